"""The queryable-state client: point and batch lookups against a job's query server.

With ``direct=True`` (the default) a lookup goes straight to the query host holding the
key's state on the executor (one round trip, no driver hop; ``routing.py``), with a route
fetched from the job's query server once; keys the driver serves (no query host: the
local runner, ``queryable-state.serve-on-executors: false``) and requests the hosts cannot
answer consistently go through the query server as with ``direct=False``.

A client holds one TCP connection to the server (opened on first use, reopened once when
the server dropped it) and one per query host, and sends one request at a time; share it between threads (requests are
serialized) or give each thread its own client for parallel lookups. Every answer is as of
one completed epoch (``as_of="epoch"``, the default) or checkpoint (``as_of="checkpoint"``)
and says which: a batch never mixes two.

Errors are typed (:mod:`streamstate.errors`): ``UnknownJobError``,
``UnknownKvStateError``, ``StateNotQueryableError``, ``WrongKeyTypeError``,
``StateNotAvailableYetError`` (starting or restarting: retry), ``ServerBusyError`` and
``QueryableStateError`` for the rest (a connection that cannot be made, a time-out).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import pickle
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streamstate.common.typeinfo import PickledBytesTypeInfo
from streamstate.errors import QueryableStateError, UnknownJobError, WrongKeyTypeError
from streamstate.queryablestate.routing import DirectRoutes, error_from_header
from streamstate.runtime.queryable import wire
from streamstate.runtime.serializers.key import default_key_serializer
from streamstate.runtime.state.format.serializers import serializer_for_type_info

__all__ = ["KvStateResponse", "KvStatesResponse", "QueryableStateClient"]


@dataclass(frozen=True)
class KvStatesResponse:
    """The values of a batch (in the order of its keys; None: no value) and their cut."""

    keys: list[Any]
    values: list[Any]
    as_of: str
    epoch: int
    attempt: int
    checkpoint_id: int | None

    def as_dict(self) -> dict[Any, Any]:
        return dict(zip(self.keys, self.values, strict=True))


@dataclass(frozen=True)
class KvStateResponse:
    """One key's value (ValueState: the value, ListState: a list, MapState: a dict,
    Reducing/AggregatingState: the reduced value / result; None: no value) and its cut."""

    value: Any
    as_of: str
    epoch: int
    attempt: int
    checkpoint_id: int | None

    def get(self) -> Any:
        """The value (Flink's ``ValueState.value()`` / ``ListState.get()`` ...)."""
        return self.value


class QueryableStateClient:
    """Lookups against the query server at ``host:port`` (Flink's ``QueryableStateClient``).

    ``token``: the job's bearer token; None reads it from the job's registry file
    (``$STREAMSTATE_HOME/jobs/<job-id>.json``, readable by the job's user only) on the
    first request for that job. ``timeout``: seconds per request (connect, send, answer).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 9069,
        token: str | None = None,
        timeout: float = 10.0,
        direct: bool = True,
    ) -> None:
        self.host, self.port, self.timeout = host, int(port), float(timeout)
        #: look keys up at the query hosts holding them (``routing.py``), not via the driver
        self.direct = direct
        self._routes = DirectRoutes(self.timeout)
        self._key_types: dict[Any, tuple[Any, dict[str, Any], str]] = {}
        self._last_key_type: tuple[Any, tuple[Any, dict[str, Any], str] | None] = (None, None)
        self._token = token
        self._tokens: dict[str, str] = {}
        self._sock: socket.socket | None = None
        self._last: dict[str, Any] | None = None
        self._lock = threading.RLock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    @classmethod
    def for_job(
        cls, job_id: str, timeout: float = 10.0, direct: bool = True
    ) -> QueryableStateClient:
        """A client of the server answering for ``job_id``, found in the job registry."""
        record = _record(job_id)
        if not record.queryable_address:
            raise UnknownJobError(
                f"job {job_id} serves no queryable state (queryable-state.enable: false, or "
                f"rest.enabled: false)"
            )
        host, _, port = record.queryable_address.rpartition(":")
        return cls(host.strip("[]"), int(port), record.token, timeout, direct)

    # -- lookups ----------------------------------------------------------------------------
    def get_kv_state(
        self,
        job_id: str,
        queryable_state_name: str,
        key: Any,
        key_type_info: Any,
        state_descriptor: Any,
        as_of: str = "epoch",
    ) -> KvStateResponse:
        """The value of ``key`` in queryable state ``queryable_state_name`` of ``job_id``.

        ``key_type_info``: the job's key type (``key_by(..., key_type=...)``; None or
        ``Types.PICKLED_BYTE_ARRAY()`` for a job that declared none, whose keys are
        pickled); ``state_descriptor``: a descriptor of the state's kind."""
        if self.direct:  # the common case, kept lean: one key to its query host
            ser, _, key_type_text = self._key_type(key_type_info)
            blobs = self._serialize(ser, [key], key_type_info)
            kind = getattr(state_descriptor, "kind", None)
            route_key = (job_id, queryable_state_name, as_of, kind, key_type_text)
            with self._lock:
                got = self._routes.lookup(
                    lambda: self._route(
                        self._header(job_id, queryable_state_name, kind, as_of, key_type_info)
                    ),
                    route_key,
                    blobs,
                )
            if got is not None:
                return KvStateResponse(got[1][0], *got[0])
        r = self.get_kv_states(
            job_id, queryable_state_name, [key], key_type_info, state_descriptor, as_of
        )
        return KvStateResponse(r.values[0], r.as_of, r.epoch, r.attempt, r.checkpoint_id)

    def get_kv_states(
        self,
        job_id: str,
        queryable_state_name: str,
        keys: Sequence[Any],
        key_type_info: Any,
        state_descriptor: Any,
        as_of: str = "epoch",
    ) -> KvStatesResponse:
        """The values of every key of ``keys``, all as of the same epoch (or checkpoint)."""
        keys = list(keys)
        ser, _, key_type_text = self._key_type(key_type_info)
        blobs = self._serialize(ser, keys, key_type_info)
        kind = getattr(state_descriptor, "kind", None)
        header = self._header(job_id, queryable_state_name, kind, as_of, key_type_info)
        if self.direct:
            route_key = (job_id, queryable_state_name, as_of, kind, key_type_text)
            with self._lock:
                got = self._routes.lookup(lambda: self._route(header), route_key, blobs)
            if got is not None:
                (cut_as_of, epoch, attempt, checkpoint_id), values = got
                return KvStatesResponse(keys, values, cut_as_of, epoch, attempt, checkpoint_id)
        head, blobs_back = self._request(header, blobs)
        if not head.get("ok"):
            raise error_from_header(head)
        if self.direct:  # answered by the driver: a route older than its cut is dropped
            with self._lock:
                self._routes.seen(route_key, int(head["attempt"]), int(head["epoch"]))
        values = pickle.loads(blobs_back[0])
        return KvStatesResponse(
            keys,
            values,
            str(head["as_of"]),
            int(head["epoch"]),
            int(head["attempt"]),
            head.get("checkpoint_id"),
        )

    def get_kv_state_async(
        self,
        job_id: str,
        queryable_state_name: str,
        key: Any,
        key_type_info: Any,
        state_descriptor: Any,
        as_of: str = "epoch",
    ) -> concurrent.futures.Future[KvStateResponse]:
        """:meth:`get_kv_state` as a future (Flink's ``getKvState`` returns one); the
        client's requests still go one at a time over its connection."""
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="streamstate-query-client"
                )
            pool = self._pool
        return pool.submit(
            self.get_kv_state,
            job_id,
            queryable_state_name,
            key,
            key_type_info,
            state_descriptor,
            as_of,
        )

    def shutdown(self) -> None:
        """Close the connection (Flink's ``shutdownAndWait``)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
            self._routes.close()

    close = shutdown

    def __enter__(self) -> QueryableStateClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- plumbing ---------------------------------------------------------------------------
    def _token_for(self, job_id: str) -> str:
        if self._token is not None:
            return self._token
        token = self._tokens.get(job_id)
        if token is None:
            token = self._tokens[job_id] = _record(job_id).token
        return token

    def _header(
        self, job_id: str, name: str, kind: str | None, as_of: str, key_type_info: Any
    ) -> dict[str, Any]:
        return {
            "v": wire.WIRE_VERSION,
            "job": job_id,
            "token": self._token_for(job_id),
            "name": name,
            "kind": kind,
            "as_of": as_of,
            "key_type": self._key_type(key_type_info)[1],
        }

    @staticmethod
    def _serialize(ser: Any, keys: list[Any], key_type_info: Any) -> list[bytes]:
        try:
            return [ser.serialize(k) for k in keys]
        except Exception as e:  # any serializer's refusal means the key is not of that type
            raise WrongKeyTypeError(
                f"a key cannot be serialized as {key_type_info!r}: {e}; pass the job's key "
                f"type and keys of that type"
            ) from e

    def _key_type(self, key_type_info: Any) -> tuple[Any, dict[str, Any], str]:
        """The key type's serializer, its snapshot and that as text (made once per type)."""
        last = self._last_key_type
        if last[0] is key_type_info and last[1] is not None:
            return last[1]  # the same type info object as the previous request: no hashing
        try:
            hit = self._key_types.get(key_type_info)
        except TypeError:  # an unhashable type info: made every time
            hit = None
        if hit is None:
            # a job keyed without a key type has PyFlink's pickled keys: None or
            # Types.PICKLED_BYTE_ARRAY() name that encoding (streamstate's default key one)
            pickled = key_type_info is None or isinstance(key_type_info, PickledBytesTypeInfo)
            ser = default_key_serializer() if pickled else serializer_for_type_info(key_type_info)
            snap = ser.snapshot_configuration().to_dict()
            hit = (ser, snap, json.dumps(snap, sort_keys=True))
            with contextlib.suppress(TypeError):
                if len(self._key_types) < 64:
                    self._key_types[key_type_info] = hit
        self._last_key_type = (key_type_info, hit)
        return hit

    def _route(self, header: dict[str, Any]) -> dict[str, Any]:
        """The driver's route for a request like ``header`` (its typed errors raised)."""
        head, _ = self._request({**header, "op": "route"}, [], repeat=False)
        if not head.get("ok"):
            raise error_from_header(head)
        return head["route"]  # type: ignore[no-any-return]  # the server's JSON object

    def _connect(self) -> socket.socket:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as e:
            raise QueryableStateError(
                f"no queryable-state server answers at {self.host}:{self.port} ({e}); is the "
                f"job running? (its address is in `streamstate list` and the job's log)"
            ) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _request(
        self, header: dict[str, Any], blobs: list[bytes], repeat: bool = True
    ) -> tuple[dict[str, Any], list[bytes]]:
        """``repeat``: a lookup, whose header the next one with the same may leave empty."""
        with self._lock:
            for attempt in (0, 1):
                if self._sock is None:
                    self._sock = self._connect()
                    self._last = None
                # the same header as the previous request on this connection goes empty
                same = repeat and header == self._last
                try:
                    wire.send_frame(self._sock, wire.encode({} if same else header, blobs))
                    answer = wire.decode(wire.recv_frame(self._sock))
                    self._last = header if answer[0].get("ok") and repeat else None
                    return answer
                except TimeoutError:
                    self._sock.close()
                    self._sock = None
                    raise QueryableStateError(
                        f"the query server at {self.host}:{self.port} did not answer within "
                        f"{self.timeout} s"
                    ) from None
                except (OSError, ConnectionError) as e:
                    self._sock.close()
                    self._sock = None
                    if attempt:
                        raise QueryableStateError(
                            f"the connection to {self.host}:{self.port} failed: {e}"
                        ) from None
        raise AssertionError("unreachable")


def _record(job_id: str) -> Any:
    from streamstate.control.registry import list_jobs

    for r in list_jobs():
        if r.job_id == job_id:
            return r
    raise UnknownJobError(
        f"job {job_id} is not in the job registry (not running, or started by another user "
        f"or with another STREAMSTATE_HOME); pass host, port and token explicitly"
    )
