"""Serializers of composite types: rows, tuples, lists, arrays and maps, nested arbitrarily.

Composite serializers are built from their element serializers (any
:class:`TypeSerializer`; ones that are not :class:`FieldSerializer` are
length-framed when nested). Their snapshot ``params`` hold the element
serializers' snapshots in the JSON-compatible form of :func:`nested_snapshot`,
which ``registry.restore_serializer`` turns back into serializers.

Encodings: a row or tuple is ``[row kind byte (rows only)] [null bitmap] [non-null fields]``;
an empty tuple is one zero byte; a list or basic/object array is ``varint n, null bitmap, non-null elements``; a
primitive array is ``varint n, packed elements`` (no nulls); a map is
``varint n, null bitmap of values, key, [value], key, [value] ...`` (keys must
not be ``None``). A top-level ``None`` serializes as ``b""``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from streamstate.common.row import Row, RowKind
from streamstate.common.serializer import (
    NESTED_SNAPSHOT_KEY,  # marks nested snapshots
    migrate_value,
)
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.serializers.basic import (
    FieldSerializer,
    read_varint,
    write_varint,
)
from streamstate.runtime.serializers.fastpath import Unrolled

__all__ = [
    "NESTED_SNAPSHOT_KEY",
    "ListSerializer",
    "MapSerializer",
    "PrimitiveArraySerializer",
    "RowSerializer",
    "TupleSerializer",
    "as_field_serializer",
    "apply_plan",
    "migrate_fields",
    "plan_of",
    "nested_snapshot",
    "read_fields",
    "record_values",
    "write_fields",
]


def nested_snapshot(serializer: TypeSerializer) -> dict[str, Any]:
    """The JSON-compatible form of ``serializer``'s snapshot, for a composite's params."""
    snap = serializer.snapshot_configuration()
    return {NESTED_SNAPSHOT_KEY: snap.name, "version": snap.version, "params": snap.params}


class _Framed(FieldSerializer):
    """Adapts a plain :class:`TypeSerializer` to the nestable protocol by length-framing."""

    def __init__(self, inner: TypeSerializer) -> None:
        self.inner = inner
        self.name = inner.name

    def write(self, value: Any, out: bytearray) -> None:
        b = self.inner.serialize(value)
        write_varint(out, len(b))
        out += b

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        n, pos = read_varint(data, pos)
        if pos + n > len(data):
            raise IndexError("truncated value")
        return self.inner.deserialize(bytes(data[pos : pos + n])), pos + n


def as_field_serializer(serializer: TypeSerializer) -> FieldSerializer:
    """``serializer`` itself if it is nestable, else a length-framing adapter."""
    if isinstance(serializer, FieldSerializer):
        return serializer
    return _Framed(serializer)


def record_values(value: Any, old: TypeSerializer) -> dict[str, tuple[Any, TypeSerializer | None]]:
    """Field name -> (value, serializer ``old`` wrote it with) of a restored record
    ``value`` (a Row, dataclass instance, dict or tuple), for a record serializer's
    :meth:`~TypeSerializer.migrate`. ``old`` describes its fields when it is a record
    serializer (``record_names`` / ``fields``), else (pickle) the value alone does."""
    names: list[str] | None = getattr(old, "record_names", None)
    sers: Sequence[TypeSerializer] = getattr(old, "fields", ()) if names is not None else ()
    by_name = dict(zip(names or (), sers, strict=False))
    if isinstance(value, Row):
        row_names = value._fields if value._fields is not None else names
        if row_names is None:
            row_names = [f"f{i}" for i in range(len(value._values))]
        pairs: Any = zip(row_names, value._values, strict=False)
    elif isinstance(value, Mapping):
        pairs = value.items()
    elif isinstance(value, tuple | list):
        pairs = zip(names or [f"f{i}" for i in range(len(value))], value, strict=False)
    elif names is not None:
        pairs = ((n, getattr(value, n, None)) for n in names)
    elif hasattr(value, "__dataclass_fields__"):
        pairs = ((n, getattr(value, n)) for n in value.__dataclass_fields__)
    else:
        raise TypeError(f"cannot read the fields of {type(value).__name__} {value!r}")
    return {n: (v, by_name.get(n)) for n, v in pairs}


def migrate_fields(
    names: Sequence[str],
    fields: Sequence[TypeSerializer],
    value: Any,
    old: TypeSerializer,
    default: Any = None,
    plans: dict[int, tuple[Any, Any]] | None = None,
) -> list[Any]:
    """The values of fields ``names`` (serializers ``fields``) of a restored record:
    matched by name and migrated; a field the record lacks gets ``default(name)``
    (``None`` without one). ``plans``: the new serializer's plan cache."""
    fast = planned_values(names, fields, value, old, default, False, plans)
    if fast is not None:
        return fast
    got = record_values(value, old)
    out: list[Any] = []
    for n, f in zip(names, fields, strict=True):
        hit = got.get(n)
        if hit is None:
            out.append(default(n) if default is not None else None)
        else:
            v, of = hit
            out.append(v if of is None else migrate_value(of, f, v))
    return out


