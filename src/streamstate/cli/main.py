"""The ``streamstate`` command line.

::

    streamstate run [--from-checkpoint PATH | --from-savepoint PATH]
                    [--allow-non-restored-state] [--allow-duplicate-output]
                    [--allow-unsigned-checkpoints]
                    [--master URL] [--remote [URL]] [--parallelism N] [--quiet]
                    [--verbose] [-D key=value ...] JOB.py [job args ...]
    streamstate checkpoints DIR [--job JOB_ID] [--no-verify] [--all] [--json]
    streamstate describe PATH [--json]
    streamstate state PATH --operator UID --state NAME
                      [--kind value|list|map|reducing|aggregating] [--limit N] [--json]
    streamstate list | info JOB_ID | cancel JOB_ID | savepoint JOB_ID [DIR]
                | stop JOB_ID [--savepoint-path DIR]      (running jobs: cli/jobs.py)
    streamstate local start|stop|status        (the warm local Spark Connect server: cli/local.py)

``run`` executes a job script as ``python JOB.py args...`` would (``__name__ ==
"__main__"``, ``sys.argv = [JOB.py, *args]``), with configuration defaults that every
``StreamExecutionEnvironment`` created inside picks up: they travel in the environment
variable ``STREAMSTATE_CONF`` (a JSON object of configuration keys), which the environment
constructor merges *before* the job's own configuration (so explicit settings in the job
win, as with Flink's ``flink run -p/-D``). Options must come before ``JOB.py``, as with
``flink run`` and its jar; everything after it is passed to the job, except that one of
``run``'s own options there (``job.py --from-checkpoint PATH``) is refused with the right
order: it would otherwise reach only the job's ``sys.argv`` and the job would silently start
from empty state. ``JOB.py -- ARGS`` passes such arguments to the job on purpose.

The commands that read checkpoints (``checkpoints``, ``describe``, ``state``) reach an
object store with the ``s3.*`` / ``fsspec.*`` keys of ``STREAMSTATE_CONF`` or the AWS SDK's
own environment (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...).

Exit codes: 0 ok; 2 usage error or a streamstate error (one line on stderr, no traceback);
1 any other error raised by a job (with its traceback); a job's own ``sys.exit(n)`` is kept.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from streamstate.cli.jobs import JOB_COMMANDS, add_job_parsers
from streamstate.cli.local import LOCAL_COMMANDS, add_local_parser
from streamstate.cli.state_export import write_rows
from streamstate.errors import ConfigurationError, JobExecutionError, StreamStateError
from streamstate.runtime.checkpoint import signing
from streamstate.runtime.stores import StorageOptions
from streamstate.runtime.tracebacks import user_frames

__all__ = ["CONF_ENV_VAR", "build_parser", "main"]

#: environment variable read by ``StreamExecutionEnvironment`` (JSON object of config keys)
CONF_ENV_VAR = "STREAMSTATE_CONF"

_KINDS = ("value", "list", "map", "reducing", "aggregating")

#: why a checkpoint directory can be empty after a job ran (``streamstate checkpoints``)
NO_CHECKPOINTS_HINT = (
    "(a job deletes its checkpoints when it finishes or is cancelled unless "
    "execution.checkpointing.externalized-checkpoint-retention is RETAIN_ON_CANCELLATION; "
    "checkpoints go to this directory only with execution.checkpointing.dir or "
    "set_checkpoint_storage_dir)"
)


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # no SystemExit from deep inside main()
        raise _UsageError(f"{self.prog}: {message}")


# ---------------------------------------------------------------------------------------------
# Parser


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="streamstate",
        description="Run streamstate jobs and inspect their checkpoints and savepoints.",
    )
    p.add_argument("--version", action="version", version=f"streamstate {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    r = sub.add_parser(
        "run",
        help="run a job script with configuration defaults",
        description="Run JOB.py as `python JOB.py ARGS`; every StreamExecutionEnvironment it "
        "creates starts from the given configuration (the job's own settings win). Options go "
        "before JOB.py; everything after JOB.py is passed to the job.",
    )
    r.add_argument(
        "--from-checkpoint",
        "-s",
        metavar="PATH",
        help="restore from this retained checkpoint (chk-<n>) or savepoint "
        "(execution.state-recovery.path)",
    )
    r.add_argument(
        "--from-savepoint",
        dest="from_checkpoint",
        metavar="PATH",
        help="restore from this savepoint (same as --from-checkpoint)",
    )
    r.add_argument(
        "--allow-non-restored-state",
        action="store_true",
        help="drop state of operators the job no longer has instead of failing the restore",
    )
    r.add_argument(
        "--allow-duplicate-output",
        action="store_true",
        help="restore a checkpoint behind committed output even where the replay cannot skip "
        "it (execution.state-recovery.allow-duplicate-output): that output is written again",
    )
    _add_unsigned_flag(r)
    r.add_argument(
        "--master",
        "-m",
        metavar="URL",
        help="Spark master (spark.master); sc://host:port runs on that Spark Connect server",
    )
    r.add_argument(
        "--remote",
        nargs="?",
        const="",
        metavar="URL",
        help="run on a Spark Connect server (spark.remote): URL, or without one the warm "
        "local server of `streamstate local start`",
    )
    r.add_argument(
        "--quiet", "-q", action="store_true", help="no progress output (execution.progress: none)"
    )
    r.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="Spark's and streamstate's logs at INFO, Spark's start-up output and progress bars "
        "(execution.runner.spark.quiet: false)",
    )
    r.add_argument(
        "--parallelism",
        "-p",
        type=int,
        metavar="N",
        help="default parallelism (parallelism.default)",
    )
    r.add_argument(
        "-D",
        dest="defines",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any configuration key, e.g. -D execution.runner=local (repeatable)",
    )
    r.add_argument("job", metavar="JOB.py", help="the job script")
    r.add_argument("job_args", nargs=argparse.REMAINDER, metavar="ARGS", help="job arguments")

    c = sub.add_parser(
        "checkpoints",
        help="list the checkpoints under a checkpoint directory",
        description="List checkpoints under DIR (<DIR>/<job-id>/chk-<n>/_metadata) with their "
        "status: valid, or corrupt (unreadable metadata or damaged state files).",
    )
    c.add_argument("directory", metavar="DIR", help="checkpoint directory (path or fsspec URL)")
    c.add_argument("--job", metavar="JOB_ID", help="only this job's checkpoints")
    c.add_argument(
        "--no-verify", action="store_true", help="do not read and CRC-check the state files"
    )
    c.add_argument("--all", action="store_true", help="also list incomplete chk-<n> directories")
    c.add_argument("--json", action="store_true", help="print JSON")
    _add_unsigned_flag(c)

    d = sub.add_parser(
        "describe",
        help="describe a checkpoint or savepoint",
        description="Show a checkpoint's job, time, operators and source positions.",
    )
    d.add_argument("path", metavar="PATH", help="chk-<n> / savepoint directory or _metadata")
    d.add_argument("--json", action="store_true", help="print JSON")
    _add_unsigned_flag(d)

    s = sub.add_parser(
        "state",
        help="print the keyed (or operator) state of one operator",
        description="Print `key -> value` for keyed state NAME of operator UID. Reducing and "
        "aggregating state show the stored value / accumulator. When NAME is operator state "
        "(list, union list, broadcast), print `subtask <i> (<mode>) -> value` per subtask.",
    )
    s.add_argument("path", metavar="PATH", help="chk-<n> / savepoint directory or _metadata")
    s.add_argument("--operator", "-o", required=True, metavar="UID", help="operator uid")
    s.add_argument("--state", "-n", required=True, metavar="NAME", help="state name")
    s.add_argument(
        "--kind", choices=_KINDS, help="state kind (default: as recorded in the checkpoint)"
    )
    s.add_argument("--limit", type=int, metavar="N", help="print at most N keys")
    s.add_argument("--json", action="store_true", help="print JSON lines (= --format json)")
    s.add_argument(
        "--format",
        choices=("text", "json", "csv", "parquet"),
        help="text (default), json lines, csv with a header, or parquet (needs --output)",
    )
    s.add_argument("--output", metavar="FILE", help="write to FILE instead of stdout")
    _add_unsigned_flag(s)
    add_job_parsers(sub)
    add_local_parser(sub)
    p.set_defaults(allow_unsigned_checkpoints=False)
    return p


def _add_unsigned_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-unsigned-checkpoints",
        action="store_true",
        help="read checkpoints whose _metadata has no signature (written by an older "
        "streamstate, or downgraded): only for checkpoints you wrote, their pickled state "
        "is loaded (execution.state-recovery.allow-unsigned-checkpoints)",
    )


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("streamstate")
    except metadata.PackageNotFoundError:
        return "unknown"


# ---------------------------------------------------------------------------------------------
# run


def _parse_define(raw: str) -> tuple[str, str]:
    key, sep, value = raw.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigurationError(f"-D takes KEY=VALUE, got {raw!r}")
    return key, value.strip()


def _outer_conf() -> dict[str, str]:
    """The keys of ``STREAMSTATE_CONF`` (a JSON object), if set."""
    outer = os.environ.get(CONF_ENV_VAR)
    if not outer:
        return {}
    try:
        values = json.loads(outer)
    except json.JSONDecodeError as e:
        raise ConfigurationError(f"{CONF_ENV_VAR} is not a JSON object: {e}") from e
    if not isinstance(values, dict):
        raise ConfigurationError(f"{CONF_ENV_VAR} is not a JSON object: {outer!r}")
    return {str(k): str(v) for k, v in values.items()}


def _run_conf(args: argparse.Namespace) -> dict[str, str]:
    conf = _outer_conf()
    for raw in args.defines:
        k, v = _parse_define(raw)
        conf[k] = v
    if args.from_checkpoint:
        conf["execution.state-recovery.path"] = args.from_checkpoint
    if args.allow_non_restored_state:
        conf["execution.state-recovery.ignore-unclaimed-state"] = "true"
    if args.allow_duplicate_output:
        conf["execution.state-recovery.allow-duplicate-output"] = "true"
    if args.allow_unsigned_checkpoints:
        conf[signing.ALLOW_UNSIGNED_KEY] = "true"
    if args.master:
        conf["spark.remote" if args.master.startswith("sc://") else "spark.master"] = args.master
    if args.remote is not None:
        conf["spark.remote"] = args.remote or _warm_server_url()
    if args.quiet:
        conf["execution.progress"] = "none"
    if args.verbose:
        conf["execution.runner.spark.quiet"] = "false"
    if args.parallelism is not None:
        if args.parallelism < 1:
            raise ConfigurationError(f"--parallelism must be >= 1, got {args.parallelism}")
        conf["parallelism.default"] = str(args.parallelism)
    return conf


def _warm_server_url() -> str:
    from streamstate.spark.local_server import running_server

    server = running_server()
    if server is None:
        raise ConfigurationError(
            "--remote without a URL runs on the warm local server, and none is running: "
            "start it with `streamstate local start`, or give --remote sc://host:port"
        )
    return server.url


@contextlib.contextmanager
def _job_process_state(script: str, argv: list[str], conf: dict[str, str]) -> Iterator[None]:
    """sys.argv, sys.path[0] and STREAMSTATE_CONF as for `python script`, restored after."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    saved_env = os.environ.get(CONF_ENV_VAR)
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    os.environ[CONF_ENV_VAR] = json.dumps(conf, sort_keys=True)
    try:
        yield
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if saved_env is None:
            os.environ.pop(CONF_ENV_VAR, None)
        else:
            os.environ[CONF_ENV_VAR] = saved_env


