"""Compare streamstate's public surface with PyFlink's manifest; write docs/pyflink-compat.md.

    .venv/bin/python tools/pyflink_compat.py          # rewrite docs/pyflink-compat.md
    .venv/bin/python tools/pyflink_compat.py --check  # exit 1 when the doc is out of date

Inputs: ``tools/pyflink_surface.json`` (written by ``tools/pyflink_surface.py`` in a
virtualenv with PyFlink 2.x) and the reviewed exclusions file
``src/streamstate/common/pyflink_compat.toml`` (``[unsupported."Name"]`` with ``reason`` and
``instead``; ``[different."Name"]`` with ``meaning``). A name is ``Class``, ``Class.member``
or a module-level function; every PyFlink class name of the DataStream side is unique.

Each PyFlink name gets one status:

- ``supported``: it resolves at every PyFlink module path (``pyflink`` -> ``streamstate``)
  and, for a callable, accepts every call PyFlink's signature accepts;
- ``different``: it resolves, and the exclusions file says how its meaning differs (this
  also waives the signature check);
- ``unsupported``: it is in the exclusions file, and does not resolve (streamstate raises
  ``UnsupportedFeatureError`` for it);
- ``missing`` / ``signature`` / ``stale``: a defect the parity test reports (absent and not
  excluded; present with an incompatible signature; excluded but present and compatible).
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__:  # imported as tools.pyflink_compat (the parity tests)
    from tools.pyflink_surface import signature_of
else:  # run as a script: tools/ is on sys.path
    from pyflink_surface import signature_of

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tools" / "pyflink_surface.json"
EXCLUSIONS = ROOT / "src" / "streamstate" / "common" / "pyflink_compat.toml"
DOC = ROOT / "docs" / "pyflink-compat.md"

SUPPORTED, DIFFERENT, UNSUPPORTED = "supported", "different", "unsupported"
MISSING, SIGNATURE, STALE = "missing", "signature", "stale"

@dataclass
class Entry:
    name: str  # Class, Class.member or function
    status: str
    detail: str = ""
    paths: list[str] = field(default_factory=list)  # PyFlink module paths of an object


def load_manifest() -> dict[str, Any]:
    return json.loads(MANIFEST.read_text())


def load_exclusions() -> dict[str, dict[str, dict[str, str]]]:
    data = tomllib.loads(EXCLUSIONS.read_text())
    return {
        "unsupported": data.get("unsupported", {}),
        "different": data.get("different", {}),
        "unsupported_modules": data.get("unsupported_modules", {}),
    }


def module_problems() -> list[str]:
    """Unsupported PyFlink modules whose streamstate counterpart exists after all."""
    problems = []
    for name in load_exclusions()["unsupported_modules"]:
        rel = Path(*name.replace("pyflink", "streamstate", 1).split("."))
        base = ROOT / "src" / rel
        if base.with_suffix(".py").exists() or (base / "__init__.py").exists():
            problems.append(f"{name}: listed as an unsupported module but src/{rel} exists")
    return problems


def _resolve(module: str, name: str) -> tuple[bool, Any]:
    """(found, object) for ``streamstate``'s counterpart of ``module.name``."""
    from streamstate.errors import UnsupportedFeatureError

    try:
        mod = importlib.import_module(module.replace("pyflink", "streamstate", 1))
        return True, getattr(mod, name)
    except (ImportError, AttributeError, UnsupportedFeatureError):
        return False, None


def _static_member(cls: type, name: str) -> tuple[bool, Any]:
    from streamstate.errors import UnsupportedFeatureError

    for klass in cls.__mro__:
        if name in vars(klass):
            raw = vars(klass)[name]
            if type(raw).__name__ == "UnsupportedMember":
                return False, raw  # raises UnsupportedFeatureError (maybe inherited)
            return True, raw
    try:
        if name in getattr(cls, "__dataclass_fields__", {}) or name in getattr(
            cls, "__annotations__", {}
        ):
            return True, None
        return True, getattr(cls, name)
    except (AttributeError, UnsupportedFeatureError):
        return False, None


