"""The keyed-state seam, checked on the source tree: outside ``runtime/state/`` no code
compares a backend's registered name or reaches into a backend's private members (it asks
the registry, ``runtime/state/registry.py``, and the public contract instead).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from streamstate.runtime.state.registry import registered_keyed_backends

SRC = Path(__file__).resolve().parents[4] / "src" / "streamstate"
STATE = SRC / "runtime" / "state"
#: the registered names, and the heap's other name in the benchmarks and tests
NAMES = {*registered_keyed_backends(), "heap"}


def _outside_state() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if STATE not in p.parents)


def _strings(node: ast.AST) -> list[str]:
    """The string constants ``node`` is or holds (a tuple, list or set of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for element in node.elts for s in _strings(element)]
    return []


def _last_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _violations(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            compared = [s.lower() for n in (node.left, *node.comparators) for s in _strings(n)]
            if NAMES & set(compared):
                out.append(f"{node.lineno}: compares a backend name")
        elif isinstance(node, ast.MatchValue):
            if NAMES & {s.lower() for s in _strings(node.value)}:
                out.append(f"{node.lineno}: matches a backend name")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and "backend" in _last_name(node.value).lower()
        ):
            out.append(f"{node.lineno}: reads the private {node.attr} of a backend")
    return out


def test_the_rule_sees_what_it_forbids() -> None:
    found = _violations(
        ast.parse(
            "if name == 'rocksdb': pass\n"
            "if kind in ('hashmap', 'x'): pass\n"
            "op.keyed_backend._stores\n"
            "match name:\n    case 'rocksdb': pass\n"
            "backend.snapshot()\n"
        )
    )
    assert sorted(int(v.split(":")[0]) for v in found) == [1, 2, 3, 5]


@pytest.mark.parametrize("path", _outside_state(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_backend_name_branch_or_private_access_outside_state(path: Path) -> None:
    violations = _violations(ast.parse(path.read_text()))
    assert violations == [], f"{path.relative_to(SRC)}: {violations} (ask the registry)"
