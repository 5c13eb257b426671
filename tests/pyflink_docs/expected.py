"""Plain-Python evaluations of what Flink prints for the documented programs.

Nothing here imports streamstate: these are the references the programs' output is
compared with (Flink's window assignment and merging rules, Java's toString of typed
tuples, float32 arithmetic of ``Types.FLOAT()``).
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable, Iterable


def f32(x: float) -> float:
    """The float32 nearest to ``x`` (what ``Types.FLOAT()`` keeps), as a Python float."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def java_tuple(*fields: object) -> str:
    """``Tuple.toString()`` of ints and strings: ``(hi,0,5,4)``."""
    return "(" + ",".join(str(f) for f in fields) + ")"


def tumbling(timestamps: Iterable[int], size: int) -> list[tuple[int, int, int]]:
    """``(start, end, count)`` of tumbling event-time windows, in firing (end) order."""
    counts = Counter(t - t % size for t in timestamps)
    return [(s, s + size, n) for s, n in sorted(counts.items())]


def sliding(
    timestamps: Iterable[int], size: int, slide: int, offset: int = 0
) -> list[tuple[int, int, int]]:
    """Flink's SlidingEventTimeWindows: every window ``[s, s + size)`` with
    ``s = t - (t - offset) % slide - k * slide > t - size``."""
    counts: Counter[int] = Counter()
    for t in timestamps:
        last = t - (t - offset + slide) % slide
        s = last
        while s > t - size:
            counts[s] += 1
            s -= slide
    return [(s, s + size, n) for s, n in sorted(counts.items())]


def sessions(timestamps: Iterable[int], gap: Callable[[int], int]) -> list[tuple[int, int, int]]:
    """Session windows: each element opens ``[t, t + gap(t))``; windows that intersect
    (``start <= other.end and end >= other.start``, Flink's TimeWindow.intersects) merge."""
    windows: list[list[int]] = []  # [start, end, count]
    for t in timestamps:
        new = [t, t + gap(t), 1]
        keep = []
        for w in windows:
            if w[0] <= new[1] and w[1] >= new[0]:
                new = [min(w[0], new[0]), max(w[1], new[1]), w[2] + new[2]]
            else:
                keep.append(w)
        windows = [*keep, new]
    return sorted((s, e, n) for s, e, n in windows)


def running(
    pairs: Iterable[tuple[str, float]], fold: Callable[[float, float], float]
) -> list[tuple[str, float]]:
    """``(key, running fold)`` after every element, in input order (a keyed reduce)."""
    acc: dict[str, float] = {}
    out = []
    for k, v in pairs:
        acc[k] = v if k not in acc else fold(acc[k], v)
        out.append((k, acc[k]))
    return out
