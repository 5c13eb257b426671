"""Checkpointing settings, as ``pyflink.datastream.checkpoint_config``.

Every duration argument takes int milliseconds, :class:`datetime.timedelta`,
:class:`~streamstate.common.Time` or :class:`~streamstate.common.Duration`; getters return
int milliseconds, as PyFlink's. Invalid values raise
:class:`~streamstate.errors.ConfigurationError` (a ``ValueError``) naming the fix.

Epoch model notes: checkpoints are taken at epoch boundaries, so they are always aligned
(the unaligned-checkpoint switches are accepted and have no effect), and a checkpoint
completes at the end of its epoch, so at most one is ever in flight whatever
``max_concurrent_checkpoints`` says.
"""

from __future__ import annotations

import os
from enum import Enum
from typing import TYPE_CHECKING, Any

from streamstate.common._unsupported import unsupported_attribute
from streamstate.common.time import to_millis
from streamstate.datastream.checkpoint_storage import (
    CheckpointStorage,
    FileSystemCheckpointStorage,
)
from streamstate.datastream.checkpointing_mode import CheckpointingMode
from streamstate.errors import ConfigurationError

__all__ = [
    "CheckpointConfig",
    "ExternalizedCheckpointCleanup",
    "ExternalizedCheckpointRetention",
]

_INT_MAX = 2**31 - 1


class ExternalizedCheckpointCleanup(Enum):
    """What happens to retained checkpoints when the job ends.

    :data:`DELETE_ON_CANCELLATION`: deleted when the job is cancelled (or finishes); kept
    when it fails, so it can be resumed.

    :data:`RETAIN_ON_CANCELLATION`: always kept; delete them yourself.

    :data:`NO_EXTERNALIZED_CHECKPOINTS`: deleted whenever the job ends (Flink's default).
    Checkpoints still survive a crash of the driver itself, since nobody deletes them then.
    """

    DELETE_ON_CANCELLATION = 0
    RETAIN_ON_CANCELLATION = 1
    NO_EXTERNALIZED_CHECKPOINTS = 2


#: PyFlink 2.x name of the same enum.
ExternalizedCheckpointRetention = ExternalizedCheckpointCleanup


