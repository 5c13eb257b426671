"""JSON, mirroring ``pyflink.datastream.formats.json``, plus JSON lines for ``FileSource``.

``JsonRowDeserializationSchema`` / ``JsonRowSerializationSchema`` turn JSON objects into
``Row``s of a ``Types.ROW_NAMED`` and back (PyFlink's builders). ``JsonLinesReaderFormat``
(a streamstate extension: PyFlink has no JSON file format) reads one JSON object per line::

    row = Types.ROW_NAMED(["id", "name"], [Types.LONG(), Types.STRING()])
    fmt = JsonLinesReaderFormat.for_type_info(row)
    source = FileSource.for_record_stream_format(fmt, path).monitor_continuously(...).build()
"""

from __future__ import annotations

import json
from typing import Any

from streamstate.common.serialization import DeserializationSchema, SerializationSchema
from streamstate.datastream.connectors.file_system import StreamFormat
from streamstate.errors import ConfigurationError

__all__ = ["JsonLinesReaderFormat", "JsonRowDeserializationSchema", "JsonRowSerializationSchema"]


def _check_row(type_info: Any, who: str) -> Any:
    if getattr(type_info, "serializer_name", None) != "row":
        raise ConfigurationError(f"{who} needs Types.ROW_NAMED([...], [...]), got {type_info!r}")
    return type_info


class JsonRowDeserializationSchema(DeserializationSchema):
    """A JSON object (bytes) -> a ``Row`` of the type info's fields (missing fields: None,
    or an error with ``fail_on_missing_field``)."""

    def __init__(
        self, type_info: Any, fail_on_missing_field: bool = False, ignore_parse_errors: bool = False
    ) -> None:
        super().__init__()
        from streamstate.connectors.line_formats import JsonLines

        self._lines = JsonLines(
            _check_row(type_info, "JsonRowDeserializationSchema"),
            fail_on_missing_field,
            ignore_parse_errors,
        )

    @staticmethod
    def builder() -> JsonRowDeserializationSchema.Builder:
        return JsonRowDeserializationSchema.Builder()

    def deserialize(self, message: bytes) -> Any:
        rows = self._lines.decode(bytes(message).decode("utf-8"), "JSON message")
        return rows[0] if rows else None

    class Builder:
        def __init__(self) -> None:
            self._type_info: Any = None
            self._fail_on_missing_field = False
            self._ignore_parse_errors = False

        def type_info(self, type_info: Any) -> JsonRowDeserializationSchema.Builder:
            self._type_info = type_info
            return self

        def json_schema(self, json_schema: str) -> JsonRowDeserializationSchema.Builder:
            raise ConfigurationError(
                "JsonRowDeserializationSchema.Builder.json_schema() is not supported: give the "
                "fields as .type_info(Types.ROW_NAMED([...], [...]))"
            )

        def fail_on_missing_field(self) -> JsonRowDeserializationSchema.Builder:
            self._fail_on_missing_field = True
            return self

        def ignore_parse_errors(self) -> JsonRowDeserializationSchema.Builder:
            self._ignore_parse_errors = True
            return self

        def build(self) -> JsonRowDeserializationSchema:
            return JsonRowDeserializationSchema(
                self._type_info, self._fail_on_missing_field, self._ignore_parse_errors
            )


class JsonRowSerializationSchema(SerializationSchema):
    """A ``Row`` (or tuple) of the type info's fields -> a JSON object (bytes)."""

    def __init__(self, type_info: Any) -> None:
        super().__init__()
        self._names = _check_row(type_info, "JsonRowSerializationSchema").get_field_names()

    @staticmethod
    def builder() -> JsonRowSerializationSchema.Builder:
        return JsonRowSerializationSchema.Builder()

    def serialize(self, element: Any) -> bytes:
        values = [element.get(n) for n in self._names] if isinstance(element, dict) else element
        obj = dict(zip(self._names, values, strict=True))
        return json.dumps(obj, default=str, separators=(",", ":")).encode("utf-8")

    class Builder:
        def __init__(self) -> None:
            self._type_info: Any = None

        def with_type_info(self, type_info: Any) -> JsonRowSerializationSchema.Builder:
            self._type_info = type_info
            return self

        def build(self) -> JsonRowSerializationSchema:
            if self._type_info is None:
                raise TypeError("Typeinfo should be set.")
            return JsonRowSerializationSchema(self._type_info)


class JsonLinesReaderFormat(StreamFormat):
    """Reads JSON lines (one object per line): ``Row``s of a type info, or plain values
    (dicts, lists, ...) without one."""

    def __init__(
        self,
        type_info: Any = None,
        fail_on_missing_field: bool = False,
        ignore_parse_errors: bool = False,
    ) -> None:
        super().__init__("json-lines")
        self._args = (type_info, fail_on_missing_field, ignore_parse_errors)

    @staticmethod
    def for_type_info(
        type_info: Any = None,
        fail_on_missing_field: bool = False,
        ignore_parse_errors: bool = False,
    ) -> JsonLinesReaderFormat:
        from streamstate.connectors.line_formats import converter

        if type_info is not None:
            converter(type_info)  # an unreadable type fails here, on the driver
        return JsonLinesReaderFormat(type_info, fail_on_missing_field, ignore_parse_errors)

    @staticmethod
    def for_schema(schema: JsonRowDeserializationSchema) -> JsonLinesReaderFormat:
        """The settings of a ``JsonRowDeserializationSchema``."""
        lines = schema._lines
        return JsonLinesReaderFormat(
            lines.type_info, lines.fail_on_missing_field, lines.ignore_parse_errors
        )

    def _produced_type(self) -> Any:
        return self._args[0]  # None without a type: plain JSON values

    def _line_format(self) -> Any:
        from streamstate.connectors.line_formats import JsonLines

        return JsonLines(*self._args)
