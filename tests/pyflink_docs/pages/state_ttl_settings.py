"""A state time-to-live built with ``StateTtlConfig.new_builder`` and attached to a
descriptor (the calls of the state page's TTL section, our words; the page passes
Java's ``Duration.ofSeconds``, PyFlink's own spelling is ``Duration.of_seconds``)."""

from __future__ import annotations

from streamstate.common import Duration
from streamstate.common.typeinfo import Types
from streamstate.datastream.state import StateTtlConfig, ValueStateDescriptor


def session_token_descriptor(seconds: int) -> ValueStateDescriptor:
    """A string value state that expires ``seconds`` after it was created or written and
    is never read once expired."""
    expiry = (
        StateTtlConfig.new_builder(Duration.of_seconds(seconds))
        .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
        .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
        .build()
    )
    descriptor = ValueStateDescriptor("session-token", Types.STRING())
    descriptor.enable_time_to_live(expiry)
    return descriptor
