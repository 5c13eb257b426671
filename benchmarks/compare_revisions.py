"""CPU seconds of the same job on two (or more) revisions of streamstate, in one sitting.

The machine is shared, so wall time says more about the neighbours than about the code;
the CPU time a job's processes spent is much steadier. For every revision named
(``--revs BASE OTHER ...``; ``.`` is this checkout as it is, uncommitted changes
included) the harness checks the revision out with ``git worktree add`` under
``$TMPDIR`` (removed at the end) and runs the job in a fresh interpreter with
``PYTHONPATH=<that tree>/src``, so each revision runs its own library code (the K1 child
checks which ``streamstate`` it imported). Runs are
interleaved (A B A B ...), so a change of load hits every revision alike; each figure is
the best (smallest) of ``--repeat`` runs, and the ratios are each revision's best over the
base revision's best.

Two kinds of job:

* ``--job k1`` (the default): K1's keyed running count (``benchmarks/keyed_count.py``'s
  workload, ``--records`` records over ``--keys`` keys, parallelism 2) on the **local
  runner** (``execution.runner: local``): every stage in one Python process, no Spark, so
  the figure is the worker code's own cost. Measured: the process CPU (user + system) of
  ``env.execute()`` inside the child (``time.process_time``), and of the whole child;
  ``--epochs`` and ``--checkpoints`` choose the cells, ``--state-backend`` the backend.
* ``-- COMMAND ...``: any command (e.g. ``python -m benchmarks.keyed_count --no-peers``,
  which starts Spark), run in this checkout with each revision's ``src/`` first on
  ``PYTHONPATH``: the benchmark's code is this checkout's for every revision, the library's
  is the revision's (PySpark's workers and the subtask hosts inherit the path). Measured: the CPU of the command's
  whole process tree: the JVM, PySpark's workers and subtask hosts included. With a
  writable cgroup-v1 ``cpuacct`` hierarchy (root on Linux) the command runs in a cgroup of
  its own, which counts every descendant, daemonised or not; otherwise
  ``getrusage(RUSAGE_CHILDREN)``, which counts only the descendants that were waited for.
  A process left in the cgroup after the command ends and idle for 3 s (e.g. a
  subtask-host zygote) is killed: give the harness a ``TMPDIR`` of its own, so that no
  zygote it starts serves (and no run outside it shares) a process it would kill.

Run (``TMPDIR=$(mktemp -d)`` first): ``python -m benchmarks.compare_revisions --revs cc0d968^ cc0d968 . --repeat 3``;
``python -m benchmarks.compare_revisions --revs main . -- python -m benchmarks.keyed_count
--records 300000 --no-peers --repeat 1``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.results import Table

#: this checkout (the child runs this file as a script: it imports nothing of benchmarks/)
REPO_DIR = Path(__file__).resolve().parent.parent
CGROUP_ROOT = Path("/sys/fs/cgroup/cpuacct")


@dataclass(frozen=True)
class Revision:
    """A revision as named (``label``) and the tree its code runs from."""

    label: str
    sha: str
    tree: Path


@contextmanager
def checked_out(names: Sequence[str], scratch: Path) -> Iterator[list[Revision]]:
    """Each named revision in a tree of its own (``.``: this checkout); the temporary
    worktrees go at the end."""
    made: list[Path] = []
    revisions = []
    try:
        for name in names:
            if name == ".":
                sha = _git("rev-parse", "--short", "HEAD") + "+worktree"
                revisions.append(Revision(name, sha, REPO_DIR))
                continue
            sha = _git("rev-parse", "--short", f"{name}^{{commit}}")
            tree = scratch / f"rev-{sha}"
            if not tree.exists():
                _git("worktree", "add", "--detach", str(tree), sha)
                made.append(tree)
            revisions.append(Revision(name, sha, tree))
        yield revisions
    finally:
        for tree in made:
            _git("worktree", "remove", "--force", str(tree))


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
    except OSError:
        return "?"


def _exit_on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO_DIR), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _env(rev: Revision) -> dict[str, str]:
    """The environment of a run of ``rev``: its ``src/`` first on the path, then this
    checkout (the benchmark code, the same for every revision)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{rev.tree / 'src'}{os.pathsep}{REPO_DIR}"
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # every revision imports from its bytecode
    return env


