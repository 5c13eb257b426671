"""``from_collection``: a bounded, non-parallel source over a Python list."""

from __future__ import annotations

import pickle
from typing import Any

from streamstate.connectors.base import Source

__all__ = ["CollectionSource"]


class CollectionSource(Source):
    """Reads ``elements`` in order; the position is the index of the next element.

    Parallelism 1, as Flink's ``fromCollection``. The elements travel to the
    workers once per job (the runner broadcasts the source with the stage).
    """

    default_parallelism = 1
    bounded = True
    sliced_reads = True

    def __init__(self, elements: list[Any]) -> None:
        self.elements = list(elements)

    def __getstate__(self) -> dict[str, Any]:
        # The job spec is cloudpickled (pure Python, slow for big lists): plain data goes
        # through the C pickler once instead; anything it refuses (lambdas, local classes)
        # falls back to cloudpickle.
        try:
            packed = pickle.dumps(self.elements, protocol=5)
        except Exception:  # noqa: BLE001 - any refusal: cloudpickle gets the elements
            return {"elements": self.elements}
        if b"__main__" in packed:
            # classes of the job script: cloudpickle ships them by value with the spec
            return {"elements": self.elements}
        return {"packed": packed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        packed = state.get("packed")
        self.elements = pickle.loads(packed) if packed is not None else state["elements"]

    def create_enumerator_state(self, parallelism: int) -> Any:
        return {"offset": 0}

    def plan_epoch(self, state: Any, parallelism: int) -> list[Any]:
        return [state["offset"]] + [None] * (parallelism - 1)

    def read(self, assignment: Any, budget: int) -> tuple[list[Any], Any]:
        if assignment is None:
            return [], None
        end = min(len(self.elements), assignment + budget)
        return self.elements[assignment:end], end

    def advance(self, assignment: Any, progress: Any) -> Any:
        return progress  # the offset of the next element

    def apply_progress(self, state: Any, progress: list[Any]) -> Any:
        ends = [p for p in progress if p is not None]
        return {"offset": max(ends)} if ends else state

    def is_finished(self, state: Any) -> bool:
        return bool(state["offset"] >= len(self.elements))

    def finishes_within(self, state: Any, parallelism: int, budget: int) -> bool:
        return bool(len(self.elements) - state["offset"] <= budget)
