"""Typed errors raised by streamstate.

Every error names the problem and, where there is one, the fix. All derive from
:class:`StreamStateError` so callers can catch the family.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "CheckpointStorageError",
    "ConfigurationError",
    "ControlPlaneError",
    "CorruptCheckpointError",
    "DuplicateOutputError",
    "FileSinkRestoreError",
    "IllegalLifecycleTransition",
    "InputFormatError",
    "JobExecutionError",
    "KeySerializationError",
    "OutputTypeError",
    "QueryableStateError",
    "RescaleError",
    "ServerBusyError",
    "SourceNotResumableError",
    "StateAccessError",
    "StateDescriptorConflictError",
    "StateMigrationError",
    "StateNotAvailableYetError",
    "StateNotQueryableError",
    "StateSerializationError",
    "StateSizeExceededError",
    "StorageNotSharedError",
    "StoreAccessError",
    "StoreNotInstalledError",
    "StreamStateError",
    "TaskChannelError",
    "TaskFailure",
    "TaskSlotsError",
    "TimestampError",
    "UnknownJobError",
    "UnknownKvStateError",
    "UnsafeDirectoryError",
    "UnsignedCheckpointError",
    "UnsupportedFeatureError",
    "UnsupportedModuleError",
    "WorkerEnvironmentError",
    "WrongKeyTypeError",
]


class StreamStateError(Exception):
    """Base class of every streamstate error."""


class ConfigurationError(StreamStateError, ValueError):
    """A configuration value or API argument is invalid."""


class IllegalLifecycleTransition(StreamStateError, RuntimeError):
    """A lifecycle object (checkpoint, job, transaction) was moved along an edge it does not have."""


class StateAccessError(StreamStateError, RuntimeError):
    """State was used where it is not available (e.g. keyed state outside a keyed stream)."""


class StateDescriptorConflictError(StreamStateError, ValueError):
    """The same state name was registered with a descriptor of another kind or type."""


class StateSerializationError(StreamStateError, TypeError):
    """A state key or value cannot be serialized with the state's serializer."""

    def __init__(self, state_name: str, operator: str, value_type: str, cause: str) -> None:
        self.state_name = state_name
        self.operator = operator
        self.value_type = value_type
        super().__init__(
            f"cannot serialize a value of type {value_type!r} for state {state_name!r} "
            f"of operator {operator!r}: {cause}. Give the state descriptor a type "
            f"information that matches the values (or none, to use pickle)."
        )


class KeySerializationError(StreamStateError, TypeError):
    """A key produced by ``key_by`` cannot be serialized (so it has no key group)."""


class TimestampError(StreamStateError, TypeError):
    """An event timestamp or a timer time that is not int milliseconds."""


class InputFormatError(StreamStateError, ValueError):
    """A source's input cannot be read as its format says (e.g. bytes that are not valid in
    the file's charset); names the input, the position and the fix."""


class OutputTypeError(StreamStateError, TypeError):
    """A user function produced something its operator cannot use, or a value that does not
    fit the type the job declared for it (``output_type``); names the operator and the fix."""


class SourceNotResumableError(StreamStateError, RuntimeError):
    """A ``SourceFunction`` without operator state had to be rebuilt without a failure (its
    subtask moved to another process or machine): its ``run()`` cannot continue where it
    stopped, and starting it again would silently replay its records. The job fails,
    whatever the restart strategy (as Flink's ``SuppressRestartsException``); the fix is
    to keep the source's position in operator state (``CheckpointedFunction``)."""

    #: the executor fails the job instead of asking the restart strategy
    suppresses_restarts = True


class StateMigrationError(StreamStateError):
    """Restored state is incompatible with the descriptor it is restored into, or its
    migration to the descriptor's schema failed. A restart cannot cure it (the same
    checkpoint is restored again), so the job fails whatever the restart strategy."""

    #: the executor fails the job instead of asking the restart strategy
    suppresses_restarts = True


