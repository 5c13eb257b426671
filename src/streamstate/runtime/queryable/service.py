"""The queryable-state service of one job: published snapshots, the name registry, lookups.

The driver publishes an immutable :class:`ServingSnapshot` after every epoch it folded
(:meth:`QueryableStateService.publish_epoch`) and after every checkpoint it completed or
restored (:meth:`publish_checkpoint`); a failure retracts the epoch snapshot until the
restored job has state again (:meth:`retract_epoch`). Publishing swaps one reference, so
queries never hold up the driver loop. A lookup pins the newest snapshot once and answers
every key of the request from it (:meth:`lookup`), so a batch is one consistent cut.

Which names are queryable comes from the subtasks themselves: every ack lists the states
registered on its keyed backends with their ``set_queryable`` names (its
:class:`QueryableAck`, ``feature.py``), as Flink's tasks register their KvStates.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamstate.errors import (
    ConfigurationError,
    StateMigrationError,
    StateNotAvailableYetError,
    StateNotQueryableError,
    UnknownKvStateError,
    WrongKeyTypeError,
)
from streamstate.runtime.keygroups import (
    compute_key_group_for_serialized_key,
    compute_key_group_range_for_operator_index,
)
from streamstate.runtime.protocol import Lineage
from streamstate.runtime.queryable.direct import client_secret
from streamstate.runtime.queryable.forwarding import QueryHosts, answer
from streamstate.runtime.queryable.process import PROCESS
from streamstate.runtime.queryable.serving import (
    QueryableOperator,
    ServingCache,
    ServingSnapshot,
    StaleSnapshot,
    with_bridges,
)
from streamstate.runtime.serializers.base import TypeSerializer
from streamstate.runtime.serializers.key import deserialize_untrusted
from streamstate.runtime.state.format.serializers import restore_serializer

__all__ = [
    "AS_OF",
    "QueryAnswer",
    "QueryableAck",
    "QueryableStateService",
    "check_direct_key_type",
    "check_key_type",
    "check_kind",
    "checkpoint_lineages",
    "pin_hosts",
    "queryable_operators",
    "route",
    "service_of",
    "unavailable",
]

log = logging.getLogger("streamstate")


def service_of(job_id: str) -> QueryableStateService | None:
    """The queryable-state service of job ``job_id`` if it runs in this process."""
    return PROCESS.service_of(job_id)


#: what an answer may be as of
AS_OF = ("epoch", "checkpoint")

#: how long the driver waits for a query host to take (or drop) a pin (s); a failure
#: withdraws the epoch pins before the job restarts, waiting at most UNPIN_TIMEOUT_S per host
PIN_TIMEOUT_S = 2.0
UNPIN_TIMEOUT_S = 1.0

#: a request re-pins to a newer snapshot at most this many times (a copy moved ahead)
MAX_REPINS = 8


@dataclass(frozen=True)
class QueryAnswer:
    """The values of one request and the cut they are as of."""

    values: list[Any]
    as_of: str
    epoch: int
    attempt: int
    checkpoint_id: int | None


@dataclass(frozen=True)
class QueryableAck:
    """A subtask's part of queryable state in its ack (``SubtaskAck.features``)."""

    #: keyed operator uid -> (state name, kind, queryable name or None, the type infos of
    #: a queryable state) of the states registered on its backend (what may be answered)
    keyed_states: Mapping[str, tuple[tuple[Any, ...], ...]] = field(default_factory=dict)
    #: ``(address, secret)`` of the query host on the subtask's machine that serves its
    #: keyed state; ``None``: the driver serves it
    query_host: tuple[str, str] | None = None


@dataclass(frozen=True)
class _Registered:
    uid: str
    state_name: str
    kind: str
    #: the job's descriptor's type infos (None: unknown, e.g. restored from a checkpoint's
    #: properties; the state is then read with pass-through serializers)
    type_infos: tuple[Any, ...] | None = None


