"""examples/rule_matching.py runs (in-process runner) and stays exactly-once."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_rule_matching_example(capsys):
    spec = importlib.util.spec_from_file_location(
        "rule_matching", ROOT / "examples" / "rule_matching.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--runner", "local", "--items", "120", "--epoch-records", "20"]) == 0
    out = capsys.readouterr().out
    assert "identical to the failure-free run: yes" in out
    assert "restarts: 0 1" in out
