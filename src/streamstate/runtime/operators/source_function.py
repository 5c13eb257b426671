"""Runs a user ``SourceFunction`` (``run(ctx)`` / ``cancel()``) sliced into epochs.

``run(ctx)`` executes in a daemon thread of the worker that runs the source
subtask. The thread lives as long as the subtask's instance (across epochs in
the same Python worker). Each epoch, ``read_epoch`` lets the thread run until
it collected ``budget`` records, or ``max_wait_ms`` passed, or ``run`` returned;
then it **cuts** the epoch at a *safe point*: a moment at which the source
thread does not hold the checkpoint lock. The thread is parked there until the
next epoch, so the records of the epoch and the operator state snapshotted at
its end (``snapshot_state`` runs while the thread is parked) describe the same
cut. That is ``get_checkpoint_lock()``'s contract: an emit and the state update
made under the lock land in the same epoch and the same snapshot.

Safe points are reached by the source thread itself: when it releases the
lock (outermost), when it acquires it, and in ``collect`` outside the lock. If
the thread does neither (it blocks in I/O outside the lock) the task thread
takes the lock itself after ``max_wait_ms``: the source then parks at its next
safe point. A source that holds the lock forever stalls the epoch (as it stalls
checkpoints in Flink).

When the subtask's instance is rebuilt elsewhere (another worker, a restart),
the new instance restores the source function's operator state (e.g. the
``CounterSource`` offset) and starts a new thread from there; the old instance
is cancelled when its worker closes it. A source without operator state that is
rebuilt without a failure (it moved) fails the job (``check_resumable``) rather
than start ``run()`` again and replay silently.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from streamstate.api.checkpointing import CheckpointedFunction, ListCheckpointed, SourceFunction
from streamstate.errors import ConfigurationError, SourceNotResumableError
from streamstate.runtime.operators.base import StreamOperator, close_function, open_function

__all__ = ["SourceFunctionOperator"]


class _Closing(BaseException):
    """Unwinds ``run()`` when the instance is discarded (not an Exception: user code that
    catches Exception must not swallow it)."""


class _CheckpointLock:
    """Re-entrant lock; releasing/acquiring it in the source thread are safe points."""

    def __init__(self, runner: _Runner) -> None:
        self._lock = threading.RLock()
        self._runner = runner
        self._depth = 0  # the source thread's nesting depth

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        r = self._runner
        if not r.in_source_thread():
            return self._lock.acquire(blocking, timeout)
        if self._depth > 0:
            self._lock.acquire()
            self._depth += 1
            return True
        while True:
            r.safe_point()
            if not self._lock.acquire(blocking, timeout):
                return False
            with r.cv:
                open_epoch = r.running and not r.closing
            if open_epoch:
                break
            # the epoch was cut while we waited for the lock: park first
            self._lock.release()
        self._depth += 1
        return True

    def release(self) -> None:
        r = self._runner
        if r.in_source_thread():
            self._depth -= 1
            self._lock.release()
            if self._depth == 0:
                r.safe_point()
        else:
            self._lock.release()

    def held_by_source(self) -> bool:
        return self._depth > 0

    def __enter__(self) -> _CheckpointLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


class _SourceContext(SourceFunction.SourceContext):
    def __init__(self, runner: _Runner) -> None:
        self._runner = runner

    def collect(self, element: Any) -> None:
        self._runner.collect(element, None)

    def collect_with_timestamp(self, element: Any, timestamp: int) -> None:
        self._runner.collect(element, int(timestamp))

    def emit_watermark(self, watermark: Any) -> None:
        raise ConfigurationError(
            "SourceContext.emit_watermark() is not supported: use "
            "assign_timestamps_and_watermarks(WatermarkStrategy...) after add_source()"
        )

    def mark_as_temporarily_idle(self) -> None:
        raise ConfigurationError(
            "SourceContext.mark_as_temporarily_idle() is not supported: use "
            "WatermarkStrategy.with_idleness() after add_source()"
        )

    def get_checkpoint_lock(self) -> Any:
        return self._runner.lock

    def close(self) -> None:
        pass


class _Runner:
    """The thread running ``fn.run(ctx)`` and the epoch hand-over (see the module doc)."""

    def __init__(self, fn: Any, name: str) -> None:
        self.fn = fn
        self.name = name
        self.cv = threading.Condition()
        self.lock = _CheckpointLock(self)
        self.ctx = _SourceContext(self)
        self.thread: threading.Thread | None = None
        self.running = False  # the source may emit (an epoch is open)
        self.parks = 0  # how often the source thread parked at a safe point
        self.done = False
        self.closing = False
        self.error: BaseException | None = None
        self.records: list[Any] = []
        self.timestamps: list[Any] = []
        self.any_timestamp = False
        self.budget = 0

    def in_source_thread(self) -> bool:
        """Whether the caller is the thread running ``run()``: told by the thread object,
        not ``threading.get_ident()``, which a thread started after ``run()`` returned
        may get again (a subtask host serves each epoch of a non-reused Spark worker on a
        new thread: taken for the source, the task thread parked for ever, issue 27)."""
        return self.thread is not None and threading.current_thread() is self.thread

    # -- source thread ---------------------------------------------------------------
    def _main(self) -> None:
        try:
            self.safe_point()  # wait for the first epoch
            self.fn.run(self.ctx)
        except _Closing:
            pass
        except BaseException as e:  # noqa: BLE001 - handed to the task thread, which raises it
            with self.cv:
                self.error = e
        finally:
            with self.cv:
                self.done = True
                self.cv.notify_all()

    def safe_point(self) -> None:
        """Called by the source thread when it does not hold the lock: park if the epoch is
        full or cut."""
        with self.cv:
            if len(self.records) >= self.budget:
                self.running = False
            if not self.running and not self.closing:
                self.parks += 1
                self.cv.notify_all()
            while not self.running and not self.closing:
                self.cv.wait()
            if self.closing:
                raise _Closing()

    def collect(self, element: Any, timestamp: int | None) -> None:
        src = self.in_source_thread()
        if src and not self.lock.held_by_source():
            self.safe_point()
        with self.cv:
            if self.closing:
                raise _Closing()
            self.records.append(element)
            self.timestamps.append(timestamp)
            if timestamp is not None:
                self.any_timestamp = True

    # -- task thread -----------------------------------------------------------------
    def read_epoch(
        self, budget: int, max_wait_s: float
    ) -> tuple[list[Any], list[Any] | None, bool]:
        """Run the source for one epoch: ``(records, timestamps or None, finished)``."""
        if self.thread is None:
            self.thread = threading.Thread(
                target=self._main, name=f"streamstate source {self.name}", daemon=True
            )
            self.thread.start()
        deadline = time.monotonic() + max_wait_s
        with self.cv:
            # records collected (outside the lock) after the previous cut belong to this epoch
            self.budget = budget
            parks = self.parks
            if not self.done:
                self.running = True
                self.cv.notify_all()
            # until the source parks again (epoch full), returns, or the wait is over
            while not self.done and self.parks == parks:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cv.wait(left)
            self.running = False  # cut: the source parks at its next safe point
        # take the lock so that the cut is not inside a locked section
        self.lock.acquire()
        try:
            with self.cv:
                records, ts = self.records, self.timestamps
                any_ts = self.any_timestamp
                self.records, self.timestamps, self.any_timestamp = [], [], False
                error, done = self.error, self.done
        finally:
            self.lock.release()
        if error is not None:
            raise error
        return records, (ts if any_ts else None), done

    def close(self) -> None:
        with self.cv:
            self.closing = True
            self.cv.notify_all()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=1.0)


class SourceFunctionOperator(StreamOperator):
    """The head of a SourceFunction source stage: ``read_epoch`` replaces ``Source.read``."""

    def __init__(self, fn: Any, max_wait_ms: int) -> None:
        super().__init__()
        self.fn = fn
        self.max_wait_s = max_wait_ms / 1000.0
        self.runner: _Runner | None = None
        #: timestamps of the last epoch's records (collect_with_timestamp), or None
        self.epoch_timestamps: list[Any] | None = None

    def open(self) -> None:
        assert self.ctx is not None
        open_function(self.fn, self.ctx)
        self.runner = _Runner(self.fn, self.ctx.get_task_name_with_subtasks())

    def check_resumable(self, assignment: Any, epoch: int) -> None:
        """Called when this (new) instance replaces one that ran an earlier epoch of the same
        attempt without a failure (the subtask moved): a source that keeps its position in
        operator state resumes from it; one that keeps none would start ``run()`` again and
        replay its records silently, so the job fails with :class:`SourceNotResumableError`."""
        if assignment is not None and assignment.get("finished"):
            return  # run() returned already: nothing is replayed
        if isinstance(self.fn, (CheckpointedFunction, ListCheckpointed)):
            return
        assert self.ctx is not None
        raise SourceNotResumableError(
            f"the SourceFunction {type(self.fn).__name__} of "
            f"{self.ctx.get_task_name_with_subtasks()} had to be rebuilt in epoch {epoch} "
            f"without a failure (its subtask moved to another process or machine, or its "
            f"subtask host exited after its idle timeout), and it keeps no operator state: "
            f"its run() cannot continue where it stopped, and starting it again would replay "
            f"its records. Make it a CheckpointedFunction that stores its position in a "
            f"ListState (snapshot_state / initialize_state) and resumes from it in run(), or "
            f"read a replayable Source with env.from_source(...)"
        )

    def read_epoch(self, assignment: Any, budget: int) -> tuple[list[Any], Any]:
        """``(records, progress)`` of this subtask's source for one epoch."""
        assert self.runner is not None
        if assignment is not None and assignment.get("finished"):
            self.epoch_timestamps = None
            return [], {"finished": True}
        records, ts, done = self.runner.read_epoch(budget, self.max_wait_s)
        self.epoch_timestamps = ts
        return records, {"finished": done}

    def process_batch(self, batch: list[Any]) -> list[Any]:
        return batch  # the records were produced by read_epoch

    def process_batch_ts(
        self, batch: list[Any], timestamps: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        return batch, timestamps

    def close(self) -> None:
        try:
            cancel = getattr(self.fn, "cancel", None)
            if cancel is not None:
                cancel()
        finally:
            if self.runner is not None:
                self.runner.close()
            close_function(self.fn)
