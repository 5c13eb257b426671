"""``streamstate state --format text|json|csv|parquet``: state rows in a file format.

Rows are ``(key, value)`` for keyed state and ``(subtask, mode, value)`` for operator
state. Text is ``repr``; JSON is one array per line; CSV has a header and writes scalars
as they are and anything else as JSON; Parquet (pyarrow) keeps a column's type when all
its values share one scalar type (int, float, str, bool), else stores JSON text, and
needs ``--output`` (written to a temporary file, then renamed).
"""

from __future__ import annotations

import csv
import json
import os
import uuid
from collections.abc import Sequence
from typing import Any, TextIO

from streamstate.errors import ConfigurationError

__all__ = ["FORMATS", "write_rows"]

FORMATS = ("text", "json", "csv", "parquet")
_SCALARS = (bool, int, float, str)


def _json(v: Any) -> str:
    return json.dumps(v, default=repr, sort_keys=isinstance(v, dict))


def _cell(v: Any) -> Any:
    return v if v is None or isinstance(v, _SCALARS) else _json(v)


def write_rows(
    rows: Sequence[Sequence[Any]],
    columns: Sequence[str],
    fmt: str,
    out: TextIO,
    output: str | None = None,
) -> None:
    """Write ``rows`` (each with ``len(columns)`` values) in format ``fmt`` to ``output``
    (a path) or ``out``."""
    if fmt == "parquet":
        if not output:
            raise ConfigurationError("--format parquet needs --output FILE (Parquet is binary)")
        _write_parquet(rows, columns, output)
        return
    if output:
        with open(output, "w", newline="") as f:
            write_rows(rows, columns, fmt, f)
        return
    if fmt == "text":
        for r in rows:
            out.write(" -> ".join(repr(v) for v in r) + "\n")
    elif fmt == "json":
        for r in rows:
            out.write(json.dumps(list(r), default=repr) + "\n")
    elif fmt == "csv":
        w = csv.writer(out)
        w.writerow(columns)
        for r in rows:
            w.writerow([_cell(v) for v in r])
    else:
        raise ConfigurationError(f"unknown --format {fmt!r}; use one of {', '.join(FORMATS)}")


def _write_parquet(rows: Sequence[Sequence[Any]], columns: Sequence[str], output: str) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ConfigurationError("--format parquet needs pyarrow: pip install pyarrow") from e
    arrays = {}
    for j, name in enumerate(columns):
        values = [r[j] for r in rows]
        kinds = {type(v) for v in values if v is not None}
        if len(kinds) == 1 and next(iter(kinds)) in _SCALARS:
            arrays[name] = pa.array(values)
        else:
            arrays[name] = pa.array([None if v is None else _json(v) for v in values], pa.string())
    table = pa.table(arrays)
    tmp = os.path.join(os.path.dirname(os.path.abspath(output)), f".{uuid.uuid4().hex}.inprogress")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, output)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