class _Refresher:
    """A thread per service, started by the first publish after a lookup, that brings the
    serving copies held to each newly published snapshot (``ServingCache.refresh``)."""

    def __init__(self, service: QueryableStateService) -> None:
        self.service = service
        self.published = threading.Event()
        self.closed = False
        self.thread: threading.Thread | None = None

    def wake(self) -> None:
        """A snapshot was published: the thread (started on the first call after a lookup)
        brings every copy held to it. Returns at once; never raises for a refresh."""
        if not self.service.hosts.served and not any(len(c) for c in self.service.caches.values()):
            return  # nothing queried yet: nothing to keep fresh
        if self.thread is None:
            self.thread = threading.Thread(
                target=self._loop,
                name=f"streamstate-query-refresh-{self.service.job_id}",
                daemon=True,
            )
            self.thread.start()
        self.published.set()

    def stop(self) -> None:
        """The service closed: the thread ends after the refresh it may be running."""
        self.closed = True
        self.published.set()

    def _loop(self) -> None:
        while not self.closed:
            self.published.wait()
            self.published.clear()
            t0 = time.thread_time()
            for as_of, cache in self.service.caches.items():
                snap = self.service.snapshot(as_of)
                if snap is not None and not self.closed:
                    try:
                        cache.refresh(snap)
                        self.service.hosts.refresh(snap, cache.max_entries)
                    except Exception:  # lookups bring their copy up themselves
                        log.debug(
                            "queryable state: refreshing serving copies failed", exc_info=True
                        )
            self.service.account("queryable_refresh_cpu_us", time.thread_time() - t0)


