"""Between Flink type information and Spark SQL types (and their values).

``spark_type(type_info)`` is the Spark ``DataType`` of values of a ``Types.*`` type;
``to_spark(type_info)`` converts one such value for a Spark row. A record type (``ROW``,
``ROW_NAMED``, ``TUPLE``) becomes the DataFrame's columns (``f0``, ``f1``, ... without
names, as Flink names tuple fields); any other type is one column named ``value``
(:func:`record_schema`, :func:`record_converter`).

The mapping, by serializer name (the registry key of every type information)::

    STRING, CHAR -> string      BOOLEAN -> boolean     BYTE -> byte     SHORT -> short
    INT -> int                  LONG -> long           FLOAT -> float   DOUBLE -> double
    BIG_INT -> decimal(38,0)    BIG_DEC -> decimal(38,18)
    SQL_DATE -> date            SQL_TIMESTAMP -> timestamp_ntz      INSTANT -> timestamp
    SQL_TIME -> string (ISO)    (Spark SQL has no usable TIME type yet)
    PICKLED_BYTE_ARRAY -> binary (the pickle)        PRIMITIVE_ARRAY(BYTE) -> binary
    LIST, BASIC_ARRAY, OBJECT_ARRAY, PRIMITIVE_ARRAY -> array     MAP -> map
    ROW, ROW_NAMED, TUPLE -> struct

:func:`from_spark` turns a Spark row back into a :class:`~streamstate.common.Row` with
field names (nested rows too), which is what bootstrap functions receive.
"""

from __future__ import annotations

import datetime as _dt
import pickle
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from streamstate.common.row import Row
from streamstate.common.time import Instant
from streamstate.common.typeinfo import TypeInformation
from streamstate.errors import ConfigurationError

__all__ = [
    "from_spark",
    "inferable_row",
    "is_record_type",
    "record_converter",
    "record_schema",
    "spark_type",
    "to_spark",
]

Converter = Callable[[Any], Any]

#: serializer name -> name of the pyspark.sql.types class (no arguments)
_SIMPLE = {
    "string": "StringType",
    "char": "StringType",
    "boolean": "BooleanType",
    "byte": "ByteType",
    "short": "ShortType",
    "int": "IntegerType",
    "long": "LongType",
    "float": "FloatType",
    "double": "DoubleType",
    "sql_date": "DateType",
    "sql_time": "StringType",
    "sql_timestamp": "TimestampNTZType",
    "instant": "TimestampType",
    "pickle": "BinaryType",
    "bytes": "BinaryType",
}
_RECORDS = ("row", "tuple")
_ARRAYS = ("list", "basic_array", "object_array", "primitive_array")


def _types() -> Any:
    from pyspark.sql import types

    return types


def _fields(ti: Any) -> list[tuple[str, TypeInformation]]:
    names = ti.get_field_names() if ti.serializer_name == "row" else None
    types = ti.get_field_types()
    return list(zip(names or [f"f{i}" for i in range(len(types))], types, strict=True))


def _check(ti: Any) -> str:
    if not isinstance(ti, TypeInformation):
        raise ConfigurationError(
            f"expected a type information (e.g. Types.LONG(), Types.ROW_NAMED([...], [...])), "
            f"got {ti!r}"
        )
    return ti.serializer_name


def spark_type(ti: Any) -> Any:
    """The Spark SQL ``DataType`` of values of ``ti``."""
    name = _check(ti)
    t = _types()
    if name in _SIMPLE:
        return getattr(t, _SIMPLE[name])()
    if name == "big_int":
        return t.DecimalType(38, 0)
    if name == "big_dec":
        return t.DecimalType(38, 18)
    if name in _RECORDS:
        return t.StructType([t.StructField(n, spark_type(f), True) for n, f in _fields(ti)])
    if name in _ARRAYS:
        return t.ArrayType(spark_type(ti.element_type), name != "primitive_array")
    if name == "map":
        return t.MapType(spark_type(ti.key_type), spark_type(ti.value_type), True)
    raise ConfigurationError(
        f"{ti!r} has no Spark SQL type; use Types.PICKLED_BYTE_ARRAY() for a binary pickle"
    )


def _identity(v: Any) -> Any:
    return v


def _pickled(v: Any) -> Any:
    return None if v is None else pickle.dumps(v, protocol=5)


def _iso_time(v: Any) -> Any:
    return None if v is None else v.isoformat()


