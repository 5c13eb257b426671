"""State time-to-live configuration (``pyflink.datastream.state.StateTtlConfig``).

Build one with :meth:`StateTtlConfig.new_builder` and pass it to a state
descriptor's ``enable_time_to_live``::

    ttl = (StateTtlConfig.new_builder(Time.seconds(1))
           .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
           .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
           .build())
    descriptor.enable_time_to_live(ttl)

The configuration is not part of checkpoints (as in Flink): only whether a
state has TTL is recorded (in its serializer snapshot), so the TTL length,
update type, visibility and cleanup strategies may change between runs.
A :class:`StateTtlConfig` is an immutable, picklable, comparable value.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from streamstate.common.time import Duration, Time, to_millis
from streamstate.errors import ConfigurationError

__all__ = ["StateTtlConfig"]


def _ttl_time(ttl: Any) -> Time:
    """``ttl`` (Time, Duration, timedelta or int ms) as a positive :class:`Time`."""
    ms = to_millis(ttl, "the state TTL")
    if ms <= 0:
        raise ConfigurationError(f"TTL is expected to be positive, got {ttl!r}")
    return Time.milliseconds(ms)


class _CleanupStrategy:
    """Base interface for cleanup strategies configurations."""

    def _key(self) -> tuple[Any, ...]:
        return ()

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()  # type: ignore[attr-defined]  # subclasses define _key()

    def __hash__(self) -> int:
        return (type(self).__name__, self._key()).__hash__()

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._key()!r}"


class _EmptyCleanupStrategy(_CleanupStrategy):
    pass


class _IncrementalCleanupStrategy(_CleanupStrategy):
    """Check ``cleanup_size`` entries per state access (and per record if asked)."""

    def __init__(self, cleanup_size: int, run_cleanup_for_every_record: bool) -> None:
        if isinstance(cleanup_size, bool) or not isinstance(cleanup_size, int):
            raise ConfigurationError(
                f"cleanup_size must be an int, got {type(cleanup_size).__name__} {cleanup_size!r}"
            )
        if cleanup_size <= 0:
            raise ConfigurationError(
                f"Number of incrementally cleaned up state entries should be positive, got "
                f"{cleanup_size}"
            )
        self._cleanup_size = cleanup_size
        self._run_cleanup_for_every_record = bool(run_cleanup_for_every_record)

    def get_cleanup_size(self) -> int:
        return self._cleanup_size

    def run_cleanup_for_every_record(self) -> bool:
        return self._run_cleanup_for_every_record

    def _key(self) -> tuple[Any, ...]:
        return (self._cleanup_size, self._run_cleanup_for_every_record)


class _RocksdbCompactFilterCleanupStrategy(_CleanupStrategy):
    """Cleanup by RocksDB's compaction filter (only the RocksDB backend acts on it)."""

    def __init__(
        self,
        query_time_after_num_entries: int,
        periodic_compaction_time: Any = None,
    ) -> None:
        if isinstance(query_time_after_num_entries, bool) or not isinstance(
            query_time_after_num_entries, int
        ):
            raise ConfigurationError(
                f"query_time_after_num_entries must be an int, got {query_time_after_num_entries!r}"
            )
        if query_time_after_num_entries < 0:
            raise ConfigurationError(
                f"query_time_after_num_entries must not be negative, got "
                f"{query_time_after_num_entries}"
            )
        if periodic_compaction_time is None:
            periodic_compaction_time = Duration.of_days(30)
        ms = to_millis(periodic_compaction_time, "periodic_compaction_time")
        self._query_time_after_num_entries = query_time_after_num_entries
        self._periodic_compaction_time = Duration.of_millis(ms)

    def get_query_time_after_num_entries(self) -> int:
        return self._query_time_after_num_entries

    def get_periodic_compaction_time(self) -> Duration:
        return self._periodic_compaction_time

    def _key(self) -> tuple[Any, ...]:
        return (
            self._query_time_after_num_entries,
            self._periodic_compaction_time.to_milliseconds(),
        )


class _Strategies(Enum):
    """Fixed strategies ordinals in strategies config field."""

    FULL_STATE_SCAN_SNAPSHOT = 0
    INCREMENTAL_CLEANUP = 1
    ROCKSDB_COMPACTION_FILTER = 2