class TaskSlotsError(ConfigurationError):
    """A job needs more task slots at once than its Spark application can ever give it
    (the barrier runner's co-scheduled tasks on a local master with fewer cores, or with
    every slot held while the driver must run Spark jobs of its own). A restart cannot
    cure it, so the job fails whatever the restart strategy; the message names the fix."""

    #: the executor fails the job instead of asking the restart strategy
    suppresses_restarts = True


class WorkerEnvironmentError(ConfigurationError):
    """The Spark executors' Python workers cannot run streamstate (it is not installed in
    the interpreter they use). A restart cannot cure it, so the job fails whatever the
    restart strategy, instead of restarting forever under the default strategy."""

    #: the executor fails the job instead of asking the restart strategy
    suppresses_restarts = True


class UnsafeDirectoryError(ConfigurationError):
    """A directory streamstate keeps private things in (sockets, job state) is not private:
    a symlink, another user's, or open to other users. Refused rather than used."""


class StorageNotSharedError(ConfigurationError):
    """The directory where the job keeps its state (checkpoints, epoch versions) is a local
    path that a Spark executor does not share with the driver: an executor on another
    machine cannot see what the driver wrote there. A restart cannot cure it, so the job
    fails at its first epoch whatever the restart strategy; the message names the setting."""

    #: the executor fails the job instead of asking the restart strategy
    suppresses_restarts = True


class StateSizeExceededError(StreamStateError):
    """State is larger than the configured in-memory checkpoint storage allows."""


class ControlPlaneError(StreamStateError, RuntimeError):
    """A job's REST API cannot be reached, or refused a call (``streamstate list`` etc.)."""


class QueryableStateError(StreamStateError, RuntimeError):
    """A queryable-state lookup failed (the family of the errors below)."""


class UnknownJobError(QueryableStateError, LookupError):
    """The query server does not know the job id (not running in that process, or ended)."""


class UnknownKvStateError(QueryableStateError, LookupError):
    """No state of the job is queryable under that name (names the queryable ones)."""


class StateNotQueryableError(QueryableStateError):
    """The name is a keyed state of the job, but it was not made queryable."""


class WrongKeyTypeError(QueryableStateError, TypeError):
    """The key does not fit the key type given, or that type is not the job's key type."""


class StateNotAvailableYetError(QueryableStateError):
    """No completed epoch (or checkpoint) can answer yet: the job is starting or restarting.

    Retry later; an answer is never made up from state that is not complete."""


class ServerBusyError(QueryableStateError):
    """The query server refused or timed out the request (bounded queue, time-out)."""


class CheckpointError(StreamStateError):
    """A checkpoint could not be completed."""


class CheckpointStorageError(StreamStateError, OSError):
    """Checkpoint storage cannot be read or written."""


class CorruptCheckpointError(CheckpointStorageError):
    """A checkpoint or savepoint is missing its ``_metadata`` or its files are damaged."""


class StoreAccessError(CheckpointStorageError):
    """A store refused the credentials, or its endpoint cannot be reached; names the
    setting (``s3.access-key``, ``s3.endpoint``, ...) that decides it."""


class StoreNotInstalledError(ConfigurationError):
    """A URL names a file system whose fsspec implementation is not installed (``s3://``
    without ``s3fs``); names the package to install."""


class UnsignedCheckpointError(CorruptCheckpointError):
    """A checkpoint's ``_metadata`` carries no signature (an old or downgraded format) and
    the reader did not opt in to unsigned checkpoints by name."""


class FileSinkRestoreError(CorruptCheckpointError):
    """A FileSink restore misses a pending or in-progress file the checkpoint names, and its
    part was never committed in the sink's directory (deleted, or another directory)."""


class RescaleError(StreamStateError, ValueError):
    """A rescale request cannot be applied: a parallelism outside ``1..max parallelism``,
    an unknown operator uid, chained operators asked for different parallelisms, or a
    job without checkpointing; names the problem and the fix."""


class DuplicateOutputError(CheckpointError):
    """A restore would write output again that a sink already committed (a fallback to an
    older checkpoint, or resuming one) and the replay cannot skip it; names what would be
    duplicated and the option that allows it."""


