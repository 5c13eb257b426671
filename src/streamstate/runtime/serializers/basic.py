"""Serializers of the basic types (``Types.LONG()``, ``Types.STRING()``, ...).

Every serializer here is a :class:`FieldSerializer`: besides ``serialize`` /
``deserialize`` (one value <-> one ``bytes``) it can append a self-delimiting
encoding of a value to a buffer and read it back (``write`` / ``read``), which
is how composite serializers nest them.

Encodings (big-endian):

=============  =======================================================  =========
type           encoding                                                  nullable
=============  =======================================================  =========
BOOLEAN        1 byte                                                    no
BYTE/SHORT     int8 / int16                                              no
INT/LONG       int32 / int64                                             no
FLOAT/DOUBLE   IEEE float32 / float64                                    no
CHAR           UTF-8 of the one character (1-4 bytes)                    no
STRING         UTF-8 (nested: varint length first)                       yes
BIG_INT        minimal two's complement (nested: varint length first)    yes
BIG_DEC        flags byte, zigzag exponent, digits as unsigned int       yes
SQL_DATE       int32 days since 1970-01-01                               yes
SQL_TIME       int64 microseconds of the day (naive ``time`` only)       yes
SQL_TIMESTAMP  int64 microseconds since 1970-01-01 (naive ``datetime``)  yes
INSTANT        int64 seconds + uint32 nanos since the epoch              yes
bytes          raw bytes (nested: varint length first)                   no
=============  =======================================================  =========

Null handling: Flink's primitive types have no null, so their serializers
reject ``None`` with ``TypeError``. The nullable types serialize a top-level
``None`` as the empty byte string (no non-null value encodes to zero bytes;
``STRING`` uses the single byte ``0xFF``, which never occurs in UTF-8). Inside
rows, tuples, lists, arrays and map values, nulls are recorded by the
composite's null bitmap, so every field type may be ``None`` there.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, ClassVar

from streamstate.runtime.serializers.base import TypeSerializer

__all__ = [
    "BigDecSerializer",
    "BigIntSerializer",
    "BooleanSerializer",
    "ByteSerializer",
    "BytesSerializer",
    "CharSerializer",
    "DoubleSerializer",
    "FieldSerializer",
    "FloatSerializer",
    "IntSerializer",
    "LongSerializer",
    "ShortSerializer",
    "StringSerializer",
    "read_varint",
    "type_error",
    "write_varint",
]


def write_varint(out: bytearray, n: int) -> None:
    """Append unsigned LEB128 ``n`` (``n >= 0``)."""
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Read unsigned LEB128 at ``pos``; returns ``(value, next_pos)``."""
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    result, shift = b & 0x7F, 7
    while True:
        pos += 1
        b = data[pos]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + 1
        shift += 7


def type_error(serializer: FieldSerializer, value: Any) -> TypeError:
    return TypeError(
        f"{serializer.type_name} serializer expects {serializer.expected}, got "
        f"{type(value).__name__} {value!r}"
    )


def _truncated(serializer: TypeSerializer, what: str) -> ValueError:
    return ValueError(f"{serializer.name}: corrupt data ({what})")


class FieldSerializer(TypeSerializer):
    """A serializer with a self-delimiting, nestable encoding.

    Subclasses implement :meth:`write` and :meth:`read`; ``serialize`` and
    ``deserialize`` derive from them (subclasses may override both with a more
    compact top-level form, keeping them inverse).
    """

    #: whether a top-level ``None`` is allowed (encoded as ``b""``)
    nullable: ClassVar[bool] = True
    #: Flink's name of the type, used in error messages (some serializers set it per instance)
    type_name: str = ""
    #: the accepted Python types, used in error messages (some serializers set it per instance)
    expected: str = ""

    def write(self, value: Any, out: bytearray) -> None:
        """Append the encoding of non-null ``value``; ``TypeError``/``ValueError`` if invalid."""
        raise NotImplementedError

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        """Decode the value at ``pos``; returns ``(value, next_pos)``."""
        raise NotImplementedError

    def check_null(self, value: Any) -> None:
        if value is None and not self.nullable:
            raise TypeError(
                f"{self.type_name} serializer expects {self.expected}, got None "
                f"({self.type_name} is not nullable outside rows and collections)"
            )

    def serialize(self, value: Any) -> bytes:
        if value is None:
            self.check_null(value)
            return b""
        out = bytearray()
        self.write(value, out)
        return bytes(out)

    def deserialize(self, data: bytes) -> Any:
        if not data and self.nullable:
            return None
        try:
            value, pos = self.read(data, 0)
        except (IndexError, struct.error):
            raise _truncated(self, "truncated value") from None
        if pos != len(data):
            raise _truncated(self, f"{len(data) - pos} trailing bytes")
        return value

    def serialize_many(self, values: Sequence[Any]) -> bytes:
        out = bytearray()
        write = self.write
        if self.nullable:
            for v in values:
                if v is None:
                    out.append(0)
                else:
                    out.append(1)
                    write(v, out)
        else:
            for v in values:
                self.check_null(v)
                write(v, out)
        return bytes(out)

    def deserialize_many(self, data: bytes) -> list[Any]:
        out: list[Any] = []
        pos, n = 0, len(data)
        read = self.read
        try:
            if self.nullable:
                while pos < n:
                    marker = data[pos]
                    pos += 1
                    if marker == 0:
                        out.append(None)
                    else:
                        v, pos = read(data, pos)
                        out.append(v)
            else:
                while pos < n:
                    v, pos = read(data, pos)
                    out.append(v)
        except (IndexError, struct.error):
            raise _truncated(self, "truncated batch") from None
        return out


