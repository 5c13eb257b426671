"""``streamstate local start|stop|status``: the warm local Spark Connect server.

::

    streamstate local start [--port N] [--master URL] [--conf KEY=VALUE ...] [--owner-pid PID]
    streamstate local stop
    streamstate local status [--json]

While it runs, ``streamstate run JOB.py`` and ``get_execution_environment()`` (without a
session of their own) run jobs on it (``spark/runners.py``); ``--master local[*]`` on a
job still asks for a new classic session. Exit codes: 0 ok; 1 ``status`` of a server
that is not running; 2 a usage error or a server that could not start.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, TextIO

__all__ = ["LOCAL_COMMANDS", "add_local_parser"]


def add_local_parser(sub: Any) -> None:
    p = sub.add_parser(
        "local",
        help="start, stop or show the warm local Spark Connect server",
        description="A Spark Connect server on 127.0.0.1 with its Python workers kept warm: "
        "jobs started while it runs use it and start in seconds.",
    )
    verbs = p.add_subparsers(dest="local_command", metavar="VERB", required=True)
    s = verbs.add_parser("start", help="start the server (or show the running one)")
    s.add_argument(
        "--port", type=int, default=None, help="gRPC port (default 15002, or the next free one)"
    )
    s.add_argument(
        "--master", default="local[*]", help="the server's Spark master (default local[*])"
    )
    s.add_argument(
        "--conf",
        dest="confs",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the server (repeatable)",
    )
    s.add_argument(
        "--owner-pid",
        type=int,
        default=None,
        metavar="PID",
        help="stop the server when process PID ends, however it ends (a CI job's shell, "
        "a notebook kernel): a watchdog process watches it",
    )
    verbs.add_parser("stop", help="stop the server")
    st = verbs.add_parser("status", help="is it running, where, since when")
    st.add_argument("--json", action="store_true", help="print JSON")


def _conf(pairs: list[str]) -> dict[str, str]:
    from streamstate.errors import ConfigurationError

    conf = {}
    for raw in pairs:
        key, sep, value = raw.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(f"--conf takes KEY=VALUE, got {raw!r}")
        conf[key.strip()] = value
    return conf


def _cmd_local(args: argparse.Namespace, out: TextIO) -> int:
    from streamstate.spark import local_server

    if args.local_command == "start":
        running = local_server.running_server()
        if running is not None:
            print(f"already running at {running.url} (pid {running.pid})", file=out)
            return 0
        port = (
            local_server.DEFAULT_PORT if args.port is None else local_server.check_port(args.port)
        )
        t0 = time.monotonic()
        server = local_server.start_server(
            port=port, master=args.master, conf=_conf(args.confs), owner_pid=args.owner_pid
        )
        print(
            f"Spark Connect server running at {server.url} (pid {server.pid}, "
            f"{args.master}, started in {time.monotonic() - t0:.1f} s); log: {server.log}\n"
            f"jobs started now run on it; `streamstate local stop` stops it",
            file=out,
        )
        return 0
    if args.local_command == "stop":
        stopped = local_server.stop_server()
        print("stopped" if stopped is not None else "not running", file=out)
        return 0
    current = local_server.running_server()
    if args.json:
        print(json.dumps(local_server.describe(current)), file=out)
    elif current is None:
        print("not running (start it with `streamstate local start`)", file=out)
    else:
        up = time.time() - current.started_ms / 1000.0
        print(
            f"running at {current.url} (pid {current.pid}, {current.master}, up {up:.0f} s); "
            f"log: {current.log}",
            file=out,
        )
    return 0 if current is not None else 1


LOCAL_COMMANDS = {"local": _cmd_local}
