"""Side output tags, mirroring ``pyflink.datastream.output_tag``."""

from __future__ import annotations

from typing import Any

__all__ = ["OutputTag"]


class OutputTag:
    """Names a side output of a process function.

    Emit to it with ``ctx.output(tag, value)`` (or, as in PyFlink, by yielding
    ``(tag, value)``) and read it with ``DataStream.get_side_output(tag)``. Two
    tags with the same ``tag_id`` are the same side output.
    """

    __slots__ = ("tag_id", "type_info")

    def __init__(self, tag_id: str, type_info: Any = None) -> None:
        if not isinstance(tag_id, str) or not tag_id:
            raise ValueError("OutputTag tag_id cannot be None or empty string")
        self.tag_id = tag_id
        self.type_info = type_info

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other.tag_id == self.tag_id

    def __hash__(self) -> int:
        return hash(("OutputTag", self.tag_id))  # in-process dict key only; never persisted

    def __repr__(self) -> str:
        return f"OutputTag({self.tag_id!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return OutputTag, (self.tag_id, self.type_info)