class CpuMeter:
    """The CPU seconds (user + system) of a subprocess and all its descendants."""

    def __init__(self) -> None:
        self.cgroup: Path | None = None
        probe = CGROUP_ROOT / f"streamstate-bench-{os.getpid()}"
        try:
            probe.mkdir()
            self.cgroup = probe
        except OSError:
            pass  # no writable cpuacct hierarchy: RUSAGE_CHILDREN

    @property
    def how(self) -> str:
        return "cgroup cpuacct" if self.cgroup else "getrusage(RUSAGE_CHILDREN)"

    def run(self, argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
        """Run ``argv``; its CPU seconds and its standard output (it must succeed)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = self._usage()
        preexec = None
        if self.cgroup is not None:
            procs = self.cgroup / "cgroup.procs"

            def preexec() -> None:  # the child joins the cgroup before it execs
                procs.write_text(str(os.getpid()))

        proc = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, preexec_fn=preexec
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}")
        if self.cgroup is not None:
            self._wait_empty()
            return (self._usage() - start) / 1e9, proc.stdout
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return cpu, proc.stdout

    def _usage(self) -> int:
        if self.cgroup is None:
            return 0
        return int((self.cgroup / "cpuacct.usage").read_text())

    def _wait_empty(self, idle_s: float = 3.0) -> None:
        """Daemonised descendants (a Spark JVM shutting down) still count until they exit.
        One that stays but spends no CPU for ``idle_s`` (an idle subtask-host zygote
        waiting for its idle timeout, as older revisions leave) adds nothing more to the
        figure: it is named on stderr and killed, so the next run starts clean."""
        assert self.cgroup is not None
        procs = self.cgroup / "cgroup.procs"
        usage, since = self._usage(), time.monotonic()
        while left := procs.read_text().split():
            time.sleep(0.2)
            now = self._usage()
            if now != usage:
                usage, since = now, time.monotonic()
            elif time.monotonic() - since >= idle_s:
                for pid in left:
                    print(f"killing idle leftover {pid}: {_cmdline(pid)}", file=sys.stderr)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                since = time.monotonic()

    def close(self, grace_s: float = 10.0) -> None:
        """Remove the cgroup; a failed or interrupted command's processes still in it (a
        subtask-host zygote, a JVM) are killed first, or rmdir would fail (EBUSY) and
        leave both behind."""
        if self.cgroup is None:
            return
        procs = self.cgroup / "cgroup.procs"
        deadline = time.monotonic() + grace_s
        while left := [int(pid) for pid in procs.read_text().split()]:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {left} of {self.cgroup} did not end")
            time.sleep(0.1)
        self.cgroup.rmdir()


# ---- the K1 job on the local runner (the child side) ----------------------------------


def k1_child(args: Any) -> None:
    """Run K1 once on the local runner; print the CPU figures as JSON."""
    import streamstate
    from streamstate.common import Configuration, Types
    from streamstate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
    from streamstate.datastream.connectors import DiscardingSink
    from streamstate.datastream.state import ValueStateDescriptor

    class CountPerKey(KeyedProcessFunction):  # benchmarks/keyed_count.py's function
        def open(self, ctx: Any) -> None:
            self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

        def process_element(self, value: Any, ctx: Any) -> Any:
            c = (self.count.value() or 0) + 1
            self.count.update(c)
            yield value[0], c

    data = [(f"k{i % args.keys}", 1) for i in range(args.records)]
    conf = Configuration()
    conf.set_string("execution.runner", "local")
    conf.set_string("execution.epoch.max-records", str(-(-len(data) // (args.epochs * 2))))
    conf.set_string("state.backend.type", args.state_backend)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    if args.checkpoints:
        env.enable_checkpointing(1)
        env.get_checkpoint_config().set_checkpoint_storage_dir(tempfile.mkdtemp())
    env.from_collection(data).set_parallelism(2).key_by(lambda v: v[0]).process(CountPerKey()).uid(
        "count"
    ).add_sink(DiscardingSink())
    if args.gc == "paused":  # as the Spark runner's epochs run (runtime/gc_pause.py)
        import gc

        gc.collect()
        gc.disable()
    profile = os.environ.get("STREAMSTATE_PROFILE")
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = env.execute("k1-cpu")
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    if profiler is not None and profile is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    acc = result.get_all_accumulator_results()
    assert acc["records-in.count"] == len(data), acc  # every record, exactly once
    figures = {"job_cpu_s": cpu, "job_wall_s": wall, "module": streamstate.__file__}
    print(json.dumps(figures))


def k1_cells(args: Any) -> list[tuple[str, list[str]]]:
    """The K1 cells to measure: (label, child arguments)."""
    cells: list[tuple[str, list[str]]] = []
    for epochs in args.epochs:
        for checkpoints in args.checkpoints:
            label = f"{epochs} epoch(s), {'checkpoint every epoch' if checkpoints else 'no checkpoints'}"
            argv = ["--epochs", str(epochs), "--records", str(args.records), "--gc", args.gc]
            argv += ["--keys", str(args.keys), "--state-backend", args.state_backend]
            cells.append((label, argv + (["--checkpoints"] if checkpoints else [])))
    return cells


def measure(args: Any, revisions: list[Revision], meter: CpuMeter) -> dict[str, Any]:
    """Best CPU seconds per cell and revision: ``{cell: {rev label: {figure: s}}}``."""
    cells: list[tuple[str, list[str]]]
    if args.command:
        cells = [(" ".join(args.command), [])]
    else:
        cells = k1_cells(args)
    best: dict[str, dict[str, dict[str, float]]] = {}
    if not args.command:  # untimed: each tree compiles its bytecode, the page cache warms
        for rev in revisions:
            warm = [sys.executable, str(Path(__file__).resolve()), "--child", "--records", "2000"]
            meter.run(warm, Path(tempfile.gettempdir()), _env(rev))
    for label, child_args in cells:
        for round_ in range(args.repeat):
            for rev in revisions:
                env = _env(rev)
                if args.command:
                    argv = [sys.executable if a == "python" else a for a in args.command]
                    cpu, out = meter.run(argv, REPO_DIR, env)
                    slug = "".join(c if c.isalnum() else "-" for c in args.name) or "run"
                    log = Path(tempfile.gettempdir()) / f"{slug}-{rev.sha}-{round_ + 1}.out"
                    log.write_text(out)  # the command's own figures, to read beside the CPU
                    print(f"  output: {log}")
                    figures = {"process tree CPU s": cpu}
                else:
                    argv = [sys.executable, str(Path(__file__).resolve()), "--child"]
                    cpu, out = meter.run(argv + child_args, Path(tempfile.gettempdir()), env)
                    child = json.loads(out.strip().splitlines()[-1])
                    expected = rev.tree / "src" / "streamstate" / "__init__.py"
                    if Path(child["module"]) != expected:  # each revision runs its own code
                        raise RuntimeError(f"{rev.label} imported {child['module']}")
                    figures = {"job CPU s": child["job_cpu_s"], "process CPU s": cpu}
                print(
                    f"{label} | {rev.label} ({rev.sha}) round {round_ + 1}: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()),
                    flush=True,
                )
                cell = best.setdefault(label, {}).setdefault(rev.label, {})
                for k, v in figures.items():
                    cell[k] = min(cell.get(k, v), v)
    return best


def table(best: dict[str, Any], revisions: list[Revision]) -> Table:
    """One row per cell and figure: each revision's best CPU seconds and its ratio to the
    first revision's."""
    from benchmarks.results import Table

    base = revisions[0].label
    columns = ["cell", "figure"] + [f"{r.label} ({r.sha}) s" for r in revisions]
    columns += [f"{r.label} / {base}" for r in revisions[1:]]
    rows = []
    for label, per_rev in best.items():
        for figure in per_rev[base]:
            row = [label, figure] + [f"{per_rev[r.label][figure]:.2f}" for r in revisions]
            row += [
                f"{per_rev[r.label][figure] / per_rev[base][figure]:.2f}" for r in revisions[1:]
            ]
            rows.append(tuple(row))
    return Table(tuple(columns), tuple(rows))


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1 :]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--revs", nargs="+", default=["main", "."], help="base revision first")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--records", type=int, default=300_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--epochs", type=int, nargs="+", default=[1, 10])
    p.add_argument("--checkpoints", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--cells",
        choices=("off", "on", "both"),
        default="both",
        help="K1 with checkpoints off, on (a checkpoint every epoch) or both",
    )
    p.add_argument("--state-backend", choices=("hashmap", "rocksdb"), default="hashmap")
    p.add_argument(
        "--gc",
        choices=("on", "paused"),
        default="on",
        help="K1: Python's cyclic garbage collector on, or paused for the whole job (as the "
        "Spark runner pauses it for each epoch's work)",
    )
    p.add_argument("--name", default="", help="the run's name in the result (--result)")
    p.add_argument("--result", action="store_true", help="make this the current result")
    args = p.parse_args(argv)
    if args.child:
        args.epochs = args.epochs[0]
        k1_child(args)
        return
    from benchmarks.results import Sitting, record

    args.command = command
    args.checkpoints = {"off": [False], "on": [True], "both": [False, True]}[args.cells]
    sitting = Sitting.begin(
        "benchmarks.compare_revisions", argv + (["--", *command] if command else [])
    )
    scratch = Path(tempfile.gettempdir())
    # SIGTERM (a timeout, a kill) ends the run through the finally blocks below: the
    # temporary worktrees and the cgroup go, the measured processes are killed
    signal.signal(signal.SIGTERM, _exit_on_signal)
    meter = CpuMeter()
    print(f"CPU of the job's processes by {meter.how}; load average {os.getloadavg()}")
    try:
        with checked_out(args.revs, scratch) as revisions:
            best = measure(args, revisions, meter)
    finally:
        meter.close()
    result = table(best, revisions)
    widths = [
        max(len(str(c)) for c in col) for col in zip(result.columns, *result.rows, strict=True)
    ]
    for row in (result.columns, *result.rows):
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    print(f"load average at the end {os.getloadavg()}")
    if args.result:
        notes = [f"CPU seconds by {meter.how}; best of {args.repeat}, revisions interleaved."]
        record("compare_revisions", sitting.run([result], notes, name=args.name))


if __name__ == "__main__":
    main()
