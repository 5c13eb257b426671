"""Type information, as in ``pyflink.common.typeinfo``.

A :class:`TypeInformation` describes the values of a state or stream. Type
infos are immutable values: they compare equal by structure, hash, pickle, and
``repr`` as the ``Types`` call that builds them (``Types.LONG()``).

Each type info names the serializer that handles its values
(:attr:`TypeInformation.serializer_name`) and the arguments it is built from
(:meth:`TypeInformation.serializer_params`, nested type infos included);
``streamstate.runtime.serializers.registry.serializer_for`` turns that into a
serializer through the serializer registry.
"""

from __future__ import annotations

import dataclasses
import json
import types as _types
import typing
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from streamstate.common import _sql_time
from streamstate.common._unsupported import unsupported_attribute
from streamstate.errors import ConfigurationError

__all__ = [
    "BasicArrayTypeInfo",
    "BasicType",
    "AvroTypeInfo",
    "BasicTypeInfo",
    "DataclassTypeInfo",
    "InstantTypeInfo",
    "ListTypeInfo",
    "MapTypeInfo",
    "ObjectArrayTypeInfo",
    "PickledBytesTypeInfo",
    "PrimitiveArrayTypeInfo",
    "RowTypeInfo",
    "SqlTimeType",
    "SqlTimeTypeInfo",
    "TupleTypeInfo",
    "TypeInformation",
    "Types",
]


class TypeInformation(ABC):
    """Describes a type of values; the source of its serializer."""

    __slots__ = ()

    @property
    @abstractmethod
    def serializer_name(self) -> str:
        """Registry name of the serializer for values of this type."""

    def serializer_params(self) -> dict[str, Any]:
        """Arguments of the serializer factory; nested type infos appear as type infos."""
        return {}

    def need_conversion(self) -> bool:
        """Whether values have an internal form other than themselves (PyFlink's
        ``TypeInformation`` protocol; the SQL date/time types do)."""
        return False

    def to_internal_type(self, obj: Any) -> Any:
        """The internal form of a Python value (PyFlink's): itself unless overridden."""
        return obj

    def from_internal_type(self, obj: Any) -> Any:
        """The Python value of an internal form (inverse of :meth:`to_internal_type`)."""
        return obj

    def __str__(self) -> str:
        return self.__repr__()


def _check_type_info(value: Any, what: str) -> TypeInformation:
    if not isinstance(value, TypeInformation):
        raise TypeError(
            f"{what} must be a TypeInformation (e.g. Types.LONG()), got {type(value).__name__} "
            f"{value!r}"
        )
    return value


def _check_type_infos(values: Sequence[Any], what: str) -> tuple[TypeInformation, ...]:
    if isinstance(values, TypeInformation) or not isinstance(values, Sequence):
        raise TypeError(f"{what} must be a list of TypeInformation, got {values!r}")
    return tuple(_check_type_info(v, f"{what}[{i}]") for i, v in enumerate(values))


class BasicType(Enum):
    """The basic (indivisible) types; the value is Flink's Java class name."""

    STRING = "String"
    BYTE = "Byte"
    BOOLEAN = "Boolean"
    SHORT = "Short"
    INT = "Integer"
    LONG = "Long"
    FLOAT = "Float"
    DOUBLE = "Double"
    CHAR = "Char"
    BIG_INT = "BigInteger"
    BIG_DEC = "BigDecimal"


_PRIMITIVES = frozenset(
    {
        BasicType.BOOLEAN,
        BasicType.BYTE,
        BasicType.SHORT,
        BasicType.INT,
        BasicType.LONG,
        BasicType.FLOAT,
        BasicType.DOUBLE,
        BasicType.CHAR,
    }
)


@dataclass(frozen=True, repr=False)
class BasicTypeInfo(TypeInformation):
    """Primitive types, ``String``, ``BigInteger`` and ``BigDecimal``."""

    basic_type: BasicType

    @property
    def serializer_name(self) -> str:
        return self.basic_type.name.lower()

    def is_primitive(self) -> bool:
        """True for the types Java has a primitive for (not nullable in primitive arrays)."""
        return self.basic_type in _PRIMITIVES

    def __repr__(self) -> str:
        return f"Types.{self.basic_type.name}()"


