"""A side output from a ``ProcessFunction`` (the side output page's shape, our words):
the function yields a value for the main output and ``(tag, value)`` for the side one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streamstate.common import Types
from streamstate.datastream import OutputTag, ProcessFunction

odd_labels = OutputTag("odd-labels", Types.STRING())


class LabelOdds(ProcessFunction):
    """Every number to the main output; each odd one also, labelled, to ``odd_labels``."""

    def process_element(self, value: int, ctx: ProcessFunction.Context) -> Iterator[Any]:
        yield value
        if value % 2:
            yield odd_labels, f"odd:{value}"
