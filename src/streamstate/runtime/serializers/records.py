"""Record serializers (dataclasses) and the schema rules of records (rows, dataclasses).

A record's snapshot records its field names and field serializers. Two snapshots
of a record compare by field name (:func:`resolve_record`):

* a field added (restored values get the field's default, or ``None``), removed
  or moved -> ``compatible_after_migration``;
* a field whose serializer is incompatible (its type changed) -> ``incompatible``
  unless a migration for the two types is registered
  (``streamstate.common.serializer.register_type_migration``);
* otherwise the worst of the fields' outcomes.

A positional row (``Types.ROW``) names its fields ``f0``, ``f1``, ... and a row on
either side being positional makes fields match by position.

:class:`DataclassSerializer` (``Types.DATACLASS(cls)``) writes a null bitmap and the
non-null fields, as a row without its kind byte. Its snapshot records the class's
import path, the field names and the field serializers. Rebuilt from a snapshot (a
restore), it reads instances of that class when it can import a class of that path
with exactly those fields, else named :class:`~streamstate.common.row.Row` s, which
the new serializer's :meth:`~DataclassSerializer.migrate` turns into instances.
Instances are built without calling ``__init__`` / ``__post_init__`` (as pickle).
"""

from __future__ import annotations

import dataclasses
import importlib
import operator
import struct
from collections.abc import Callable, Sequence
from itertools import accumulate, repeat
from typing import Any

from streamstate.common.row import Row
from streamstate.common.serializer import (
    TypeSerializerSchemaCompatibility,
    TypeSerializerSnapshot,
    as_snapshot,
    compare_snapshots,
)
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.serializers.basic import FieldSerializer, StringSerializer
from streamstate.runtime.serializers.composite import (
    apply_plan,
    as_field_serializer,
    migrate_fields,
    nested_snapshot,
    plan_of,
    read_fields,
    write_fields,
)
from streamstate.runtime.serializers.fastpath import Unrolled

__all__ = ["DataclassSerializer", "resolve_record"]

_U32 = struct.Struct(">I")
_ENCODE = operator.methodcaller("encode", "utf-8", "surrogatepass")
_DECODE = operator.methodcaller("decode", "utf-8", "surrogatepass")
#: first byte of a column-wise bulk blob (the framed form starts with a marker 0 or 1)
_BULK = b"\x02"

_C = TypeSerializerSchemaCompatibility


def _worst(a: _C, b: _C) -> _C:
    return a if a.value >= b.value else b


def _fields_of(
    snap: TypeSerializerSnapshot,
) -> tuple[list[str] | None, list[TypeSerializerSnapshot]]:
    fields = [as_snapshot(f) for f in snap.params.get("fields", [])]
    names = snap.params.get("names")
    return (None if names is None else list(names)), fields


def resolve_record(
    old: TypeSerializerSnapshot, new: TypeSerializerSnapshot
) -> tuple[_C, list[str]]:
    """Compatibility of two record snapshots (rows or dataclasses), fields by name."""
    on, of = _fields_of(old)
    nn, nf = _fields_of(new)
    result: _C = _C.COMPATIBLE_AS_IS
    reasons: list[str] = []
    if (on is None) != (nn is None):  # positional on one side: fields match by position
        reasons.append(f"field names {on} -> {nn}")
        result = _C.COMPATIBLE_AFTER_MIGRATION
    if on is None or nn is None:
        on = [f"f{i}" for i in range(len(of))]
        nn = [f"f{i}" for i in range(len(nf))]
    old_by = dict(zip(on, of, strict=True))
    for n, f in zip(nn, nf, strict=True):
        o = old_by.get(n)
        if o is None:
            continue
        c, why = compare_snapshots(o, f)
        reasons.extend(f"field {n!r}: {w}" for w in why)
        result = _worst(result, c)
    added = [n for n in nn if n not in old_by]
    removed = [n for n in on if n not in set(nn)]
    if added:
        reasons.append(f"fields added: {added}")
    if removed:
        reasons.append(f"fields removed: {removed}")
    if not added and not removed and on != nn:
        reasons.append(f"fields reordered: {on} -> {nn}")
    old_cls, new_cls = old.params.get("class"), new.params.get("class")
    if old_cls != new_cls:
        reasons.append(f"class {old_cls} -> {new_cls}")
    if reasons and not result.is_incompatible():
        changed = added or removed or on != nn or old_cls != new_cls
        if changed:
            result = _worst(result, _C.COMPATIBLE_AFTER_MIGRATION)
    return result, reasons


