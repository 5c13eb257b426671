"""``execution.epoch.interval``: an epoch that did not fill its budget (a slow source) is
followed by a pause for the rest of the interval, so epochs do not shrink to a few records
each; a full epoch is followed by none. The pause is what the driver asks its cancel event
to wait for (observed here, no timing assertion)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from streamstate.connectors.collection import CollectionSource
from streamstate.datastream.connectors import CollectSink
from tests.support import envs


class Trickle(CollectionSource):
    """A bounded source that yields at most ``per_epoch`` records per epoch, whatever the
    budget (as a slow external system would)."""

    default_parallelism = 1

    def __init__(self, total: int, per_epoch: int) -> None:
        super().__init__(list(range(total)))
        self.per_epoch = per_epoch

    def read(self, assignment: Any, budget: int) -> tuple[list[Any], Any]:
        return super().read(assignment, min(budget, self.per_epoch))

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "per_epoch": self.per_epoch}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.per_epoch = state["per_epoch"]


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    seen: list[float] = []
    real = threading.Event.wait

    def wait(self: threading.Event, timeout: float | None = None) -> bool:
        if timeout is not None and timeout > 0.05:  # the driver's pauses, not Spark's or ours
            seen.append(timeout)
            timeout = 0.0
        return real(self, timeout)

    monkeypatch.setattr(threading.Event, "wait", wait)
    return seen


@pytest.mark.parametrize("budget, paced", [(100, True), (3, False)])
def test_short_epochs_wait_for_the_interval_full_ones_do_not(waits, budget, paced):
    env = envs.make_env(1, max_records=budget, conf={"execution.epoch.interval": "10 s"})
    sink = CollectSink()
    env.add_source(Trickle(12, 3)).sink_to(sink)
    result = env.execute("paced")
    assert sorted(sink.get_results()) == list(range(12))
    epochs = result.get_accumulator_result("epochs")
    assert epochs >= 4
    if paced:  # every epoch but the last read 3 < 100 records: the rest of the 10 s
        assert len(waits) >= epochs - 1 and all(5 < w <= 10 for w in waits)
    else:
        assert waits == []
