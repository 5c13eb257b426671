"""The default serializer for keys whose type was not declared.

The bytes of a key decide its key group (``murmur3(serialized key)``), so this
serializer is *deterministic*: the same key gives the same bytes in every
process, on every machine, whatever ``PYTHONHASHSEED``. It is on the per-record
hot path and has fast paths for ``str`` and ``int`` keys.

Every encoding starts with a type tag byte, so ``1``, ``"1"``, ``1.0`` and
``True`` are different keys (unlike in a Python dict, where ``1 == 1.0 ==
True``). Supported exactly, recursively: ``None``, ``bool``, ``int`` (any
size), ``float``, ``str``, ``bytes``, ``tuple`` and :class:`Row` of these.
Floats are normalised so that equal floats give equal bytes (``-0.0`` is
stored as ``0.0``, every NaN as the canonical NaN).

Anything else, including subclasses of the types above (``IntEnum``,
``StrEnum``, numpy scalars), falls back to pickle protocol 5. Pickle is
deterministic only for simple values: sets, frozensets and objects whose
pickled state contains them may give different bytes in different processes,
so such keys can land in different key groups. Declare a key type, or map keys
to the supported types, when that matters.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

from streamstate.common.row import Row, RowKind
from streamstate.runtime.serializers.base import PICKLE_PROTOCOL, TypeSerializer
from streamstate.runtime.serializers.basic import read_varint, write_varint

__all__ = [
    "DefaultKeySerializer",
    "default_key_serializer",
    "deserialize_untrusted",
]

# type tags (part of the format: never renumber)
_T_NONE = 0
_T_FALSE = 1
_T_TRUE = 2
_T_INT = 3  # int64
_T_BIGINT = 4  # two's complement, any size
_T_FLOAT = 5
_T_STR = 6
_T_BYTES = 7
_T_TUPLE = 8
_T_ROW = 9
_T_PICKLE = 10

_B_STR = bytes([_T_STR])
_B_BYTES = bytes([_T_BYTES])
_B_BIGINT = bytes([_T_BIGINT])
_B_PICKLE = bytes([_T_PICKLE])
_B_NONE = bytes([_T_NONE])
_B_FALSE = bytes([_T_FALSE])
_B_TRUE = bytes([_T_TRUE])
_TAG_I64 = struct.Struct(">Bq")
_pack_tag_int = _TAG_I64.pack
_TAG_F64 = struct.Struct(">Bd")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_CANONICAL_NAN = struct.unpack(">d", b"\x7f\xf8\x00\x00\x00\x00\x00\x00")[0]


def _norm_float(f: float) -> float:
    if f != f:
        return _CANONICAL_NAN
    return f + 0.0  # -0.0 + 0.0 == 0.0


def _encode_str(s: str) -> bytes:
    try:
        return s.encode()
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogatepass")


def _int_bytes(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)


def _write(value: Any, out: bytearray) -> None:
    """Append the nested (self-delimiting) encoding of ``value``."""
    t = type(value)
    if t is str:
        b = _encode_str(value)
        out.append(_T_STR)
        write_varint(out, len(b))
        out += b
    elif t is int:
        try:
            out += _pack_tag_int(_T_INT, value)
        except struct.error:
            b = _int_bytes(value)
            out.append(_T_BIGINT)
            write_varint(out, len(b))
            out += b
    elif value is None:
        out.append(_T_NONE)
    elif t is bool:
        out.append(_T_TRUE if value else _T_FALSE)
    elif t is float:
        out += _TAG_F64.pack(_T_FLOAT, _norm_float(value))
    elif t is bytes:
        out.append(_T_BYTES)
        write_varint(out, len(value))
        out += value
    elif t is tuple:
        out.append(_T_TUPLE)
        write_varint(out, len(value))
        for v in value:
            _write(v, out)
    elif t is Row:
        names = value._fields
        out.append(_T_ROW)
        out.append(value.get_row_kind().value)
        write_varint(out, len(value))
        out.append(0 if names is None else 1)
        if names is not None:
            for n in names:
                _write(n, out)
        for v in value:
            _write(v, out)
    else:
        b = pickle.dumps(value, protocol=PICKLE_PROTOCOL)
        out.append(_T_PICKLE)
        write_varint(out, len(b))
        out += b


def _read_blob(data: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = read_varint(data, pos)
    end = pos + n
    if end > len(data):
        raise IndexError("truncated key")
    return data[pos:end], end


def _read(data: bytes, pos: int, allow_pickle: bool = True) -> tuple[Any, int]:
    """Decode the nested encoding at ``pos``; returns ``(value, next_pos)``."""
    tag = data[pos]
    pos += 1
    if tag == _T_STR:
        b, pos = _read_blob(data, pos)
        return b.decode("utf-8", "surrogatepass"), pos
    if tag == _T_INT:
        return _I64.unpack_from(data, pos)[0], pos + 8
    if tag == _T_NONE:
        return None, pos
    if tag == _T_FALSE:
        return False, pos
    if tag == _T_TRUE:
        return True, pos
    if tag == _T_FLOAT:
        return _F64.unpack_from(data, pos)[0], pos + 8
    if tag == _T_BIGINT:
        b, pos = _read_blob(data, pos)
        return int.from_bytes(b, "big", signed=True), pos
    if tag == _T_BYTES:
        return _read_blob(data, pos)
    if tag == _T_TUPLE:
        n, pos = read_varint(data, pos)
        items = []
        for _ in range(n):
            v, pos = _read(data, pos, allow_pickle)
            items.append(v)
        return tuple(items), pos
    if tag == _T_ROW:
        kind = data[pos]
        n, pos = read_varint(data, pos + 1)
        has_names = data[pos]
        pos += 1
        names = None
        if has_names:
            names = []
            for _ in range(n):
                name, pos = _read(data, pos, allow_pickle)
                names.append(name)
        values = []
        for _ in range(n):
            v, pos = _read(data, pos, allow_pickle)
            values.append(v)
        row = Row(*values)
        row._fields = names
        if kind:
            row.set_row_kind(RowKind(kind))
        return row, pos
    if tag == _T_PICKLE:
        if not allow_pickle:
            raise ValueError("a pickled key (or key part) from an untrusted source")
        b, pos = _read_blob(data, pos)
        return pickle.loads(b), pos
    raise ValueError(f"corrupt key: unknown type tag {tag}")


def deserialize_untrusted(data: bytes) -> Any:
    """A key of the default encoding from an untrusted source (a queryable-state client):
    as :meth:`DefaultKeySerializer.deserialize`, but nothing is unpickled (ValueError)."""
    tag = data[0]
    if tag == _T_STR:
        return data[1:].decode("utf-8", "surrogatepass")
    if tag == _T_BIGINT:
        return int.from_bytes(data[1:], "big", signed=True)
    if tag == _T_BYTES:
        return bytes(data[1:])
    if tag == _T_PICKLE:
        raise ValueError("a pickled key from an untrusted source")
    try:
        value, pos = _read(data, 0, allow_pickle=False)
    except (IndexError, struct.error):
        raise ValueError("corrupt key: truncated") from None
    if pos != len(data):
        raise ValueError(f"corrupt key: {len(data) - pos} trailing bytes")
    return value


class DefaultKeySerializer(TypeSerializer):
    """Deterministic, type-tagged serializer for undeclared keys (see module docs).

    Top-level ``str``, ``bytes``, big ``int`` and pickled keys are the tag
    followed by the raw bytes; everything else uses the nested encoding.
    """

    name = "default_key"
    version = 1

    def serialize(self, value: Any) -> bytes:
        t = type(value)
        if t is str:
            try:
                return _B_STR + value.encode()
            except UnicodeEncodeError:
                return _B_STR + value.encode("utf-8", "surrogatepass")
        if t is int:
            try:
                return _pack_tag_int(_T_INT, value)
            except struct.error:
                return _B_BIGINT + _int_bytes(value)
        if t is bytes:
            return _B_BYTES + value
        try:
            if t is tuple or t is Row or t is float or t is bool or value is None:
                out = bytearray()
                _write(value, out)
                return bytes(out)
            return _B_PICKLE + pickle.dumps(value, protocol=PICKLE_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as e:
            raise TypeError(
                f"key {value!r} of type {type(value).__name__} cannot be serialized: it is "
                f"not a str/int/float/bool/bytes/None/tuple/Row and pickle failed ({e})"
            ) from e

    def deserialize(self, data: bytes) -> Any:
        tag = data[0]
        if tag == _T_STR:
            return data[1:].decode("utf-8", "surrogatepass")
        if tag == _T_BIGINT:
            return int.from_bytes(data[1:], "big", signed=True)
        if tag == _T_BYTES:
            return bytes(data[1:])
        if tag == _T_PICKLE:
            return pickle.loads(data[1:])
        try:
            value, pos = _read(data, 0)
        except (IndexError, struct.error):
            raise ValueError("corrupt key: truncated") from None
        if pos != len(data):
            raise ValueError(f"corrupt key: {len(data) - pos} trailing bytes")
        return value

    def __reduce__(self) -> tuple[Any, ...]:
        return default_key_serializer, ()


_DEFAULT = DefaultKeySerializer()


def default_key_serializer() -> DefaultKeySerializer:
    """The (shared, stateless) default key serializer."""
    return _DEFAULT