class _CleanupStrategies:
    """TTL cleanup strategies.

    By default, expired state is always cleaned up on explicit read access.
    ``is_cleanup_in_background`` (the default) additionally enables each
    backend's default background cleanup: incremental cleanup (5 entries, not
    per record) on the heap backend, the compaction filter (1000 entries) on
    RocksDB.
    """

    Strategies = _Strategies
    CleanupStrategy = _CleanupStrategy
    EmptyCleanupStrategy = _EmptyCleanupStrategy
    IncrementalCleanupStrategy = _IncrementalCleanupStrategy
    RocksdbCompactFilterCleanupStrategy = _RocksdbCompactFilterCleanupStrategy
    EMPTY_STRATEGY = _EmptyCleanupStrategy()

    def __init__(
        self, strategies: dict[_Strategies, _CleanupStrategy], is_cleanup_in_background: bool
    ) -> None:
        self._strategies = dict(strategies)
        self._is_cleanup_in_background = bool(is_cleanup_in_background)

    def is_cleanup_in_background(self) -> bool:
        return self._is_cleanup_in_background

    def in_full_snapshot(self) -> bool:
        return _Strategies.FULL_STATE_SCAN_SNAPSHOT in self._strategies

    def get_incremental_cleanup_strategy(self) -> _IncrementalCleanupStrategy | None:
        """The configured incremental cleanup, else the default (5, False) if in background."""
        default = _IncrementalCleanupStrategy(5, False) if self._is_cleanup_in_background else None
        return self._strategies.get(_Strategies.INCREMENTAL_CLEANUP, default)  # type: ignore[return-value]  # the strategy stored under this key has this type

    def get_rocksdb_compact_filter_cleanup_strategy(
        self,
    ) -> _RocksdbCompactFilterCleanupStrategy | None:
        """The configured compaction-filter cleanup, else the default (1000) if in background."""
        default = (
            _RocksdbCompactFilterCleanupStrategy(1000) if self._is_cleanup_in_background else None
        )
        return self._strategies.get(_Strategies.ROCKSDB_COMPACTION_FILTER, default)  # type: ignore[return-value]  # the strategy stored under this key has this type

    def is_explicit(self, strategy: _Strategies) -> bool:
        """Whether ``strategy`` was configured explicitly (not only by the background default)."""
        return strategy in self._strategies

    def _key(self) -> tuple[Any, ...]:
        items = sorted(((k.value, v) for k, v in self._strategies.items()), key=lambda kv: kv[0])
        return (tuple(items), self._is_cleanup_in_background)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _CleanupStrategies) and self._key() == other._key()

    def __hash__(self) -> int:
        return self._key().__hash__()

    def __repr__(self) -> str:
        names = ", ".join(k.name for k in sorted(self._strategies, key=lambda s: s.value))
        return f"CleanupStrategies([{names}], in_background={self._is_cleanup_in_background})"


class _UpdateType(Enum):
    """When the last access timestamp, which prolongs the state's life, is updated."""

    Disabled = 0
    """TTL is disabled. State does not expire."""

    OnCreateAndWrite = 1
    """Last access timestamp is initialised when state is created and updated on every write."""

    OnReadAndWrite = 2
    """The same as OnCreateAndWrite but also updated on read."""


class _StateVisibility(Enum):
    """Whether an expired user value can be returned or not."""

    ReturnExpiredIfNotCleanedUp = 0
    """Return expired user value if it is not cleaned up yet."""

    NeverReturnExpired = 1
    """Never return expired user value."""


class _TtlTimeCharacteristic(Enum):
    """The time scale of TTL (only processing time, as in Flink)."""

    ProcessingTime = 0