class SqlTimeType(Enum):
    DATE = "Date"
    TIME = "Time"
    TIMESTAMP = "Timestamp"


@dataclass(frozen=True, repr=False)
class SqlTimeTypeInfo(TypeInformation):
    """``datetime.date`` / ``datetime.time`` / naive ``datetime.datetime`` values."""

    time_type: SqlTimeType

    @property
    def serializer_name(self) -> str:
        return "sql_" + self.time_type.name.lower()

    def need_conversion(self) -> bool:
        return True

    def to_internal_type(self, obj: Any) -> Any:
        """PyFlink's internal forms: a date is days since 1970-01-01, a time microseconds
        of the day, a timestamp microseconds since the epoch (a naive one in local time)."""
        if obj is None:
            return None
        return _sql_time.TO_INTERNAL[self.time_type.name](obj)

    def from_internal_type(self, obj: Any) -> Any:
        if obj is None:
            return None
        return _sql_time.FROM_INTERNAL[self.time_type.name](obj)

    def __repr__(self) -> str:
        return f"Types.SQL_{self.time_type.name}()"


@dataclass(frozen=True, repr=False)
class InstantTypeInfo(TypeInformation):
    """Points on the UTC time-line (:class:`streamstate.common.time.Instant`)."""

    @property
    def serializer_name(self) -> str:
        return "instant"

    def __repr__(self) -> str:
        return "Types.INSTANT()"


@dataclass(frozen=True, repr=False)
class PickledBytesTypeInfo(TypeInformation):
    """Any picklable Python object, stored as pickled bytes."""

    @property
    def serializer_name(self) -> str:
        return "pickle"

    def __repr__(self) -> str:
        return "Types.PICKLED_BYTE_ARRAY()"


@dataclass(frozen=True, repr=False)
class RowTypeInfo(TypeInformation):
    """Rows of fixed arity; named when ``field_names`` is given."""

    field_types: tuple[TypeInformation, ...]
    field_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "field_types", _check_type_infos(self.field_types, "field_types"))
        if self.field_names is None:
            return
        if isinstance(self.field_names, str) or not isinstance(self.field_names, Sequence):
            raise TypeError(f"field_names must be a list of str, got {self.field_names!r}")
        names = tuple(self.field_names)
        for n in names:
            if not isinstance(n, str) or not n:
                raise TypeError(f"field names must be non-empty str, got {n!r}")
        if len(names) != len(self.field_types):
            raise ConfigurationError(
                f"ROW_NAMED got {len(names)} field names but {len(self.field_types)} field types"
            )
        if len(set(names)) != len(names):
            raise ConfigurationError(f"ROW_NAMED field names must be unique, got {list(names)}")
        object.__setattr__(self, "field_names", names)

    @property
    def serializer_name(self) -> str:
        return "row"

    def serializer_params(self) -> dict[str, Any]:
        names = None if self.field_names is None else list(self.field_names)
        return {"fields": list(self.field_types), "names": names}

    def get_field_names(self) -> list[str]:
        """The field names (``f0``, ``f1``, ... for a positional row, as in Flink)."""
        if self.field_names is None:
            return [f"f{i}" for i in range(len(self.field_types))]
        return list(self.field_names)

    def get_field_index(self, field_name: str) -> int:
        """Index of ``field_name``, or -1 if there is no such field."""
        names = self.get_field_names()
        return names.index(field_name) if field_name in names else -1

    def get_field_types(self) -> list[TypeInformation]:
        return list(self.field_types)

    def get_arity(self) -> int:
        return len(self.field_types)

    def __repr__(self) -> str:
        types = ", ".join(repr(t) for t in self.field_types)
        if self.field_names is None:
            return f"Types.ROW([{types}])"
        return f"Types.ROW_NAMED({list(self.field_names)!r}, [{types}])"


