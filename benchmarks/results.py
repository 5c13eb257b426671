"""The benchmarks' results: one versioned JSON file per benchmark, the source of the page.

Every benchmark module ``benchmarks/NAME.py`` has its current result in
``benchmarks/results/NAME.json``; ``python -m benchmarks.report`` renders them all into
``docs/benchmarks.md`` (generated: never edited by hand; older figures live in git history).

A result file holds, for one benchmark::

    {"format": 1, "benchmark": NAME, "title": ..., "about": ..., "notes": [...],
     "runs": [{"name": ..., "command": ..., "date": ..., "load_average": ...,
               "git_sha": ..., "machine": ..., "tables": [...], "notes": [...],
               "images": [...]}]}

``about`` and the file's ``notes`` describe the benchmark (the workload, what a figure
means) and are kept when a run is replaced; a run is one sitting's measurement: the
command that reruns it, when and where it ran (the machine's load average beside every
figure: a shared machine's absolute figures move with it, same-run ratios much less),
its tables (cells are the figures as printed) and the caveats of that sitting. Most
benchmarks have one run; a benchmark measured by two different commands (e.g. two
workloads) has one run per command, each under its own ``name``.

A benchmark writes its run with ``--result`` (see ``Sitting`` and ``record``).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: bump when a reader of the old layout could misread the new one (and convert the files)
FORMAT_VERSION = 1
BENCHMARKS_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCHMARKS_DIR / "results"
REPO_DIR = BENCHMARKS_DIR.parent


class ResultFormatError(ValueError):
    """A result file that cannot be read: names the file, the problem and the fix."""


@dataclass(frozen=True)
class Table:
    """One table of figures: column headings and rows of cells as printed."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"columns": list(self.columns), "rows": [list(r) for r in self.rows]}
        if self.caption:
            out["caption"] = self.caption
        return out


@dataclass(frozen=True)
class Image:
    """A figure drawn by the benchmark (a file under docs/), shown under the run's tables."""

    path: str
    alt: str


@dataclass(frozen=True)
class Run:
    """One sitting's measurement of a benchmark, with what reruns it and where it ran."""

    command: str
    date: str
    load_average: str
    machine: str
    tables: tuple[Table, ...]
    git_sha: str | None = None
    name: str = ""
    notes: tuple[str, ...] = ()
    images: tuple[Image, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.name:
            out["name"] = self.name
        out.update(
            command=self.command,
            date=self.date,
            load_average=self.load_average,
            git_sha=self.git_sha,
            machine=self.machine,
            tables=[t.to_json() for t in self.tables],
            notes=list(self.notes),
        )
        if self.images:
            out["images"] = [{"path": i.path, "alt": i.alt} for i in self.images]
        return out


@dataclass(frozen=True)
class Result:
    """A benchmark's current result: what it measures and its current run(s)."""

    benchmark: str
    title: str
    about: str
    runs: tuple[Run, ...]
    notes: tuple[str, ...] = ()
    #: the module that measures it (``benchmarks/NAME.py``); None for a manual measurement
    module: str | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "benchmark": self.benchmark,
            "module": self.module,
            "title": self.title,
            "about": self.about,
            "notes": list(self.notes),
            "runs": [r.to_json() for r in self.runs],
        }

    def with_run(self, run: Run) -> Result:
        """This result with ``run`` replacing the run of the same name (or added last)."""
        runs = [r for r in self.runs if r.name != run.name]
        index = next((i for i, r in enumerate(self.runs) if r.name == run.name), len(runs))
        runs.insert(index, run)
        return Result(self.benchmark, self.title, self.about, tuple(runs), self.notes, self.module)


