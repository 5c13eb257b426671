"""The ``streamstate`` command line (``streamstate run | checkpoints | describe | state``).

See :mod:`streamstate.cli.main`.
"""

from streamstate.cli.main import main

__all__ = ["main"]