def _run_options() -> dict[str, bool]:
    """``streamstate run``'s option strings -> whether each takes a value."""
    sub = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    )  # argparse has no public accessor for a subcommand's options
    return {
        o: a.nargs != 0
        for a in sub.choices["run"]._actions
        for o in a.option_strings
        if o not in ("-h", "--help")
    }


def _misplaced_option(job_args: list[str]) -> tuple[int, int] | None:
    """``(start, end)`` of the first of ``run``'s own options among the job's arguments
    (``--from-checkpoint PATH``, ``--master=URL``, ``-Dk=v``, ``--quiet``), or None."""
    options = _run_options()
    for i, arg in enumerate(job_args):
        if arg == "--":
            return None
        name, has_value = arg.split("=", 1)[0], "=" in arg
        if name not in options and arg.startswith("-D") and len(arg) > 2:
            name, has_value = "-D", True  # -Dkey=value
        if name in options:
            return i, i + 1 + (options[name] and not has_value)
    return None


def _double_dash_follows(argv: list[str], job: str) -> bool:
    """Whether ``--`` comes right after the job file in the command line."""
    at = argv.index("run") if "run" in argv else 0
    return any(a == job and argv[i + 1 : i + 2] == ["--"] for i, a in enumerate(argv) if i > at)


def _job_args(args: argparse.Namespace) -> list[str]:
    """The job's ``sys.argv[1:]``; ``run``'s own options after JOB.py are refused (they
    would reach only the job, which would run without them: a restore silently lost)."""
    job_args = list(args.job_args)
    if job_args[:1] == ["--"]:
        return job_args[1:]
    if _double_dash_follows(getattr(args, "argv", []), args.job):
        return job_args  # argparse removed the `--` that says "the rest is the job's"
    found = _misplaced_option(job_args)
    if found is None:
        return job_args
    start, end = found
    option = " ".join(job_args[start:end])
    fixed = ["streamstate run", option, args.job, *job_args[:start], *job_args[end:]]
    raise _UsageError(
        f"streamstate run: {option!r} comes after the job file, where it would only be "
        f"passed to the job; options of `streamstate run` go before the job file (as with "
        f"`flink run`): `{' '.join(fixed)}`. To pass it to the job itself: "
        f"`streamstate run {args.job} -- {' '.join(job_args)}`"
    )