class QueryableStateService:
    """See the module docstring. Thread-safe: the driver publishes, query threads look up."""

    def __init__(
        self,
        job_id: str,
        operators: Mapping[str, QueryableOperator],
        max_entries: int = 512,
        stats: dict[str, int] | None = None,
    ) -> None:
        self.job_id = job_id
        #: keys answered by query hosts / by the driver (the job's metrics when given)
        self.stats: dict[str, int] = {} if stats is None else stats
        #: connections to the query hosts on the executors (query_host.py)
        self.hosts = QueryHosts()
        #: (uid, subtask) -> the query host of its machine, as of the last epoch's acks
        self._hosts: dict[tuple[str, int], tuple[str, str]] = {}
        self.operators = dict(operators)
        self._lock = threading.Lock()
        self._snapshots: dict[str, ServingSnapshot | None] = dict.fromkeys(AS_OF)
        #: queryable name -> where it lives; keyed state names without a queryable name
        self._queryable: dict[str, _Registered] = {}
        self._plain: dict[str, _Registered] = {}
        self._why_unavailable = "the job has not completed an epoch yet"
        self.caches = {a: ServingCache(max_entries) for a in AS_OF}
        #: (operator uid, key type snapshot) -> its checked serializer
        self._key_types: dict[tuple[str, str], TypeSerializer] = {}
        #: a client was handed a route: pin every publish on the query hosts (direct.py)
        self.direct = False
        #: moves the serving copies to a new snapshot off the lookup path
        self._refresher = _Refresher(self)
        PROCESS.add_service(self)

    def account(self, stat: str, cpu_s: float) -> None:
        """Add ``cpu_s`` CPU seconds to the job's metric ``stat`` (µs): what queries cost the
        driver (``queryable_server_cpu_us``: the query server's threads answering requests;
        ``queryable_refresh_cpu_us``: keeping the driver's copies current and asking the
        query hosts to). Unsynchronized like the lookup counters: a metric, not a ledger."""
        self.stats[stat] = self.stats.get(stat, 0) + int(cpu_s * 1e6)

    # -- driver side ----------------------------------------------------------------------
    def register_states(self, acks: Iterable[QueryableAck]) -> None:
        """Learn the (queryable) keyed states the subtasks registered."""
        queryable, plain = {}, {}
        for a in acks:
            for uid, states in a.keyed_states.items():
                for name, kind, qname, type_infos in states:
                    if name.startswith("_timer_state/"):
                        continue
                    reg = _Registered(uid, name, kind, type_infos)
                    if qname is not None:
                        queryable[qname] = reg
                    plain[name] = reg
        # a registration changes when new, or when it gains the job's type infos (kept
        # otherwise: a copy read with other serializers is rebuilt)
        queryable = {
            k: v
            for k, v in queryable.items()
            if (o := self._queryable.get(k)) is None
            or o.type_infos is None
            or (o.uid, o.state_name, o.kind) != (v.uid, v.state_name, v.kind)
        }
        if plain.keys() - self._plain.keys() or queryable:
            with self._lock:
                self._queryable = {**self._queryable, **queryable}
                self._plain = {**self._plain, **plain}

    def registrations(self) -> dict[str, list[Any]]:
        """The registrations as JSON, kept in every checkpoint's properties so that a job
        restored from it answers before its first epoch: ``{name: [uid, state, kind, q]}``."""
        with self._lock:
            out: dict[str, list[Any]] = {
                n: [r.uid, r.state_name, r.kind, False] for n, r in self._plain.items()
            }
            out.update({n: [r.uid, r.state_name, r.kind, True] for n, r in self._queryable.items()})
        return out

    def restore_registrations(self, saved: Any) -> None:
        """Take over what :meth:`registrations` recorded (operators this job still has)."""
        if not isinstance(saved, dict):
            return
        queryable: dict[str, _Registered] = {}
        plain: dict[str, _Registered] = {}
        for name, entry in saved.items():
            if not (isinstance(entry, list) and len(entry) == 4 and entry[0] in self.operators):
                continue
            reg = _Registered(str(entry[0]), str(entry[1]), str(entry[2]))
            (queryable if entry[3] else plain)[str(name)] = reg
        with self._lock:
            self._queryable = {**queryable, **self._queryable}
            self._plain = {**plain, **self._plain}

    def epoch_folded(
        self,
        epoch: int,
        attempt: int,
        lineages: Mapping[tuple[str, int], Lineage],
        acks: Mapping[tuple[int, int], QueryableAck],
    ) -> None:
        """The driver folded epoch ``epoch``'s acks (their queryable parts, by (stage,
        subtask)): learn registrations, publish it."""
        self.register_states(acks.values())
        hosts = dict(self._hosts)
        for (_, subtask), a in acks.items():
            for uid in a.keyed_states:
                if a.query_host is not None:
                    hosts[(uid, subtask)] = a.query_host
                else:
                    hosts.pop((uid, subtask), None)
        self._hosts = hosts
        self.publish_epoch(epoch, attempt, lineages)

    def checkpoint_completed(self, md: Any, job_state: Any) -> None:
        """Checkpoint ``md`` completed: it answers ``as_of="checkpoint"`` from now on."""
        self.publish_checkpoint(
            md.checkpoint_id,
            int(md.properties.get("epoch", job_state.epoch)),
            job_state.attempt,
            with_bridges(checkpoint_lineages(md, self.operators), job_state.versions.keyed),
        )

    def publish_epoch(
        self, epoch: int, attempt: int, lineages: Mapping[tuple[str, int], Lineage]
    ) -> None:
        """Epoch ``epoch`` is complete: its lineages answer ``as_of="epoch"`` from now on."""
        snap = ServingSnapshot(
            "epoch",
            epoch,
            attempt,
            None,
            {k: v for k, v in lineages.items() if k[0] in self.operators},
            self.operators,
            self._hosts,
        )
        with self._lock:
            self._snapshots["epoch"] = snap
        if self.direct:  # before the superseded files go (the hosts' pins name them)
            pin_hosts(self, "epoch")
        self._refresher.wake()

    def publish_checkpoint(
        self,
        checkpoint_id: int,
        epoch: int,
        attempt: int,
        lineages: Mapping[tuple[str, int], Lineage],
    ) -> None:
        """A checkpoint completed (or was restored): it answers ``as_of="checkpoint"``."""
        snap = ServingSnapshot(
            "checkpoint",
            epoch,
            attempt,
            checkpoint_id,
            {k: v for k, v in lineages.items() if k[0] in self.operators},
            self.operators,
            self._hosts,
        )
        with self._lock:
            self._snapshots["checkpoint"] = snap
        if self.direct:
            pin_hosts(self, "checkpoint")
        self._refresher.wake()

    def retract_epoch(self, why: str) -> None:
        """The job failed: the latest epoch may be rolled back; answer nothing as of an
        epoch until the restored job publishes again (checkpoint answers go on)."""
        with self._lock:
            self._snapshots["epoch"] = None
            self._why_unavailable = why
        self._hosts = {}  # executors may be lost: the next epoch's acks name the hosts again
        if self.direct:  # no query host answers direct lookups as of an epoch from now on
            pin_hosts(self, "epoch", UNPIN_TIMEOUT_S)

    def close(self) -> None:
        """The job ended: forget it and release the serving copies."""
        self._refresher.stop()
        self.hosts.close()
        PROCESS.remove_service(self)
        for c in self.caches.values():
            c.clear()

    # -- query side -----------------------------------------------------------------------
    def snapshot(self, as_of: str) -> ServingSnapshot | None:
        with self._lock:
            return self._snapshots.get(as_of)

    def queryable_names(self) -> list[str]:
        with self._lock:
            return sorted(self._queryable)

    def resolve(self, name: str) -> tuple[QueryableOperator, str, str, Any]:
        """``(operator, state name, kind, type infos)`` of queryable state ``name``, or a
        typed error."""
        with self._lock:
            reg = self._queryable.get(name)
            plain = self._plain.get(name)
            known = sorted(self._queryable)
            started = bool(self._plain) or any(s is not None for s in self._snapshots.values())
        if reg is None:
            if plain is not None:
                raise StateNotQueryableError(
                    f"state {name!r} of operator {plain.uid!r} (job {self.job_id}) is not "
                    f"queryable: call descriptor.set_queryable({name!r}) before getting the "
                    f"state, or use keyed_stream.as_queryable_state(...)"
                )
            if not started:
                raise StateNotAvailableYetError(
                    f"job {self.job_id} has not completed an epoch yet, so no state is known "
                    f"to be queryable; retry shortly"
                )
            raise UnknownKvStateError(
                f"job {self.job_id} has no state queryable as {name!r}; queryable states: "
                f"{', '.join(repr(k) for k in known) or 'none'}"
            )
        op = self.operators.get(reg.uid)
        if op is None:
            raise UnknownKvStateError(f"state {name!r} lives in no keyed operator of the job")
        return op, reg.state_name, reg.kind, reg.type_infos

    def decode_keys(
        self, op: QueryableOperator, key_type: Mapping[str, Any] | None, blobs: Sequence[bytes]
    ) -> list[Any]:
        """The keys a remote client sent, serialized with its key type's serializer."""
        if key_type is None:
            raise WrongKeyTypeError("the request carries no key type")
        token = (op.uid, str(key_type))
        ser = self._key_types.get(token)
        if ser is None and '"pickle"' in json.dumps(key_type):
            raise WrongKeyTypeError(
                "keys of a pickled type cannot be looked up remotely (the server never "
                "unpickles what a client sends): key the job by a declared key type"
            )
        if ser is None:
            try:
                ser = restore_serializer(dict(key_type), "<key>")
            except (StateMigrationError, KeyError, TypeError, ValueError) as e:
                raise WrongKeyTypeError(f"the key type of the request is unknown here: {e}") from e
            check_key_type(op, ser)
            if len(self._key_types) < 64:
                self._key_types[token] = ser  # checked: the same key type costs a lookup
        decode = deserialize_untrusted if ser.name == "default_key" else ser.deserialize
        try:
            return [decode(b) for b in blobs]
        except Exception as e:  # any decoding failure is a bad key from the client
            raise WrongKeyTypeError(f"a key of the request cannot be decoded: {e}") from e

    def lookup(
        self,
        name: str,
        keys: Sequence[Any],
        as_of: str = "epoch",
        kind: str | None = None,
        resolved: tuple[QueryableOperator, str, str, Any] | None = None,
    ) -> QueryAnswer:
        """The values of ``keys`` in queryable state ``name``, all as of one snapshot
        (``resolved``: what :meth:`resolve` returned for ``name``, when the caller has it)."""
        if as_of not in AS_OF:
            raise ConfigurationError(f"as_of must be one of {AS_OF}, got {as_of!r}")
        op, state_name, state_kind, type_infos = resolved or self.resolve(name)
        check_kind(name, kind, state_kind)
        groups = []
        for k in keys:
            try:
                key_bytes = op.key_serializer.serialize(k)
            except Exception as e:  # a key the job's key serializer rejects
                raise WrongKeyTypeError(
                    f"key {k!r} cannot be serialized with the key serializer of operator "
                    f"{op.uid!r} ({op.key_serializer.name}): {e}"
                ) from e
            groups.append(compute_key_group_for_serialized_key(key_bytes, op.max_parallelism))
        cache = self.caches[as_of]
        for _ in range(MAX_REPINS):
            snap = self.snapshot(as_of)
            if snap is None:
                raise StateNotAvailableYetError(unavailable(self, as_of))
            state = (state_name, state_kind, type_infos)
            try:
                values = answer(self.hosts, snap, cache, op, state, keys, groups, self.stats)
            except StaleSnapshot:
                continue
            except (OSError, FileNotFoundError) as e:
                # the snapshot's files were superseded meanwhile: a newer one is published
                if self.snapshot(as_of) is snap:
                    raise StateNotAvailableYetError(
                        f"the state of job {self.job_id} as of {as_of} {snap.epoch} cannot be "
                        f"read ({e}); retry shortly"
                    ) from e
                continue
            return QueryAnswer(values, as_of, snap.epoch, snap.attempt, snap.checkpoint_id)
        raise StateNotAvailableYetError(
            f"the state of job {self.job_id} moved on {MAX_REPINS} times during one request; "
            f"retry (or query as_of='checkpoint', which changes less often)"
        )