def _call_params(raw: Any, kind: str) -> list[list[Any]] | None:
    """Parameters as a caller passes them (self / cls dropped); None when unknown."""
    if isinstance(raw, staticmethod):
        return signature_of(raw.__func__, False)
    if isinstance(raw, classmethod):
        return signature_of(raw.__func__, True)
    if inspect.isfunction(raw):
        return signature_of(raw, kind == "method")
    if callable(raw):
        return signature_of(raw, kind == "method" and not inspect.isclass(raw))
    return None


def signature_problem(pyflink: list[list[Any]], ours: list[list[Any]]) -> str:
    """Why a call valid against PyFlink's parameters fails (or means something else)
    against ours ('' when none). Parameters are ``[name, kind, has_default, default]``
    (the literal default's ``repr``, or None; older manifests have no fourth item)."""
    pyflink = [list(p) + [None] * (4 - len(p)) for p in pyflink]
    ours = [list(p) + [None] * (4 - len(p)) for p in ours]
    var_pos = any(p[1] == "var_positional" for p in ours)
    var_kw = any(p[1] == "var_keyword" for p in ours)
    positional = [p for p in ours if p[1] in ("positional_only", "positional")]
    by_name = {p[0]: p for p in ours if p[1] in ("positional", "keyword_only")}
    pf_names = {p[0] for p in pyflink}
    index = 0
    for name, kind, has_default, default in pyflink:
        mine: list[Any] | None = None
        if kind in ("positional_only", "positional"):
            if index < len(positional):
                mine = positional[index]
                if kind == "positional" and mine[0] != name and not var_kw:
                    return f"parameter {index + 1} is {mine[0]!r}, PyFlink's is {name!r}"
                if has_default and not mine[2]:
                    return f"{mine[0]!r} is required, PyFlink's {name!r} has a default"
            elif not var_pos:
                return f"no positional parameter {name!r}"
            index += 1
        elif kind == "keyword_only":
            mine = by_name.get(name)
            if mine is None and not var_kw:
                return f"no keyword parameter {name!r}"
            if mine is not None and has_default and not mine[2]:
                return f"{name!r} is required, PyFlink's has a default"
        elif kind == "var_positional" and not var_pos:
            return "no *args"
        elif kind == "var_keyword" and not var_kw:
            return "no **kwargs"
        if mine is not None and default is not None and mine[3] is not None and mine[3] != default:
            return f"the default of {name!r} is {mine[3]} here, {default} in PyFlink"
    for name, kind, has_default, _ in ours:
        if kind in ("var_positional", "var_keyword") or has_default:
            continue
        if name not in pf_names:
            return f"requires {name!r}, which PyFlink does not have"
    return ""


def _kind_problem(pyflink_kind: str, raw: Any) -> str:
    """A member used as PyFlink's is used: a property read as an attribute, a static
    method called on the class, a method called."""
    if raw is None:  # a dataclass field / annotation: an attribute
        return "" if pyflink_kind in ("property", "attribute") else "an attribute, not a method"
    is_function = inspect.isfunction(raw)
    if pyflink_kind == "property" and (is_function or isinstance(raw, (staticmethod, classmethod))):
        return "a method here, a property in PyFlink"
    if pyflink_kind in ("method", "staticmethod", "classmethod") and not callable(
        raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    ):
        return "not callable here"
    if pyflink_kind in ("staticmethod", "classmethod") and is_function:
        return "an instance method here, callable on the class in PyFlink"
    return ""


def _short_name(canonical: str) -> str:
    """``pyflink.datastream.state.StateTtlConfig.Builder`` -> ``StateTtlConfig.Builder``:
    the part from the first capitalised segment (modules are lower case)."""
    parts = canonical.split(".")
    first = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts) - 1)
    return ".".join(parts[first:])


def _internal_constructor(params: list[list[Any]] | None) -> bool:
    """PyFlink wrappers of Java objects take ``j_...``: users never call them."""
    return bool(params) and any(str(p[0]).startswith("j_") for p in params or [])