def _log_to_stderr(level: int) -> None:
    """streamstate's log records at ``level`` and above on stderr (``run -v``)."""
    logger = logging.getLogger("streamstate")
    logger.setLevel(level)
    if not any(isinstance(h, logging.StreamHandler) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)


def _cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    import runpy

    script = args.job
    if not os.path.isfile(script):
        raise ConfigurationError(f"job script {script!r} does not exist")
    job_args = _job_args(args)
    conf = _run_conf(args)
    if args.verbose:
        _log_to_stderr(logging.INFO)
    with _job_process_state(script, job_args, conf):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            code = e.code
            if code is None:
                return 0
            if isinstance(code, int):
                return code
            print(code, file=sys.stderr)
            return 1
    return 0


# ---------------------------------------------------------------------------------------------
# inspection commands


def _fmt_ts(ts_ms: int | None) -> str:
    if ts_ms is None:
        return "-"
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts_ms / 1000.0, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _cmd_checkpoints(args: argparse.Namespace, out: TextIO) -> int:
    from streamstate.runtime.state_reader import list_checkpoints

    infos = list_checkpoints(
        args.directory, args.job, verify=not args.no_verify, include_incomplete=args.all
    )
    if args.json:
        json.dump([i.to_dict() for i in infos], out, indent=2)
        out.write("\n")
        return 0
    if not infos:
        which = f" of job {args.job}" if args.job else ""
        print(f"no checkpoints{which} under {args.directory}", file=out)
        print(NO_CHECKPOINTS_HINT, file=out)
        return 0
    rows = [
        (
            i.job_id,
            ("savepoint" if i.is_savepoint else str(i.checkpoint_id)),
            _fmt_ts(i.timestamp_ms),
            i.status,
            i.path + (f"  ({i.error})" if i.error else ""),
        )
        for i in infos
    ]
    header = ("JOB", "CHECKPOINT", "TIMESTAMP (UTC)", "STATUS", "PATH")
    widths = [max(len(r[k]) for r in [header, *rows]) for k in range(4)]
    for r in [header, *rows]:
        cells = [r[k].ljust(widths[k]) for k in range(4)]
        print("  ".join([*cells, r[4]]), file=out)
    return 0


