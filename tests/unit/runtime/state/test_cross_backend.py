"""Cross-backend checkpoints, with rescaling: every test runs on every ordered pair of
registered backends (a snapshot or delta of the first restored into the second). The
per-backend contract suite is ``test_keyed_backend_contract.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import permutations
from typing import Any

import pytest

from streamstate.runtime.state.registry import registered_keyed_backends
from tests.support import backends as H
from tests.support.backends import Made


def test_every_builtin_backend_is_covered() -> None:
    assert {"hashmap", "rocksdb"} <= set(registered_keyed_backends())


@pytest.fixture(params=list(permutations(registered_keyed_backends(), 2)), ids="->".join)
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[Made, Made]]:
    """(source, destination) factories of two different registered backends."""
    src_name, dst_name = request.param
    src, dst = Made(src_name), Made(dst_name)
    yield src, dst
    src.close()
    dst.close()


def _filled(make: Made, p: int = 1, idx: int = 0) -> Any:
    b = make.backend(p, idx)
    H.fill(b, [k for k in H.KEYS if H.kg_of(k) in b.key_group_range])
    return b


def test_snapshot_restores_into_the_other_backend(pair: tuple[Made, Made]) -> None:
    src, dst = pair
    a = _filled(src)
    snap = a.snapshot()
    b = dst.backend()
    b.restore([H.handle_of(a, snap)])
    assert H.dump(b) == H.dump(a)
    # and back again: the second backend's snapshot restores into the first kind
    c = src.backend()
    c.restore([H.handle_of(b, b.snapshot())])
    assert H.dump(c) == H.dump(a)


def test_rescale_p3_to_p2_across_backends(pair: tuple[Made, Made]) -> None:
    src, dst = pair
    olds = [_filled(src, 3, i) for i in range(3)]
    handles = [H.handle_of(b, b.snapshot()) for b in olds]
    deltas = []
    for b in olds:  # a delta on top of the full snapshots, replayed after the rescale
        v = b.get_partitioned_state(H.V)
        m = b.get_partitioned_state(H.M)
        for k in H.KEYS[:40]:
            if H.kg_of(k) in b.key_group_range:
                H.at(b, k)
                v.update("changed")
                m.remove("u1")
                m.put("new", k)
        deltas.append(b.snapshot_delta())
    merged: dict[str, dict[Any, Any]] = {d.name: {} for d in H.ALL}
    for b in olds:
        for name, per_key in H.dump(b).items():
            merged[name].update(per_key)
    got: dict[str, dict[Any, Any]] = {d.name: {} for d in H.ALL}
    for i in range(2):
        nb = dst.backend(2, i)
        nb.restore(handles)
        for d in deltas:
            nb.apply_delta(d)
        for name, per_key in H.dump(nb).items():
            assert not set(per_key) & set(got[name])
            got[name].update(per_key)
    assert got == merged and len(got["v"]) == len(H.KEYS)


def test_delta_replays_on_the_other_backend(pair: tuple[Made, Made]) -> None:
    src, dst = pair
    r = _filled(src)
    base = H.handle_of(r, r.snapshot())
    H.at(r, H.KEYS[3])
    r.get_partitioned_state(H.L).update([])
    r.get_partitioned_state(H.M).clear()
    H.at(r, "fresh")
    r.get_partitioned_state(H.R).add(5)
    delta = r.snapshot_delta()
    h = dst.backend()
    h.restore([base])
    h.apply_delta(delta)
    assert H.dump(h) == H.dump(r)
