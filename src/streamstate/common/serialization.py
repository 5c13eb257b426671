"""Encoders for row-format sinks, as ``pyflink.common.serialization``."""

from __future__ import annotations

from typing import Any

__all__ = ["Encoder"]


class Encoder:
    """Turns one record into the bytes of one row (``simple_string_encoder``: ``str(v)`` + newline)."""

    def __init__(self, charset: str = "UTF-8") -> None:
        self.charset = charset

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> Encoder:
        return Encoder(charset_name)

    def encode(self, value: Any) -> bytes:
        return f"{value}\n".encode(self.charset)
