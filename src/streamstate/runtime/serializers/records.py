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
from collections.abc import Callable, Sequence
from typing import Any

from streamstate.common.row import Row
from streamstate.common.serializer import (
    TypeSerializerSchemaCompatibility,
    TypeSerializerSnapshot,
    as_snapshot,
    compare_snapshots,
)
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.serializers.basic import FieldSerializer
from streamstate.runtime.serializers.composite import (
    as_field_serializer,
    migrate_fields,
    nested_snapshot,
    read_fields,
    write_fields,
)

__all__ = ["DataclassSerializer", "resolve_record"]

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


class DataclassSerializer(FieldSerializer):
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
        getter = operator.attrgetter(*self.names) if self.names else (lambda v: ())
        self._get: Callable[[Any], Any] = (
            (lambda v: (getter(v),)) if len(self.names) == 1 else getter
        )
        self._slots = self.cls is not None and "__slots__" in vars(self.cls)

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
        return self._make(migrate_fields(self.names, self.fields, value, old, self._default))

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
        write_fields(self._nested, values, out, self.class_path)

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        values, pos = read_fields(self._nested, data, pos)
        return self._make(values), pos

    def __eq__(self, other: object) -> bool:
        return super().__eq__(other) and self.cls is getattr(other, "cls", None)

    def __hash__(self) -> int:
        return id(DataclassSerializer)

    def __repr__(self) -> str:
        return f"DataclassSerializer({self.class_path!r}, {self.names!r})"
