"""Key group assignment follows Flink's KeyGroupRangeAssignment rules."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamstate.errors import ConfigurationError
from streamstate.runtime.keygroups import (
    DEFAULT_LOWER_BOUND_MAX_PARALLELISM,
    UPPER_BOUND_MAX_PARALLELISM,
    KeyGroupRange,
    assign_key_to_parallel_operator,
    check_parallelism,
    compute_default_max_parallelism,
    compute_key_group_for_serialized_key,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
)


def _flink_default_max_parallelism(p: int) -> int:
    """Flink: min(max(roundUpToPowerOfTwo(p + p / 2), 128), 32768) with int division."""
    x = p + p // 2
    pow2 = 1
    while pow2 < x:
        pow2 <<= 1
    return min(max(pow2, 128), 32768)


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        (1, 128),
        (2, 128),
        (85, 128),  # 127 -> 128
        (86, 256),  # 129 -> 256
        (100, 256),
        (171, 256),  # 256 exactly
        (172, 512),  # 258 -> 512
        (1000, 2048),
        (21845, 32768),  # 32767 -> 32768
        (21846, 32768),  # 32769 -> 65536, clamped
        (30000, 32768),
    ],
)
def test_default_max_parallelism(p: int, expected: int) -> None:
    assert compute_default_max_parallelism(p) == expected


@given(st.integers(1, 100_000))
def test_default_max_parallelism_matches_flink_rule(p: int) -> None:
    got = compute_default_max_parallelism(p)
    assert got == _flink_default_max_parallelism(p)
    assert DEFAULT_LOWER_BOUND_MAX_PARALLELISM <= got <= UPPER_BOUND_MAX_PARALLELISM
    assert got & (got - 1) == 0


def _check_ranges(p: int, max_p: int) -> None:
    ranges = [compute_key_group_range_for_operator_index(max_p, p, i) for i in range(p)]
    nxt = 0
    for i, r in enumerate(ranges):
        assert r.start == nxt, (p, max_p, i)
        assert len(r) >= 1  # p <= maxP: every subtask owns at least one key group
        # Flink's formulas
        assert r.start == (i * max_p + p - 1) // p
        assert r.end == ((i + 1) * max_p - 1) // p
        nxt = r.end + 1
    assert nxt == max_p
    # sizes differ by at most one (balanced)
    sizes = [len(r) for r in ranges]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize(
    ("p", "max_p"),
    [(1, 1), (1, 128), (2, 128), (3, 128), (7, 128), (128, 128), (5, 7), (3, 1000), (13, 32768)],
)
def test_ranges_cover_contiguously(p: int, max_p: int) -> None:
    _check_ranges(p, max_p)


@given(
    st.integers(1, UPPER_BOUND_MAX_PARALLELISM).flatmap(
        lambda m: st.tuples(st.integers(1, min(m, 512)), st.just(m))
    )
)
@settings(max_examples=200)
def test_ranges_cover_property(pm: tuple[int, int]) -> None:
    _check_ranges(*pm)


@given(
    st.integers(1, UPPER_BOUND_MAX_PARALLELISM).flatmap(
        lambda m: st.tuples(st.integers(1, m), st.just(m), st.integers(0, m - 1))
    )
)
def test_operator_index_agrees_with_ranges(pmk: tuple[int, int, int]) -> None:
    p, max_p, kg = pmk
    idx = compute_operator_index_for_key_group(max_p, p, kg)
    assert 0 <= idx < p
    assert kg in compute_key_group_range_for_operator_index(max_p, p, idx)


@pytest.mark.parametrize(("p", "max_p"), [(1, 128), (3, 128), (4, 7), (128, 128)])
def test_operator_index_exhaustive(p: int, max_p: int) -> None:
    for i in range(p):
        for kg in compute_key_group_range_for_operator_index(max_p, p, i):
            assert compute_operator_index_for_key_group(max_p, p, kg) == i


def test_murmur3_known_vector() -> None:
    # murmur3 x86 32-bit, seed 0, unsigned: "hello" -> 0x248bfa47
    assert compute_key_group_for_serialized_key(b"hello", UPPER_BOUND_MAX_PARALLELISM) == (
        0x248BFA47 % UPPER_BOUND_MAX_PARALLELISM
    )
    assert compute_key_group_for_serialized_key(b"", 128) == 0  # murmur3("") == 0


@given(st.binary(max_size=64), st.integers(1, UPPER_BOUND_MAX_PARALLELISM), st.data())
def test_assignment_in_range_and_consistent(key: bytes, max_p: int, data: st.DataObject) -> None:
    kg = compute_key_group_for_serialized_key(key, max_p)
    assert 0 <= kg < max_p
    assert kg == compute_key_group_for_serialized_key(bytes(key), max_p)
    p = data.draw(st.integers(1, max_p))
    assert assign_key_to_parallel_operator(key, max_p, p) == compute_operator_index_for_key_group(
        max_p, p, kg
    )


_KEYS = ["user-1", "αβγ", ("a", 1), 12345678901234567890, b"raw", None, 3.5]


def test_same_key_group_across_hash_seeds() -> None:
    """The key group depends on the serialized key only, not on PYTHONHASHSEED."""
    blobs = [pickle.dumps(k, protocol=5) for k in _KEYS]
    here = [compute_key_group_for_serialized_key(b, 32768) for b in blobs]
    code = (
        "import pickle,sys\n"
        "from streamstate.runtime.keygroups import compute_key_group_for_serialized_key as f\n"
        f"keys = {_KEYS!r}\n"
        "print(hash('user-1'))\n"
        "print(','.join(str(f(pickle.dumps(k, protocol=5), 32768)) for k in keys))\n"
    )
    outs = []
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        res = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        str_hash, kgs = res.stdout.split()
        outs.append(str_hash)
        assert [int(x) for x in kgs.split(",")] == here
    assert outs[0] != outs[1]  # the seeds really changed Python's hash()


def test_check_parallelism() -> None:
    check_parallelism(1, 1)
    check_parallelism(128, 128)
    with pytest.raises(ConfigurationError, match="max parallelism"):
        check_parallelism(129, 128)
    with pytest.raises(ConfigurationError):
        check_parallelism(0, 128)
    with pytest.raises(ConfigurationError, match="out of range"):
        check_parallelism(1, UPPER_BOUND_MAX_PARALLELISM + 1)
    with pytest.raises(ConfigurationError):
        compute_key_group_range_for_operator_index(128, 200, 0)


def test_key_group_range_ops() -> None:
    r = KeyGroupRange(3, 7)
    assert len(r) == 5 and list(r) == [3, 4, 5, 6, 7]
    assert 3 in r and 7 in r and 8 not in r and "3" not in r
    assert r.intersection(KeyGroupRange(6, 10)) == KeyGroupRange(6, 7)
    assert len(r.intersection(KeyGroupRange(8, 10))) == 0
    assert len(KeyGroupRange.empty()) == 0 and list(KeyGroupRange.empty()) == []
    assert r.to_list() == [3, 7]
