"""Encoders for row-format sinks and (de)serialization schemas, as
``pyflink.common.serialization``.

The schemas turn records into bytes and back in Python (PyFlink's run in the JVM):
``SimpleStringSchema`` (str <-> bytes in a charset), ``ByteArraySchema`` (bytes as they
are), ``RowFieldExtractorSchema(i)`` (field ``i`` of a ``Row``, which must be bytes).
``Encoder.simple_string_encoder()`` writes ``str(record)`` and a newline per record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamstate.common._unsupported import install_unsupported, unsupported_attribute
from streamstate.errors import OutputTypeError

__all__ = [
    "BulkWriterFactory",
    "ByteArraySchema",
    "DeserializationSchema",
    "Encoder",
    "RowFieldExtractorSchema",
    "SerializationSchema",
    "SimpleStringSchema",
]


class Encoder:
    """Turns one record into the bytes of one row (``simple_string_encoder``: ``str(v)`` + newline)."""

    def __init__(self, charset: str = "UTF-8") -> None:
        self.charset = charset

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> Encoder:
        return Encoder(charset_name)

    def encode(self, value: Any) -> bytes:
        return f"{value}\n".encode(self.charset)

    def encode_typed(self, value: Any, type_info: Any) -> bytes:
        """``value`` of a stream of ``type_info``: Java's ``toString`` of the typed record,
        as Flink's SimpleStringEncoder writes it (``(a,3)`` for a ``Types.TUPLE``)."""
        from streamstate.common.java_strings import flink_string

        if type(self).encode is not Encoder.encode:  # a subclass with its own encode wins
            return self.encode(value)
        return f"{flink_string(value, type_info)}\n".encode(self.charset)


class SerializationSchema:
    """Turns one record into bytes (``serialize``); subclass it for your own format."""

    def __init__(self, j_serialization_schema: Any = None) -> None:
        self._j = j_serialization_schema

    def serialize(self, element: Any) -> bytes:
        raise NotImplementedError(f"{type(self).__name__} must implement serialize(element)")


class DeserializationSchema:
    """Turns bytes into one record (``deserialize``); subclass it for your own format."""

    def __init__(self, j_deserialization_schema: Any = None) -> None:
        self._j = j_deserialization_schema

    def deserialize(self, message: bytes) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement deserialize(message)")

    def is_end_of_stream(self, next_element: Any) -> bool:
        return False


class SimpleStringSchema(SerializationSchema, DeserializationSchema):
    """Strings as bytes in ``charset`` (UTF-8 by default)."""

    def __init__(self, charset: str = "UTF-8") -> None:
        super().__init__()
        "".encode(charset)  # an unknown charset fails here, not at the first record
        self.charset = charset

    def serialize(self, element: Any) -> bytes:
        return str(element).encode(self.charset)

    def deserialize(self, message: bytes) -> str:
        return bytes(message).decode(self.charset)


class ByteArraySchema(SerializationSchema, DeserializationSchema):
    """Bytes as they are."""

    def __init__(self) -> None:
        super().__init__()

    def serialize(self, element: Any) -> bytes:
        if not isinstance(element, (bytes, bytearray, memoryview)):
            raise OutputTypeError(
                f"ByteArraySchema serializes bytes, got {type(element).__name__}: "
                f"encode the record first (or use SimpleStringSchema for str)"
            )
        return bytes(element)

    def deserialize(self, message: bytes) -> bytes:
        return bytes(message)


class RowFieldExtractorSchema(SerializationSchema):
    """Field ``field_index`` of a ``Row`` (or tuple), which must already be bytes."""

    def __init__(self, field_index: int) -> None:
        super().__init__()
        if not isinstance(field_index, int) or field_index < 0:
            raise ValueError(f"field_index must be a non-negative int, got {field_index!r}")
        self.field_index = field_index

    def serialize(self, element: Any) -> bytes:
        if element is None:
            return b""
        try:
            value = element[self.field_index]
        except IndexError:
            raise OutputTypeError(
                f"RowFieldExtractorSchema({self.field_index}): the row has only "
                f"{len(element)} fields"
            ) from None
        if not isinstance(value, (bytes, bytearray)):
            raise OutputTypeError(
                f"RowFieldExtractorSchema({self.field_index}): field {self.field_index} must "
                f"be bytes, got {type(value).__name__}: convert it to bytes first"
            )
        return bytes(value)


class BulkWriterFactory:
    """Writes records into part files in bulk (Flink's ``BulkWriter.Factory``), for
    ``FileSink.for_bulk_format``; built by ``ParquetBulkWriters.for_row_type``."""

    def __init__(self, part_format: Any) -> None:
        self._format = part_format

    def _part_format(self) -> Any:
        return self._format


install_unsupported(globals())
if not TYPE_CHECKING:  # a typo stays a type error; at run time PyFlink names get typed errors
    __getattr__ = unsupported_attribute(__name__)