@dataclass(frozen=True, repr=False)
class TupleTypeInfo(TypeInformation):
    """Python tuples of fixed arity."""

    field_types: tuple[TypeInformation, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "field_types", _check_type_infos(self.field_types, "field_types"))

    @property
    def serializer_name(self) -> str:
        return "tuple"

    def serializer_params(self) -> dict[str, Any]:
        return {"fields": list(self.field_types)}

    def get_field_types(self) -> list[TypeInformation]:
        return list(self.field_types)

    def get_arity(self) -> int:
        return len(self.field_types)

    def __repr__(self) -> str:
        return "Types.TUPLE([" + ", ".join(repr(t) for t in self.field_types) + "])"


@dataclass(frozen=True, repr=False)
class _ElementTypeInfo(TypeInformation):
    element_type: TypeInformation

    def __post_init__(self) -> None:
        _check_type_info(self.element_type, "element_type")

    def serializer_params(self) -> dict[str, Any]:
        return {"element": self.element_type}


@dataclass(frozen=True, repr=False)
class ListTypeInfo(_ElementTypeInfo):
    """Python lists of one element type (elements may be ``None``)."""

    @property
    def serializer_name(self) -> str:
        return "list"

    def __repr__(self) -> str:
        return f"Types.LIST({self.element_type!r})"


