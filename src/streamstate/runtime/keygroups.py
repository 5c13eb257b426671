"""Key groups: the unit in which keyed state is assigned, snapshotted and rescaled.

The rules are Flink's ``KeyGroupRangeAssignment`` with one deliberate change:
the hash is murmur3 (x86, 32-bit, seed 0) of the *serialized* key instead of
Java's ``hashCode``, so the assignment is stable across processes and machines
(Python's built-in hash is randomised per process and is never used here).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import mmh3

from streamstate.errors import ConfigurationError

__all__ = [
    "DEFAULT_LOWER_BOUND_MAX_PARALLELISM",
    "UPPER_BOUND_MAX_PARALLELISM",
    "KeyGroupRange",
    "assign_key_to_parallel_operator",
    "compute_default_max_parallelism",
    "compute_key_group_for_serialized_key",
    "compute_key_group_range_for_operator_index",
    "compute_operator_index_for_key_group",
    "check_parallelism",
]

DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7
UPPER_BOUND_MAX_PARALLELISM = 1 << 15


def _round_up_pow2(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def compute_default_max_parallelism(parallelism: int) -> int:
    """``clamp(round_up_pow2(p + p // 2), 128, 32768)`` as in Flink."""
    return min(
        max(_round_up_pow2(parallelism + parallelism // 2), DEFAULT_LOWER_BOUND_MAX_PARALLELISM),
        UPPER_BOUND_MAX_PARALLELISM,
    )


def check_parallelism(parallelism: int, max_parallelism: int) -> None:
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ConfigurationError(
            f"max parallelism {max_parallelism} is out of range: it must be in "
            f"[1, {UPPER_BOUND_MAX_PARALLELISM}]"
        )
    if not 1 <= parallelism <= max_parallelism:
        raise ConfigurationError(
            f"parallelism {parallelism} must be in [1, max parallelism {max_parallelism}]; "
            f"raise the max parallelism (set_max_parallelism) or lower the parallelism"
        )


def compute_key_group_for_serialized_key(key_bytes: bytes, max_parallelism: int) -> int:
    """Key group of a serialized key: ``murmur3_32(key_bytes) % max_parallelism``."""
    return mmh3.hash(key_bytes, 0, False) % max_parallelism


def compute_operator_index_for_key_group(
    max_parallelism: int, parallelism: int, key_group: int
) -> int:
    """Subtask that owns ``key_group``: ``key_group * parallelism // max_parallelism``."""
    return key_group * parallelism // max_parallelism


def assign_key_to_parallel_operator(
    key_bytes: bytes, max_parallelism: int, parallelism: int
) -> int:
    kg = compute_key_group_for_serialized_key(key_bytes, max_parallelism)
    return kg * parallelism // max_parallelism


@dataclass(frozen=True, slots=True)
class KeyGroupRange:
    """Inclusive range ``[start, end]`` of key groups; empty when ``end < start``."""

    start: int
    end: int

    @staticmethod
    def empty() -> KeyGroupRange:
        return KeyGroupRange(0, -1)

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def intersection(self, other: KeyGroupRange) -> KeyGroupRange:
        start, end = max(self.start, other.start), min(self.end, other.end)
        return KeyGroupRange(start, end) if start <= end else KeyGroupRange.empty()

    def to_list(self) -> list[int]:
        return [self.start, self.end]

    def difference(self, other: KeyGroupRange) -> tuple[KeyGroupRange, ...]:
        """The key groups of this range not in ``other``: at most two ranges (none when
        ``other`` covers this one)."""
        inter = self.intersection(other)
        if not len(inter):
            return (self,) if len(self) else ()
        parts = (KeyGroupRange(self.start, inter.start - 1), KeyGroupRange(inter.end + 1, self.end))
        return tuple(r for r in parts if len(r))


def compute_key_group_range_for_operator_index(
    max_parallelism: int, parallelism: int, operator_index: int
) -> KeyGroupRange:
    """The contiguous key groups owned by subtask ``operator_index`` (Flink's formula)."""
    check_parallelism(parallelism, max_parallelism)
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)