def _require(data: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise ResultFormatError(f"{where}: missing {key!r}; add it (see benchmarks/results.py)")
    value = data[key]
    if not isinstance(value, kind):
        raise ResultFormatError(
            f"{where}: {key!r} is {type(value).__name__}, expected {kind}; fix the file"
        )
    return value


def _strings(values: Any, where: str) -> tuple[str, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ResultFormatError(f"{where}: expected a list of strings; fix the file")
    return tuple(values)


def _table(data: Any, where: str) -> Table:
    if not isinstance(data, dict):
        raise ResultFormatError(f"{where}: a table is an object with columns and rows")
    columns = _strings(_require(data, "columns", list, where), f"{where} columns")
    rows = tuple(
        _strings(row, f"{where} row {n}")
        for n, row in enumerate(_require(data, "rows", list, where))
    )
    for n, row in enumerate(rows):
        if len(row) != len(columns):
            raise ResultFormatError(
                f"{where} row {n}: {len(row)} cells for {len(columns)} columns; "
                "give every row one cell per column (an empty string for none)"
            )
    return Table(columns, rows, data.get("caption", ""))


def _run(data: Any, where: str) -> Run:
    if not isinstance(data, dict):
        raise ResultFormatError(f"{where}: a run is an object")
    sha = data.get("git_sha")
    if sha is not None and not isinstance(sha, str):
        raise ResultFormatError(f"{where}: git_sha is a string or null")
    tables = tuple(
        _table(t, f"{where} table {n}") for n, t in enumerate(_require(data, "tables", list, where))
    )
    images = tuple(
        Image(_require(i, "path", str, where), _require(i, "alt", str, where))
        for i in data.get("images", [])
    )
    return Run(
        command=_require(data, "command", str, where),
        date=_require(data, "date", str, where),
        load_average=_require(data, "load_average", str, where),
        machine=_require(data, "machine", str, where),
        tables=tables,
        git_sha=sha,
        name=data.get("name", ""),
        notes=_strings(data.get("notes", []), f"{where} notes"),
        images=images,
    )


def parse(data: Any, where: str) -> Result:
    """A ``Result`` from the JSON value of a result file (``where`` names it in errors)."""
    if not isinstance(data, dict):
        raise ResultFormatError(f"{where}: a result file holds one JSON object")
    version = _require(data, "format", int, where)
    if version != FORMAT_VERSION:
        raise ResultFormatError(
            f"{where}: format {version}, this checkout reads format {FORMAT_VERSION}; "
            "rewrite the file in this format or update benchmarks/results.py"
        )
    runs = tuple(
        _run(r, f"{where} run {n}") for n, r in enumerate(_require(data, "runs", list, where))
    )
    if not runs:
        raise ResultFormatError(f"{where}: no runs; a result needs at least one")
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise ResultFormatError(f"{where}: two runs named alike {names}; one run per name")
    module = data.get("module")
    if module is not None and not isinstance(module, str):
        raise ResultFormatError(f"{where}: module is a path string or null")
    return Result(
        benchmark=_require(data, "benchmark", str, where),
        title=_require(data, "title", str, where),
        about=_require(data, "about", str, where),
        runs=runs,
        notes=_strings(data.get("notes", []), f"{where} notes"),
        module=module,
    )


def result_path(benchmark: str, results_dir: Path = RESULTS_DIR) -> Path:
    return results_dir / f"{benchmark}.json"


def load(path: Path) -> Result:
    """Read and check one result file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ResultFormatError(f"{path}: not JSON ({e}); fix the file") from e
    result = parse(data, str(path))
    if result.benchmark != path.stem:
        raise ResultFormatError(
            f"{path}: holds benchmark {result.benchmark!r}; name the file {result.benchmark}.json"
        )
    return result


def load_all(results_dir: Path = RESULTS_DIR) -> list[Result]:
    """Every result, in the order of their file names."""
    return [load(p) for p in sorted(results_dir.glob("*.json"))]


def dump(result: Result) -> str:
    """The file text of a result (stable: sorted by nothing but the fields' order)."""
    return json.dumps(result.to_json(), indent=2, ensure_ascii=False) + "\n"


def save(result: Result, results_dir: Path = RESULTS_DIR) -> Path:
    """Write a result file atomically (a reader never sees half a file)."""
    path = result_path(result.benchmark, results_dir)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(dump(result), encoding="utf-8")
    os.replace(tmp, path)
    return path


def _git_sha() -> str | None:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_DIR,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "src", "benchmarks"],
            cwd=REPO_DIR,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{sha}+changes" if dirty else sha


def _machine() -> str:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    try:
        spark = f", PySpark {importlib.metadata.version('pyspark')}"
    except importlib.metadata.PackageNotFoundError:
        spark = ""
    return (
        f"{os.cpu_count()} cores, {mem_gib:.0f} GiB, Python "
        f"{platform.python_version()}{spark}, {platform.system()} {platform.machine()}"
    )


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass
class Sitting:
    """A benchmark run in progress: started at ``begin``, made a ``Run`` at its end.

    It notes the command line, the UTC time and the 1-minute load average at the start
    and again at the end, so every figure carries the load it was measured under.
    """

    command: str
    started: datetime.datetime
    load_at_start: float

    @classmethod
    def begin(cls, module: str, argv: Sequence[str] | None = None) -> Sitting:
        args = list(sys.argv[1:] if argv is None else argv)
        args = [a for a in args if a != "--result"]
        command = " ".join(["python", "-m", module, *map(shlex.quote, args)])
        return cls(command, _utc_now(), os.getloadavg()[0])

    def run(
        self,
        tables: Iterable[Table],
        notes: Iterable[str] = (),
        name: str = "",
        images: Iterable[Image] = (),
    ) -> Run:
        ended = _utc_now()
        load_at_end = os.getloadavg()[0]
        low, high = sorted((self.load_at_start, load_at_end))
        return Run(
            command=self.command,
            date=f"{self.started:%Y-%m-%d %H:%M}-{ended:%H:%M} UTC",
            load_average=f"{low:.1f}-{high:.1f}",
            machine=_machine(),
            tables=tuple(tables),
            git_sha=_git_sha(),
            name=name,
            notes=tuple(notes),
            images=tuple(images),
        )


def record(benchmark: str, run: Run, results_dir: Path = RESULTS_DIR) -> Path:
    """Make ``run`` the benchmark's current run of its name, keeping about, notes, other runs.

    The benchmark's result file must exist (its title and description are written by
    hand once); then ``python -m benchmarks.report`` regenerates the page.
    """
    path = result_path(benchmark, results_dir)
    if not path.exists():
        raise ResultFormatError(
            f"{path} does not exist: write it once by hand (title, about, notes; see "
            "benchmarks/results.py), then rerun with --result"
        )
    saved = save(load(path).with_run(run), results_dir)
    print(f"result: {saved} (now run `python -m benchmarks.report`)", file=sys.stderr)
    return saved


def publish(
    benchmark: str, run: Callable[[], Run], result: bool, json_path: str | None, figures: Any
) -> None:
    """A benchmark's end: ``figures`` written to ``json_path`` (its ``--json``, when given)
    and, with ``--result`` (``result``), ``run()`` recorded as the benchmark's current run."""
    if json_path:
        with open(json_path, "w") as f:
            json.dump(figures, f, indent=1)
    if result:
        record(benchmark, run())


def records_per_s(value: float) -> str:
    """A rate as the page prints it: ``417,862``."""
    return f"{value:,.0f}"


def ratio(value: float) -> str:
    return f"{value:.2f}"


def add_result_option(parser: Any) -> None:
    """The ``--result`` option every benchmark takes (an ``argparse.ArgumentParser``)."""
    parser.add_argument(
        "--result",
        action="store_true",
        help="make this run the benchmark's current result (benchmarks/results/NAME.json); "
        "then regenerate docs/benchmarks.md with `python -m benchmarks.report`",
    )


def rates_table(
    heading: str, rows: dict[str, dict[str, float]], columns: dict[str, str], unit: str = " rec/s"
) -> Table:
    """A table of rates: one row per ``rows`` entry, one column per ``columns`` key
    (``{key: column heading}``), each cell the rate printed with thousands separators."""
    return Table(
        (heading, *columns.values()),
        tuple(
            (name, *(f"{rates[key]:,.0f}{unit}" if key in rates else "" for key in columns))
            for name, rates in rows.items()
        ),
    )


def cell(value: Any) -> str:
    """A figure as the page prints it: thousands separators, a few significant digits."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.3g}"
    if isinstance(value, list | tuple):
        return ", ".join(cell(v) for v in value)
    return str(value)


def _flat(figures: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, value in figures.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _flat(value, f"{path} / ")
        else:
            out.append((path, cell(value)))
    return out


def figures_table(figures: dict[str, Any], heading: str = "figure") -> Table:
    """A two-column table of a benchmark's (nested) dict of figures: the key path
    (``outer / inner``) and the value."""
    return Table((heading, "value"), tuple(_flat(figures)))


def rows_table(rows: list[dict[str, Any]]) -> Table:
    """A table of dict rows: the columns are the keys of the rows, in first-seen order."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return Table(
        tuple(columns),
        tuple(tuple(cell(row[c]) if c in row else "" for c in columns) for row in rows),
    )