def _cmd_describe(args: argparse.Namespace, out: TextIO) -> int:
    from streamstate.runtime.state_reader import describe_checkpoint

    info = describe_checkpoint(args.path)
    if args.json:
        json.dump(info, out, indent=2, sort_keys=True, default=repr)
        out.write("\n")
        return 0
    kind = "Savepoint" if info["is_savepoint"] else "Checkpoint"
    w = out.write
    w(f"{kind} {info['checkpoint_id']}\n")
    w(f"  path:       {info['path']}\n")
    w(f"  job id:     {info['job_id']}\n")
    if info.get("job_name"):
        w(f"  job name:   {info['job_name']}\n")
    w(f"  timestamp:  {info['timestamp']} ({info['timestamp_ms']} ms)\n")
    if info.get("epoch") is not None:
        w(f"  epoch:      {info['epoch']}\n")
    w(f"Operators ({len(info['operators'])}):\n")
    for uid, op in info["operators"].items():
        w(
            f"  {uid}: parallelism {op['parallelism']}, max parallelism "
            f"{op['max_parallelism']}, {op['key_groups_with_state']} key groups with state, "
            f"{op['state_bytes']} bytes\n"
        )
        if op["keyed_states"]:
            ttl_names = set(op.get("ttl_states", ()))
            states = ", ".join(
                f"{n} ({k}{', TTL' if n in ttl_names else ''})"
                for n, k in op["keyed_states"].items()
            )
            w(f"    keyed state: {states}\n")
            for n, roles in op.get("serializers", {}).items():
                key = roles.get("key", {}).get("schema", "?")
                w(f"      {n}: {roles.get('value', {}).get('schema', '?')} (key {key})\n")
        if op["operator_state_handles"]:
            w(f"    operator state handles: {op['operator_state_handles']}\n")
            for n, sers in op.get("operator_serializers", {}).items():
                w(f"      {n}: {', '.join(x['schema'] for x in sers)}\n")
    w(f"Source positions ({len(info['source_offsets'])}):\n")
    for uid, pos in sorted(info["source_offsets"].items()):
        w(f"  {uid}: {json.dumps(pos, sort_keys=True, default=repr)}\n")
    if info["sinks"]:
        w(f"Sinks with transactions: {', '.join(info['sinks'])}\n")
    return 0


