"""The user's part of a worker's traceback.

A failure in a user function reaches the driver as the worker's traceback text, whose
frames are mostly streamstate's own (the subtask host, the task loop, the operator) and
PySpark's. What the user needs is their function's frames and the exception:
:func:`user_frames` keeps those (the full text stays in the job's exception history, REST
``/jobs/<id>/exceptions``, for a bug report).
"""

from __future__ import annotations

import linecache
import os
import re

__all__ = ["DYNAMIC_CODE", "in_main_file", "user_frames"]

#: the file name cloudpickle gives every function it ships by value (those of ``__main__``)
DYNAMIC_CODE = "<dynamic-code>"

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: frames of the libraries a job runs inside, wherever they are installed
_LIBRARY_FRAME = re.compile(r'^  File "[^"]*[/\\]site-packages[/\\](streamstate|pyspark|py4j)[/\\]')
_FRAME = re.compile(r'^  File "([^"]*)", line \d+')


def _ours(frame_line: str) -> bool:
    m = _FRAME.match(frame_line)
    if m is None:
        return False
    path = m.group(1)
    return path.startswith(_PACKAGE_DIR + os.sep) or bool(_LIBRARY_FRAME.match(frame_line))


def user_frames(traceback_text: str) -> str:
    """``traceback_text`` without the frames of streamstate, PySpark and py4j (each frame
    is its ``File`` line and the indented lines under it). When every frame is theirs (a
    failure inside streamstate), the text is returned whole."""
    lines = traceback_text.splitlines()
    kept: list[str] = []
    dropped = kept_frames = 0
    skipping = False
    for line in lines:
        if line.startswith('  File "'):
            skipping = _ours(line)
            if skipping:
                dropped += 1
            else:
                kept_frames += 1
        elif not line.startswith("    "):
            skipping = False  # the exception line, a header, "During handling of ..."
        if not skipping:
            kept.append(line)
    if not dropped or not kept_frames:
        return traceback_text
    return "\n".join(kept)


_DYNAMIC_FRAME = re.compile(r'^  File "<dynamic-code>", line (\d+), in (\w+)$')


def in_main_file(traceback_text: str, main_file: str | None) -> str:
    """Frames of functions cloudpickle shipped by value (file ``<dynamic-code>``) named after
    the job script ``main_file`` they come from, with their source line, when that file
    defines a function of that name at or above the frame's line."""
    if not main_file or DYNAMIC_CODE not in traceback_text:
        return traceback_text
    source = linecache.getlines(main_file)
    out: list[str] = []
    for line in traceback_text.splitlines():
        m = _DYNAMIC_FRAME.match(line)
        if m is not None:
            number, name = int(m.group(1)), m.group(2)
            defined = any(
                re.match(rf"\s*(async\s+)?def\s+{re.escape(name)}\b", text)
                for text in source[:number]
            )
            if defined and number <= len(source):
                out.append(f'  File "{main_file}", line {number}, in {name}')
                out.append(f"    {source[number - 1].strip()}")
                continue
        out.append(line)
    return "\n".join(out)