# -- fixed-width numbers ---------------------------------------------------------------------


class _StructSerializer(FieldSerializer):
    """A fixed-width value packed with one struct format character."""

    nullable = False
    fmt: ClassVar[str] = ""
    #: Python types packed without further checks
    fast_types: ClassVar[tuple[type, ...]] = ()

    _s: ClassVar[struct.Struct]
    #: bytes of every value; ``serialize_many`` is the values' ``serialize`` back to back
    #: (queryable state reads the i-th value of a blob, or finds a key's bytes, without
    #: decoding the rest)
    fixed_width: ClassVar[int] = 0
    #: equal values serialize to equal bytes and unequal ones to unequal bytes (not so
    #: for floats: ``0.0 == -0.0``, ``nan != nan``), so a key is found by its bytes
    canonical_bytes: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.fmt:
            cls._s = struct.Struct(">" + cls.fmt)
            cls.fixed_width = cls._s.size

    def check(self, value: Any) -> Any:
        """``value`` converted to what the struct format packs; raises on a wrong type."""
        raise NotImplementedError

    def _pack_error(self, value: Any, exc: Exception) -> ValueError:
        return ValueError(f"{value!r} is out of range for {self.type_name}: {exc}")

    def serialize(self, value: Any) -> bytes:
        if type(value) not in self.fast_types:
            self.check_null(value)
            value = self.check(value)
        try:
            return self._s.pack(value)
        except (struct.error, OverflowError) as e:
            raise self._pack_error(value, e) from None

    def deserialize(self, data: bytes) -> Any:
        try:
            return self._s.unpack(data)[0]
        except struct.error:
            raise _truncated(self, f"expected {self._s.size} bytes") from None

    def write(self, value: Any, out: bytearray) -> None:
        out += self.serialize(value)

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        s = self._s
        return s.unpack_from(data, pos)[0], pos + s.size

    def pack_many(self, values: Sequence[Any]) -> bytes:
        """All ``values`` packed back to back (no nulls)."""
        fast = self.fast_types
        checked = list(values)
        if not set(map(type, checked)).issubset(fast):  # else nothing to check (C-level scan)
            for i, v in enumerate(checked):
                if type(v) not in fast:
                    self.check_null(v)
                    checked[i] = self.check(v)
        try:
            return struct.pack(f">{len(checked)}{self.fmt}", *checked)
        except (struct.error, OverflowError):
            for v in checked:  # find the offending value for the message
                self.serialize(v)
            raise

    def unpack_many(self, data: bytes | memoryview, pos: int, count: int) -> tuple[list[Any], int]:
        s = struct.Struct(f">{count}{self.fmt}")
        return list(s.unpack_from(data, pos)), pos + s.size

    def serialize_many(self, values: Sequence[Any]) -> bytes:
        return self.pack_many(values)

    def deserialize_many(self, data: bytes) -> list[Any]:
        size = self._s.size
        if len(data) % size:
            raise _truncated(self, "batch length is not a multiple of the value size")
        return self.unpack_many(data, 0, len(data) // size)[0]


class _IntegerSerializer(_StructSerializer):
    fast_types = (int,)
    #: ints round-trip exactly (out of range ones fail to serialize); see ``ExactValues``
    exact_types: tuple[type, ...] = (int,)
    expected = "int"
    canonical_bytes = True

    def check(self, value: Any) -> int:
        if isinstance(value, bool):
            raise type_error(self, value)
        try:
            return operator.index(value)  # int subclasses, numpy integers
        except TypeError:
            raise type_error(self, value) from None


class ByteSerializer(_IntegerSerializer):
    """``Types.BYTE()``: int in [-128, 127]."""

    name, fmt, type_name = "byte", "b", "BYTE"


class ShortSerializer(_IntegerSerializer):
    """``Types.SHORT()``: int in [-2**15, 2**15 - 1]."""

    name, fmt, type_name = "short", "h", "SHORT"


class IntSerializer(_IntegerSerializer):
    """``Types.INT()``: int in [-2**31, 2**31 - 1]."""

    name, fmt, type_name = "int", "i", "INT"


class LongSerializer(_IntegerSerializer):
    """``Types.LONG()``: int in [-2**63, 2**63 - 1]."""

    name, fmt, type_name = "long", "q", "LONG"


class _FloatingSerializer(_StructSerializer):
    fast_types = (float,)
    expected = "float (or int)"

    def check(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            if hasattr(value, "__float__") and not isinstance(value, str | bytes | Decimal):
                return float(value)  # numpy floats
            raise type_error(self, value)
        try:
            return float(value)
        except OverflowError:
            raise ValueError(f"{value!r} is out of range for {self.type_name}") from None


class FloatSerializer(_FloatingSerializer):
    """``Types.FLOAT()``: float stored as IEEE float32 (precision is rounded to 32 bits)."""

    name, fmt, type_name = "float", "f", "FLOAT"


class DoubleSerializer(_FloatingSerializer):
    """``Types.DOUBLE()``: float stored as IEEE float64."""

    name, fmt, type_name = "double", "d", "DOUBLE"
    #: float64 bits round-trip exactly (not FLOAT's float32); see ``ExactValues``
    exact_types: tuple[type, ...] = (float,)


class BooleanSerializer(_StructSerializer):
    """``Types.BOOLEAN()``: ``True``/``False`` only."""

    name, fmt, type_name, expected = "boolean", "?", "BOOLEAN", "bool"
    fast_types = (bool,)
    canonical_bytes = True
    exact_types: tuple[type, ...] = (bool,)

    def check(self, value: Any) -> bool:
        raise type_error(self, value)


class CharSerializer(FieldSerializer):
    """``Types.CHAR()``: a str of exactly one character, stored as its UTF-8 bytes."""

    name, type_name, expected = "char", "CHAR", "a str of length 1"
    nullable = False

    def write(self, value: Any, out: bytearray) -> None:
        if type(value) is not str or len(value) != 1:
            self.check_null(value)
            if not isinstance(value, str) or len(value) != 1:
                raise type_error(self, value)
        out += value.encode("utf-8", "surrogatepass")

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        lead = data[pos]
        n = 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        return bytes(data[pos : pos + n]).decode("utf-8", "surrogatepass"), pos + n


# -- variable-length values ------------------------------------------------------------------


class StringSerializer(FieldSerializer):
    """``Types.STRING()``: str as UTF-8 (lone surrogates allowed); ``None`` is ``b"\\xff"``."""

    name, type_name, expected = "string", "STRING", "str"
    #: str round-trips exactly (lone surrogates included); see ``ExactValues``
    exact_types: tuple[type, ...] = (str,)

    def serialize(self, value: Any) -> bytes:
        if type(value) is str:
            try:
                return value.encode()
            except UnicodeEncodeError:
                return value.encode("utf-8", "surrogatepass")
        if value is None:
            return b"\xff"
        if isinstance(value, str):
            return value.encode("utf-8", "surrogatepass")
        raise type_error(self, value)

    def deserialize(self, data: bytes) -> Any:
        if data == b"\xff":
            return None
        return data.decode("utf-8", "surrogatepass")

    def write(self, value: Any, out: bytearray) -> None:
        if not isinstance(value, str):
            raise type_error(self, value)
        b = value.encode("utf-8", "surrogatepass")
        write_varint(out, len(b))
        out += b

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        n, pos = read_varint(data, pos)
        end = pos + n
        if end > len(data):
            raise IndexError("truncated string")
        return bytes(data[pos:end]).decode("utf-8", "surrogatepass"), end


class BytesSerializer(FieldSerializer):
    """``Types.PRIMITIVE_ARRAY(Types.BYTE())``: ``bytes`` (also accepts bytearray/memoryview)."""

    name, type_name, expected = "bytes", "PRIMITIVE_ARRAY(BYTE)", "bytes"
    nullable = False

    def serialize(self, value: Any) -> bytes:
        if type(value) is bytes:
            return value
        self.check_null(value)
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value)
        raise type_error(self, value)

    def deserialize(self, data: bytes) -> Any:
        return bytes(data)

    def write(self, value: Any, out: bytearray) -> None:
        b = self.serialize(value)
        write_varint(out, len(b))
        out += b

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        n, pos = read_varint(data, pos)
        if pos + n > len(data):
            raise IndexError("truncated bytes")
        return bytes(data[pos : pos + n]), pos + n


def _int_to_bytes(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)


class BigIntSerializer(FieldSerializer):
    """``Types.BIG_INT()``: int of any size."""

    name, type_name, expected = "big_int", "BIG_INT", "int"

    def _check(self, value: Any) -> int:
        if type(value) is int:
            return value
        if isinstance(value, bool):
            raise type_error(self, value)
        try:
            return operator.index(value)
        except TypeError:
            raise type_error(self, value) from None

    def serialize(self, value: Any) -> bytes:
        if value is None:
            return b""
        return _int_to_bytes(self._check(value))

    def deserialize(self, data: bytes) -> Any:
        return int.from_bytes(data, "big", signed=True) if data else None

    def write(self, value: Any, out: bytearray) -> None:
        b = _int_to_bytes(self._check(value))
        write_varint(out, len(b))
        out += b

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        n, pos = read_varint(data, pos)
        if pos + n > len(data):
            raise IndexError("truncated int")
        return int.from_bytes(data[pos : pos + n], "big", signed=True), pos + n


# BIG_DEC flag byte: bit 0 = negative sign, bits 1-2 = kind
_DEC_FINITE, _DEC_INF, _DEC_NAN, _DEC_SNAN = 0, 2, 4, 6
_DEC_KIND = {"F": _DEC_INF, "n": _DEC_NAN, "N": _DEC_SNAN}
_DEC_EXP = {_DEC_INF: "F", _DEC_NAN: "n", _DEC_SNAN: "N"}


class BigDecSerializer(FieldSerializer):
    """``Types.BIG_DEC()``: ``decimal.Decimal`` (or int), exactly, including its exponent.

    Python's NaN and infinities (which Java's BigDecimal lacks) are kept too.
    """

    name, type_name, expected = "big_dec", "BIG_DEC", "decimal.Decimal (or int)"

    def write(self, value: Any, out: bytearray) -> None:
        if not isinstance(value, Decimal):
            if isinstance(value, bool) or not isinstance(value, int):
                raise type_error(self, value)
            value = Decimal(value)
        sign, digits, exponent = value.as_tuple()
        if isinstance(exponent, str):  # special value; NaN payloads are kept in digits
            out.append(_DEC_KIND[exponent] | sign)
            payload = int("".join(map(str, digits))) if digits else 0
            write_varint(out, payload)
            return
        out.append(_DEC_FINITE | sign)
        write_varint(out, (exponent << 1) ^ (exponent >> 63))  # zigzag
        magnitude = int("".join(map(str, digits))) if digits else 0
        b = magnitude.to_bytes((magnitude.bit_length() + 7) // 8 or 1, "big")
        write_varint(out, len(b))
        out += b

    def read(self, data: bytes | memoryview, pos: int) -> tuple[Any, int]:
        flags = data[pos]
        sign, kind = flags & 1, flags & 6
        if kind != _DEC_FINITE:
            payload, pos = read_varint(data, pos + 1)
            digits = tuple(int(c) for c in str(payload)) if payload else ()
            # typeshed omits the special exponents "F"/"n"/"N" that Decimal accepts in tuples
            return Decimal((sign, digits, _DEC_EXP[kind])), pos  # type: ignore[arg-type]  # typeshed wants a Literal exponent; ours is an int from the table
        z, pos = read_varint(data, pos + 1)
        exponent = (z >> 1) ^ -(z & 1)
        n, pos = read_varint(data, pos)
        if pos + n > len(data):
            raise IndexError("truncated decimal")
        magnitude = int.from_bytes(data[pos : pos + n], "big")
        digits = tuple(int(c) for c in str(magnitude))
        return Decimal((sign, digits, exponent)), pos + n
