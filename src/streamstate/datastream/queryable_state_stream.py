"""``KeyedStream.as_queryable_state``: a sink keeping each key's latest (or reduced) record
in keyed state queryable under a name (Flink's ``QueryableStateStream``)."""

from __future__ import annotations

from typing import Any

from streamstate.api.functions import KeyedProcessFunction
from streamstate.api.state import ReducingStateDescriptor, StateDescriptor, ValueStateDescriptor
from streamstate.errors import ConfigurationError

__all__ = ["QueryableStateStream"]


class _QueryableStateFunction(KeyedProcessFunction):
    """ValueState: ``update(record)``; ReducingState: ``add(record)``. Emits nothing."""

    def __init__(self, descriptor: StateDescriptor) -> None:
        self.descriptor = descriptor
        self.state: Any = None

    def open(self, runtime_context: Any) -> None:
        if self.descriptor.kind == "value":
            self.state = runtime_context.get_state(self.descriptor)
        else:
            self.state = runtime_context.get_reducing_state(self.descriptor)

    def process_element(self, value: Any, ctx: Any) -> None:
        if self.descriptor.kind == "value":
            self.state.update(value)
        else:
            self.state.add(value)


class QueryableStateStream:
    """What ``as_queryable_state`` returns: the name, the key type and the descriptor to
    query with, and the sink it ends in (it cannot be transformed further, as in Flink)."""

    def __init__(
        self, queryable_state_name: str, key_type: Any, descriptor: StateDescriptor, sink: Any
    ) -> None:
        self.queryable_state_name = queryable_state_name
        self.key_type = key_type
        self.descriptor = descriptor
        self.sink = sink

    def get_queryable_state_name(self) -> str:
        return self.queryable_state_name

    def get_key_type(self) -> Any:
        return self.key_type

    def get_state_descriptor(self) -> StateDescriptor:
        return self.descriptor

    def uid(self, uid: str) -> QueryableStateStream:
        """Set the uid of the operator holding the state (keep it stable across versions)."""
        self._operator.uid(uid)
        return self

    _operator: Any = None


def as_queryable_state(
    keyed_stream: Any, queryable_state_name: str, state_descriptor: StateDescriptor | None = None
) -> QueryableStateStream:
    """See :meth:`KeyedStream.as_queryable_state`."""
    if not isinstance(queryable_state_name, str) or not queryable_state_name:
        raise ConfigurationError(
            f"a queryable state name must be a non-empty str, got {queryable_state_name!r}"
        )
    if state_descriptor is None:
        state_descriptor = ValueStateDescriptor(queryable_state_name)
    if not isinstance(state_descriptor, ValueStateDescriptor | ReducingStateDescriptor):
        raise ConfigurationError(
            f"as_queryable_state() takes a ValueStateDescriptor or a ReducingStateDescriptor "
            f"(as in Flink: a queryable list would grow without bound), got "
            f"{type(state_descriptor).__name__}; use descriptor.set_queryable(name) in a "
            f"KeyedProcessFunction for other kinds"
        )
    state_descriptor.set_queryable(queryable_state_name)
    from streamstate.datastream.connectors.collect import DiscardingSink

    op = keyed_stream.process(_QueryableStateFunction(state_descriptor)).name(
        f"Queryable({queryable_state_name})"
    )
    sink = op.sink_to(DiscardingSink())
    stream = QueryableStateStream(
        queryable_state_name, keyed_stream.get_key_type(), state_descriptor, sink
    )
    stream._operator = op
    return stream
