"""The RocksDB layer's coherence, over both of its write paths.

``RocksDBAccess.get`` and ``put`` inline the layer's lookup and ``put_object`` on their hot
path (exact-round-trip values: the decoded object is kept next to its bytes), while every
other access goes through :class:`BufferedColumnFamily`'s methods. The rules the layer
keeps (a write that is not ``put_object`` forgets the key's object; a flush that forgets
drops objects too; bulk writes go past the layer after a flush) thus live in two files.
Here one random sequence of operations runs against three backends: RocksDB with the
decoded-object path, RocksDB with it off (every read decodes the stored bytes), and the
heap backend as the model. Every read of every backend must agree, whatever mix of
writes, clears, namespaced writes, flushes, evictions, snapshots and restores came first.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamstate.common import Types
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime.state.rocksdb.backend import RocksDBKeyedStateBackend
from tests.support import backends as H

COUNT = ValueStateDescriptor("count", Types.LONG())
KEYS = ["a", "b", "c", 7, 8]
NAMESPACES = ["w1", "w2"]

_op = st.one_of(
    st.tuples(st.just("at"), st.sampled_from(KEYS)),
    st.tuples(st.just("update"), st.integers(-(2**40), 2**40)),
    st.tuples(st.just("add_one"), st.none()),
    st.tuples(st.just("clear"), st.none()),
    st.tuples(st.just("read"), st.none()),
    # the same column family written in another namespace (windows' state does this)
    st.tuples(st.just("namespaced"), st.tuples(st.sampled_from(NAMESPACES), st.integers(0, 9))),
    st.tuples(st.just("flush"), st.booleans()),  # True: flush and forget
    st.tuples(st.just("snapshot_restore"), st.none()),
)


class _Subject:
    """One backend and its value state, driven by the operations."""

    def __init__(self, made: H.Made, decoded_objects: bool) -> None:
        self.made = made
        self.decoded_objects = decoded_objects
        self.key: Any = KEYS[0]
        self._use(made.backend())

    def _use(self, backend: Any) -> None:
        self.backend = backend
        self.state = backend.get_partitioned_state(COUNT)
        H.at(backend, self.key)
        if isinstance(backend, RocksDBKeyedStateBackend):
            self.state._access._layer.limit = 3  # evictions happen within a sequence
            if not self.decoded_objects:
                self.state._access._exact_types = ()

    def apply(self, op: str, arg: Any) -> Any:
        """Run one operation; returns what it read (None for writes)."""
        state = self.state
        if op == "at":
            self.key = arg
            H.at(self.backend, arg)
        elif op == "update":
            state.update(arg)
        elif op == "add_one":
            state.update((state.value() or 0) + 1)
        elif op == "clear":
            state.clear()
        elif op == "read":
            return state.value()
        elif op == "namespaced":
            namespace, value = arg
            state.set_current_namespace(namespace)
            before = state.value()
            state.update(value)
            state.set_current_namespace(None)
            return before
        elif op == "flush":
            if isinstance(self.backend, RocksDBKeyedStateBackend):
                self.state._access._layer.flush(forget=arg)
        elif op == "snapshot_restore":
            self._snapshot_restore()
        return None

    def _snapshot_restore(self) -> None:
        """Snapshot (which flushes the layer), then go on in a backend restored from it:
        the restore's bulk writes go past the layer."""
        handle = H.handle_of(self.backend, self.backend.snapshot())
        restored = self.made.backend()
        restored.restore([handle])
        self._use(restored)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(_op, min_size=1, max_size=40))
def test_the_hot_path_and_the_layers_methods_read_the_same(
    rocks: H.Made, heap: H.Made, ops: list[tuple[str, Any]]
) -> None:
    subjects = [
        _Subject(rocks, decoded_objects=True),
        _Subject(rocks, decoded_objects=False),
        _Subject(heap, decoded_objects=False),
    ]
    for step, (op, arg) in enumerate(ops):
        seen = [s.apply(op, arg) for s in subjects]
        assert seen[0] == seen[1] == seen[2], (step, op, arg, seen)
    for key in KEYS:  # and every key's final value, read back through each
        finals = []
        for s in subjects:
            s.apply("at", key)
            finals.append(s.apply("read", None))
        assert finals[0] == finals[1] == finals[2], (key, finals)
