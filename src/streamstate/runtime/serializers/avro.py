"""Avro records as state (``Types.AVRO(schema)``), with fastavro.

:class:`AvroSerializer` writes a value (a dict, as fastavro reads records) in Avro's
binary encoding without a header (``schemaless_writer``). Its snapshot keeps the
*writer schema* (the full JSON, defaults included), so a restore reads the state
with the schema that wrote it and resolves it to the job's schema by Avro's schema
resolution rules (:func:`resolve_avro`, the static check; fastavro's reader with a
reader schema, the conversion):

* a reader field missing from the writer needs a default (it takes it);
* writer fields missing from the reader are dropped; fields match by name or alias;
* primitives promote int -> long/float/double, long -> float/double, float ->
  double, string <-> bytes;
* enums: every writer symbol is a reader symbol, or the reader has a default;
* unions: each writer branch resolves to a reader branch; arrays and maps by items;
  fixed by name and size; named types by (unqualified) name or alias.

Identical schemas are compatible as is, any other resolvable change after
migration, the rest incompatible (with the Avro rule that failed as the reason).
fastavro is an optional dependency (``pip install streamstate[avro]``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

from streamstate.common.serializer import (
    TypeSerializerSchemaCompatibility,
    TypeSerializerSnapshot,
)
from streamstate.errors import ConfigurationError
from streamstate.runtime.serializers.base import TypeSerializer

__all__ = ["AvroSerializer", "resolve_avro"]

_C = TypeSerializerSchemaCompatibility
_PROMOTIONS = {
    ("int", "long"),
    ("int", "float"),
    ("int", "double"),
    ("long", "float"),
    ("long", "double"),
    ("float", "double"),
    ("string", "bytes"),
    ("bytes", "string"),
}
_NAMED = ("record", "enum", "fixed", "error")


def _fastavro() -> Any:
    try:
        import fastavro
    except ImportError:
        raise ConfigurationError(
            "Types.AVRO needs fastavro: pip install 'streamstate[avro]' (or fastavro) on the "
            "driver and every worker"
        ) from None
    return fastavro


class AvroSerializer(TypeSerializer):
    """Avro records (dicts) of ``schema`` (a JSON string, dict, or list for a union)."""

    name = "avro"
    version = 1

    def __init__(self, schema: Any) -> None:
        raw = json.loads(schema) if isinstance(schema, str) else schema
        self.schema_json = json.dumps(raw, sort_keys=True, separators=(",", ":"))
        fa = _fastavro()
        self._fa = fa
        self.parsed = fa.parse_schema(json.loads(self.schema_json), named_schemas={})
        # bulk paths: all values as one Avro array (one fastavro call each way)
        self._many = fa.parse_schema(
            {"type": "array", "items": json.loads(self.schema_json)}, named_schemas={}
        )

    def _params(self) -> dict[str, Any]:
        return {"schema": self.schema_json}

    def serialize(self, value: Any) -> bytes:
        buf = io.BytesIO()
        try:
            self._fa.schemaless_writer(buf, self.parsed, value)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise ValueError(f"AVRO value {value!r} does not match its schema: {e}") from None
        return buf.getvalue()

    def deserialize(self, data: bytes) -> Any:
        return self._fa.schemaless_reader(io.BytesIO(data), self.parsed, None)

    def serialize_many(self, values: Sequence[Any]) -> bytes:
        buf = io.BytesIO()
        try:
            self._fa.schemaless_writer(buf, self._many, list(values))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise ValueError(f"AVRO values do not match their schema: {e}") from None
        return buf.getvalue()

    def deserialize_many(self, data: bytes) -> list[Any]:
        if not data:
            return []
        return list(self._fa.schemaless_reader(io.BytesIO(data), self._many, None))

    def migrate(self, value: Any, old: TypeSerializer) -> Any:
        if not isinstance(old, AvroSerializer):
            return value  # from pickle: the value is offered to this schema as it is
        if old.schema_json == self.schema_json:
            return value
        data = old.serialize(value)  # Avro resolution reads writer bytes with a reader schema
        return self._fa.schemaless_reader(io.BytesIO(data), old.parsed, self.parsed)

    def __getstate__(self) -> dict[str, Any]:
        return {"schema_json": self.schema_json}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["schema_json"])  # type: ignore[misc]  # rebuild the parsed schema

    def __repr__(self) -> str:
        return f"AvroSerializer({self.schema_json})"


# ---------------------------------------------------------------- schema resolution


def _norm(s: Any, named: dict[str, Any]) -> Any:
    """A schema with a named reference replaced by its definition (one level)."""
    return named.get(s, s) if isinstance(s, str) else s


def _collect(s: Any, named: dict[str, Any]) -> None:
    if isinstance(s, list):
        for b in s:
            _collect(b, named)
    elif isinstance(s, dict):
        t = s.get("type")
        if t in _NAMED and "name" in s:
            named[str(s["name"]).rsplit(".", 1)[-1]] = s
            named[str(s["name"])] = s
        for f in s.get("fields", ()):
            _collect(f.get("type"), named)
        for k in ("items", "values"):
            if k in s:
                _collect(s[k], named)
        if isinstance(t, dict | list):
            _collect(t, named)


def _kind(s: Any) -> str:
    if isinstance(s, list):
        return "union"
    if isinstance(s, dict):
        t = s.get("type")
        return _kind(t) if isinstance(t, dict | list) else str(t)
    return str(s)


def _short(name: Any) -> str:
    return str(name).rsplit(".", 1)[-1]


def _names(s: dict[str, Any]) -> set[str]:
    return {_short(s.get("name"))} | {_short(a) for a in s.get("aliases", ())}


class _Resolver:
    def __init__(self, writer: Any, reader: Any) -> None:
        self.wn: dict[str, Any] = {}
        self.rn: dict[str, Any] = {}
        _collect(writer, self.wn)
        _collect(reader, self.rn)
        self.seen: set[tuple[str, str]] = set()

    def check(self, w: Any, r: Any, path: str) -> str | None:
        """Why ``w`` cannot be read as ``r`` (``None``: it can)."""
        w, r = _norm(w, self.wn), _norm(r, self.rn)
        if isinstance(w, dict) and isinstance(w.get("type"), dict | list):
            w = w["type"]
        if isinstance(r, dict) and isinstance(r.get("type"), dict | list):
            r = r["type"]
        wk, rk = _kind(w), _kind(r)
        if wk == "union":
            for b in w:
                why = self.check(b, r, path)
                if why is not None:
                    return why
            return None
        if rk == "union":
            if any(self.check(w, b, path) is None for b in r):
                return None
            return f"{path}: {wk} matches no branch of the reader's union"
        if wk != rk:
            if (wk, rk) in _PROMOTIONS:
                return None
            return f"{path}: type changed from {wk} to {rk} (no Avro promotion)"
        if wk in _NAMED:
            if not (_names(w) & _names(r)) and _short(w.get("name")) not in _names(r):
                return f"{path}: {wk} {w.get('name')} is now named {r.get('name')}"
            key = (json.dumps(w, sort_keys=True), json.dumps(r, sort_keys=True))
            if key in self.seen:  # recursive types
                return None
            self.seen.add(key)
        if wk in ("record", "error"):
            wf = {f["name"]: f for f in w.get("fields", ())}
            for f in r.get("fields", ()):
                names = [f["name"], *f.get("aliases", ())]
                hit = next((wf[n] for n in names if n in wf), None)
                if hit is None:
                    if "default" not in f:
                        return f"{path}.{f['name']}: field added without a default"
                    continue
                why = self.check(hit["type"], f["type"], f"{path}.{f['name']}")
                if why is not None:
                    return why
        elif wk == "enum":
            missing = set(w.get("symbols", ())) - set(r.get("symbols", ()))
            if missing and "default" not in r:
                return f"{path}: enum symbols {sorted(missing)} removed without a default"
        elif wk == "fixed" and w.get("size") != r.get("size"):
            return f"{path}: fixed size {w.get('size')} -> {r.get('size')}"
        elif wk == "array":
            return self.check(w["items"], r["items"], f"{path}[]")
        elif wk == "map":
            return self.check(w["values"], r["values"], f"{path}{{}}")
        return None


def _changes(w: Any, r: Any) -> list[str]:
    if isinstance(w, dict) and isinstance(r, dict) and "fields" in w and "fields" in r:
        wn = [f["name"] for f in w["fields"]]
        rn = [f["name"] for f in r["fields"]]
        out = []
        if added := [n for n in rn if n not in wn]:
            out.append(f"fields added: {added}")
        if removed := [n for n in wn if n not in rn]:
            out.append(f"fields removed: {removed}")
        if out or wn == rn:
            return out or ["field types or attributes changed"]
        return [f"fields reordered: {wn} -> {rn}"]
    return ["Avro schema changed"]


def resolve_avro(
    old: TypeSerializerSnapshot, new: TypeSerializerSnapshot
) -> tuple[TypeSerializerSchemaCompatibility, list[str]]:
    """Compatibility of two Avro snapshots by Avro's schema resolution rules."""
    ws, rs = old.params.get("schema"), new.params.get("schema")
    if ws == rs:
        return _C.COMPATIBLE_AS_IS, []
    w, r = json.loads(str(ws)), json.loads(str(rs))
    why = _Resolver(w, r).check(
        w, r, str(r.get("name", "value")) if isinstance(r, dict) else "value"
    )
    if why is not None:
        return _C.INCOMPATIBLE, [f"Avro schema resolution: {why}"]
    return _C.COMPATIBLE_AFTER_MIGRATION, _changes(w, r)
