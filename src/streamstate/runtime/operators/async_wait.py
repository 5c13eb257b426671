"""The async I/O operator (``AsyncDataStream.ordered_wait`` / ``unordered_wait``).

Each subtask keeps one asyncio event loop. A batch's records are started as tasks, at
most ``capacity`` in flight (a semaphore); each task awaits ``async_invoke(value)`` with
the timeout, calling ``timeout(value)`` when it expires, and retries as the
``AsyncRetryStrategy`` allows (an exception or a result its predicates match, after the
back-off). The batch completes before ``process_batch`` returns, which is Flink's
draining of in-flight requests before a checkpoint: an epoch's outputs are all in its
state version, so a restore neither loses nor repeats a request's result. ORDERED emits
the outputs in input order; UNORDERED in completion order. Timestamps stay with their
record's outputs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from streamstate.runtime.operators.base import StreamOperator, close_function, open_function
from streamstate.runtime.operators.outputs import outputs_not_iterable

__all__ = ["AsyncWaitOperator"]


class AsyncWaitOperator(StreamOperator):
    def __init__(self, descriptor: Any) -> None:
        super().__init__()
        self.d = descriptor
        self.fn = descriptor.async_function
        self.ordered = descriptor.output_mode.name == "ORDERED"
        self.loop: asyncio.AbstractEventLoop | None = None

    def open(self) -> None:
        assert self.ctx is not None
        self.loop = asyncio.new_event_loop()
        open_function(self.fn, self.ctx)

    def close(self) -> None:
        close_function(self.fn)
        if self.loop is not None:
            self.loop.close()
            self.loop = None

    def process_batch(self, batch: list[Any]) -> list[Any]:
        out, _ = self._run(batch, None)
        return out

    def process_batch_ts(
        self, batch: list[Any], timestamps: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        out, ts = self._run(batch, timestamps)
        assert ts is not None
        return out, ts

    def _run(self, batch: list[Any], timestamps: list[Any] | None) -> tuple[list[Any], Any]:
        if not batch:
            return [], ([] if timestamps is not None else None)
        if self.loop is None:
            self.open()
        assert self.loop is not None
        results = self.loop.run_until_complete(self._all(batch))
        out: list[Any] = []
        out_ts: list[Any] = []
        for i, outputs in results:
            out.extend(outputs)
            if timestamps is not None:
                out_ts.extend([timestamps[i]] * len(outputs))
        return out, (out_ts if timestamps is not None else None)

    async def _all(self, batch: list[Any]) -> list[tuple[int, list[Any]]]:
        gate = asyncio.Semaphore(self.d.capacity)
        done: list[tuple[int, list[Any]]] = []

        async def one(i: int, value: Any) -> None:
            async with gate:
                done.append((i, await self._invoke(value)))

        await asyncio.gather(*(one(i, v) for i, v in enumerate(batch)))
        if self.ordered:
            done.sort(key=lambda p: p[0])
        return done

    async def _invoke(self, value: Any) -> list[Any]:
        strategy = self.d.async_retry_strategy
        predicate = strategy.get_retry_predicate()
        on_result = predicate.result_predicate()
        on_error = predicate.exception_predicate()
        attempt = 1
        while True:
            try:
                result = await asyncio.wait_for(
                    self.fn.async_invoke(value), self.d.timeout_ms / 1000
                )
            except TimeoutError:
                return self._as_list(self.fn.timeout(value))
            except Exception as e:
                if on_error is not None and on_error(e) and strategy.can_retry(attempt):
                    await self._backoff(strategy, attempt)
                    attempt += 1
                    continue
                raise
            outputs = self._as_list(result)
            if on_result is not None and on_result(outputs) and strategy.can_retry(attempt):
                await self._backoff(strategy, attempt)
                attempt += 1
                continue
            return outputs

    @staticmethod
    async def _backoff(strategy: Any, attempt: int) -> None:
        delay = strategy.get_backoff_time_millis(attempt)
        if delay > 0:
            await asyncio.sleep(delay / 1000)

    def _as_list(self, result: Any) -> list[Any]:
        if result is None:
            return []
        try:
            return list(result)
        except TypeError:
            raise outputs_not_iterable(self, result) from None