def unavailable(service: QueryableStateService, as_of: str) -> str:
    """Why nothing answers as of ``as_of`` (a StateNotAvailableYetError's message)."""
    if as_of == "checkpoint":
        return (
            f"job {service.job_id} has no completed checkpoint yet (enable checkpointing, or "
            f"query as_of='epoch')"
        )
    return f"job {service.job_id}: {service._why_unavailable}; retry shortly"


def check_kind(name: str, kind: str | None, state_kind: str) -> None:
    """The request's descriptor must be of the state's kind."""
    if kind is not None and kind != state_kind:
        raise WrongKeyTypeError(
            f"queryable state {name!r} is {state_kind} state, but the request's descriptor "
            f"is for {kind} state; query it with a {state_kind} state descriptor"
        )


def route(
    service: QueryableStateService,
    name: str,
    as_of: str,
    kind: str | None,
    resolved: tuple[QueryableOperator, str, str, Any] | None = None,
) -> dict[str, Any]:
    """Where a client looks the keys of queryable state ``name`` up directly
    (``direct.py``): the operator's parallelism, max parallelism and, per subtask, its
    query host's address and client secret (None: the driver serves that subtask). The
    same typed errors as :meth:`QueryableStateService.lookup` (the caller checked the key
    type); the hosts are pinned to the newest snapshot before the route is handed out."""
    if as_of not in AS_OF:
        raise ConfigurationError(f"as_of must be one of {AS_OF}, got {as_of!r}")
    op, _, state_kind, _ = resolved or service.resolve(name)
    check_kind(name, kind, state_kind)
    if service.snapshot(as_of) is None:
        raise StateNotAvailableYetError(unavailable(service, as_of))
    service.direct = True
    snap = pin_hosts(service, as_of)
    hosts: list[list[str] | None] = []
    for sub in range(op.parallelism):
        h = snap.hosts.get((op.uid, sub)) if snap is not None else None
        if h is not None and service.hosts.is_pinned(as_of, h, snap):
            hosts.append([h[0], client_secret(h[1], service.job_id)])
        else:
            hosts.append(None)
    cut = [snap.attempt, snap.epoch] if snap is not None else None
    return {
        "parallelism": op.parallelism,
        "max_parallelism": op.max_parallelism,
        "hosts": hosts,
        "cut": cut,  # what the route is as of: a client drops it once it sees a newer one
    }


