"""State schema migration: restored values rewritten for the serializers a job declares.

A restored state whose recorded serializers differ from the ones its descriptor
declares (``compatible_after_migration``) is migrated eagerly, once, when the
descriptor is registered (as Flink does): every stored object is read with the
recorded serializers and converted (:func:`migrate_object`, which calls
``streamstate.common.serializer.migrate_value`` on each value, list element, map
key and map value) for the new ones. The heap backend swaps the converted tables
in only when every entry converted; the RocksDB backend rewrites the state's
column families. A value that cannot be converted raises
:class:`StateMigrationError` naming the operator, the state, both schemas and
the reason; the checkpoint is never written to.

Each migrated state adds its entry count to ``backend.migrated_entries`` (job
metrics) and logs one line saying what changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from streamstate.common.serializer import migrate_value
from streamstate.errors import StateMigrationError
from streamstate.runtime.serializers.ttl import MIGRATION_TIMESTAMP
from streamstate.runtime.state.format.serializers import StateSerializers, describe_schema

__all__ = [
    "MigrationFailed",
    "drain_migrated",
    "migrate_heap_table",
    "migrate_holder",
    "migrate_object",
    "migration_error",
    "needs_migration",
    "needs_rewrite",
    "record_migration",
]

log = logging.getLogger("streamstate.migration")


class MigrationFailed(Exception):
    """A restored object could not be converted (carries the object's description)."""


def needs_migration(old: StateSerializers, new: StateSerializers) -> bool:
    """Whether objects read with ``old`` must be converted before ``new`` writes them."""
    if old.value != new.value:
        return True
    return new.user_key is not None and old.user_key != new.user_key


def needs_rewrite(old: StateSerializers, new: StateSerializers) -> bool:
    """Whether stored bytes written with ``old`` differ in form from ``new``'s (RocksDB:
    serializers with equal snapshots write the same bytes)."""
    a, b = old.to_meta(), new.to_meta()
    return any(a.get(f) != b.get(f) for f in ("value_serializer", "user_key_serializer"))


def object_migrator(
    kind: str, old: StateSerializers, new: StateSerializers
) -> Callable[[Any], Any]:
    """A function converting one stored object of a ``kind`` state from ``old`` to ``new``."""
    ov, nv = old.value, new.value

    def value(v: Any) -> Any:
        return migrate_value(ov, nv, v)

    if kind == "list":
        return lambda obj: [value(e) for e in obj]
    if kind == "map":
        ok, nk = old.user_key, new.user_key
        assert ok is not None and nk is not None  # map state always has user-key serializers
        return lambda obj: {migrate_value(ok, nk, k): value(v) for k, v in obj.items()}
    return value


def migrate_object(kind: str, old: StateSerializers, new: StateSerializers, obj: Any) -> Any:
    """One stored object (value, list, or dict of map state) converted from ``old`` to ``new``."""
    return object_migrator(kind, old, new)(obj)


def migration_error(
    operator_name: str,
    state_name: str,
    old: StateSerializers,
    new: StateSerializers,
    key: Any,
    error: BaseException,
) -> StateMigrationError:
    """The error of a value of ``state_name`` (at ``key``) that did not convert."""
    return StateMigrationError(
        f"operator {operator_name!r}: state {state_name!r} could not be migrated from "
        f"{describe_schema(old.value)} to {describe_schema(new.value)}: the value at key "
        f"{key!r} failed with {type(error).__name__}: {error}. Nothing was written; the "
        f"checkpoint is unchanged. Register a conversion "
        f"(streamstate.common.serializer.register_type_migration) or keep the old type."
    )


def record_migration(
    backend: Any, state_name: str, count: int, old: StateSerializers, new: StateSerializers
) -> None:
    """Count ``count`` migrated entries of ``state_name`` and log what changed."""
    backend.migrated_entries[state_name] = backend.migrated_entries.get(state_name, 0) + count
    log.info(
        "operator %r: state %r migrated, %d entries: %s -> %s",
        backend.operator_name,
        state_name,
        count,
        describe_schema(old.value),
        describe_schema(new.value),
    )


def migrate_heap_table(backend: Any, table: Any, new: StateSerializers) -> int:
    """Convert every object of a heap ``table`` to ``new`` (all or nothing); returns
    the number of entries converted."""
    old: StateSerializers = table.serializers
    convert = object_migrator(table.kind, old, new)
    replaced: dict[Any, list[dict[Any, Any]]] = {}
    count = 0
    for ns, maps in table.namespaces.items():
        out: list[dict[Any, Any]] = []
        for m in maps:
            done: dict[Any, Any] = {}
            try:
                for k, v in m.items():
                    done[k] = convert(v)
            except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as e:
                raise migration_error(backend.operator_name, table.name, old, new, k, e) from e
            count += len(done)
            out.append(done)
        replaced[ns] = out
    for ns, out in replaced.items():
        maps = table.namespaces[ns]
        for i, done in enumerate(out):
            maps[i].clear()  # handles hold these dicts: update them in place
            maps[i].update(done)
    return count


def migrate_holder(
    backend: Any,
    holder: Any,
    new: StateSerializers,
    migrate: Callable[[Any, Any, StateSerializers], int],
) -> None:
    """Migrate ``holder`` (a heap table or RocksDB column) of ``backend`` to ``new``
    with the backend's ``migrate(backend, holder, new) -> entries``; count and log it.
    State TTL switched on stamps values with the backend's TTL clock."""
    old = holder.serializers
    token = MIGRATION_TIMESTAMP.set(backend.ttl_time_provider.current_timestamp())
    try:
        n = migrate(backend, holder, new)
    finally:
        MIGRATION_TIMESTAMP.reset(token)
    holder.serializers = new
    if needs_rewrite(old, new):  # else only restored objects were rebuilt (same schema)
        record_migration(backend, holder.name, n, old, new)


class CountsMigrations(Protocol):
    """What keyed backends and operator state stores share: entries migrated per state
    since the last :func:`drain_migrated`."""

    migrated_entries: dict[str, int]


def drain_migrated(*owners: dict[str, CountsMigrations]) -> dict[str, int]:
    """``"<uid>.<state>" -> entries`` migrated by the keyed backends / operator state
    stores of ``owners`` (uid -> backend or store) since the last call (then reset)."""
    out: dict[str, int] = {}
    for by_uid in owners:
        for uid, owner in by_uid.items():
            counts = owner.migrated_entries
            if counts:
                for state, n in counts.items():
                    out[f"{uid}.{state}"] = out.get(f"{uid}.{state}", 0) + n
                counts.clear()
    return out
