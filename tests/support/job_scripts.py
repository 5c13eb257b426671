"""The README's keyed count as a job script, run as a user runs it: ``streamstate run``.

Tests and benchmarks that start a job script in another process build it from
``COUNT_PER_KEY`` (the imports and the ``CountPerKey`` function) plus their own lines,
write it with :func:`job_script` and run the CLI with :func:`cli_env`.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

#: the ``streamstate`` command of the interpreter running the tests
CLI = str(Path(sys.executable).parent / "streamstate")

#: imports and the keyed function of the README's job: ``(word, times seen so far)``
COUNT_PER_KEY = """
from streamstate.common import Types
from streamstate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from streamstate.datastream.state import ValueStateDescriptor


class CountPerKey(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        yield value, self.count.value()

"""


def job_script(directory: Path, text: str, name: str = "job.py") -> Path:
    """``text`` (dedented) written as ``directory/name``: a job script to run."""
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def cli_env(**extra: str) -> dict[str, str]:
    """This process's environment for a CLI subprocess, without a developer's
    ``STREAMSTATE_CONF`` (a job must not pick up the shell's configuration), plus ``extra``."""
    env = dict(os.environ)
    env.pop("STREAMSTATE_CONF", None)
    env.update(extra)
    return env


def retained_checkpoint_options(checkpoint_dir: Path | str) -> list[str]:
    """``streamstate run`` options: the in-process runner, a checkpoint every epoch into
    ``checkpoint_dir``, retained after the job (for a test that restores it)."""
    return [
        "-D",
        "execution.runner=local",
        "-D",
        "execution.checkpointing.interval=1",
        "-D",
        f"execution.checkpointing.dir={checkpoint_dir}",
        "-D",
        "execution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION",
    ]