def _plan(
    names: Sequence[str], fields: Sequence[TypeSerializer], old: Any, positional: bool
) -> list[tuple[int, TypeSerializer | None, TypeSerializer, str]]:
    """Per new field: (index in the old record or -1, old serializer if the value must
    be migrated else None, new serializer, name)."""
    idx = {n: i for i, n in enumerate(old.record_names)}
    out: list[tuple[int, TypeSerializer | None, TypeSerializer, str]] = []
    for j, (n, f) in enumerate(zip(names, fields, strict=True)):
        i = (j if j < len(old.fields) else -1) if positional else idx.get(n, -1)
        of = old.fields[i] if i >= 0 else None
        out.append((i, None if of is None or of == f else of, f, n))
    return out


def planned_values(
    names: Sequence[str],
    fields: Sequence[TypeSerializer],
    value: Any,
    old: TypeSerializer,
    default: Any = None,
    positional: bool = False,
    plans: dict[int, tuple[Any, Any]] | None = None,
) -> list[Any] | None:
    """The migrated field values of ``value`` as read by record serializer ``old``, by a
    plan computed once per (old, new) pair; ``None`` when ``value`` is not in the form
    ``old`` reads (the caller then matches fields one by one)."""
    old_names: list[str] | None = getattr(old, "record_names", None)
    if old_names is None:
        return None
    if isinstance(value, Row):
        if value._fields is not None and value._fields != old_names:
            return None
        vals: Sequence[Any] = value._values
    else:
        get = getattr(old, "_get", None)
        if get is None or isinstance(value, tuple | list | Mapping):
            return None
        try:
            vals = get(value)
        except AttributeError:
            return None
    if len(vals) != len(old_names):
        return None
    return apply_plan(plan_of(names, fields, old, positional, plans), vals, default)


def plan_of(
    names: Sequence[str],
    fields: Sequence[TypeSerializer],
    old: Any,
    positional: bool,
    plans: dict[int, tuple[Any, Any]] | None,
) -> list[tuple[int, TypeSerializer | None, TypeSerializer, str]]:
    """The migration plan from record serializer ``old`` (cached in ``plans``, the new
    serializer's cache keyed by the old serializer)."""
    if plans is None:
        plans = {}
    hit = plans.get(id(old))
    if hit is None or hit[0] is not old:
        hit = plans[id(old)] = (old, _plan(names, fields, old, positional))
    return hit[1]  # type: ignore[no-any-return]  # the plan stored above


def apply_plan(
    plan: list[tuple[int, TypeSerializer | None, TypeSerializer, str]],
    vals: Sequence[Any],
    default: Any = None,
) -> list[Any]:
    """The new record's field values from the old record's ``vals``."""
    out: list[Any] = []
    for i, of, f, n in plan:
        if i < 0:
            out.append(default(n) if default is not None else None)
        else:
            v = vals[i]
            out.append(v if of is None or v is None else migrate_value(of, f, v))
    return out


def _check_serializer(s: Any, what: str) -> TypeSerializer:
    if not isinstance(s, TypeSerializer):
        raise TypeError(f"{what} must be a TypeSerializer, got {type(s).__name__}")
    return s


def _same_kind(e: Exception) -> type[Exception]:
    """``TypeError`` or ``ValueError``, whichever ``e`` is (to re-raise with context)."""
    return TypeError if isinstance(e, TypeError) else ValueError


def _bitmap(values: Sequence[Any]) -> bytearray:
    bits = bytearray((len(values) + 7) >> 3)
    for i, v in enumerate(values):
        if v is None:
            bits[i >> 3] |= 1 << (i & 7)
    return bits


