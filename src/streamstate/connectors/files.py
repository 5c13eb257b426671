"""File source: records from the lines of files under one or more paths (any fsspec URL).

Each line goes through the source's line format (``connectors/line_formats.py``): the
text itself, a CSV record or a JSON object; a format may skip lines (a CSV header,
comments, blank lines) and their bytes still advance the position.

Every file is a split; its position is a byte offset, so a restored reader
continues exactly after the last line it had emitted. Files are assigned to
readers round robin in discovery order. Bounded: the files present when the
job starts. Continuous (``monitor_interval_ms``): the paths are listed again at
epoch boundaries once the interval has passed and new files are appended;
files are treated as immutable once discovered (as Flink does); hidden files
(``.`` or ``_`` prefix) are skipped.
"""

from __future__ import annotations

import posixpath
from typing import Any

from streamstate.connectors.base import Source
from streamstate.connectors.line_formats import TextLine
from streamstate.errors import ConfigurationError, InputFormatError

__all__ = ["TextLineFileSource", "list_files"]


def _fs_and_path(url: str) -> tuple[Any, str]:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs, path


def list_files(url: str) -> list[str]:
    """Every visible file under ``url`` (or ``url`` itself), as full URLs, sorted."""
    fs, path = _fs_and_path(url)
    if not fs.exists(path):
        raise ConfigurationError(f"file source path {url} does not exist")
    paths = [path] if fs.isfile(path) else fs.find(path)
    proto = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    out = []
    for p in sorted(paths):
        base = posixpath.basename(p)
        if base.startswith((".", "_")):
            continue
        out.append(p if proto in ("file", "local") else f"{proto}://{p}")
    return out


#: ``finishes_within`` looks up the sizes of at most this many unread files
_SIZE_LOOKUPS = 64


class TextLineFileSource(Source):
    bounded = True
    sliced_reads = True

    def __init__(
        self,
        paths: list[str],
        monitor_interval_ms: int | None = None,
        charset: str = "utf-8",
        line_format: Any = None,
    ) -> None:
        if not paths:
            raise ConfigurationError("a file source needs at least one path")
        self.paths = [str(p) for p in paths]
        self.monitor_interval_ms = monitor_interval_ms
        self.bounded = monitor_interval_ms is None
        self.charset = charset
        self.line_format = line_format or TextLine()

    def _scan(self) -> list[str]:
        found: list[str] = []
        for p in self.paths:
            found.extend(list_files(p))
        return found

    def create_enumerator_state(self, parallelism: int) -> Any:
        # files: [path, byte offset, done]
        return {"files": [[f, 0, False] for f in self._scan()], "last_scan_ms": None}

    def discover(self, state: Any, now_ms: int) -> Any:
        if self.monitor_interval_ms is None:
            return state
        last = state.get("last_scan_ms")
        if last is not None and now_ms - last < self.monitor_interval_ms:
            return state
        known = {f[0] for f in state["files"]}
        new = [[f, 0, False] for f in self._scan() if f not in known]
        return {"files": state["files"] + new, "last_scan_ms": now_ms}

    def plan_epoch(self, state: Any, parallelism: int) -> list[Any]:
        per: list[list[Any]] = [[] for _ in range(parallelism)]
        for i, (path, offset, done) in enumerate(state["files"]):
            if not done:
                per[i % parallelism].append([i, path, offset])
        return per

    def read(self, assignment: Any, budget: int) -> tuple[list[Any], Any]:
        import fsspec

        out: list[Any] = []
        progress = []
        decode = self.line_format.decode
        plain = type(self.line_format) is TextLine  # the common case without a call per line
        for idx, path, offset, *finished in assignment:
            if finished:  # read to its end in an earlier slice of this epoch (advance)
                progress.append([idx, offset, True])
                continue
            if len(out) >= budget:
                break
            with fsspec.open(path, "rb") as f:
                f.seek(offset)
                done = False
                skip = offset == 0 and self.line_format.skip_first_line
                while len(out) < budget:
                    line = f.readline()
                    if not line:
                        done = True
                        break
                    if skip:
                        skip = False
                        offset += len(line)
                        continue
                    try:
                        text = line.decode(self.charset)
                    except UnicodeDecodeError as e:
                        raise InputFormatError(
                            f"file {path!r}, the line at byte offset {offset}: cannot decode "
                            f"{line[max(0, e.start - 8) : e.end + 8]!r} as {self.charset} "
                            f"({e.reason}). Give the FileSource the file's charset "
                            f"(StreamFormat.text_line_format('ISO-8859-1'), ...) or fix the file"
                        ) from None
                    if plain:
                        out.append(text.rstrip("\r\n"))
                    else:
                        out.extend(decode(text.rstrip("\r\n"), f"file {path!r}, byte {offset}"))
                    offset += len(line)
                if not done and not f.read(1):
                    done = True
            progress.append([idx, offset, done])
        return out, progress

    def advance(self, assignment: Any, progress: Any) -> Any:
        reached = {idx: (offset, done) for idx, offset, done in progress}
        out = []
        for idx, path, offset, *finished in assignment:
            offset, done = reached.get(idx, (offset, bool(finished)))
            out.append([idx, path, offset, True] if done else [idx, path, offset])
        return out

    def apply_progress(self, state: Any, progress: list[Any]) -> Any:
        files = [list(f) for f in state["files"]]
        for per in progress:
            for idx, offset, done in per or []:
                files[idx][1] = offset
                files[idx][2] = done
        return {"files": files, "last_scan_ms": state.get("last_scan_ms")}

    def is_finished(self, state: Any) -> bool:
        return self.bounded and all(f[2] for f in state["files"])

    def finishes_within(self, state: Any, parallelism: int, budget: int) -> bool:
        """Bounded and at most ``budget`` bytes left per reader (a line is at least one
        byte, so those lines fit in the budget). Sizes are looked up for at most
        ``_SIZE_LOOKUPS`` unread files per epoch (else: unknown, False)."""
        pending = [(i, f[0], f[1]) for i, f in enumerate(state["files"]) if not f[2]]
        if not self.bounded or len(pending) > _SIZE_LOOKUPS:
            return False
        import fsspec

        left = [0] * parallelism
        for i, path, offset in pending:
            fs, p = fsspec.core.url_to_fs(path)
            left[i % parallelism] += max(0, int(fs.size(p)) - int(offset))
        return max(left, default=0) <= budget
