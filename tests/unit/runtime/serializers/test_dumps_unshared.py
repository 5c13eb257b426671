"""``dumps_unshared``: a memo-free pickle that loads equal to its input, shared parts as
copies, whatever its size (its frames are joined once) and with cycles (a normal pickle)."""

from __future__ import annotations

import pickle

from streamstate.runtime.serializers.base import dumps_unshared


def test_a_large_chunk_loads_equal_across_many_frames():
    # far more than one 64 KiB pickle frame, with strings and ints of every size
    values = [(f"k{i % 977}" * (i % 5), i * 7919 - 10**12, i % 3 == 0) for i in range(60_000)]
    blob = dumps_unshared(values)
    assert len(blob) > 10 * 65_536
    assert pickle.loads(blob) == values


def test_shared_parts_load_as_copies_and_cycles_still_pickle():
    shared = [1, 2]
    a, b = pickle.loads(dumps_unshared([shared, shared]))
    assert a == b == shared and a is not b
    cyclic: list = [1]
    cyclic.append(cyclic)
    loaded = pickle.loads(dumps_unshared(cyclic))
    assert loaded[0] == 1 and loaded[1] is loaded


def test_small_values_round_trip():
    for value in (None, 0, "", b"x", (), {"a": (1, 2.5)}, [[]]):
        assert pickle.loads(dumps_unshared(value)) == value
