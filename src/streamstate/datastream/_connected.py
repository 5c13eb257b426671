"""``connect``: ConnectedStreams, BroadcastStream and BroadcastConnectedStream.

Re-exported by ``streamstate.datastream.data_stream`` (PyFlink keeps them there).
A two-input operator always starts its own stage; its first input keeps its
partitioning (forward, rebalance or key_by), its second input too, or is
broadcast (every record to every subtask).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from streamstate.errors import ConfigurationError
from streamstate.runtime.graph import Partitioning, Transformation, TransformationKind
from streamstate.runtime.operators import broadcast, co

if TYPE_CHECKING:
    from streamstate.datastream.data_stream import DataStream

__all__ = ["BroadcastConnectedStream", "BroadcastStream", "ConnectedStreams"]


def _make(cls: type, *args: Any) -> Any:
    return cls(*args)


def _two_input(
    first: DataStream, second_t: Transformation, name: str, factory: Any, keyed: bool
) -> Any:
    t = Transformation(
        TransformationKind.TWO_INPUT, name, [first._t, second_t], payload=factory, keyed=keyed
    )
    return first._derive(t)


class ConnectedStreams:
    """Two streams of possibly different types connected into one two-input operator.

    When both streams are keyed (``KeyedStream``s, or after ``key_by`` here), the
    operator's keyed state is shared by both inputs.
    """

    def __init__(self, stream1: DataStream, stream2: DataStream) -> None:
        if stream1._env is not stream2._env:
            raise ConfigurationError("connect() needs streams of the same environment")
        self.stream1 = stream1
        self.stream2 = stream2

    def _is_keyed(self) -> bool:
        k1, k2 = self.stream1._is_keyed_stream, self.stream2._is_keyed_stream
        if k1 != k2:
            raise ConfigurationError(
                "connect() of a keyed and a non-keyed stream: key_by both streams (or neither), "
                "or use broadcast() for the second stream"
            )
        return k1

    def key_by(
        self, key_selector1: Any, key_selector2: Any, key_type: Any = None
    ) -> ConnectedStreams:
        """Key both inputs; records with equal keys meet in the same subtask and state."""
        return ConnectedStreams(
            self.stream1.key_by(key_selector1, key_type),
            self.stream2.key_by(key_selector2, key_type),
        )

    def _apply(self, name: str, plain: type, keyed_cls: type, func: Any) -> DataStream:
        keyed = self._is_keyed()
        cls = keyed_cls if keyed else plain
        return _two_input(self.stream1, self.stream2._t, name, partial(_make, cls, func), keyed)

    def map(self, func: Any, output_type: Any = None) -> DataStream:
        """A ``CoMapFunction``: ``map1`` for the first input, ``map2`` for the second."""
        return self._apply("Co-Map", co.CoMapOperator, co.KeyedCoMapOperator, func)

    def flat_map(self, func: Any, output_type: Any = None) -> DataStream:
        """A ``CoFlatMapFunction``: ``flat_map1`` / ``flat_map2``."""
        return self._apply("Co-Flat Map", co.CoFlatMapOperator, co.KeyedCoFlatMapOperator, func)

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        """A ``CoProcessFunction``, or a ``KeyedCoProcessFunction`` on keyed inputs."""
        from streamstate.datastream.functions import KeyedCoProcessFunction

        keyed = self._is_keyed()
        if isinstance(func, KeyedCoProcessFunction) and not keyed:
            raise ConfigurationError(
                "a KeyedCoProcessFunction needs keyed inputs: connect two KeyedStreams or call "
                "key_by(key_selector1, key_selector2) on the ConnectedStreams"
            )
        cls = co.KeyedCoProcessOperator if keyed else co.CoProcessOperator
        name = "Keyed Co-Process" if keyed else "Co-Process"
        return _two_input(self.stream1, self.stream2._t, name, partial(_make, cls, func), keyed)


class BroadcastStream:
    """A stream broadcast to every subtask of the operator it is connected to.

    Carries the ``MapStateDescriptor``s of the broadcast state the connected
    operator keeps (``DataStream.broadcast(descriptor, ...)``).
    """

    def __init__(
        self, input_stream: DataStream, broadcast_state_descriptors: tuple[Any, ...]
    ) -> None:
        from streamstate.datastream.state import MapStateDescriptor

        for d in broadcast_state_descriptors:
            if not isinstance(d, MapStateDescriptor):
                raise ConfigurationError(
                    f"broadcast() takes MapStateDescriptors for the broadcast state, got "
                    f"{type(d).__name__}"
                )
        names = [d.name for d in broadcast_state_descriptors]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"broadcast() got two descriptors with one name: {names}")
        self._stream = input_stream
        self._env = input_stream._env
        self.broadcast_state_descriptors = tuple(broadcast_state_descriptors)
        self._t = Transformation(
            TransformationKind.PARTITION,
            "Broadcast",
            [input_stream._t],
            partitioning=Partitioning.BROADCAST,
        )


class BroadcastConnectedStream:
    """A (keyed or non-keyed) stream connected with a :class:`BroadcastStream`."""

    def __init__(
        self,
        non_broadcast_stream: DataStream,
        broadcast_stream: BroadcastStream,
        broadcast_state_descriptors: Any = None,
    ) -> None:
        non_broadcast = non_broadcast_stream
        if non_broadcast._env is not broadcast_stream._env:
            raise ConfigurationError("connect() needs streams of the same environment")
        self.non_broadcast_stream = non_broadcast
        self.broadcast_stream = broadcast_stream
        self.broadcast_state_descriptors = broadcast_stream.broadcast_state_descriptors

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        """A ``KeyedBroadcastProcessFunction`` (keyed stream) or ``BroadcastProcessFunction``."""
        from streamstate.datastream.functions import (
            BroadcastProcessFunction,
            KeyedBroadcastProcessFunction,
        )

        keyed = self.non_broadcast_stream._is_keyed_stream
        if keyed and isinstance(func, BroadcastProcessFunction):
            raise ConfigurationError(
                "a keyed stream connected with a broadcast stream needs a "
                "KeyedBroadcastProcessFunction, got a BroadcastProcessFunction"
            )
        if not keyed and isinstance(func, KeyedBroadcastProcessFunction):
            raise ConfigurationError(
                "a KeyedBroadcastProcessFunction needs a keyed stream: key_by() the "
                "non-broadcast stream before connect(), or use a BroadcastProcessFunction"
            )
        cls = (
            broadcast.KeyedBroadcastProcessOperator if keyed else broadcast.BroadcastProcessOperator
        )
        factory = partial(_make, cls, func, self.broadcast_state_descriptors)
        name = "Keyed Broadcast Process" if keyed else "Broadcast Process"
        return _two_input(self.non_broadcast_stream, self.broadcast_stream._t, name, factory, keyed)