def _instant(v: Any) -> Any:
    if v is None or isinstance(v, _dt.datetime):
        return v
    return v.to_datetime() if isinstance(v, Instant) else v


def _big_int(v: Any) -> Any:
    return None if v is None else Decimal(v)


_SCALAR_CONVERTERS: dict[str, Converter] = {
    "pickle": _pickled,
    "sql_time": _iso_time,
    "instant": _instant,
    "big_int": _big_int,
}


def _record(ti: Any) -> Converter:
    fields = _fields(ti)
    names = [n for n, _ in fields]
    convs = [to_spark(f) for _, f in fields]

    def convert(v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, Mapping):
            values = [v.get(n) for n in names]
        elif isinstance(v, Row) and v._fields is not None and set(v._fields) >= set(names):
            values = [v[n] for n in names]
        else:
            values = list(v)
        if len(values) != len(convs):
            raise ConfigurationError(
                f"a record of {ti!r} needs {len(convs)} fields, got {len(values)}: {v!r:.80}"
            )
        return tuple(c(x) for c, x in zip(convs, values, strict=True))

    return convert


def to_spark(ti: Any) -> Converter:
    """Converts a value of ``ti`` into what Spark expects for :func:`spark_type` of ``ti``."""
    name = _check(ti)
    if name in _SCALAR_CONVERTERS:
        return _SCALAR_CONVERTERS[name]
    if name in _SIMPLE:
        return _identity
    if name == "big_dec":
        return _identity
    if name in _RECORDS:
        return _record(ti)
    if name in _ARRAYS:
        elem = to_spark(ti.element_type)
        if elem is _identity:
            return _identity
        return lambda v: None if v is None else [elem(x) for x in v]
    if name == "map":
        kc, vc = to_spark(ti.key_type), to_spark(ti.value_type)
        return lambda v: None if v is None else {kc(k): vc(x) for k, x in v.items()}
    spark_type(ti)  # raises the explanation
    return _identity  # pragma: no cover - spark_type raised


def is_record_type(ti: Any) -> bool:
    """Whether values of ``ti`` become one DataFrame column per field (ROW, TUPLE)."""
    return _check(ti) in _RECORDS


def record_schema(ti: Any) -> Any:
    """The DataFrame schema of records of ``ti``: its fields, or one ``value`` column."""
    t = _types()
    st = spark_type(ti)
    return st if is_record_type(ti) else t.StructType([t.StructField("value", st, True)])


def record_converter(ti: Any) -> Converter:
    """Converts one record of ``ti`` into a row (a tuple) of :func:`record_schema`."""
    conv = to_spark(ti)
    if is_record_type(ti):
        return conv
    return lambda v: (conv(v),)


def _inferable(value: Any) -> Any:
    """A value Spark's schema inference understands: rows as PySpark rows (``f0``, ``f1``,
    ... when unnamed), instants as datetimes, the rest as is (lists and dicts recursively)."""
    from pyspark.sql import Row as SparkRow

    if isinstance(value, Row) or (isinstance(value, tuple) and not hasattr(value, "__fields__")):
        names = getattr(value, "_fields", None) or [f"f{i}" for i in range(len(value))]
        return SparkRow(**{n: _inferable(v) for n, v in zip(names, value, strict=True)})
    if isinstance(value, Instant):
        return value.to_datetime()
    if isinstance(value, list):
        return [_inferable(v) for v in value]
    if isinstance(value, dict):
        return {_inferable(k): _inferable(v) for k, v in value.items()}
    return value


def inferable_row(record: Any) -> Any:
    """One record as a PySpark row for ``createDataFrame`` without a schema (Spark infers
    it from the first rows, as for any RDD): a record type's fields are the columns
    (``f0``, ``f1``, ... when unnamed, as with a declared ``Types.TUPLE``), any other value
    is one column named ``value``, as with a declared type."""
    from pyspark.sql import Row as SparkRow

    row = _inferable(record)
    return row if isinstance(row, SparkRow) else SparkRow(value=row)


def from_spark(value: Any) -> Any:
    """A Spark row as a :class:`Row` with field names (recursively); other values as is."""
    fields = getattr(value, "__fields__", None)
    if fields is not None and isinstance(value, tuple):
        return Row(**{f: from_spark(v) for f, v in zip(fields, value, strict=True)})
    if isinstance(value, list):
        return [from_spark(v) for v in value]
    if isinstance(value, dict):
        return {from_spark(k): from_spark(v) for k, v in value.items()}
    return value
