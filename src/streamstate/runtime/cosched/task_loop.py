"""What a co-scheduled task runs, from its start to the end of its job.

Task ``index`` connects to the driver's coordinator (``coordinator.py``), says where its
peers reach it, receives the launch (every task's address, the stage specs, the plan's
shape), opens its channels (``channels.py``) and then serves the coordinator:

* ``("epoch", epoch_specs)``: run subtask ``index`` of every stage that has one, in the
  plan's order (stage ids increase along edges), each once its inputs ended; payloads for
  its own subtasks stay in the process, the others go to their task; answer ``("done",
  acks)`` with the leaf stages' acks (pickled, as the other runners collect them);
* ``("stop",)``: what the process kept of the job goes (``job_end``), the task returns.

A failure answers ``("failed", traceback, consequence)`` and re-raises, which fails the Spark stage
(and with it every task of the launch: the driver restarts them all from the last
checkpoint). A coordinator that goes away ends the task.
"""

from __future__ import annotations

import traceback
from typing import Any

from streamstate.errors import TaskChannelError
from streamstate.runtime.cosched import links
from streamstate.runtime.cosched.channels import Channels, PeerClosedError
from streamstate.runtime.cosched.links import StageShape
from streamstate.runtime.gc_pause import gc_paused
from streamstate.runtime.job_end import end_job
from streamstate.runtime.protocol import DRIVER, EpochSpec
from streamstate.runtime.spent import release, release_after_reply, stop_keeping
from streamstate.runtime.task import run_stage_partition
from streamstate.runtime.worker.host import HOST

__all__ = ["run_task"]

#: how long a task waits to reach the coordinator (s)
CONNECT_TIMEOUT_S = 60.0


def run_task(index: int, coordinator: str, secret: str, executor: str | None) -> None:
    """Serve the coordinator at ``coordinator`` as task ``index`` until it says stop."""
    link, local_host = links.connect(coordinator, secret, CONNECT_TIMEOUT_S)
    channels: Channels | None = None
    release_after_reply()
    try:
        listener = links.listen(local_host)
        links.send(
            link,
            (
                "hello",
                links.COSCHED_VERSION,
                index,
                links.address_of(listener, local_host),
                HOST.worker_id,
            ),
        )
        try:
            kind, addresses, blobs, meta, shapes = links.recv(link)
        except EOFError:
            listener.close()
            return  # the launch was given up before it began
        if kind != "start":
            raise TaskChannelError(f"task {index} expected the launch, got {kind!r}")
        channels = Channels(index, addresses, listener, secret)
        job_id = next(iter(blobs.values()))[0]
        while True:
            try:
                message = links.recv(link)
            except EOFError:
                return  # the driver went away: nothing else will ask for this task
            if message[0] == "stop":
                end_job(job_id)
                links.send(link, ("stopped",))
                return
            # The collector stays off through the epoch and its answer: turned on while the
            # epoch's records are alive, its first run would traverse all of them. They
            # are freed after the answer (runtime/spent.py), off the driver's wait.
            with gc_paused():
                acks = _run_epoch(index, message[1], channels, blobs, meta, shapes, executor)
                links.send(link, ("done", acks))
                release()
    except BaseException as e:
        try:
            # a peer's closed channel is a consequence: the coordinator looks for the cause
            links.send(link, ("failed", traceback.format_exc(), isinstance(e, PeerClosedError)))
        except OSError:
            pass  # the coordinator is gone: Spark reports the failure
        raise
    finally:
        stop_keeping()
        if channels is not None:
            channels.close()
        link.close()


def _run_epoch(
    index: int,
    epoch_specs: dict[int, EpochSpec],
    channels: Channels,
    blobs: dict[int, Any],
    meta: dict[int, tuple[int, int]],
    shapes: list[StageShape],
    executor: str | None,
) -> list[bytes]:
    parallelism = {s.id: s.parallelism for s in shapes}
    channels.begin_epoch(next(iter(epoch_specs.values())).epoch)
    local: dict[int, list[Any]] = {}
    acks: list[bytes] = []
    for shape in shapes:
        if index >= shape.parallelism:
            continue  # this task runs no subtask of the stage
        for up in shape.upstream:
            channels.wait_for(up, set(range(parallelism[up])) - {index})
        payloads = local.pop(shape.id, []) + channels.payloads.pop(shape.id, [])
        items = [(index, payload) for payload in payloads]
        for dest, part, payload in run_stage_partition(
            blobs[shape.id], meta, epoch_specs[shape.id], index, items, executor
        ):
            if dest == DRIVER:
                acks.append(payload[1])
            elif part == index:
                local.setdefault(dest, []).append(payload)
            else:
                channels.send_payload(part, dest, payload)
        readers = {j for down in shape.downstream for j in range(parallelism[down]) if j != index}
        channels.end_stage(shape.id, readers)
    return acks
