"""What the bed's tests check beyond a job's output: that machines share nothing but the
network and the object store."""

from __future__ import annotations

from typing import Any

__all__ = ["committed_lines", "machine_paths_in_store"]

#: how a machine-local path shows in anything written for others to read
LOCAL_MARKERS = (b"file://", b"/tmp/", b"/home/streamstate")


def machine_paths_in_store(bed: Any, prefix: str) -> list[str]:
    """Every object under ``s3://bed/<prefix>`` that names a machine-local path (a file URL,
    a temp dir, a home directory): another machine reading that object would be sent to a
    path only the writer's machine has. ``[]`` when none does."""
    fs = bed.s3fs()
    found = []
    for key in fs.find(f"bed/{prefix.strip('/')}"):
        data = fs.cat_file(key)
        for marker in LOCAL_MARKERS:
            at = data.find(marker)
            if at >= 0:
                found.append(f"{key}: {data[max(0, at - 60) : at + 60]!r}")
    return found


def committed_lines(fs: Any, prefix: str) -> list[str]:
    """The lines of every visible object under ``prefix`` (a FileSink's committed output;
    hidden ``.``-names are in-progress or pending parts), sorted."""
    lines: list[str] = []
    for path in sorted(fs.find(prefix)):
        if not path.rsplit("/", 1)[-1].startswith("."):
            lines += fs.cat_file(path).decode().splitlines()
    return sorted(lines)
