"""What a user does on a machine other than the driver's, one verb per call; each prints one
``RESULT {json}`` line (tests/cluster/test_remote_access.py runs them on the bed)::

    python -m tests.cluster.remote_client rest http://DRIVER:PORT TOKEN JOB_ID
    python -m tests.cluster.remote_client query HOST:PORT TOKEN JOB_ID
    python -m tests.cluster.remote_client dashboard http://DRIVER:PORT TOKEN JOB_ID SHOT.png
    python -m tests.cluster.remote_client read-state s3://.../savepoint-... [...]
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from streamstate.common import Types
from tests.cluster.remote_job import KEYS, TOTAL


def _get(url: str, token: str | None) -> tuple[int, Any]:
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, None


def rest(args: argparse.Namespace) -> dict[str, Any]:
    """The REST API without the token, with a wrong one and with the job's."""
    overview = f"{args.address}/jobs/overview"
    anonymous, _ = _get(overview, None)
    wrong, _ = _get(overview, "not-the-token")
    status, doc = _get(f"{args.address}/jobs/{args.job_id}", args.token)
    return {
        "anonymous": anonymous,
        "wrong": wrong,
        "with_token": status,
        "state": doc and doc["state"],
        "epochs": doc and len(doc["epochs"]),
    }


def query(args: argparse.Namespace) -> dict[str, Any]:
    """Every key's ``totals`` (values as of one epoch) in one batch, then each key alone: the
    job's query server (on the driver) checks the token and hands out the route, the
    lookups go straight to the query hosts on the executors holding the keys. Says how
    many lookups the hosts answered, how many the driver, and the hosts' addresses."""
    from streamstate.queryablestate.client import QueryableStateClient

    host, port = args.address.rsplit(":", 1)
    client = QueryableStateClient(host, int(port), token=args.token)
    try:
        keys = [f"k{i}" for i in range(KEYS)]
        got = client.get_kv_states(args.job_id, "totals", keys, Types.STRING(), TOTAL)
        alone = {
            k: client.get_kv_state(args.job_id, "totals", k, Types.STRING(), TOTAL) for k in keys
        }
        # the routes the driver handed out: per subtask, its query host's address
        routes = client._routes._routes.values()
        return {
            "epoch": got.epoch,
            "values": got.as_dict(),
            "alone_epochs": sorted({r.epoch for r in alone.values()}),
            "direct": client._routes.direct_requests,
            "via_driver": client._routes.driver_requests,
            "hosts": sorted({h[0] for r in routes for h in r.hosts if h is not None}),
        }
    finally:
        client.close()


def dashboard(args: argparse.Namespace) -> dict[str, Any]:
    """The dashboard in headless Chromium on this machine: the jobs list, then the job's
    page with its checkpoint history; a screenshot; the page's JavaScript errors."""
    from tests.support.browser import Browser, find_chromium

    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("no chromium on this machine")
    with Browser(chromium) as b:
        b.goto(f"{args.address}/?token={args.token}")
        b.wait_for(f"!!document.querySelector('#jobs-table tr[data-jid=\"{args.job_id}\"]')")
        shown_url = b.evaluate("location.href")
        b.goto(f"{args.address}/#/job/{args.job_id}")
        rows = b.wait_for(
            "document.querySelectorAll('#checkpoint-table tbody tr').length > 0 && "
            "document.querySelectorAll('#checkpoint-table tbody tr').length"
        )
        text = b.evaluate("document.body.innerText")
        shot = b.screenshot(Path(args.shot))
        return {
            "checkpoint_rows": rows,
            "token_in_url": "token=" in shown_url,
            "running": "RUNNING" in text,
            "screenshot_bytes": shot.stat().st_size,
            "errors": b.errors,
        }


def read_state(args: argparse.Namespace) -> dict[str, Any]:
    """The ``sums`` operator's totals of each savepoint or checkpoint given, read as a
    DataFrame by the State Processor API in this machine's own SparkSession (``local[2]``):
    ``{"columns", "totals": {path: {key: total}}}``."""
    from pyspark.sql import SparkSession

    from streamstate.state_processor import KeyedStateReaderFunction, SavepointReader

    class TotalReader(KeyedStateReaderFunction):
        def open(self, ctx: Any) -> None:
            self.total = ctx.get_state(TOTAL)

        def read_key(self, key: Any, ctx: Any, out: Any) -> Any:
            yield key, self.total.value()

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bed-read-state")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        found: dict[str, Any] = {"columns": [], "totals": {}}
        for path in args.paths:
            df = SavepointReader.read(spark, path).read_keyed_state(
                "sums", TotalReader(), output_type=Types.TUPLE([Types.STRING(), Types.LONG()])
            )
            found["columns"] = df.columns
            found["totals"][path] = dict(map(tuple, df.collect()))
        return found
    finally:
        spark.stop()


VERBS = {"rest": rest, "query": query, "dashboard": dashboard, "read-state": read_state}


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.cluster.remote_client")
    sub = p.add_subparsers(dest="verb", required=True)
    for verb in ("rest", "query", "dashboard"):
        s = sub.add_parser(verb)
        s.add_argument("address")
        s.add_argument("token")
        s.add_argument("job_id")
        if verb == "dashboard":
            s.add_argument("shot")
    sub.add_parser("read-state").add_argument("paths", nargs="+")
    args = p.parse_args(argv)
    print("RESULT " + json.dumps(VERBS[args.verb](args)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