def compare() -> list[Entry]:
    manifest = load_manifest()
    excl = load_exclusions()
    unsupported, different = excl["unsupported"], excl["different"]
    paths: dict[str, list[tuple[str, str]]] = {}
    for module, names in manifest["modules"].items():
        for name, canonical in names.items():
            paths.setdefault(canonical, []).append((module, name))
    entries: list[Entry] = []
    resolved: dict[str, Any] = {}
    for canonical, obj in manifest["objects"].items():
        short = _short_name(canonical)
        where = paths.get(canonical, [])
        if where:
            found = [_resolve(m, n) for m, n in where]
            ours = next((o for ok, o in found if ok), None)
            gaps = [f"{m}.{n}" for (m, n), (ok, _) in zip(where, found, strict=True) if not ok]
        else:  # a class nested in a class: reached through its owner
            owner, _, inner = short.rpartition(".")
            ok, ours = (False, None)
            if owner and inspect.isclass(resolved.get(owner)):
                ok, ours = _static_member(resolved[owner], inner)
            gaps = [] if ok else [f"{owner} has no {inner}"]
        resolved[short] = ours
        pf_paths = [f"{m}.{n}" for m, n in where]
        whole_class_gone = short in unsupported or any(
            short.startswith(u + ".") for u in unsupported
        )
        if whole_class_gone and short not in unsupported and gaps:
            entries.append(Entry(short, UNSUPPORTED, "its owner is not supported"))
        else:
            entries.append(_judge(short, not gaps, gaps, unsupported, different, pf_paths))
        for member, info in obj.get("members", {}).items():
            qual = f"{short}.{member}"
            if (info["kind"] == "class") and f"{canonical}.{member}" in manifest["objects"]:
                continue  # described as an object of its own
            if ours is None or not inspect.isclass(ours):
                status = UNSUPPORTED if whole_class_gone or qual in unsupported else MISSING
                entries.append(
                    Entry(qual, status, "" if status == UNSUPPORTED else "class missing")
                )
                continue
            ok, raw = _static_member(ours, member)
            inherited = getattr(raw, "name", None) if not ok and raw is not None else None
            if inherited is not None and inherited != qual and inherited in unsupported:
                entries.append(Entry(qual, UNSUPPORTED, f"as {inherited}"))
                continue
            problem = _kind_problem(info["kind"], raw) if ok else ""
            if (
                ok
                and not problem
                and info.get("signature") is not None
                and info["kind"] != "property"
            ):
                if not (member == "__init__" and _internal_constructor(info["signature"])):
                    mine = _call_params(raw, info["kind"])
                    if mine is None and member == "__init__":
                        mine = _call_params(ours, "function")
                    if mine is not None:
                        problem = signature_problem(info["signature"], mine)
            entries.append(
                _judge(qual, ok, [] if ok else ["absent"], unsupported, different, [], problem)
            )
    for name in sorted(set(unsupported) | set(different)):
        if not any(e.name == name for e in entries):
            entries.append(Entry(name, STALE, "listed in the exclusions file, not in PyFlink"))
    return entries