def write_fields(
    fields: Sequence[FieldSerializer], values: Sequence[Any], out: bytearray, what: str
) -> None:
    out += _bitmap(values)
    for i, (f, v) in enumerate(zip(fields, values, strict=True)):
        if v is not None:
            try:
                f.write(v, out)
            except (TypeError, ValueError) as e:
                raise _same_kind(e)(f"{what} field {i}: {e}") from None


def read_fields(
    fields: Sequence[FieldSerializer], data: bytes | memoryview, pos: int
) -> tuple[list[Any], int]:
    n = len(fields)
    nb = (n + 7) >> 3
    bits = data[pos : pos + nb]
    pos += nb
    out: list[Any] = []
    for i, f in enumerate(fields):
        if bits[i >> 3] & (1 << (i & 7)):
            out.append(None)
        else:
            v, pos = f.read(data, pos)
            out.append(v)
    return out, pos


class RowSerializer(Unrolled, FieldSerializer):
    """``Types.ROW`` / ``Types.ROW_NAMED``: values deserialize as :class:`Row`.

    Accepts a ``Row``, ``tuple`` or ``list`` of the right arity, and for named
    rows also a ``dict`` or a ``Row`` whose names are the declared names in
    another order (fields are then matched by name). Deserialized rows carry
    the declared field names (``f0``, ``f1``, ... for ``ROW``, as PyFlink's rows of a
    ``RowTypeInfo``) and the row kind.
    """

    name, type_name = "row", "ROW"

    def __init__(self, fields: Sequence[TypeSerializer], names: Sequence[str] | None = None):
        self.fields = tuple(_check_serializer(f, "row field") for f in fields)
        self.names = None if names is None else [str(n) for n in names]
        if self.names is not None and len(self.names) != len(self.fields):
            raise ValueError(f"{len(self.names)} names for {len(self.fields)} row fields")
        self._nested = tuple(as_field_serializer(f) for f in self.fields)
        self._compile()
        #: field names, ``f0``, ``f1``, ... for positional rows (schema evolution)
        self.record_names = (
            list(self.names) if self.names is not None else [f"f{i}" for i in range(len(fields))]
        )
        self.expected = (
            f"a Row/tuple/list of {len(self.fields)} fields"
            if self.names is None
            else f"a Row/tuple/list/dict with fields {self.names}"
        )

    def _params(self) -> dict[str, Any]:
        return {"fields": [nested_snapshot(f) for f in self.fields], "names": self.names}

    def _values(self, value: Any) -> tuple[list[Any], RowKind]:
        names = self.names
        values: Sequence[Any]
        if isinstance(value, Row):
            kind = value.get_row_kind()
            row_names = value._fields
            if names is not None and row_names is not None and row_names != names:
                try:
                    return [value[n] for n in names], kind
                except KeyError as e:
                    raise ValueError(
                        f"row {value!r} has no field {e.args[0]!r}; expected fields {names}"
                    ) from None
            values = value._values
        elif isinstance(value, tuple | list):
            kind, values = RowKind.INSERT, value
        elif names is not None and isinstance(value, Mapping):
            missing = [n for n in names if n not in value]
            if missing:
                raise ValueError(f"dict {value!r} lacks row fields {missing}")
            return [value[n] for n in names], RowKind.INSERT
        else:
            raise TypeError(
                f"ROW serializer expects {self.expected}, got {type(value).__name__} {value!r}"
            )
        if len(values) != len(self.fields):
            raise ValueError(
                f"ROW serializer expects {len(self.fields)} fields, got {len(values)}: {value!r}"
            )
        return list(values), kind

    def migrate(self, value: Any, old: TypeSerializer) -> Any:
        kind = value.get_row_kind() if isinstance(value, Row) else RowKind.INSERT
        olds: Sequence[TypeSerializer] | None = getattr(old, "fields", None)
        positional = self.names is None or getattr(old, "names", None) is None
        new: list[Any] | None = planned_values(
            self.record_names, self.fields, value, old, None, positional, self._plans
        )
        if new is not None:
            pass
        elif olds is not None and positional:
            # a positional row on either side: fields match by position
            if isinstance(value, Row | tuple | list):
                vals = list(value._values if isinstance(value, Row) else value)
            else:
                vals = [v for v, _ in record_values(value, old).values()]
            new = [
                migrate_value(olds[i], f, vals[i]) if i < len(vals) and i < len(olds) else None
                for i, f in enumerate(self.fields)
            ]
        else:
            new = migrate_fields(self.record_names, self.fields, value, old)
        row = Row(*new)
        row._fields = list(self.record_names)  # f0, f1, ... for Types.ROW, as PyFlink's coder
        row.set_row_kind(kind)
        return row

    def migrate_bytes(self, data: bytes, old: TypeSerializer) -> bytes | None:
        """``data`` written by row serializer ``old``, rewritten for this one without
        building Row objects (RocksDB migration); ``None``: use :meth:`migrate`."""
        if type(old) is not RowSerializer or not data:
            return None
        positional = self.names is None or old.names is None
        try:
            vals, _ = old._fast_read(data, 1)
        except (IndexError, struct.error):
            return None
        plan = plan_of(self.record_names, self.fields, old, positional, self._plans)
        out = bytearray(data[:1])
        return bytes(out) if self._fast_write(apply_plan(plan, vals), out) else None

    def write(self, value: Any, out: bytearray) -> None:
        values, kind = self._values(value)
        out.append(kind.value)
        if not self._fast_write(values, out):
            write_fields(self._nested, values, out, "row")

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        kind = data[pos]
        try:
            values, pos = self._fast_read(data, pos + 1)
        except (IndexError, struct.error):  # truncated: the generic loop says how
            values, pos = read_fields(self._nested, data, pos + 1)
        row = Row(*values)
        row._fields = list(self.record_names)  # f0, f1, ... for Types.ROW, as PyFlink's coder
        if kind:
            row.set_row_kind(RowKind.from_byte_value(kind))
        return row, pos

    def __repr__(self) -> str:
        return f"RowSerializer({list(self.fields)!r}, {self.names!r})"


