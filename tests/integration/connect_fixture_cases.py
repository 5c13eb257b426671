"""Run by ``test_connect_fixture.py`` in a pytest of its own (not collected by the suite):
one test that fails on the session's Connect server, one that waits on it to be killed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

OUT = Path(os.environ.get("CONNECT_FIXTURE_OUT", "."))


def test_fails_on_the_server(connect_server):
    (OUT / "server.json").write_text(json.dumps({"pid": connect_server.pid}))
    raise AssertionError("this test fails on purpose")


def test_waits_to_be_terminated(connect_server):
    (OUT / "waiting").write_text("")
    deadline = time.monotonic() + 600  # the outer test terminates this run long before
    while time.monotonic() < deadline:
        time.sleep(0.1)