class StateTtlConfig:
    """Configuration of state TTL (see the module docstring); build with :meth:`new_builder`."""

    UpdateType = _UpdateType
    StateVisibility = _StateVisibility
    TtlTimeCharacteristic = _TtlTimeCharacteristic
    CleanupStrategies = _CleanupStrategies

    def __init__(
        self,
        update_type: _UpdateType,
        state_visibility: _StateVisibility,
        ttl_time_characteristic: _TtlTimeCharacteristic,
        ttl: Any,
        cleanup_strategies: _CleanupStrategies,
    ) -> None:
        if not isinstance(update_type, _UpdateType):
            raise ConfigurationError(
                f"update_type must be a StateTtlConfig.UpdateType, got {update_type!r}"
            )
        if not isinstance(state_visibility, _StateVisibility):
            raise ConfigurationError(
                f"state_visibility must be a StateTtlConfig.StateVisibility, got "
                f"{state_visibility!r}"
            )
        if not isinstance(ttl_time_characteristic, _TtlTimeCharacteristic):
            raise ConfigurationError(
                f"ttl_time_characteristic must be a StateTtlConfig.TtlTimeCharacteristic, got "
                f"{ttl_time_characteristic!r}"
            )
        if not isinstance(cleanup_strategies, _CleanupStrategies):
            raise ConfigurationError(
                f"cleanup_strategies must be StateTtlConfig.CleanupStrategies, got "
                f"{cleanup_strategies!r}"
            )
        self._update_type = update_type
        self._state_visibility = state_visibility
        self._ttl_time_characteristic = ttl_time_characteristic
        self._ttl = _ttl_time(ttl)
        self._cleanup_strategies = cleanup_strategies

    @staticmethod
    def new_builder(ttl: Any) -> StateTtlConfig.Builder:
        """A builder for a TTL of ``ttl`` (``Time``, ``Duration``, ``timedelta`` or int ms)."""
        return StateTtlConfig.Builder(ttl)

    def get_update_type(self) -> _UpdateType:
        return self._update_type

    def get_state_visibility(self) -> _StateVisibility:
        return self._state_visibility

    def get_ttl(self) -> Time:
        return self._ttl

    def get_ttl_time_characteristic(self) -> _TtlTimeCharacteristic:
        return self._ttl_time_characteristic

    def is_enabled(self) -> bool:
        """False only for ``UpdateType.Disabled`` (the state then has no TTL at all)."""
        return self._update_type is not _UpdateType.Disabled

    def get_cleanup_strategies(self) -> _CleanupStrategies:
        return self._cleanup_strategies

    def _key(self) -> tuple[Any, ...]:
        return (
            self._update_type,
            self._state_visibility,
            self._ttl_time_characteristic,
            self._ttl.to_milliseconds(),
            self._cleanup_strategies,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StateTtlConfig) and self._key() == other._key()

    def __hash__(self) -> int:
        return self._key().__hash__()

    def __setattr__(self, attr: str, value: Any) -> None:
        if attr in self.__dict__:
            raise AttributeError(f"StateTtlConfig is immutable (cannot set {attr!r})")
        object.__setattr__(self, attr, value)

    def __repr__(self) -> str:
        return (
            f"StateTtlConfig<update_type={self._update_type}, "
            f"state_visibility={self._state_visibility}, "
            f"ttl_time_characteristic={self._ttl_time_characteristic}, ttl={self._ttl}, "
            f"cleanup_strategies={self._cleanup_strategies!r}>"
        )

    class Builder:
        """Builder for the :class:`StateTtlConfig` (every setter returns the builder)."""

        def __init__(self, ttl: Any) -> None:
            self._ttl = _ttl_time(ttl)
            self._update_type = _UpdateType.OnCreateAndWrite
            self._state_visibility = _StateVisibility.NeverReturnExpired
            self._ttl_time_characteristic = _TtlTimeCharacteristic.ProcessingTime
            self._is_cleanup_in_background = True
            self._strategies: dict[_Strategies, _CleanupStrategy] = {}

        def set_update_type(self, update_type: _UpdateType) -> StateTtlConfig.Builder:
            """When the last access timestamp (which prolongs the state's life) is updated."""
            if not isinstance(update_type, _UpdateType):
                raise ConfigurationError(
                    f"update_type must be a StateTtlConfig.UpdateType, got {update_type!r}"
                )
            self._update_type = update_type
            return self

        def update_ttl_on_create_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(_UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(_UpdateType.OnReadAndWrite)

        def set_state_visibility(
            self, state_visibility: _StateVisibility
        ) -> StateTtlConfig.Builder:
            """Whether an expired value not cleaned up yet may be returned by a read."""
            if not isinstance(state_visibility, _StateVisibility):
                raise ConfigurationError(
                    f"state_visibility must be a StateTtlConfig.StateVisibility, got "
                    f"{state_visibility!r}"
                )
            self._state_visibility = state_visibility
            return self

        def return_expired_if_not_cleaned_up(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(_StateVisibility.ReturnExpiredIfNotCleanedUp)

        def never_return_expired(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(_StateVisibility.NeverReturnExpired)

        def set_ttl_time_characteristic(
            self, ttl_time_characteristic: _TtlTimeCharacteristic
        ) -> StateTtlConfig.Builder:
            """The time scale of TTL (only ``ProcessingTime`` exists)."""
            if not isinstance(ttl_time_characteristic, _TtlTimeCharacteristic):
                raise ConfigurationError(
                    f"ttl_time_characteristic must be a StateTtlConfig.TtlTimeCharacteristic, "
                    f"got {ttl_time_characteristic!r}"
                )
            self._ttl_time_characteristic = ttl_time_characteristic
            return self

        def use_processing_time(self) -> StateTtlConfig.Builder:
            return self.set_ttl_time_characteristic(_TtlTimeCharacteristic.ProcessingTime)

        def cleanup_full_snapshot(self) -> StateTtlConfig.Builder:
            """Drop expired entries when a full snapshot (checkpoint) is taken."""
            self._strategies[_Strategies.FULL_STATE_SCAN_SNAPSHOT] = (
                _CleanupStrategies.EMPTY_STRATEGY
            )
            return self

        def cleanup_incrementally(
            self, cleanup_size: int, run_cleanup_for_every_record: bool
        ) -> StateTtlConfig.Builder:
            """Check ``cleanup_size`` entries on every access of the state (and every record).

            The backend keeps a lazy cursor over all entries of the state; every
            trigger advances it by ``cleanup_size`` entries and drops the expired
            ones. With ``run_cleanup_for_every_record`` it also runs for every
            processed record. Without accesses (or records) expired state stays.
            Implemented by the heap backend.
            """
            self._strategies[_Strategies.INCREMENTAL_CLEANUP] = _IncrementalCleanupStrategy(
                cleanup_size, run_cleanup_for_every_record
            )
            return self

        def cleanup_in_rocksdb_compact_filter(
            self, query_time_after_num_entries: int, periodic_compaction_time: Any = None
        ) -> StateTtlConfig.Builder:
            """Drop expired entries while RocksDB compacts (RocksDB backend only).

            The filter queries the current time every ``query_time_after_num_entries``
            entries; ``periodic_compaction_time`` (default 30 days) is passed on.
            Backends without a compaction filter (the heap backend) ignore it and
            log a warning when a state with it is registered.
            """
            self._strategies[_Strategies.ROCKSDB_COMPACTION_FILTER] = (
                _RocksdbCompactFilterCleanupStrategy(
                    query_time_after_num_entries, periodic_compaction_time
                )
            )
            return self

        def disable_cleanup_in_background(self) -> StateTtlConfig.Builder:
            """Disable the default background cleanup (explicit strategies stay active)."""
            self._is_cleanup_in_background = False
            return self

        def set_ttl(self, ttl: Any) -> StateTtlConfig.Builder:
            self._ttl = _ttl_time(ttl)
            return self

        def build(self) -> StateTtlConfig:
            return StateTtlConfig(
                self._update_type,
                self._state_visibility,
                self._ttl_time_characteristic,
                self._ttl,
                _CleanupStrategies(self._strategies, self._is_cleanup_in_background),
            )


# PyFlink spells these StateTtlConfig.UpdateType etc.; make repr and pickling agree.
_cls: type
for _cls, _name in (
    (_UpdateType, "UpdateType"),
    (_StateVisibility, "StateVisibility"),
    (_TtlTimeCharacteristic, "TtlTimeCharacteristic"),
    (_CleanupStrategies, "CleanupStrategies"),
):
    _cls.__name__ = _name
    _cls.__qualname__ = f"StateTtlConfig.{_name}"
for _cls, _name in (
    (_Strategies, "Strategies"),
    (_CleanupStrategy, "CleanupStrategy"),
    (_EmptyCleanupStrategy, "EmptyCleanupStrategy"),
    (_IncrementalCleanupStrategy, "IncrementalCleanupStrategy"),
    (_RocksdbCompactFilterCleanupStrategy, "RocksdbCompactFilterCleanupStrategy"),
):
    _cls.__name__ = _name
    _cls.__qualname__ = f"StateTtlConfig.CleanupStrategies.{_name}"