def _sorted_items(items: dict[Any, Any]) -> list[tuple[Any, Any]]:
    try:
        return sorted(items.items())
    except TypeError:
        return sorted(items.items(), key=lambda kv: repr(kv[0]))


def _cmd_state(args: argparse.Namespace, out: TextIO) -> int:
    from streamstate.runtime.state_reader import (
        list_keyed_states,
        load_checkpoint,
        passthrough_descriptor,
        read_keyed_state,
        read_operator_state,
    )

    if args.limit is not None and args.limit < 0:
        raise ConfigurationError(f"--limit must be >= 0, got {args.limit}")
    md = load_checkpoint(args.path)
    kind = args.kind
    if kind is None:
        kinds = list_keyed_states(md, args.operator)
        kind = kinds.get(args.state)
        if kind is None:
            op_states = read_operator_state(md, args.operator)
            if args.state in op_states:
                return _print_operator_state(args, op_states[args.state], out)
            known = ", ".join(f"{n} ({k})" for n, k in kinds.items()) or "none"
            known_op = ", ".join(f"{n} ({o['mode']})" for n, o in op_states.items()) or "none"
            raise ConfigurationError(
                f"operator {args.operator!r} has no keyed state named {args.state!r}; "
                f"its keyed states: {known}; its operator states: {known_op}"
            )
    values = read_keyed_state(md, args.operator, passthrough_descriptor(args.state, kind))
    items = _sorted_items(values)
    shown = items if args.limit is None else items[: args.limit]
    write_rows(shown, ("key", "value"), _format(args), out, args.output)
    if len(shown) < len(items):
        print(f"... {len(items) - len(shown)} more keys (of {len(items)})", file=sys.stderr)
    return 0


def _print_operator_state(args: argparse.Namespace, state: dict[str, Any], out: TextIO) -> int:
    """One row per subtask: ``subtask <i> (<mode>) -> <list or map>`` as text."""
    fmt = _format(args)
    if fmt == "text" and not args.output:
        for i, value in enumerate(state["subtasks"]):
            out.write(f"subtask {i} ({state['mode']}) -> {value!r}\n")
        return 0
    rows = [
        (i, state["mode"], sorted(v.items(), key=repr) if isinstance(v, dict) else v)
        for i, v in enumerate(state["subtasks"])
    ]
    write_rows(rows, ("subtask", "mode", "value"), fmt, out, args.output)
    return 0


def _format(args: argparse.Namespace) -> str:
    if args.json and args.format not in (None, "json"):
        raise ConfigurationError(f"--json and --format {args.format} contradict each other")
    return "json" if args.json else (args.format or "text")


_COMMANDS = {
    "run": _cmd_run,
    "checkpoints": _cmd_checkpoints,
    "describe": _cmd_describe,
    "state": _cmd_state,
    **JOB_COMMANDS,
    **LOCAL_COMMANDS,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``streamstate`` command; returns the exit code."""
    parser = build_parser()
    raw = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(raw)
        args.argv = raw
    except _UsageError as e:
        print(e, file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    if args.command is None:  # a bare `streamstate`
        parser.print_help()
        return 0
    try:
        if args.command != "run":  # a job installs its own; the others read stores here
            StorageOptions.from_configuration(_outer_conf()).install()
        with signing.allowing_unsigned(args.allow_unsigned_checkpoints):
            return _COMMANDS[args.command](args, sys.stdout)
    except _UsageError as e:
        print(e, file=sys.stderr)
        return 2
    except StreamStateError as e:
        if isinstance(e, JobExecutionError) and e.__cause__ is not None:
            # the user's error once, with its Python traceback (the worker's, on Spark)
            cause = e.__cause__
            notes = "\n".join(getattr(cause, "__notes__", []))
            shown = notes or user_frames("".join(traceback.format_exception(cause)))
            print(shown.rstrip(), file=sys.stderr)
        msg = " ".join(str(e).split())
        print(f"streamstate {args.command}: {type(e).__name__}: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("streamstate: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `streamstate state ... | head`
        with contextlib.suppress(Exception):
            sys.stdout = open(os.devnull, "w")
        return 0
    except Exception:  # noqa: BLE001 - a job's own error: show it like python would
        traceback.print_exc()
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
