"""Write PyFlink's DataStream-side public surface to a JSON manifest.

Run by hand, in a virtualenv that has PyFlink 2.x (not a streamstate dependency)::

    python3.11 -m venv /tmp/pyflink-venv
    /tmp/pyflink-venv/bin/pip install 'apache-flink>=2.0'
    /tmp/pyflink-venv/bin/python tools/pyflink_surface.py > tests/parity/pyflink_surface.json

Importing the modules starts no JVM: only the Python classes are inspected. The manifest
(format 1) has

- ``modules``: every module introspected -> its public names -> the canonical qualified
  name of the object (where it is defined; a class re-exported by several modules is
  described once);
- ``objects``: canonical name -> ``{"kind": "class" | "function" | "enum" | "constant",
  "signature": ..., "members": {name: {"kind", "signature"}}}``, where a class's members
  are its public methods, static and class methods, properties and class attributes,
  including those inherited from other PyFlink classes, and ``__init__``/``__call__``
  when PyFlink defines them. A class nested in a class (a builder, an enum) is an object
  of its own, ``module.Outer.Inner``.

A signature is the list of parameters (``self``/``cls`` dropped) as
``[name, kind, has_default, default]`` (``default``: the ``repr`` of a literal default,
else null) with kind one of ``positional_only``, ``positional``,
``var_positional``, ``keyword_only``, ``var_keyword``. ``tests/unit/datastream/test_pyflink_parity.py``
compares streamstate against it; ``tools/pyflink_compat_doc.py`` writes
``docs/pyflink-compat.md``.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import json
import sys
from typing import Any

FORMAT_VERSION = 2

#: the DataStream side of PyFlink: pyflink.common, pyflink.datastream, pyflink.metrics and the
#: connectors that make sense without a JVM (file system, number sequence)
MODULES = [
    "pyflink.common",
    "pyflink.common.completable_future",
    "pyflink.common.configuration",
    "pyflink.common.config_options",
    "pyflink.common.constants",
    "pyflink.common.execution_config",
    "pyflink.common.input_dependency_constraint",
    "pyflink.common.job_client",
    "pyflink.common.job_execution_result",
    "pyflink.common.job_id",
    "pyflink.common.job_status",
    "pyflink.common.restart_strategy",
    "pyflink.common.serialization",
    "pyflink.common.serializer",
    "pyflink.common.time",
    "pyflink.common.typeinfo",
    "pyflink.common.types",
    "pyflink.common.watermark_strategy",
    "pyflink.datastream",
    "pyflink.datastream.checkpoint_config",
    "pyflink.datastream.checkpoint_storage",
    "pyflink.datastream.checkpointing_mode",
    "pyflink.datastream.data_stream",
    "pyflink.datastream.execution_mode",
    "pyflink.datastream.functions",
    "pyflink.datastream.output_tag",
    "pyflink.datastream.slot_sharing_group",
    "pyflink.datastream.state",
    "pyflink.datastream.state_backend",
    "pyflink.datastream.stream_execution_environment",
    "pyflink.datastream.time_domain",
    "pyflink.datastream.timerservice",
    "pyflink.datastream.window",
    "pyflink.datastream.connectors",
    "pyflink.datastream.connectors.base",
    "pyflink.datastream.connectors.file_system",
    "pyflink.datastream.connectors.number_seq",
    "pyflink.metrics",
]

_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "positional_only",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
    inspect.Parameter.VAR_POSITIONAL: "var_positional",
    inspect.Parameter.KEYWORD_ONLY: "keyword_only",
    inspect.Parameter.VAR_KEYWORD: "var_keyword",
}


def signature_of(fn: Any, drop_first: bool) -> list[list[Any]] | None:
    """``[[name, kind, has_default], ...]`` or None when Python cannot tell."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if (
        drop_first
        and params
        and params[0].kind
        in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        )
    ):
        params = params[1:]
    return [
        [p.name, _KINDS[p.kind], p.default is not inspect.Parameter.empty, literal_default(p)]
        for p in params
    ]


def literal_default(p: inspect.Parameter) -> str | None:
    """``repr`` of a default that is a plain literal (None, bool, int, float, str)."""
    d = p.default
    if d is inspect.Parameter.empty or not isinstance(d, (type(None), bool, int, float, str)):
        return None
    return repr(d)


def _is_pyflink(obj: Any) -> bool:
    return str(getattr(obj, "__module__", "") or "").startswith("pyflink")


