"""The driver side of a user ``SourceFunction`` / ``ParallelSourceFunction``.

Unlike the replayable sources, a SourceFunction keeps its position in its own
operator state (``ListCheckpointed`` / ``CheckpointedFunction``), so the
enumerator state only records which reader subtasks' ``run()`` returned. The
records are produced by :class:`~streamstate.runtime.operators.source_function.SourceFunctionOperator`
in the worker (``operator_factory``), not by ``read``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from streamstate.connectors.base import Source
from streamstate.errors import ConfigurationError

__all__ = ["DEFAULT_MAX_WAIT_MS", "SourceFunctionSource"]

#: how long one epoch waits for a slow SourceFunction to fill its record budget
DEFAULT_MAX_WAIT_MS = 500


def _make_operator(fn: Any, max_wait_ms: int) -> Any:
    from streamstate.runtime.operators.source_function import SourceFunctionOperator

    return SourceFunctionOperator(fn, max_wait_ms)


class SourceFunctionSource(Source):
    """A ``SourceFunction`` (parallelism 1) or ``ParallelSourceFunction`` as a source stage.

    Bounded when every subtask's ``run()`` returns; a ``run()`` that loops until
    ``cancel()`` makes the job unbounded (stop it with ``JobClient.cancel()``).
    """

    bounded = False

    def __init__(self, fn: Any, parallel: bool, max_wait_ms: int = DEFAULT_MAX_WAIT_MS) -> None:
        self.fn = fn
        self.parallel = parallel
        self.default_parallelism = None if parallel else 1
        self.operator_factory = partial(_make_operator, fn, int(max_wait_ms))

    def _check(self, parallelism: int) -> None:
        if not self.parallel and parallelism != 1:
            raise ConfigurationError(
                f"{type(self.fn).__name__} is a SourceFunction, which runs with parallelism 1 "
                f"(got {parallelism}); implement ParallelSourceFunction to read in parallel"
            )

    def create_enumerator_state(self, parallelism: int) -> Any:
        self._check(parallelism)
        return {"finished": [False] * parallelism}

    def restore_enumerator_state(self, state: Any, parallelism: int) -> Any:
        # positions live in the function's operator state (redistributed on rescale):
        # every subtask runs again and returns at once if nothing is left for it
        return self.create_enumerator_state(parallelism)

    def plan_epoch(self, state: Any, parallelism: int) -> list[Any]:
        return [{"finished": f} for f in state["finished"]]

    def read(self, assignment: Any, budget: int) -> tuple[list[Any], Any]:
        raise RuntimeError("a SourceFunction is read by its operator (read_epoch), not by read()")

    def apply_progress(self, state: Any, progress: list[Any]) -> Any:
        finished = list(state["finished"])
        for i, p in enumerate(progress):
            if p is not None and p.get("finished"):
                finished[i] = True
        return {"finished": finished}

    def is_finished(self, state: Any) -> bool:
        return all(state["finished"])
