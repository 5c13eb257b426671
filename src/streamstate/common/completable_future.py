"""``CompletableFuture``, as ``pyflink.common.completable_future``."""

from streamstate.common.savepoint import CompletableFuture

__all__ = ["CompletableFuture"]
