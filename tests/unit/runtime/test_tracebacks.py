"""The user's part of a worker traceback (runtime/tracebacks.py)."""

from __future__ import annotations

import os

import streamstate
from streamstate.runtime.tracebacks import in_main_file, user_frames

PKG = os.path.dirname(streamstate.__file__)

WORKER_TB = f'''Traceback (most recent call last):
  File "{PKG}/runtime/host_process.py", line 139, in _run
    out = list(
          ^^^^^
  File "/opt/venv/lib/python3.11/site-packages/pyspark/worker.py", line 12, in main
    process()
  File "<dynamic-code>", line 4, in check
ValueError: bad word 'b'
'''


def test_our_frames_go_the_users_stay():
    assert user_frames(WORKER_TB).splitlines() == [
        "Traceback (most recent call last):",
        '  File "<dynamic-code>", line 4, in check',
        "ValueError: bad word 'b'",
    ]


def test_a_failure_inside_streamstate_keeps_its_whole_traceback():
    inside = "\n".join(WORKER_TB.splitlines()[:6] + ["KeyError: 'x'"])
    assert user_frames(inside) == inside


def test_dynamic_code_frames_are_named_after_the_job_script(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("import x\n\ndef check(w):\n    raise ValueError(w)\n")
    shown = in_main_file(user_frames(WORKER_TB), str(script)).splitlines()
    assert shown[1:3] == [f'  File "{script}", line 4, in check', "    raise ValueError(w)"]
    # a function the script does not define keeps cloudpickle's name
    assert in_main_file(WORKER_TB.replace("in check", "in other"), str(script)).count(
        "<dynamic-code>"
    ) == 1
