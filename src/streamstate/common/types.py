"""``Row`` and ``RowKind``, as ``pyflink.common.types``."""

from streamstate.common.row import Row, RowKind

__all__ = ["Row", "RowKind"]