def pin_hosts(
    service: QueryableStateService, as_of: str, timeout: float = PIN_TIMEOUT_S
) -> ServingSnapshot | None:
    """Pin the newest snapshot ``as_of`` of ``service`` on its job's query hosts (see
    ``QueryHosts.pin``); returns it."""
    t0, w0 = time.thread_time(), time.perf_counter()
    with service.hosts.pin_lock:
        snap = service.snapshot(as_of)
        regs = service._queryable if snap is not None else {}  # replaced whole, never mutated
        states = {n: (r.uid, r.state_name, r.kind, r.type_infos) for n, r in regs.items()}
        n = service.hosts.pin(as_of, snap, states, service.caches[as_of].max_entries, timeout)
    service.account("queryable_pin_cpu_us", time.thread_time() - t0)
    # what the driver loop waits for (a pin is synchronous there): the hosts' round trips
    service.account("queryable_pin_wall_us", time.perf_counter() - w0)
    if n:
        stats = service.stats
        stats["queryable_requests_direct"] = stats.get("queryable_requests_direct", 0) + n
    return snap


def check_direct_key_type(op: QueryableOperator, key_type: Mapping[str, Any] | None) -> None:
    """A direct lookup (``direct.py``) finds a key's query host by the bytes the client
    serialized, so they must be in the job's own key encoding. A job keyed without a key
    type stores its keys in the default encoding (PyFlink pickles them): a request naming
    a declared type (``Types.STRING()``) would go to the wrong host and not decode there.
    (The query server itself re-encodes such keys by value: :meth:`decode_keys`.)"""
    if op.key_serializer.name != "default_key":
        return
    given = str((key_type or {}).get("name", "none"))
    if given == "default_key":
        return
    raise WrongKeyTypeError(
        f"operator {op.uid!r} was keyed without a key type (its key_by(...) declared no "
        f"key_type=), so the job's keys are pickled (in streamstate's default key encoding), "
        f"but the request names the key type {given!r}. Declare it in the job "
        f"(key_by(selector, key_type=Types.STRING()) or whichever type the keys have), or "
        f"ask with the job's pickled key type: key_type_info=Types.PICKLED_BYTE_ARRAY() or "
        f"None (or through the query "
        f"server, which re-encodes keys by value: QueryableStateClient(..., direct=False))"
    )