class JobExecutionError(StreamStateError, RuntimeError):
    """The job failed and the restart strategy allows no further attempt.

    ``__cause__`` is the last failure, as the type the worker raised (the worker's
    traceback attached once, as a note). Built with :meth:`caused_by`, the error is also an
    instance of that type where Python allows it, so ``except ValueError`` around
    ``env.execute()`` catches a job whose function raised ``ValueError``.
    """

    @staticmethod
    def caused_by(message: str, cause: BaseException) -> JobExecutionError:
        """A JobExecutionError that is also a ``type(cause)`` (when the two classes combine;
        otherwise a plain JobExecutionError), with ``cause`` as its cause."""
        cls = type(cause)
        err: JobExecutionError
        try:
            combined = _COMBINED.get(cls)
            if combined is None and not issubclass(cls, (JobExecutionError, TaskFailure)):
                combined = type(
                    "JobExecutionError",
                    (JobExecutionError, cls),
                    {"__module__": __name__, "__qualname__": f"JobExecutionError[{cls.__name__}]"},
                )
                _COMBINED[cls] = combined
            if combined is None:
                raise TypeError("no combination")
            err = Exception.__new__(combined)
            Exception.__init__(err, message)
            str(err)  # a class with its own __str__ may need its constructor's fields
        except Exception:  # noqa: BLE001 - the layouts do not combine (e.g. OSError): plain error
            err = JobExecutionError(message)
        err.__cause__ = cause
        err.__suppress_context__ = True
        return err


#: user exception class -> its JobExecutionError combination (built once)
_COMBINED: dict[type, type[JobExecutionError]] = {}


class TaskFailure(StreamStateError, RuntimeError):
    """A subtask failed in a worker; carries the remote Python traceback.

    ``error_type`` is the qualified name of the exception raised in the worker
    (e.g. ``"ValueError"`` or ``"streamstate.errors.KeySerializationError"``).
    """

    def __init__(self, error_type: str, message: str, remote_traceback: str) -> None:
        self.error_type = error_type
        self.remote_traceback = remote_traceback
        super().__init__(f"{error_type}: {message}\n\nworker traceback:\n{remote_traceback}")

    @property
    def suppresses_restarts(self) -> bool:
        """Whether the worker's error is a streamstate error no restart can cure."""
        name = self.error_type.rsplit(".", 1)[-1]
        if self.error_type not in (name, f"streamstate.errors.{name}"):
            return False
        return bool(getattr(globals().get(name), "suppresses_restarts", False))


class TaskChannelError(StreamStateError, ConnectionError):
    """A connection between co-scheduled tasks, or to the driver's coordinator, failed:
    it could not be opened, the other side failed authentication, or it closed in the
    middle of an epoch (``execution.runner: barrier``, docs/epoch.md). The epoch fails
    and the restart strategy restarts the job from its last checkpoint."""


class UnsupportedFeatureError(StreamStateError, NotImplementedError):
    """A PyFlink name streamstate does not support; names the feature, why, what to do
    instead, and the page that lists every such name (``docs/pyflink-compat.md``).

    Not an ``AttributeError`` on purpose: ``from streamstate.datastream import X`` would
    turn one into a bare ``ImportError`` and lose the message.
    """

    PAGE = "docs/pyflink-compat.md"

    def __init__(self, feature: str, reason: str = "", instead: str = "") -> None:
        self.feature = feature
        self.reason = reason
        self.instead = instead
        text = f"{feature} (PyFlink) is not supported by streamstate"
        if reason:
            text += f": {reason}"
        if instead:
            text += f". Instead: {instead}"
        super().__init__(f"{text}. See {self.PAGE} (section 'Not supported').")


class UnsupportedModuleError(UnsupportedFeatureError, ModuleNotFoundError):
    """Importing a PyFlink module streamstate does not have (``streamstate.table``, the
    Kafka connector, ...). Also a ``ModuleNotFoundError``: the usual optional-import
    fallback, ``try: import streamstate.table ... except ImportError: ...``, works."""

    def __init__(self, module: str, reason: str = "", instead: str = "") -> None:
        super().__init__(f"module {module}", reason, instead)
        self.name = module.replace("pyflink", "streamstate", 1)  # ImportError's field
        self.msg = str(self)