class TupleSerializer(FieldSerializer):
    """``Types.TUPLE``: values deserialize as ``tuple`` (fields may be ``None``)."""

    name, type_name = "tuple", "TUPLE"

    def __init__(self, fields: Sequence[TypeSerializer]):
        self.fields = tuple(_check_serializer(f, "tuple field") for f in fields)
        self._nested = tuple(as_field_serializer(f) for f in self.fields)
        self.expected = f"a tuple/list/Row of {len(self.fields)} fields"

    def _params(self) -> dict[str, Any]:
        return {"fields": [nested_snapshot(f) for f in self.fields]}

    def migrate(self, value: Any, old: TypeSerializer) -> Any:
        olds = getattr(old, "fields", None)
        if olds is None or len(olds) != len(self.fields) or not isinstance(value, tuple):
            return value
        return tuple(
            migrate_value(o, n, v) for o, n, v in zip(olds, self.fields, value, strict=True)
        )

    def write(self, value: Any, out: bytearray) -> None:
        if not isinstance(value, tuple | list | Row):
            raise TypeError(
                f"TUPLE serializer expects {self.expected}, got {type(value).__name__} {value!r}"
            )
        if len(value) != len(self.fields):
            raise ValueError(
                f"TUPLE serializer expects {len(self.fields)} fields, got {len(value)}: {value!r}"
            )
        if not self._nested:
            out.append(0)  # so that () is not b"" (None)
            return
        write_fields(self._nested, list(value), out, "tuple")

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        if not self._nested:
            return (), pos + 1
        values, pos = read_fields(self._nested, data, pos)
        return tuple(values), pos

    def __repr__(self) -> str:
        return f"TupleSerializer({list(self.fields)!r})"


def _check_sequence(s: FieldSerializer, value: Any) -> Sequence[Any]:
    if isinstance(value, list | tuple):
        return value
    raise TypeError(
        f"{s.type_name} serializer expects a list, got {type(value).__name__} {value!r}"
    )


class ListSerializer(FieldSerializer):
    """``Types.LIST`` / ``BASIC_ARRAY`` / ``OBJECT_ARRAY``: lists whose elements may be ``None``.

    ``name`` is the registry name (``list``, ``basic_array`` or ``object_array``).
    """

    def __init__(self, element: TypeSerializer, name: str = "list") -> None:
        self.element = _check_serializer(element, "list element")
        self.name = name
        self.type_name = name.upper()
        self._nested = as_field_serializer(self.element)

    def _params(self) -> dict[str, Any]:
        return {"element": nested_snapshot(self.element)}

    def migrate(self, value: Any, old: TypeSerializer) -> Any:
        o = getattr(old, "element", old)
        return [migrate_value(o, self.element, v) for v in value]

    def write(self, value: Any, out: bytearray) -> None:
        values = _check_sequence(self, value)
        write_varint(out, len(values))
        out += _bitmap(values)
        w = self._nested.write
        for i, v in enumerate(values):
            if v is not None:
                try:
                    w(v, out)
                except (TypeError, ValueError) as e:
                    raise _same_kind(e)(f"{self.type_name} element {i}: {e}") from None

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        n, pos = read_varint(data, pos)
        nb = (n + 7) >> 3
        bits = data[pos : pos + nb]
        pos += nb
        r = self._nested.read
        out: list[Any] = []
        for i in range(n):
            if bits[i >> 3] & (1 << (i & 7)):
                out.append(None)
            else:
                v, pos = r(data, pos)
                out.append(v)
        return out, pos

    def __repr__(self) -> str:
        return f"ListSerializer({self.element!r}, {self.name!r})"


