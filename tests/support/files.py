"""Reading what a FileSink committed."""

from __future__ import annotations

from pathlib import Path

__all__ = ["committed_lines"]


def committed_lines(out: Path) -> list[str]:
    """Every line of the committed (non-hidden) part files under ``out`` and its bucket
    directories, sorted."""
    lines: list[str] = []
    for f in sorted(out.rglob("*")) if out.exists() else []:
        if f.is_file() and not f.name.startswith("."):
            lines += f.read_text().splitlines()
    return sorted(lines)