def _judge(
    name: str,
    present: bool,
    gaps: list[str],
    unsupported: dict[str, Any],
    different: dict[str, Any],
    paths: list[str],
    problem: str = "",
) -> Entry:
    if name in unsupported:
        if present and not problem:
            return Entry(name, STALE, "listed as unsupported but present", paths)
        return Entry(name, UNSUPPORTED, "", paths)
    if not present:
        return Entry(name, MISSING, ", ".join(gaps), paths)
    if name in different:
        return Entry(name, DIFFERENT, different[name].get("meaning", ""), paths)
    if problem:
        return Entry(name, SIGNATURE, problem, paths)
    return Entry(name, SUPPORTED, "", paths)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render(entries: list[Entry]) -> str:
    manifest = load_manifest()
    excl = load_exclusions()
    total = len(entries)
    counts = {
        s: sum(1 for e in entries if e.status == s) for s in (SUPPORTED, DIFFERENT, UNSUPPORTED)
    }
    ok = counts[SUPPORTED] + counts[DIFFERENT]
    lines = [
        "# PyFlink compatibility",
        "",
        "<!-- generated by tools/pyflink_compat.py from tools/pyflink_surface.json and",
        "     src/streamstate/common/pyflink_compat.toml; do not edit by hand -->",
        "",
        f"Measured against PyFlink {manifest['pyflink_version']}'s DataStream-side public "
        "surface (`pyflink.common`, `pyflink.datastream`, `pyflink.metrics`, the file-system "
        "and number-sequence connectors): every class, function, method, property and enum member, "
        f"{total} names. A PyFlink job ports by replacing `pyflink` with `streamstate` in "
        "its imports when it uses only supported names.",
        "",
        "| status | names | share |",
        "|---|---:|---:|",
        f"| supported | {counts[SUPPORTED]} | {100 * counts[SUPPORTED] / total:.1f}% |",
        f"| supported with a different meaning | {counts[DIFFERENT]} | "
        f"{100 * counts[DIFFERENT] / total:.1f}% |",
        f"| **supported, in all** | **{ok}** | **{100 * ok / total:.1f}%** |",
        f"| not supported | {counts[UNSUPPORTED]} | {100 * counts[UNSUPPORTED] / total:.1f}% |",
        "",
        "Supported means: the name resolves at every module path PyFlink has it under, and a "
        "callable accepts every call PyFlink's signature accepts (`tests/unit/"
        "datastream/test_pyflink_parity.py` checks both). Using a name that is not supported raises "
        "`streamstate.errors.UnsupportedFeatureError`, which names the feature and this page.",
        "",
        "Regenerate: `/tmp/pyflink-venv/bin/python tools/pyflink_surface.py > "
        "tools/pyflink_surface.json` (a virtualenv with `apache-flink` 2.x), then "
        "`.venv/bin/python tools/pyflink_compat.py`.",
        "",
        "## Supported with a different meaning",
        "",
        "| name | how it differs |",
        "|---|---|",
    ]
    for e in entries:
        if e.status == DIFFERENT:
            lines.append(f"| `{e.name}` | {_cell(excl['different'][e.name]['meaning'])} |")
    lines += [
        "",
        "## Not supported",
        "",
        "| name | why | what to do instead |",
        "|---|---|---|",
    ]
    for e in entries:
        if e.status == UNSUPPORTED and e.name in excl["unsupported"]:
            info = excl["unsupported"][e.name]
            lines.append(f"| `{e.name}` | {_cell(info['reason'])} | {_cell(info['instead'])} |")
    lines += [
        "",
        "## PyFlink modules not supported",
        "",
        "Importing one of these (`streamstate.table`, "
        "`streamstate.datastream.connectors.kafka`, ...) raises `UnsupportedModuleError`: "
        "an `UnsupportedFeatureError` and a `ModuleNotFoundError`, so the usual "
        "`try: import ... except ImportError:` fallback works.",
        "",
        "| module | why | what to do instead |",
        "|---|---|---|",
    ]
    for name, info in sorted(excl["unsupported_modules"].items()):
        lines.append(f"| `{name}` | {_cell(info['reason'])} | {_cell(info['instead'])} |")
    lines += ["", "## Supported", ""]
    by_owner: dict[str, list[str]] = {}
    for e in entries:
        if e.status != SUPPORTED:
            continue
        owner, _, member = e.name.partition(".")
        by_owner.setdefault(owner, [])
        if member:
            by_owner[owner].append(member)
    for owner in sorted(by_owner):
        members = ", ".join(f"`{m}`" for m in sorted(by_owner[owner]))
        lines.append(f"- `{owner}`" + (f": {members}" if members else ""))
    problems = [e for e in entries if e.status in (MISSING, SIGNATURE, STALE)]
    if problems:
        lines += ["", "## Defects (the parity test fails on these)", ""]
        lines += [f"- `{e.name}`: {e.status} ({_cell(e.detail)})" for e in problems]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = render(compare())
    if "--check" in argv:
        if DOC.read_text() != text:
            print(f"{DOC} is out of date: run tools/pyflink_compat.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(text.split("## Supported with")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
