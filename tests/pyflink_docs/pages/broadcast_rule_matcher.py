"""Broadcast state read by a ``KeyedBroadcastProcessFunction`` (the API shape of the
broadcast state page, our words): rules ``(name, first, second)`` are broadcast into a
``MapStateDescriptor`` state; per key (an item's colour), items of a rule's ``first``
shape wait in keyed map state until an item of its ``second`` shape arrives, which
pairs with every waiting one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streamstate.common import Types
from streamstate.datastream import RuntimeContext
from streamstate.datastream.functions import KeyedBroadcastProcessFunction
from streamstate.datastream.state import MapStateDescriptor
from tests.pyflink_docs.broadcast_model import Item, Rule


def rules_descriptor(name: str) -> MapStateDescriptor:
    """Rule name -> rule (any Python object): the broadcast state's descriptor."""
    return MapStateDescriptor(name, Types.STRING(), Types.PICKLED_BYTE_ARRAY())


class PairByRule(KeyedBroadcastProcessFunction):
    """Reads the broadcast state named ``rules_state``; emits ``"<rule>: <waiting> -> <item>"``."""

    def __init__(self, rules_state: str) -> None:
        self.rules = rules_descriptor(rules_state)
        self.waiting_desc = MapStateDescriptor(
            "waiting-by-rule", Types.STRING(), Types.LIST(Types.PICKLED_BYTE_ARRAY())
        )
        self.waiting: Any = None

    def open(self, ctx: RuntimeContext) -> None:
        self.waiting = ctx.get_map_state(self.waiting_desc)

    def process_broadcast_element(
        self, value: Rule, ctx: KeyedBroadcastProcessFunction.Context
    ) -> None:
        ctx.get_broadcast_state(self.rules).put(value.name, value)

    def process_element(
        self, value: Item, ctx: KeyedBroadcastProcessFunction.ReadOnlyContext
    ) -> Iterator[str]:
        for name, rule in ctx.get_broadcast_state(self.rules).items():
            queue = list(self.waiting.get(name) or [])
            if value.get_shape() == rule.second:
                yield from (f"{name}: {earlier} -> {value}" for earlier in queue)
                queue = []
            if value.get_shape() == rule.first:
                queue.append(value)
            if queue:
                self.waiting.put(name, queue)
            else:
                self.waiting.remove(name)
