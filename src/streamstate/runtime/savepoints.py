"""Savepoint requests: asked for from any thread, taken by the epoch loop at a boundary.

``JobExecutor.trigger_savepoint`` (``JobClient.trigger_savepoint``/``stop_with_savepoint``)
creates the savepoint's directory and queues a request; the epoch loop takes it at the next
epoch boundary, runs that epoch with the savepoint's barrier (instead of a periodic
checkpoint's) and completes the request's future with the savepoint's path, or fails it
with the reason (the job goes on; no directory without ``_metadata`` is left behind).
"""

from __future__ import annotations

import concurrent.futures
import queue
from dataclasses import dataclass, field
from typing import Any

from streamstate.errors import CheckpointError

__all__ = ["SavepointRequest", "SavepointRequests"]


@dataclass
class SavepointRequest:
    target: Any  # runtime/checkpoint/savepoint.SavepointTarget
    future: concurrent.futures.Future[str] = field(default_factory=concurrent.futures.Future)


class SavepointRequests:
    """The queue of requested savepoints and the ones in flight (by checkpoint id)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[SavepointRequest] = queue.SimpleQueue()
        self._in_flight: dict[int, SavepointRequest] = {}
        self.closed = False

    def put(self, request: SavepointRequest) -> None:
        if self.closed:
            request.future.set_exception(
                CheckpointError("the job is not running: no savepoint can be taken")
            )
            return
        self._queue.put(request)

    def take(self) -> SavepointRequest | None:
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None

    def started(self, checkpoint_id: int, request: SavepointRequest) -> None:
        self._in_flight[checkpoint_id] = request

    def completed(self, checkpoint_id: int) -> SavepointRequest | None:
        request = self._in_flight.pop(checkpoint_id, None)
        if request is not None and not request.future.done():
            request.future.set_result(request.target.url)
        return request

    def failed(self, checkpoint_id: int, reason: str) -> None:
        request = self._in_flight.pop(checkpoint_id, None)
        if request is not None and not request.future.done():
            request.future.set_exception(
                CheckpointError(f"savepoint {checkpoint_id} failed: {reason}")
            )

    def close(self, reason: str) -> None:
        """The job ended: fail every request still waiting or in flight."""
        self.closed = True
        for cid in list(self._in_flight):
            self.failed(cid, reason)
        while (r := self.take()) is not None:
            if not r.future.done():
                r.future.set_exception(CheckpointError(f"no savepoint was taken: {reason}"))
