"""Forging a CRC32: what an attacker does to swap a file whose checksum is checked."""

from __future__ import annotations

import zlib

__all__ = ["with_crc32"]


def with_crc32(data: bytes, target: int) -> bytes:
    """``data`` with its last 4 bytes replaced so that its CRC32 is ``target`` (same size).

    For messages of one length the CRC is affine in their bits, so the 4 bytes solve a
    32x32 linear system over GF(2)."""
    prefix = data[:-4]
    base = zlib.crc32(prefix + bytes(4))
    # rows: (column mask of the unknown bits, right-hand bit), one per output bit
    cols = [zlib.crc32(prefix + (1 << i).to_bytes(4, "little")) ^ base for i in range(32)]
    want = target ^ base
    rows = [(sum(((cols[i] >> r) & 1) << i for i in range(32)), (want >> r) & 1) for r in range(32)]
    solution, pivots = 0, []
    for col in range(32):
        pivot = next((k for k in range(len(rows)) if (rows[k][0] >> col) & 1), None)
        if pivot is None:
            continue
        prow = rows.pop(pivot)
        rows = [(m ^ prow[0], b ^ prow[1]) if (m >> col) & 1 else (m, b) for m, b in rows]
        pivots = [(m ^ prow[0], b ^ prow[1]) if (m >> col) & 1 else (m, b) for m, b in pivots]
        pivots.append(prow)
    for mask, bit in pivots:
        if bit:
            solution |= mask & -mask  # each pivot row is reduced to its own pivot bit
    out = prefix + solution.to_bytes(4, "little")
    assert zlib.crc32(out) == target, "no solution (the system is full rank for CRC32)"
    return out
