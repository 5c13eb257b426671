"""Generated (unrolled) field writers and readers of records: rows and dataclasses.

A record writes ``[null bitmap] [non-null fields]`` (``composite.write_fields``). The
generic loop pays for ``zip``/``enumerate`` and one method call per field; the code
generated here unrolls the fields of one record serializer, inlines struct packing of
fixed-width fields (``_StructSerializer``: LONG, DOUBLE, INT, BOOLEAN, ...) and the
varint-prefixed UTF-8 of STRING fields, and calls the field serializer for the rest.
The bytes are exactly the generic loop's. The generated code is an accelerator only:
on any failure it undoes its partial output and returns ``False`` (writer) or raises
``_Fallback`` (reader), and the caller runs the generic loop, which produces the
value or the precise error.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from streamstate.runtime.serializers.basic import (
    FieldSerializer,
    StringSerializer,
    _StructSerializer,
    read_varint,
    write_varint,
)

__all__ = ["Unrolled", "compile_reader", "compile_writer"]

#: ``writer(values, out) -> ok``; ``values`` has exactly the record's arity
Writer = Callable[[Sequence[Any], bytearray], bool]
#: ``reader(data, pos) -> (values, next pos)``; raises ``LookupError`` to fall back
Reader = Callable[[Any, int], tuple[list[Any], int]]


def _kind(f: FieldSerializer) -> str:
    if type(f) is StringSerializer:
        return "string"
    if isinstance(f, _StructSerializer) and type(f).write is _StructSerializer.write:
        return "struct"
    return "call"


def compile_writer(fields: Sequence[FieldSerializer]) -> Writer:
    """An unrolled writer of records with these field serializers."""
    n = len(fields)
    env: dict[str, Any] = {"WV": write_varint}
    names = ", ".join(f"v{i}" for i in range(n)) + ("," if n == 1 else "")
    lines = ["def write(values, out):", "    start = len(out)", "    try:"]
    lines.append(f"        {names} = values" if n else "        pass")
    for byte in range((n + 7) >> 3):
        bits = " | ".join(
            f"((v{i} is None) << {i - byte * 8})" for i in range(byte * 8, min(n, byte * 8 + 8))
        )
        lines.append(f"        out.append({bits})")
    for i, f in enumerate(fields):
        kind = _kind(f)
        env[f"W{i}"] = f.write
        lines.append(f"        if v{i} is not None:")
        if kind == "struct":
            env[f"P{i}"] = type(f)._s.pack  # type: ignore[attr-defined]  # a _StructSerializer
            env[f"T{i}"] = f.fast_types  # type: ignore[attr-defined]  # a _StructSerializer
            lines.append(f"            if type(v{i}) in T{i}: out += P{i}(v{i})")
            lines.append(f"            else: W{i}(v{i}, out)")
        elif kind == "string":
            lines += [
                f"            if type(v{i}) is str:",
                f"                b = v{i}.encode('utf-8', 'surrogatepass')",
                "                if len(b) < 128: out.append(len(b))",
                "                else: WV(out, len(b))",
                "                out += b",
                f"            else: W{i}(v{i}, out)",
            ]
        else:
            lines.append(f"            W{i}(v{i}, out)")
    lines += [
        "    except Exception:  # the generic loop reports it",
        "        del out[start:]",
        "        return False",
        "    return True",
    ]
    exec("\n".join(lines), env)
    return env["write"]  # type: ignore[no-any-return]  # defined by the exec above


def compile_reader(fields: Sequence[FieldSerializer]) -> Reader:
    """An unrolled reader of records with these field serializers."""
    n = len(fields)
    env: dict[str, Any] = {"RV": read_varint}
    nb = (n + 7) >> 3
    lines = ["def read(data, pos):"]
    for byte in range(nb):
        lines.append(f"    b{byte} = data[pos + {byte}]")
    lines.append(f"    pos += {nb}")
    for i, f in enumerate(fields):
        kind = _kind(f)
        env[f"R{i}"] = f.read
        lines.append(f"    if b{i >> 3} & {1 << (i & 7)}: v{i} = None")
        lines.append("    else:")
        if kind == "struct":
            s: struct.Struct = type(f)._s  # type: ignore[attr-defined]  # a _StructSerializer
            env[f"U{i}"] = s.unpack_from
            lines.append(f"        v{i} = U{i}(data, pos)[0]; pos += {s.size}")
        elif kind == "string":
            lines += [
                "        m = data[pos]",
                "        if m < 128: pos += 1",
                "        else: m, pos = RV(data, pos)",
                "        end = pos + m",
                "        if end > len(data): raise IndexError('truncated string')",
                f"        v{i} = str(data[pos:end], 'utf-8', 'surrogatepass'); pos = end",
            ]
        else:
            lines.append(f"        v{i}, pos = R{i}(data, pos)")
    lines.append(f"    return [{', '.join(f'v{i}' for i in range(n))}], pos")
    exec("\n".join(lines), env)
    return env["read"]  # type: ignore[no-any-return]  # defined by the exec above


class Unrolled:
    """Mixin of record serializers holding generated code (not picklable): it is
    dropped when pickled and generated again from ``_nested`` when unpickled."""

    _nested: tuple[FieldSerializer, ...]
    #: attributes rebuilt by :meth:`_compile` instead of pickled
    _transient: tuple[str, ...] = ("_fast_write", "_fast_read", "_plans")

    def _compile(self) -> None:
        self._fast_write = compile_writer(self._nested)
        self._fast_read = compile_reader(self._nested)
        #: id(old serializer) -> (it, its migration plan): see composite.planned_values
        self._plans: dict[int, tuple[Any, Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in self._transient}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._compile()
