"""The state backend chosen by configuration key (the state backends page's Python
example, in our words): ``state.backend.type`` in the ``Configuration`` given to
``get_execution_environment``."""

from __future__ import annotations

from streamstate.common import Configuration
from streamstate.datastream import StreamExecutionEnvironment


def environment_with_backend(backend: str) -> StreamExecutionEnvironment:
    settings = Configuration()
    settings.set_string("state.backend.type", backend)
    return StreamExecutionEnvironment.get_execution_environment(settings)