class PrimitiveArraySerializer(FieldSerializer):
    """``Types.PRIMITIVE_ARRAY``: lists of a primitive type, elements never ``None``.

    Fixed-width element types are packed in one struct call.
    """

    name, type_name = "primitive_array", "PRIMITIVE_ARRAY"

    def __init__(self, element: TypeSerializer) -> None:
        self.element = _check_serializer(element, "array element")
        self._nested = as_field_serializer(self.element)
        self._packed = hasattr(self._nested, "pack_many")

    def _params(self) -> dict[str, Any]:
        return {"element": nested_snapshot(self.element)}

    def write(self, value: Any, out: bytearray) -> None:
        values = _check_sequence(self, value)
        write_varint(out, len(values))
        if None in values:
            raise TypeError(f"PRIMITIVE_ARRAY elements must not be None, got {value!r}")
        if self._packed:
            out += self._nested.pack_many(values)  # type: ignore[attr-defined]  # nested serializers of this kind are fixed-width ones with a bulk path
        else:
            w = self._nested.write
            for v in values:
                w(v, out)

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        n, pos = read_varint(data, pos)
        if self._packed:
            return self._nested.unpack_many(data, pos, n)  # type: ignore[attr-defined]  # nested serializers of this kind are fixed-width ones with a bulk path
        r = self._nested.read
        out: list[Any] = []
        for _ in range(n):
            v, pos = r(data, pos)
            out.append(v)
        return out, pos

    def __repr__(self) -> str:
        return f"PrimitiveArraySerializer({self.element!r})"


class MapSerializer(FieldSerializer):
    """``Types.MAP``: dicts (any ``Mapping``); keys must not be ``None``, values may be."""

    name, type_name, expected = "map", "MAP", "a dict"

    def __init__(self, key: TypeSerializer, value: TypeSerializer) -> None:
        self.key = _check_serializer(key, "map key")
        self.value = _check_serializer(value, "map value")
        self._k = as_field_serializer(self.key)
        self._v = as_field_serializer(self.value)

    def _params(self) -> dict[str, Any]:
        return {"key": nested_snapshot(self.key), "value": nested_snapshot(self.value)}

    def migrate(self, value: Any, old: TypeSerializer) -> Any:
        ok, ov = getattr(old, "key", old), getattr(old, "value", old)
        return {
            migrate_value(ok, self.key, k): migrate_value(ov, self.value, v)
            for k, v in value.items()
        }

    def write(self, value: Any, out: bytearray) -> None:
        if not isinstance(value, Mapping):
            raise TypeError(f"MAP serializer expects a dict, got {type(value).__name__} {value!r}")
        write_varint(out, len(value))
        vals = list(value.values())
        out += _bitmap(vals)
        kw, vw = self._k.write, self._v.write
        for k, v in value.items():
            if k is None:
                raise ValueError(f"MAP keys must not be None: {value!r}")
            try:
                kw(k, out)
            except (TypeError, ValueError) as e:
                raise _same_kind(e)(f"MAP key {k!r}: {e}") from None
            if v is not None:
                try:
                    vw(v, out)
                except (TypeError, ValueError) as e:
                    raise _same_kind(e)(f"MAP value for key {k!r}: {e}") from None

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        n, pos = read_varint(data, pos)
        nb = (n + 7) >> 3
        bits = data[pos : pos + nb]
        pos += nb
        kr, vr = self._k.read, self._v.read
        out: dict[Any, Any] = {}
        for i in range(n):
            k, pos = kr(data, pos)
            if bits[i >> 3] & (1 << (i & 7)):
                out[k] = None
            else:
                out[k], pos = vr(data, pos)
        return out, pos

    def __repr__(self) -> str:
        return f"MapSerializer({self.key!r}, {self.value!r})"
