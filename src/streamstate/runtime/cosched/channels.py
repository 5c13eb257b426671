"""A co-scheduled task's channels: one connection to and one from every peer task.

Task ``i`` sends the records its subtasks produce for subtask ``j`` of a downstream stage
to task ``j`` (which runs subtask ``j`` of every stage). Frames on a channel:

* ``("D", epoch, dest_stage, payload)``: one shuffle payload (a pickled chunk, exactly what
  Spark's shuffle would have moved) for the receiver's subtask of ``dest_stage``;
* ``("E", epoch, stage)``: the sender's subtask of ``stage`` finished the epoch: every
  payload it sent this receiver for the epoch came before (Flink's end-of-input barrier on
  a channel; frames on one connection keep their order).

Every inbound connection has a network thread that moves frames into one queue as they
arrive, so a sender never waits for a receiver busy with its own subtask (two tasks sending
to each other cannot block each other): an epoch's input is held in the receiver's memory
until its subtask runs, as Spark's shuffle would have held it on the executor (without
spilling to disk: ``execution.epoch.max-records`` bounds it). The receiver sorts its input
for a deterministic order (``runtime/shuffle.py``), so arrival order does not matter.
"""

from __future__ import annotations

import pickle
import queue
import socket
import threading
from collections import defaultdict
from multiprocessing.connection import Connection
from typing import Any

from streamstate.errors import TaskChannelError
from streamstate.runtime.cosched import links

__all__ = ["Channels", "PeerClosedError"]

#: how long opening the channels may take before the task gives up (s)
OPEN_TIMEOUT_S = 60.0


class PeerClosedError(TaskChannelError):
    """A peer's channel closed mid-epoch: a consequence of the peer's own failure, which
    the coordinator reports in its place."""


class Channels:
    """Task ``index``'s channels to and from every other task of ``addresses``."""

    def __init__(self, index: int, addresses: list[str], listener: socket.socket, secret: str):
        self.index = index
        self.out: dict[int, Connection] = {}
        self._inbound: dict[int, Connection] = {}
        #: (peer, frame bytes, or None when the peer's channel closed)
        self._frames: queue.SimpleQueue[tuple[int, bytes | None]] = queue.SimpleQueue()
        #: frames of the epoch being run: payloads by destination stage, ended stages by peer
        self.payloads: dict[int, list[Any]] = defaultdict(list)
        self.ended: dict[int, set[int]] = defaultdict(set)
        self._epoch = -1
        peers = [j for j in range(len(addresses)) if j != index]
        # accepting runs beside connecting: two tasks connecting to each other at once would
        # otherwise each wait in its handshake for the other to accept
        accepted: list[BaseException] = []
        acceptor = threading.Thread(
            target=self._accept_all,
            args=(listener, secret, len(peers), accepted),
            name=f"streamstate-channels-accept-{index}",
            daemon=True,
        )
        acceptor.start()
        for j in peers:
            conn, _ = links.connect(addresses[j], secret, OPEN_TIMEOUT_S)
            links.send(conn, ("task", index))
            self.out[j] = conn
        acceptor.join(OPEN_TIMEOUT_S)
        if acceptor.is_alive() or accepted:
            self.close()
            cause = accepted[0] if accepted else None
            raise TaskChannelError(
                f"task {index} could not open its channels from {len(peers)} peer tasks"
                + (f": {cause}" if cause is not None else f" within {OPEN_TIMEOUT_S:.0f} s")
            ) from cause

    def _accept_all(
        self, listener: socket.socket, secret: str, count: int, failed: list[BaseException]
    ) -> None:
        try:
            listener.settimeout(OPEN_TIMEOUT_S)
            for _ in range(count):
                conn = links.accept(listener, secret)
                kind, peer = links.recv(conn)
                if kind != "task" or peer in self._inbound:
                    conn.close()
                    raise TaskChannelError(f"a channel opened as {kind!r} {peer!r}")
                self._inbound[peer] = conn
                # frames stay bytes here: the consuming thread unpickles them
                links.start_reader(
                    conn, self._frames, peer, f"streamstate-channel-{peer}-{self.index}"
                )
        except BaseException as e:  # noqa: BLE001 - the opening thread reports it
            failed.append(e)
        finally:
            listener.close()

    def begin_epoch(self, epoch: int) -> None:
        """Frames of ``epoch`` are expected from now on (the last epoch's are all in)."""
        self._epoch = epoch
        self.payloads.clear()
        self.ended.clear()

    def send_payload(self, peer: int, dest_stage: int, payload: Any) -> None:
        links.send(self.out[peer], ("D", self._epoch, dest_stage, payload))

    def end_stage(self, stage: int, peers: set[int]) -> None:
        """This task's subtask of ``stage`` finished the epoch: tell ``peers``."""
        for j in peers:
            links.send(self.out[j], ("E", self._epoch, stage))

    def wait_for(self, stage: int, peers: set[int]) -> None:
        """Receive until every task of ``peers`` ended ``stage`` in this epoch."""
        ended = self.ended[stage]
        while not peers <= ended:
            peer, frame = self._frames.get()
            if frame is None:
                raise PeerClosedError(
                    f"the channel from task {peer} to task {self.index} closed in epoch "
                    f"{self._epoch} (task {peer} failed or was stopped)"
                )
            message = pickle.loads(frame)
            epoch = message[1]
            if epoch != self._epoch:
                raise TaskChannelError(
                    f"task {self.index} got a frame of epoch {epoch} from task {peer} in "
                    f"epoch {self._epoch}"
                )
            if message[0] == "D":
                self.payloads[message[2]].append(message[3])
            else:
                self.ended[message[2]].add(peer)

    def close(self) -> None:
        for conn in [*self.out.values(), *self._inbound.values()]:
            try:
                conn.close()
            except OSError:
                pass