def _import_class(path: str, names: Sequence[str]) -> type | None:
    """The dataclass at ``module:qualname`` if it exists with exactly fields ``names``."""
    module, _, qualname = path.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        return None
    return obj if [f.name for f in dataclasses.fields(obj)] == list(names) else None


class DataclassSerializer(Unrolled, FieldSerializer):
    """``Types.DATACLASS(cls)``: dataclass instances, typed fields by name."""

    name, type_name = "dataclass", "DATACLASS"

    def __init__(
        self,
        class_path: str,
        names: Sequence[str],
        fields: Sequence[TypeSerializer],
        cls: type | None = None,
    ) -> None:
        self.class_path = str(class_path)
        self.names = [str(n) for n in names]
        #: field names (schema evolution: fields match by name)
        self.record_names = self.names
        self.fields = tuple(fields)
        if len(self.names) != len(self.fields):
            raise ValueError(f"{len(self.names)} names for {len(self.fields)} dataclass fields")
        self._nested = tuple(as_field_serializer(f) for f in self.fields)
        self.cls = cls if cls is not None else _import_class(self.class_path, self.names)
        self.expected = f"an instance of {self.class_path}"
        self._compile()
        self._slots = self.cls is not None and "__slots__" in vars(self.cls)

    _transient = ("_fast_write", "_fast_read", "_get")

    def _compile(self) -> None:
        super()._compile()
        getter = operator.attrgetter(*self.names) if self.names else (lambda v: ())
        self._get: Callable[[Any], Any] = (
            (lambda v: (getter(v),)) if len(self.names) == 1 else getter
        )

    def _params(self) -> dict[str, Any]:
        return {
            "class": self.class_path,
            "names": self.names,
            "fields": [nested_snapshot(f) for f in self.fields],
        }

    def _make(self, values: list[Any]) -> Any:
        cls = self.cls
        if cls is None:  # the class is gone or changed: a named row, migrated later
            row = Row(*values)
            row._fields = list(self.names)
            return row
        obj: Any = object.__new__(cls)
        if self._slots:
            for n, v in zip(self.names, values, strict=True):
                object.__setattr__(obj, n, v)
        else:
            obj.__dict__.update(zip(self.names, values, strict=True))
        return obj

    def _default(self, name: str) -> Any:
        cls = self.cls
        if cls is not None:
            f = cls.__dataclass_fields__.get(name)  # type: ignore[attr-defined]  # a dataclass
            if f is not None:
                if f.default is not dataclasses.MISSING:
                    return f.default
                if f.default_factory is not dataclasses.MISSING:
                    return f.default_factory()
        return None

    def migrate(self, value: Any, old: TypeSerializer) -> Any:
        if self.cls is not None and type(value) is self.cls and old == self:
            return value
        values = migrate_fields(self.names, self.fields, value, old, self._default, self._plans)
        return self._make(values)

    def migrate_bytes(self, data: bytes, old: TypeSerializer) -> bytes | None:
        """``data`` written by dataclass serializer ``old``, rewritten for this one
        without building instances (RocksDB migration); ``None``: use :meth:`migrate`."""
        if type(old) is not DataclassSerializer or not data:
            return None
        try:
            vals, _ = old._fast_read(data, 0)
        except (IndexError, struct.error):
            return None
        plan = plan_of(self.names, self.fields, old, False, self._plans)
        out = bytearray()
        return bytes(out) if self._fast_write(apply_plan(plan, vals, self._default), out) else None

    def write(self, value: Any, out: bytearray) -> None:
        cls = self.cls
        if cls is not None and type(value) is not cls and not isinstance(value, cls):
            raise TypeError(
                f"DATACLASS serializer expects {self.expected}, got {type(value).__name__} "
                f"{value!r}"
            )
        try:
            values = self._get(value)
        except AttributeError as e:
            raise TypeError(f"DATACLASS serializer expects {self.expected}: {e}") from None
        if not self._fast_write(values, out):
            write_fields(self._nested, values, out, self.class_path)

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        try:
            values, pos = self._fast_read(data, pos)
        except (IndexError, struct.error):  # truncated: the generic loop says how
            values, pos = read_fields(self._nested, data, pos)
        return self._make(values), pos

    # bulk paths (snapshots): column by column, each with its field serializer's bulk path
    # (one struct call for a numeric column). Blob: 0x02, u32 n, then per field: u8 flags
    # (1: null bitmap follows; 2: strings as u32 lengths + UTF-8), [null bitmap], u32
    # length, the non-null values (their serialize_many, or the string form).

    def serialize_many(self, values: Sequence[Any]) -> bytes:
        n = len(values)
        if not n or not self.names:
            return super().serialize_many(values)
        cls = self.cls
        if cls is not None and set(map(type, values)) != {cls}:
            for v in values:  # the precise error, or instances of subclasses: framed
                self.serialize(v)
            return super().serialize_many(values)
        try:
            columns = list(zip(*map(self._get, values), strict=True))
        except AttributeError as e:
            raise TypeError(f"DATACLASS serializer expects {self.expected}: {e}") from None
        parts = [_U32.pack(n)]
        for f, col in zip(self.fields, columns, strict=True):
            flags, bits = 0, b""
            if None in col:
                flags, mask = 1, bytearray((n + 7) >> 3)
                for i, v in enumerate(col):
                    if v is None:
                        mask[i >> 3] |= 1 << (i & 7)
                bits, col = bytes(mask), tuple(v for v in col if v is not None)
            if type(f) is StringSerializer and all(type(v) is str for v in col):
                flags |= 2
                enc = list(map(_ENCODE, col))
                blob = struct.pack(f">{len(enc)}I", *map(len, enc)) + b"".join(enc)
            else:
                blob = f.serialize_many(col)
            parts += (bytes((flags,)), bits, _U32.pack(len(blob)), blob)
        return _BULK + b"".join(parts)

    def deserialize_many(self, data: bytes) -> list[Any]:
        if data[:1] != _BULK:
            return super().deserialize_many(data)
        (n,) = _U32.unpack_from(data, 1)
        pos, columns = 5, []
        nb = (n + 7) >> 3
        for f in self.fields:
            flags, bits = data[pos], None
            pos += 1
            if flags & 1:
                bits = data[pos : pos + nb]
                pos += nb
            (ln,) = _U32.unpack_from(data, pos)
            blob = data[pos + 4 : pos + 4 + ln]
            pos += 4 + ln
            if flags & 2:  # strings: lengths, then the UTF-8 bytes
                k = n - (sum(bin(b).count("1") for b in bits) if bits is not None else 0)
                lens = struct.unpack_from(f">{k}I", blob)
                ends = list(accumulate(lens, initial=4 * k))
                col: list[Any] = list(
                    map(_DECODE, map(blob.__getitem__, map(slice, ends, ends[1:])))
                )
            else:
                col = f.deserialize_many(blob)
            if bits is not None:
                it = iter(col)
                col = [None if bits[i >> 3] & (1 << (i & 7)) else next(it) for i in range(n)]
            columns.append(col)
        cls, names = self.cls, self.names
        if cls is None or self._slots:
            make = self._make
            return [make(list(r)) for r in zip(*columns, strict=True)]
        # every step a C-level map: the instance dicts, the instances, their __dict__
        dicts = map(dict, map(zip, repeat(names), zip(*columns, strict=True)))
        out: list[Any] = list(map(object.__new__, repeat(cls, n)))
        for _ in map(object.__setattr__, out, repeat("__dict__"), dicts):  # frozen too
            pass
        return out

    def __eq__(self, other: object) -> bool:
        return super().__eq__(other) and self.cls is getattr(other, "cls", None)

    def __hash__(self) -> int:
        return id(DataclassSerializer)

    def __repr__(self) -> str:
        return f"DataclassSerializer({self.class_path!r}, {self.names!r})"
