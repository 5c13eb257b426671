"""``from_collection``: a bounded source over a Python list, read by one or more subtasks."""

from __future__ import annotations

import pickle
from typing import Any

from streamstate.connectors.base import Source
from streamstate.runtime.serializers.base import dumps_unshared

__all__ = ["CollectionSource"]

#: elements per pickled chunk: a reader unpickles only the chunks its stripes touch, so
#: a stripe that starts or ends inside a chunk unpickles elements it does not read (with
#: 65,536, K1's second reader unpickled 590k elements for its 500k, and a 50k stripe of a
#: 10-epoch run up to 131k); smaller chunks unpickle no slower per element
_CHUNK = 4_096


class CollectionSource(Source):
    """Reads ``elements`` in order; the enumerator state is the index of the next element.

    Parallelism 1 by default, as Flink's ``fromCollection``. With ``set_parallelism(n)``
    the ``n`` readers of an epoch read adjacent stripes of the list (reader ``i`` the
    ``i``-th ``budget`` elements after the position), so an epoch reads ``n * budget``
    elements and every receiver, which orders its input by (source subtask, sequence),
    sees them in the list's order: a keyed operator behind the source gets the same
    records in the same order at any source parallelism. The elements travel to the
    workers once per job (the runner broadcasts the source with the stage), in chunks
    pickled without a memo (an element shared twice in the list arrives as two copies, as
    Flink serializes each element on its own).
    """

    default_parallelism = 1
    bounded = True
    sliced_reads = True
    stateless_reader = True

    def __init__(self, elements: list[Any]) -> None:
        # Packed now, as Flink's fromCollection serializes its elements when the stream is
        # defined: the elements go through the C pickler without its memo, chunk by chunk
        # (which lets a reader load only its part; the job spec around them is
        # cloudpickled, pure Python and slow for big lists; classes of the job script go
        # by value). The driver then holds bytes, not a list of every element: a young
        # list of 1M elements made each collection of the youngest generation during the
        # job touch every element (44-65 ms a collection, on the driver's thread), and the
        # job's specs no longer pack them again at every start (~90 ms for 1M).
        self.size = len(elements)
        self._packed: list[bytes] = [
            dumps_unshared(elements[i : i + _CHUNK]) for i in range(0, self.size, _CHUNK)
        ]
        #: chunk index -> its unpickled elements, while a reader is inside it
        self._loaded: dict[int, list[Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"packed": self._packed, "size": self.size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.size = state["size"]
        self._packed = state["packed"]
        self._loaded = {}

    def _slice(self, start: int, end: int) -> list[Any]:
        if start >= end:
            return []
        out: list[Any] | None = None
        first, last = start // _CHUNK, (end - 1) // _CHUNK
        for c in range(first, last + 1):
            chunk = self._loaded.get(c)
            if chunk is None:
                chunk = self._loaded[c] = pickle.loads(self._packed[c])
            base = c * _CHUNK
            lo, hi = max(start, base) - base, min(end, base + len(chunk)) - base
            # one copy of each element reference: the first piece is the output list, a
            # whole chunk is appended without slicing it first
            if out is None:
                out = chunk[lo:hi]
            elif lo == 0 and hi == len(chunk):
                out += chunk
            else:
                out += chunk[lo:hi]
        assert out is not None
        # readers move forward: chunks behind this read are dropped (a replay after a
        # failure unpickles them again from the packed copy)
        for c in [c for c in self._loaded if c < last]:
            del self._loaded[c]
        return out

    def create_enumerator_state(self, parallelism: int) -> Any:
        return {"offset": 0}

    def plan_epoch(self, state: Any, parallelism: int) -> list[Any]:
        return [[state["offset"], i] for i in range(parallelism)]

    def read(self, assignment: Any, budget: int) -> tuple[list[Any], Any]:
        if assignment is None:
            return [], None
        offset, index = assignment
        start = offset + index * budget
        if start >= self.size:
            return [], None
        end = min(self.size, start + budget)
        return self._slice(start, end), end

    def slices_at(self, parallelism: int) -> bool:
        # stripes must stay adjacent: a reader cut by time would leave a gap before the
        # next reader's stripe, so only a single reader is cut
        return parallelism == 1

    def advance(self, assignment: Any, progress: Any) -> Any:
        return [progress, 0]  # a single reader: go on at the next element

    def apply_progress(self, state: Any, progress: list[Any]) -> Any:
        # every stripe but the last one read is full, so the furthest end is where the
        # next unread element is
        ends = [p for p in progress if p is not None]
        return {"offset": max(ends)} if ends else state

    def is_finished(self, state: Any) -> bool:
        return bool(state["offset"] >= self.size)

    def finishes_within(self, state: Any, parallelism: int, budget: int) -> bool:
        return bool(self.size - state["offset"] <= budget * parallelism)
