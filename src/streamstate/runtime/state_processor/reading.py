"""Reading state in a task: one key-group range of an operator, or one subtask's operator
state. Called by the Spark tasks of ``streamstate.spark.state_processor`` (and usable
without Spark: every function here is a plain generator).

A keyed range is restored into a fresh keyed backend that owns exactly that range (the
heap backend reads only its key groups' sections of each canonical snapshot; RocksDB
opens native handles through its restore path: adopted as is when the range is the
original subtask's, else its key groups are copied), the reader function is opened
against it, and the records it emits are yielded. Every state file opened is verified
(size, CRC32, SHA-256) before use. The backend is disposed when the generator ends or
is closed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

from streamstate.errors import (
    ConfigurationError,
    CorruptCheckpointError,
    StateMigrationError,
)
from streamstate.runtime.operators.base import close_function, open_function
from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.operator import OperatorStateMode, decode_operator_snapshot
from streamstate.runtime.state_processor.contexts import (
    KeyedReaderContext,
    ListCollector,
    RecordingRuntimeContext,
    TimerStateView,
    WindowReaderContext,
    collect_outputs,
)
from streamstate.runtime.state_processor.plan import KeyedReadSpec
from streamstate.runtime.windowing.operator import TIMER_SERVICE_NAME as WINDOW_TIMERS
from streamstate.runtime.windowing.operator import WINDOW_STATE_NAME

__all__ = [
    "WINDOW_STATE_NAME",
    "WindowReadSpec",
    "read_keyed_range",
    "read_operator_subtask",
    "read_window_range",
]

_TIMER_STATE_PREFIX = "_timer_state/"


@dataclass(frozen=True)
class WindowReadSpec:
    """How to read a window operator's contents: the descriptor of ``window-contents`` (a
    list, reducing or aggregating state, matching how the job built the window)."""

    descriptor: Any

    @property
    def is_list(self) -> bool:
        return bool(self.descriptor.kind == "list")


class _Restored:
    """A backend restored with one task's key-group range (a context manager)."""

    def __init__(self, spec: KeyedReadSpec, index: int) -> None:
        handles = spec.handles_for(index)
        self.spec = spec
        self.backend = spec.backend_for(handles).create(
            spec.uid, spec.ranges[index], spec.max_parallelism, spec.key_serializer
        )
        try:
            self.backend.restore(handles)
        except (CorruptCheckpointError, StateMigrationError) as e:
            self.backend.dispose()
            raise type(e)(f"{spec.where}: {e}") from e
        except BaseException:
            self.backend.dispose()
            raise
        self.context = RecordingRuntimeContext(
            spec.uid, index, len(spec.ranges), spec.max_parallelism, 0, {}, self.backend
        )

    def __enter__(self) -> _Restored:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.backend.dispose()

    def check_registered(self) -> list[str]:
        """The non-timer states the function registered; each must exist in the savepoint."""
        names = [n for n in self.context.registered if not n.startswith(_TIMER_STATE_PREFIX)]
        unknown = [n for n in names if n not in self.spec.states]
        if unknown:
            known = ", ".join(f"{n!r} ({k})" for n, k in sorted(self.spec.states.items()))
            raise ConfigurationError(
                f"{self.spec.where} has no keyed state named {', '.join(map(repr, unknown))}; "
                f"its keyed states: {known or 'none'}"
            )
        return names

    def set_key(self, key: Any) -> None:
        self.backend.set_current_key(key, self.backend.key_group_of(key))


def read_keyed_range(spec: KeyedReadSpec, index: int, function: Any) -> Iterator[Any]:
    """The records ``function`` (a ``KeyedStateReaderFunction``) emits for every key of
    range ``index`` that has a value in a state it registered in ``open()``."""
    with _Restored(spec, index) as r:
        open_function(function, r.context)
        names = r.check_registered()
        ctx = KeyedReaderContext(TimerStateView(r.backend, "user-timers"))
        out = ListCollector()
        keys = dict.fromkeys(chain.from_iterable(r.backend.get_keys(n) for n in names))
        for key in keys:
            r.set_key(key)
            collect_outputs(function, function.read_key(key, ctx, out), out)
            if out.records:
                yield from out.drain()
        close_function(function)


def read_window_range(
    spec: KeyedReadSpec, index: int, window: WindowReadSpec, function: Any
) -> Iterator[Any]:
    """The records ``function`` (a ``WindowReaderFunction``) emits for every (key, window)
    of range ``index`` with contents."""
    with _Restored(spec, index) as r:
        contents = r.backend.get_partitioned_state(window.descriptor)
        open_function(function, r.context)
        r.check_registered()
        ctx = WindowReaderContext(r.context, TimerStateView(r.backend, WINDOW_TIMERS))
        out = ListCollector()
        for key, ns in r.backend.get_keys_and_namespaces(WINDOW_STATE_NAME):
            if ns is VOID_NAMESPACE:
                continue
            r.set_key(key)
            contents.set_current_namespace(ns)
            value = contents.get()
            elements = list(value) if window.is_list else [value]
            if not elements or (not window.is_list and value is None):
                continue
            returned = function.read_window(key, ctx.at(ns), elements, out)
            collect_outputs(function, returned, out)
            if out.records:
                yield from out.drain()
        close_function(function)


def read_operator_subtask(
    handle: Any, name: str, mode: OperatorStateMode, where: str
) -> Iterator[Any]:
    """Operator state ``name`` of one subtask's snapshot: its elements (list and union list
    state) or its ``(key, value)`` entries (broadcast state)."""
    what = f"{where}, operator state {name!r}"
    snapshot = decode_operator_snapshot(handle.read(), what)
    entry = snapshot.get(name)
    if entry is None:
        return
    if entry[0] is not mode:
        raise ConfigurationError(f"{what} is {entry[0].value} state, not {mode.value} state")
    if mode is OperatorStateMode.BROADCAST:
        yield from entry[1].items()
    else:
        yield from entry[1]
