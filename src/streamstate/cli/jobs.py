"""``streamstate list|info|cancel|savepoint|stop|rescale``: running jobs, through their
REST API.

As ``flink list/info/cancel/savepoint/stop``. Jobs are found in the job registry
(``$STREAMSTATE_HOME/jobs/<user>``, written by every running job's driver; ``list`` says
where it looked) or at ``--address URL``
(the address a job prints at start); the registry file also gives the bearer token the
mutating verbs need (``--token`` overrides it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from typing import Any, TextIO

from streamstate.control.client import RestClient, resolve_job
from streamstate.control.registry import list_jobs, registry_dir
from streamstate.errors import ControlPlaneError

__all__ = ["JOB_COMMANDS", "add_job_parsers"]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address",
        "-a",
        metavar="URL",
        help="the job's REST address (default: found in the job registry)",
    )
    p.add_argument("--token", metavar="TOKEN", help="bearer token (default: the registry's)")


def add_job_parsers(sub: Any) -> None:
    """Add the job verbs to the ``streamstate`` sub-command parsers."""
    p = sub.add_parser(
        "list",
        help="list running jobs",
        description="List the jobs of the registry (or of the server at "
        "--address) with their status.",
    )
    _common(p)
    p.add_argument("--all", action="store_true", help="also jobs that ended (server memory)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = sub.add_parser(
        "info",
        help="show a running job: operators, epochs, checkpoints",
        description="Show a job's status, operators and checkpoint counts.",
    )
    p.add_argument("job_id", metavar="JOB_ID")
    _common(p)
    p.add_argument("--json", action="store_true", help="print the /jobs/<id> JSON")
    p = sub.add_parser(
        "cancel",
        help="cancel a running job",
        description="Cancel JOB_ID: it stops at its next epoch boundary.",
    )
    p.add_argument("job_id", metavar="JOB_ID")
    _common(p)
    p = sub.add_parser(
        "savepoint",
        help="take a savepoint of a running job",
        description="Take a savepoint of JOB_ID at its next epoch boundary "
        "and print its path; the job goes on.",
    )
    p.add_argument("job_id", metavar="JOB_ID")
    p.add_argument(
        "directory",
        metavar="DIR",
        nargs="?",
        help="target directory (default: execution.checkpointing.savepoint-dir)",
    )
    p.add_argument("--type", choices=("canonical", "native"), default="canonical")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS")
    _common(p)
    p = sub.add_parser(
        "stop",
        help="stop a running job with a savepoint",
        description="Take a savepoint of JOB_ID and end the job with it.",
    )
    p.add_argument("job_id", metavar="JOB_ID")
    p.add_argument(
        "--savepoint-path",
        "-p",
        metavar="DIR",
        help="target directory (default: execution.checkpointing.savepoint-dir)",
    )
    p.add_argument(
        "--drain",
        "-d",
        action="store_true",
        help="send the final watermark first (event-time timers fire)",
    )
    p.add_argument("--type", choices=("canonical", "native"), default="canonical")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS")
    _common(p)

    p = sub.add_parser(
        "rescale",
        help="change a running job's parallelism",
        description="Rescale JOB_ID at its next epoch boundary, without stopping it: every "
        "operator to PARALLELISM (a user's SourceFunction keeps its own) and/or the operators "
        "named by --operator. Waits until the job runs at the new parallelism.",
    )
    p.add_argument("job_id", metavar="JOB_ID")
    p.add_argument("parallelism", metavar="PARALLELISM", type=int, nargs="?")
    p.add_argument(
        "--operator",
        "-o",
        metavar="UID=N",
        action="append",
        default=[],
        help="one operator's parallelism, by uid (repeatable)",
    )
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS")
    _common(p)


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%d.%m.%Y %H:%M:%S")


def _cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    if args.address:
        servers = {args.address: args.token}
    else:
        servers = {}
        for r in list_jobs():
            servers.setdefault(r.address, args.token or r.token)
    rows: dict[str, dict[str, Any]] = {}
    registered = {r.job_id for r in list_jobs()}
    for address, token in servers.items():
        try:
            overview = RestClient(address, token).call("GET", "/jobs/overview")
        except ControlPlaneError as e:
            if args.address:
                raise
            # one registered driver that does not answer (stopping, hung, its machine gone)
            # must not hide the others: name it and list the rest
            sys.stderr.write(f"streamstate list: skipped a registered job server: {e}\n")
            continue
        for j in overview["jobs"]:
            j["address"] = address
            if args.all or args.address or j["jid"] in registered:
                rows[j["jid"]] = j
    jobs = sorted(rows.values(), key=lambda j: j["start-time"])
    if args.json:
        out.write(json.dumps(jobs, indent=2) + "\n")
        return 0
    where = args.address or f"the job registry {registry_dir()}"
    if not jobs:
        out.write(f"No running jobs in {where}.\n")
        return 0
    out.write(f"------------------ Jobs in {where} ------------------\n")
    for j in jobs:
        out.write(
            f"{_time(j['start-time'])} : {j['jid']} : {j['name']} ({j['state']}) "
            f"epochs={j['epochs']} restarts={j['restarts']} {j['address']}/\n"
        )
    return 0


def _cmd_info(args: argparse.Namespace, out: TextIO) -> int:
    t = resolve_job(args.job_id, args.address, args.token)
    job = t.client.call("GET", f"/jobs/{t.job_id}")
    if args.json:
        out.write(json.dumps(job, indent=2) + "\n")
        return 0
    cps = t.client.call("GET", f"/jobs/{t.job_id}/checkpoints")
    out.write(f"job {job['jid']}: {job['name']} ({job['state']}) at {t.client.address}/\n")
    stats = job["stats"]
    out.write(
        f"  epochs {stats.get('epochs', 0)}, restarts {stats.get('restarts', 0)}, "
        f"runner {job['runner']}\n"
    )
    for v in job["vertices"]:
        out.write(f"  stage {v['id']} (parallelism {v['parallelism']}): {v['name']}\n")
        for o in v["operators"]:
            out.write(f"    {o['uid']}: {o['records']} records\n")
    c = cps["counts"]
    out.write(
        f"  checkpoints: {c['completed']} completed, {c['failed']} failed, "
        f"{c['in_progress']} in progress\n"
    )
    latest = cps["latest"]["completed"]
    if latest:
        out.write(
            f"  latest checkpoint {latest['id']}: {latest['external_path']} "
            f"({latest['state_size']} bytes, {latest['end_to_end_duration']} ms)\n"
        )
    return 0


def _cmd_cancel(args: argparse.Namespace, out: TextIO) -> int:
    t = resolve_job(args.job_id, args.address, args.token)
    t.client.call("PATCH", f"/jobs/{t.job_id}?mode=cancel")
    out.write(f"Cancelled job {t.job_id} (it stops at its next epoch boundary).\n")
    return 0


def _savepoint(args: argparse.Namespace, out: TextIO, stop: bool) -> int:
    t = resolve_job(args.job_id, args.address, args.token)
    fmt = args.type.upper()
    if stop:
        body = {"targetDirectory": args.savepoint_path, "drain": args.drain, "formatType": fmt}
        doc = t.client.call("POST", f"/jobs/{t.job_id}/stop", body)
    else:
        body = {"target-directory": args.directory, "cancel-job": False, "formatType": fmt}
        doc = t.client.call("POST", f"/jobs/{t.job_id}/savepoints", body)
    out.write(f"Triggering savepoint for job {t.job_id}.\nWaiting for response...\n")
    out.flush()
    path = t.client.wait_savepoint(t.job_id, doc["request-id"], args.timeout)
    out.write(f"Savepoint completed. Path: {path}\n")
    return 0


def _cmd_savepoint(args: argparse.Namespace, out: TextIO) -> int:
    return _savepoint(args, out, stop=False)


def _cmd_stop(args: argparse.Namespace, out: TextIO) -> int:
    return _savepoint(args, out, stop=True)


def _operator_parallelism(specs: list[str]) -> dict[str, int]:
    out = {}
    for spec in specs:
        uid, sep, n = spec.rpartition("=")
        if not sep or not uid or not n.strip().isdigit():
            raise ControlPlaneError(f"--operator takes UID=N (N a positive integer), got {spec!r}")
        out[uid] = int(n)
    return out


def _cmd_rescale(args: argparse.Namespace, out: TextIO) -> int:
    named = _operator_parallelism(args.operator)
    if args.parallelism is None and not named:
        raise ControlPlaneError("give a PARALLELISM for the job, or --operator UID=N")
    t = resolve_job(args.job_id, args.address, args.token)
    path = f"/jobs/{t.job_id}/resource-requirements"
    current = t.client.call("GET", path)
    wanted = {
        uid: named.get(uid, args.parallelism if req.get("wholeJob", True) else None)
        for uid, req in current.items()
    }
    body = {
        uid: {"parallelism": {"lowerBound": 1, "upperBound": p}}
        for uid, p in wanted.items()
        if p is not None
    }
    unknown = sorted(set(named) - set(current))
    if unknown:
        body.update(
            {u: {"parallelism": {"lowerBound": 1, "upperBound": named[u]}} for u in unknown}
        )
    t.client.call("PUT", path, body)  # a request that cannot apply: 400 with the reason
    out.write(f"Rescaling job {t.job_id} at its next epoch boundary...\n")
    out.flush()
    deadline = time.monotonic() + args.timeout
    while True:
        now = t.client.call("GET", path)
        got = {u: now[u]["parallelism"]["upperBound"] for u in body if u in now}
        if all(got.get(u) == b["parallelism"]["upperBound"] for u, b in body.items()):
            break
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"job {t.job_id} did not rescale within {args.timeout:.0f} s (it rescales "
                f"after the checkpoint of its next epoch; is it still running?)"
            )
        time.sleep(0.2)
    changed = [
        f"{u} {current[u]['parallelism']['upperBound']}->{got[u]}"
        for u in sorted(got)
        if current[u]["parallelism"]["upperBound"] != got[u]
    ]
    out.write(f"Rescaled job {t.job_id}: {', '.join(changed) or 'unchanged'}.\n")
    return 0


JOB_COMMANDS = {
    "list": _cmd_list,
    "info": _cmd_info,
    "cancel": _cmd_cancel,
    "savepoint": _cmd_savepoint,
    "stop": _cmd_stop,
    "rescale": _cmd_rescale,
}
