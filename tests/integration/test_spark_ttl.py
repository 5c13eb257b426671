"""State TTL end to end on Spark, with and without an injected failure.

The job (``ttl_jobs.TtlProbe``) observes value state under each update type and
visibility, list state and map state, all with TTL, on the deterministic epoch
TTL clock (``state.ttl.time-provider = epoch:0:1000``). Every observation is
checked against a reference model of Flink's TTL rules, and a run with a
failure injected mid-run (restore from a checkpoint, replay) must produce
exactly the output and final state of the failure-free run.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from streamstate.datastream import CheckpointingMode, ExternalizedCheckpointCleanup
from streamstate.runtime.state_reader import list_checkpoints, read_keyed_state
from streamstate.testing import FailOnce, TickingClock, use_default_clock
from tests.integration.jobs import make_env
from tests.integration.ttl_jobs import CLOCK, CONFIGS, TtlProbe, descriptor, events, model
from tests.support.runners import on_both_runners

pytestmark = pytest.mark.spark

spark = on_both_runners()

DATA = events(96, keys=4, burst=6)


def run(spark: Any, tmp_path: Any, name: str, failure: Any = None) -> tuple[list[Any], Any]:
    with use_default_clock(TickingClock(start_ms=1000)):
        env = make_env(spark, epoch_records=8, **{"state.ttl.time-provider": CLOCK})
        env.enable_checkpointing(2500, CheckpointingMode.EXACTLY_ONCE)
        cc = env.get_checkpoint_config()
        cc.set_checkpoint_storage_dir(str(tmp_path / name))
        cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
        ds = env.from_collection(DATA).set_parallelism(1)
        if failure is not None:
            ds = ds.map(failure).name("fail-once").set_parallelism(1)
        probe = ds.key_by(lambda v: v[0]).process(TtlProbe()).uid("probe")
        out = list(probe.execute_and_collect(name))
    chks = [c for c in list_checkpoints(str(tmp_path / name)) if c.valid]
    latest = max(chks, key=lambda c: c.checkpoint_id)
    final = {n: read_keyed_state(latest.path, "probe", descriptor(n)) for n in CONFIGS}
    return out, final


@pytest.fixture(scope="module")
def baseline(spark: Any, tmp_path_factory: Any) -> tuple[list[Any], Any]:
    return run(spark, tmp_path_factory.mktemp("ttl-base"), "ttl-baseline")


def _check_against_model(out: list[Any]) -> None:
    assert sorted(seq for _, seq, _, _ in out) == [seq for _, seq in DATA]
    want = model(out)
    for key, seq, _epoch, seen in out:
        assert dict(seen) == want[(key, seq)], (key, seq)


def test_ttl_expiry_matches_the_model(baseline: tuple[list[Any], Any]) -> None:
    out, final = baseline
    _check_against_model(out)
    obs = {name: [dict(s)[name] for _, _, _, s in out] for name in CONFIGS}
    # the run exercises expiry: some reads after a write saw nothing (NeverReturnExpired)
    # and some saw an expired value (ReturnExpiredIfNotCleanedUp) ...
    cw_never, cw_return = obs["v_cw_never"], obs["v_cw_return"]
    assert any(a is None and b is not None for a, b in zip(cw_never, cw_return, strict=True))
    # ... and reads kept values alive under OnReadAndWrite that expired under OnCreateAndWrite
    assert any(
        a is None and b is not None for a, b in zip(cw_never, obs["v_rw_never"], strict=True)
    )
    assert len({str(x) for x in obs["l_cw_never"]}) > 3
    # the state reader unwraps TTL values
    assert final["v_cw_return"] and all(isinstance(v, int) for v in final["v_cw_return"].values())
    assert all(isinstance(v, list) for v in final["l_cw_never"].values())
    assert all(isinstance(v, dict) for v in final["m_rw_return"].values())


def test_ttl_with_failure_matches_failure_free_run(
    spark: Any, tmp_path: Any, baseline: tuple[list[Any], Any]
) -> None:
    fail = FailOnce(str(tmp_path), epoch=7, subtask=0, mode="raise", after_records=2)
    out, final = run(spark, tmp_path, "ttl-failure", failure=fail)
    assert fail.fired
    base_out, base_final = baseline
    assert Counter(out) == Counter(base_out)
    assert final == base_final
    _check_against_model(out)