def _check_int(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ConfigurationError(f"{what} must be >= {minimum}, got {value}")
    return value


class CheckpointConfig:
    """Configuration that captures all checkpointing related settings.

    Defaults are Flink's: mode exactly-once, timeout 10 min, no min pause, one concurrent
    checkpoint, 0 tolerable failures, one retained checkpoint, checkpointing disabled
    (interval -1) until :meth:`set_checkpoint_interval` (or ``enable_checkpointing``).
    """

    DEFAULT_MODE = CheckpointingMode.EXACTLY_ONCE
    DEFAULT_TIMEOUT = 10 * 60 * 1000
    DEFAULT_MIN_PAUSE_BETWEEN_CHECKPOINTS = 0
    DEFAULT_MAX_CONCURRENT_CHECKPOINTS = 1
    DEFAULT_TOLERABLE_CHECKPOINT_FAILURE_NUMBER = 0
    DEFAULT_NUM_RETAINED_CHECKPOINTS = 1
    DEFAULT_EXTERNALIZED_CHECKPOINT_CLEANUP = (
        ExternalizedCheckpointCleanup.NO_EXTERNALIZED_CHECKPOINTS
    )
    #: "Disabled" value of the checkpoint interval.
    DISABLED_CHECKPOINT_INTERVAL = -1
    #: Tolerable failure number meaning "unlimited" (set_fail_on_checkpointing_errors(False)).
    UNLIMITED_TOLERABLE_FAILURE_NUMBER = _INT_MAX

    def __init__(self) -> None:
        self._mode = self.DEFAULT_MODE
        self._interval = self.DISABLED_CHECKPOINT_INTERVAL
        self._timeout = self.DEFAULT_TIMEOUT
        self._min_pause = self.DEFAULT_MIN_PAUSE_BETWEEN_CHECKPOINTS
        self._max_concurrent = self.DEFAULT_MAX_CONCURRENT_CHECKPOINTS
        self._tolerable_failures = self.DEFAULT_TOLERABLE_CHECKPOINT_FAILURE_NUMBER
        self._cleanup: ExternalizedCheckpointCleanup | None = None
        self._storage: CheckpointStorage | None = None
        self._num_retained = self.DEFAULT_NUM_RETAINED_CHECKPOINTS
        self._unaligned = False
        self._force_unaligned = False
        self._prefer_checkpoint_for_recovery = False

    # -- enabled / mode / interval ------------------------------------------------------------

    def is_checkpointing_enabled(self) -> bool:
        """True iff a checkpoint interval has been set."""
        return self._interval > 0

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return self._mode

    def set_checkpointing_mode(self, checkpointing_mode: CheckpointingMode) -> CheckpointConfig:
        if not isinstance(checkpointing_mode, CheckpointingMode):
            raise ConfigurationError(
                f"checkpointing_mode must be a CheckpointingMode (EXACTLY_ONCE or "
                f"AT_LEAST_ONCE), got {checkpointing_mode!r}"
            )
        self._mode = checkpointing_mode
        return self

    def get_checkpoint_interval(self) -> int:
        """The interval in ms in which checkpoints are periodically scheduled (-1: disabled)."""
        return self._interval

    def set_checkpoint_interval(self, checkpoint_interval: Any) -> CheckpointConfig:
        """Set the base interval (> 0). Triggering may be delayed by the min pause.

        In the epoch model a checkpoint is taken at the first epoch boundary after the
        interval elapsed, so the effective interval is rounded up to whole epochs.
        """
        ms = to_millis(checkpoint_interval, "checkpoint interval")
        if ms <= 0:
            raise ConfigurationError(
                f"checkpoint interval must be > 0 ms, got {ms} ms (to disable checkpointing, "
                f"don't enable it)"
            )
        self._interval = ms
        return self

    # -- timeout / pause / concurrency ---------------------------------------------------------

    def get_checkpoint_timeout(self) -> int:
        return self._timeout

    def set_checkpoint_timeout(self, checkpoint_timeout: Any) -> CheckpointConfig:
        """Maximum time (> 0) a checkpoint may take before it is aborted."""
        ms = to_millis(checkpoint_timeout, "checkpoint timeout")
        if ms <= 0:
            raise ConfigurationError(f"checkpoint timeout must be > 0 ms, got {ms} ms")
        self._timeout = ms
        return self

    def get_min_pause_between_checkpoints(self) -> int:
        return self._min_pause

    def set_min_pause_between_checkpoints(
        self, min_pause_between_checkpoints: Any
    ) -> CheckpointConfig:
        """Minimal time (>= 0) between the end of one checkpoint and the start of the next."""
        self._min_pause = to_millis(min_pause_between_checkpoints, "min pause between checkpoints")
        return self

    def get_max_concurrent_checkpoints(self) -> int:
        return self._max_concurrent

    def set_max_concurrent_checkpoints(self, max_concurrent_checkpoints: int) -> CheckpointConfig:
        """Stored for compatibility (>= 1); in the epoch model at most one is ever in flight."""
        self._max_concurrent = _check_int(
            max_concurrent_checkpoints, "max concurrent checkpoints", 1
        )
        return self

    # -- failures ------------------------------------------------------------------------------

    def is_fail_on_checkpointing_errors(self) -> bool:
        """Deprecated: True iff no checkpoint failure is tolerated."""
        return self._tolerable_failures == 0

    def set_fail_on_checkpointing_errors(
        self, fail_on_checkpointing_errors: bool
    ) -> CheckpointConfig:
        """Deprecated: True = tolerate 0 failures; False = tolerate unlimited failures."""
        self._tolerable_failures = 0 if fail_on_checkpointing_errors else _INT_MAX
        return self

    def get_tolerable_checkpoint_failure_number(self) -> int:
        return self._tolerable_failures

    def set_tolerable_checkpoint_failure_number(
        self, tolerable_checkpoint_failure_number: int
    ) -> CheckpointConfig:
        """How many consecutive checkpoint failures (>= 0) are tolerated before the job fails over."""
        self._tolerable_failures = _check_int(
            tolerable_checkpoint_failure_number, "tolerable checkpoint failure number", 0
        )
        return self

    # -- externalized checkpoints --------------------------------------------------------------

    def enable_externalized_checkpoints(
        self, cleanup_mode: ExternalizedCheckpointCleanup
    ) -> CheckpointConfig:
        """Deprecated alias of :meth:`set_externalized_checkpoint_cleanup`."""
        return self.set_externalized_checkpoint_cleanup(cleanup_mode)

    def set_externalized_checkpoint_cleanup(
        self, cleanup_mode: ExternalizedCheckpointCleanup
    ) -> CheckpointConfig:
        if not isinstance(cleanup_mode, ExternalizedCheckpointCleanup):
            raise ConfigurationError(
                f"cleanup_mode must be an ExternalizedCheckpointCleanup "
                f"({', '.join(m.name for m in ExternalizedCheckpointCleanup)}), got "
                f"{cleanup_mode!r}"
            )
        self._cleanup = cleanup_mode
        return self

    def get_externalized_checkpoint_cleanup(self) -> ExternalizedCheckpointCleanup | None:
        """The configured mode, or None if never set (behaves as NO_EXTERNALIZED_CHECKPOINTS)."""
        return self._cleanup

    # PyFlink 2.x names
    def set_externalized_checkpoint_retention(
        self, retention_mode: ExternalizedCheckpointCleanup
    ) -> CheckpointConfig:
        return self.set_externalized_checkpoint_cleanup(retention_mode)

    def get_externalized_checkpoint_retention(self) -> ExternalizedCheckpointCleanup | None:
        return self.get_externalized_checkpoint_cleanup()

    def is_externalized_checkpoints_enabled(self) -> bool:
        return (
            self._cleanup is not None
            and self._cleanup is not ExternalizedCheckpointCleanup.NO_EXTERNALIZED_CHECKPOINTS
        )

    def get_effective_externalized_checkpoint_cleanup(self) -> ExternalizedCheckpointCleanup:
        """The mode the runtime applies (Flink's default when none was set)."""
        return self._cleanup or self.DEFAULT_EXTERNALIZED_CHECKPOINT_CLEANUP

    # -- retained checkpoints ------------------------------------------------------------------

    def get_num_retained_checkpoints(self) -> int:
        """``state.checkpoints.num-retained``: completed checkpoints kept (default 1)."""
        return self._num_retained

    def set_num_retained_checkpoints(self, num_retained_checkpoints: int) -> CheckpointConfig:
        self._num_retained = _check_int(num_retained_checkpoints, "num retained checkpoints", 1)
        return self

    # -- storage -------------------------------------------------------------------------------

    def set_checkpoint_storage(self, storage: CheckpointStorage | str) -> CheckpointConfig:
        """Where checkpoints go: a :class:`CheckpointStorage`, or a directory (str/URL), which
        means :class:`FileSystemCheckpointStorage` there."""
        if isinstance(storage, (str, os.PathLike)):
            storage = FileSystemCheckpointStorage(storage)
        if not isinstance(storage, CheckpointStorage):
            raise ConfigurationError(
                f"storage must be a CheckpointStorage or a directory path, got {storage!r}"
            )
        self._storage = storage
        return self

    def set_checkpoint_storage_dir(self, checkpoint_path: str) -> CheckpointConfig:
        """Write checkpoints to ``checkpoint_path`` (local path or fsspec URL)."""
        self._storage = FileSystemCheckpointStorage(checkpoint_path)
        return self

    def get_checkpoint_storage(self) -> CheckpointStorage | None:
        """The checkpoint storage configured for the job, or None if none has been set."""
        return self._storage

    # -- unaligned (accepted for compatibility; epochs are always aligned) ----------------------

    def is_prefer_checkpoint_for_recovery(self) -> bool:
        """What :meth:`set_prefer_checkpoint_for_recovery` set (default False, as PyFlink
        1.x's). A failed job always recovers from its latest completed checkpoint (as in
        Flink 2.x, which dropped the option): savepoints are never used for failover."""
        return self._prefer_checkpoint_for_recovery

    def set_prefer_checkpoint_for_recovery(
        self, prefer_checkpoint_for_recovery: bool
    ) -> CheckpointConfig:
        """PyFlink 1.x: recover from the latest checkpoint even when a newer savepoint
        exists. Kept and read back; recovery uses checkpoints whatever it is."""
        self._prefer_checkpoint_for_recovery = bool(prefer_checkpoint_for_recovery)
        return self

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return self._unaligned

    def enable_unaligned_checkpoints(self, enabled: bool = True) -> CheckpointConfig:
        """Accepted and recorded; has no effect (epoch-boundary checkpoints are aligned)."""
        self._unaligned = bool(enabled)
        return self

    def disable_unaligned_checkpoints(self) -> CheckpointConfig:
        return self.enable_unaligned_checkpoints(False)

    def set_force_unaligned_checkpoints(
        self, force_unaligned_checkpoints: bool = True
    ) -> CheckpointConfig:
        self._force_unaligned = bool(force_unaligned_checkpoints)
        return self

    def is_force_unaligned_checkpoints(self) -> bool:
        return self._force_unaligned

    def set_aligned_checkpoint_timeout(self, alignment_timeout: Any) -> CheckpointConfig:
        """Accepted and read back (a ``Duration``, ``timedelta`` or ms); checkpoints here
        are always aligned at epoch boundaries, so there is no alignment to time out."""
        self._aligned_timeout = to_millis(alignment_timeout)
        return self

    def get_aligned_checkpoint_timeout(self) -> Any:
        from streamstate.common.time import Duration

        return Duration.of_millis(getattr(self, "_aligned_timeout", 0))

    def set_alignment_timeout(self, alignment_timeout: Any) -> CheckpointConfig:
        """Deprecated alias of :meth:`set_aligned_checkpoint_timeout`."""
        return self.set_aligned_checkpoint_timeout(alignment_timeout)

    def get_alignment_timeout(self) -> Any:
        return self.get_aligned_checkpoint_timeout()

    def __repr__(self) -> str:
        return (
            f"CheckpointConfig(interval={self._interval}, mode={self._mode.name}, "
            f"timeout={self._timeout}, min_pause={self._min_pause}, "
            f"max_concurrent={self._max_concurrent}, "
            f"tolerable_failures={self._tolerable_failures}, cleanup={self._cleanup}, "
            f"num_retained={self._num_retained}, storage={self._storage!r})"
        )


if not TYPE_CHECKING:  # a typo stays a type error; at run time PyFlink names get typed errors
    __getattr__ = unsupported_attribute(__name__)