def _member(cls: type, name: str, raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, staticmethod):
        return {"kind": "staticmethod", "signature": signature_of(raw.__func__, False)}
    if isinstance(raw, classmethod):
        return {"kind": "classmethod", "signature": signature_of(raw.__func__, True)}
    if isinstance(raw, property):
        return {"kind": "property", "signature": None}
    if inspect.isfunction(raw):
        return {"kind": "method", "signature": signature_of(raw, True)}
    if inspect.isclass(raw):
        return {"kind": "class", "signature": None}
    if isinstance(raw, enum.Enum) or (isinstance(cls, enum.EnumMeta) and name in cls.__members__):
        return {"kind": "enum_member", "signature": None}
    if callable(raw) or isinstance(raw, (classmethod, staticmethod)):
        return {"kind": "method", "signature": signature_of(raw, False)}
    if name.isupper() or isinstance(raw, (int, str, float, bool, tuple)):
        return {"kind": "attribute", "signature": None}
    return None


_DUNDERS_KEPT = ("__init__", "__call__", "__iter__", "__enter__", "__exit__", "__next__")


def describe_class(cls: type) -> dict[str, Any]:
    members: dict[str, dict[str, Any]] = {}
    for klass in reversed(cls.__mro__):
        if not _is_pyflink(klass):
            continue
        for name, raw in vars(klass).items():
            if name.startswith("_") and name not in _DUNDERS_KEPT:
                continue
            if isinstance(cls, enum.EnumMeta) and name in getattr(cls, "__members__", {}):
                members[name] = {"kind": "enum_member", "signature": None}
                continue
            entry = _member(cls, name, raw)
            if entry is not None:
                members[name] = entry
    kind = "enum" if isinstance(cls, enum.EnumMeta) else "class"
    return {
        "kind": kind,
        "bases": [f"{b.__module__}.{b.__qualname__}" for b in cls.__bases__ if _is_pyflink(b)],
        "members": dict(sorted(members.items())),
    }


def _describe_nested(cls: type, canonical: str, objects: dict[str, Any]) -> None:
    """Public classes nested in a PyFlink class (builders, enums): ``Outer.Inner``."""
    for name, inner in vars(cls).items():
        if name.startswith("_") or not inspect.isclass(inner) or not _is_pyflink(inner):
            continue
        if inner.__qualname__ != f"{cls.__qualname__}.{name}":
            continue  # an alias of a class defined elsewhere
        key = f"{canonical}.{name}"
        if key not in objects:
            objects[key] = describe_class(inner)
            _describe_nested(inner, key, objects)


def public_names(module: Any) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            n
            for n, v in vars(module).items()
            if not n.startswith("_")
            and (inspect.isclass(v) or inspect.isfunction(v))
            and getattr(v, "__module__", None) == module.__name__
        ]
    return sorted(set(names))


def build() -> dict[str, Any]:
    modules: dict[str, dict[str, str]] = {}
    objects: dict[str, dict[str, Any]] = {}
    for mod_name in MODULES:
        try:
            module = importlib.import_module(mod_name)
        except ImportError as exc:
            print(f"skipping {mod_name}: {exc}", file=sys.stderr)
            continue
        exported: dict[str, str] = {}
        for name in public_names(module):
            obj = getattr(module, name, None)
            if obj is None:
                continue
            if inspect.ismodule(obj):
                continue
            if inspect.isclass(obj) or inspect.isfunction(obj):
                canonical = f"{obj.__module__}.{obj.__qualname__}"
            else:
                canonical = f"{mod_name}.{name}"
            exported[name] = canonical
            if canonical in objects:
                continue
            if inspect.isclass(obj):
                objects[canonical] = describe_class(obj)
                _describe_nested(obj, canonical, objects)
            elif inspect.isfunction(obj):
                objects[canonical] = {"kind": "function", "signature": signature_of(obj, False)}
            else:
                objects[canonical] = {"kind": "constant", "signature": None}
        modules[mod_name] = dict(sorted(exported.items()))
    import pyflink.version

    return {
        "format_version": FORMAT_VERSION,
        "pyflink_version": pyflink.version.__version__,
        "generated_by": "tools/pyflink_surface.py",
        "modules": modules,
        "objects": dict(sorted(objects.items())),
    }


def main() -> None:
    json.dump(build(), sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