def check_key_type(op: QueryableOperator, given: TypeSerializer) -> None:
    """The key type of a request must be the job's (any, when the job declared none)."""
    job = op.key_serializer
    if job.name == "default_key":
        return  # undeclared key type: keys are encoded by value, whatever type the client names
    if job.snapshot_configuration().to_dict() != given.snapshot_configuration().to_dict():
        raise WrongKeyTypeError(
            f"operator {op.uid!r} is keyed by {job.name} (params "
            f"{job.snapshot_configuration().params}), but the request's key type is "
            f"{given.name} (params {given.snapshot_configuration().params}); pass the key "
            f"type of the job's key_by(..., key_type=...)"
        )


def queryable_operators(plan: Any, settings: Any) -> dict[str, QueryableOperator]:
    """Every keyed operator of ``plan`` as the query server sees it."""
    return {
        n.uid: QueryableOperator(
            n.uid,
            n.name,
            st.parallelism,
            st.max_parallelism,
            st.key_serializer,
            settings.backend_name,
            dict(settings.backend_options),
        )
        for st in plan.stages
        for n in st.nodes.values()
        if n.keyed
    }


def checkpoint_lineages(
    md: Any, operators: Mapping[str, QueryableOperator]
) -> dict[tuple[str, int], Lineage]:
    """The lineage of every keyed subtask at checkpoint ``md`` (its own handles: with
    in-memory storage they live in the driver), at the running plan's parallelism."""
    out: dict[tuple[str, int], Lineage] = {}
    if md is None:
        return out
    token = (-1, int(md.properties.get("epoch", 0)))
    for uid, op in operators.items():
        ops = md.operator_states.get(uid)
        handles = [h for s in (ops.subtasks if ops else ()) for h in s.keyed]
        for i in range(op.parallelism):
            rng = compute_key_group_range_for_operator_index(op.max_parallelism, op.parallelism, i)
            out[(uid, i)] = Lineage(token, tuple(h for h in handles if h.intersects(rng)), ())
    return out
