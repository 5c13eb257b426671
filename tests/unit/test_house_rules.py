"""The house rules of the source tree (docs/architecture.md, "Layers"), checked on every run.

The layer contracts themselves are import-linter's (``[tool.importlinter]`` in
pyproject.toml, run by ``make test``); this file checks what a contract cannot say:
no import circles between files and a reason on every ``type: ignore`` and broad
``except``. There is no line budget: files and classes split where a concept ends.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp
import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "streamstate"


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_circles_between_files():
    # type-only imports (under TYPE_CHECKING) name a type for annotations; they do not run
    g = grimp.build_graph("streamstate", exclude_type_checking_imports=True)
    # a package's __init__ re-exporting its own modules is not a circle between files
    graph = {
        m: {
            i
            for i in g.find_modules_directly_imported_by(m)
            if i.startswith("streamstate") and not m.startswith(i + ".")
        }
        for m in g.modules
    }
    circles = _strongly_connected(graph)
    assert circles == [], f"import circles between files: {circles}"


_IGNORE = re.compile(r"#\s*type:\s*ignore(\[[^\]]*\])?(?P<rest>.*)$")
_BROAD = {"Exception", "BaseException"}


def _broad_excepts_without_reason(tree: ast.AST, lines: list[str]) -> list[int]:
    """Line numbers of ``except:``/``except Exception``/``except BaseException`` handlers that
    neither re-raise (a translation into a typed error, or a cleanup) nor carry a comment
    saying why, on the ``except`` line or the line above it."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ExceptHandler):
            continue
        broad = node.type is None or (isinstance(node.type, ast.Name) and node.type.id in _BROAD)
        if not broad:
            continue
        if any(isinstance(stmt, ast.Raise) for stmt in node.body):
            continue
        line = lines[node.lineno - 1]
        above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
        if "#" not in line.split(":", 1)[-1] and not above.startswith("#"):
            out.append(node.lineno)
    return out


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(SRC)))
def test_every_type_ignore_and_broad_except_says_why(path: Path):
    text = path.read_text()
    lines = text.splitlines()
    missing = [
        f"{no}: type: ignore without a reason"
        for no, line in enumerate(lines, 1)
        if (m := _IGNORE.search(line)) and not re.search(r"\w", m.group("rest"))
    ]
    missing += [
        f"{no}: broad except without a reason"
        for no in _broad_excepts_without_reason(ast.parse(text), lines)
    ]
    assert missing == [], f"{path.relative_to(SRC)}: {missing}"