@dataclass(frozen=True, repr=False)
class BasicArrayTypeInfo(_ElementTypeInfo):
    """Arrays of a boxed basic type, as Python lists (elements may be ``None``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.element_type, BasicTypeInfo):
            raise TypeError(
                f"BASIC_ARRAY needs a basic element type (e.g. Types.INT()), got "
                f"{self.element_type!r}; use Types.OBJECT_ARRAY or Types.LIST for others"
            )

    @property
    def serializer_name(self) -> str:
        return "basic_array"

    def __repr__(self) -> str:
        return f"Types.BASIC_ARRAY({self.element_type!r})"


@dataclass(frozen=True, repr=False)
class ObjectArrayTypeInfo(_ElementTypeInfo):
    """Arrays of any element type, as Python lists (elements may be ``None``)."""

    @property
    def serializer_name(self) -> str:
        return "object_array"

    def __repr__(self) -> str:
        return f"Types.OBJECT_ARRAY({self.element_type!r})"


@dataclass(frozen=True, repr=False)
class PrimitiveArrayTypeInfo(_ElementTypeInfo):
    """Arrays of a primitive type, as Python lists without ``None`` elements.

    As in PyFlink, ``Types.PRIMITIVE_ARRAY(Types.BYTE())`` holds ``bytes``.
    """

    def __post_init__(self) -> None:
        e = self.element_type
        if not isinstance(e, BasicTypeInfo) or not e.is_primitive():
            raise TypeError(
                f"PRIMITIVE_ARRAY needs a primitive element type (BOOLEAN, BYTE, SHORT, INT, "
                f"LONG, FLOAT, DOUBLE or CHAR), got {e!r}"
            )

    @property
    def serializer_name(self) -> str:
        assert isinstance(self.element_type, BasicTypeInfo)
        if self.element_type.basic_type is BasicType.BYTE:
            return "bytes"
        return "primitive_array"

    def serializer_params(self) -> dict[str, Any]:
        return {} if self.serializer_name == "bytes" else super().serializer_params()

    def __repr__(self) -> str:
        return f"Types.PRIMITIVE_ARRAY({self.element_type!r})"


@dataclass(frozen=True, repr=False)
class MapTypeInfo(TypeInformation):
    """Python dicts; keys must not be ``None``, values may be."""

    key_type: TypeInformation
    value_type: TypeInformation

    def __post_init__(self) -> None:
        _check_type_info(self.key_type, "key_type")
        _check_type_info(self.value_type, "value_type")

    @property
    def serializer_name(self) -> str:
        return "map"

    def serializer_params(self) -> dict[str, Any]:
        return {"key": self.key_type, "value": self.value_type}

    def __repr__(self) -> str:
        return f"Types.MAP({self.key_type!r}, {self.value_type!r})"


class Types:
    """Factories of type information, as ``pyflink.common.typeinfo.Types``."""

    @staticmethod
    def STRING() -> TypeInformation:
        return BasicTypeInfo(BasicType.STRING)

    @staticmethod
    def BYTE() -> TypeInformation:
        return BasicTypeInfo(BasicType.BYTE)

    @staticmethod
    def BOOLEAN() -> TypeInformation:
        return BasicTypeInfo(BasicType.BOOLEAN)

    @staticmethod
    def SHORT() -> TypeInformation:
        return BasicTypeInfo(BasicType.SHORT)

    @staticmethod
    def INT() -> TypeInformation:
        return BasicTypeInfo(BasicType.INT)

    @staticmethod
    def LONG() -> TypeInformation:
        return BasicTypeInfo(BasicType.LONG)

    @staticmethod
    def FLOAT() -> TypeInformation:
        return BasicTypeInfo(BasicType.FLOAT)

    @staticmethod
    def DOUBLE() -> TypeInformation:
        return BasicTypeInfo(BasicType.DOUBLE)

    @staticmethod
    def CHAR() -> TypeInformation:
        return BasicTypeInfo(BasicType.CHAR)

    @staticmethod
    def BIG_INT() -> TypeInformation:
        return BasicTypeInfo(BasicType.BIG_INT)

    @staticmethod
    def BIG_DEC() -> TypeInformation:
        return BasicTypeInfo(BasicType.BIG_DEC)

    @staticmethod
    def SQL_DATE() -> TypeInformation:
        return SqlTimeTypeInfo(SqlTimeType.DATE)

    @staticmethod
    def SQL_TIME() -> TypeInformation:
        return SqlTimeTypeInfo(SqlTimeType.TIME)

    @staticmethod
    def SQL_TIMESTAMP() -> TypeInformation:
        return SqlTimeTypeInfo(SqlTimeType.TIMESTAMP)

    @staticmethod
    def INSTANT() -> TypeInformation:
        return InstantTypeInfo()

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:
        return PickledBytesTypeInfo()

    @staticmethod
    def ROW(field_types: Sequence[TypeInformation]) -> TypeInformation:
        """Rows with positional fields of ``field_types``."""
        return RowTypeInfo(tuple(_check_type_infos(field_types, "field_types")))

    @staticmethod
    def ROW_NAMED(
        field_names: Sequence[str], field_types: Sequence[TypeInformation]
    ) -> TypeInformation:
        """Rows with fields ``field_names`` of ``field_types`` (same length, unique names)."""
        if isinstance(field_names, str) or not isinstance(field_names, Sequence):
            raise TypeError(f"field_names must be a list of str, got {field_names!r}")
        return RowTypeInfo(tuple(_check_type_infos(field_types, "field_types")), tuple(field_names))

    @staticmethod
    def TUPLE(field_types: Sequence[TypeInformation]) -> TypeInformation:
        return TupleTypeInfo(tuple(_check_type_infos(field_types, "field_types")))

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return PrimitiveArrayTypeInfo(element_type)

    @staticmethod
    def BASIC_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return BasicArrayTypeInfo(element_type)

    @staticmethod
    def OBJECT_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return ObjectArrayTypeInfo(element_type)

    @staticmethod
    def LIST(element_type_info: TypeInformation) -> TypeInformation:
        return ListTypeInfo(element_type_info)

    @staticmethod
    def MAP(key_type_info: TypeInformation, value_type_info: TypeInformation) -> TypeInformation:
        return MapTypeInfo(key_type_info, value_type_info)

    @staticmethod
    def DATACLASS(
        cls: type, field_types: Mapping[str, TypeInformation] | None = None
    ) -> TypeInformation:
        """Instances of the dataclass ``cls`` (Flink's POJO type): typed fields by name, from
        the annotations (``int`` -> LONG, ``float`` -> DOUBLE, ``str``, ``bool``, ``bytes``,
        ``X | None``, ``list[X]``, ``dict[K, V]``, dataclasses; else pickled) or
        ``field_types``."""
        return DataclassTypeInfo.of(cls, field_types)

    @staticmethod
    def AVRO(schema: str | Mapping[str, Any]) -> TypeInformation:
        """Avro values (records as dicts) of ``schema`` (JSON text or dict), by fastavro."""
        return AvroTypeInfo(schema)


@dataclass(frozen=True, repr=False, init=False)
class AvroTypeInfo(TypeInformation):
    """Avro values of one schema (kept as sorted-key JSON text)."""

    schema: str
    serializer_name = "avro"  # type: ignore[assignment]  # a constant in place of the property

    def __init__(self, schema: str | Mapping[str, Any]) -> None:
        try:
            raw = json.loads(schema) if isinstance(schema, str) else dict(schema)
        except (ValueError, TypeError) as e:
            raise ConfigurationError(f"Types.AVRO takes an Avro schema (JSON or dict): {e}") from e
        object.__setattr__(self, "schema", json.dumps(raw, sort_keys=True, separators=(",", ":")))

    def serializer_params(self) -> dict[str, Any]:
        return {"schema": self.schema}

    def __repr__(self) -> str:
        return f"Types.AVRO({self.schema})"


@dataclass(frozen=True, repr=False)
class DataclassTypeInfo(TypeInformation):
    """Instances of a dataclass; ``fields`` are (name, type info) in declaration order."""

    cls: type
    fields: tuple[tuple[str, TypeInformation], ...]
    serializer_name = "dataclass"  # type: ignore[assignment]  # a constant in place of the property

    @staticmethod
    def of(
        cls: type, field_types: Mapping[str, TypeInformation] | None = None
    ) -> DataclassTypeInfo:
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise TypeError(f"Types.DATACLASS takes a dataclass, got {cls!r}")
        given, names = dict(field_types or {}), [f.name for f in dataclasses.fields(cls)]
        try:
            hints = typing.get_type_hints(cls)
        except (NameError, TypeError):  # unresolvable annotations: pickle those fields
            hints = {}
        if unknown := sorted(set(given) - set(names)):
            raise ConfigurationError(f"{cls.__qualname__} has no fields {unknown}")
        g, h = _check_type_info, _hint_type_info
        return DataclassTypeInfo(
            cls, tuple((n, g(given[n], n) if n in given else h(hints.get(n))) for n in names)
        )

    def serializer_params(self) -> dict[str, Any]:
        path, names = f"{self.cls.__module__}:{self.cls.__qualname__}", [n for n, _ in self.fields]
        return {
            "class": path,
            "cls": self.cls,
            "names": names,
            "fields": [t for _, t in self.fields],
        }

    def __repr__(self) -> str:
        return f"Types.DATACLASS({self.cls.__qualname__})"


_HINTS: dict[Any, Any] = {int: Types.LONG, float: Types.DOUBLE, str: Types.STRING}
_HINTS.update({bool: Types.BOOLEAN, bytes: lambda: Types.PRIMITIVE_ARRAY(Types.BYTE())})


def _hint_type_info(hint: Any) -> TypeInformation:
    """The type info of a dataclass field annotated ``hint`` (pickle when unknown)."""
    made = _HINTS.get(hint)
    if made is not None:
        return made()  # type: ignore[no-any-return]  # every entry builds a TypeInformation
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, _types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return _hint_type_info(rest[0]) if len(rest) == 1 else Types.PICKLED_BYTE_ARRAY()
    if origin is list and len(args) == 1:
        return Types.LIST(_hint_type_info(args[0]))
    if origin is dict and len(args) == 2:
        return Types.MAP(_hint_type_info(args[0]), _hint_type_info(args[1]))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return DataclassTypeInfo.of(hint)
    return Types.PICKLED_BYTE_ARRAY()


if not TYPE_CHECKING:  # a typo stays a type error; at run time PyFlink names get typed errors
    __getattr__ = unsupported_attribute(__name__)
