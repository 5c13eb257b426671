"""Typed errors raised by streamstate.

Every error names the problem and, where there is one, the fix. All derive from
:class:`StreamStateError` so callers can catch the family.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "CheckpointStorageError",
    "ConfigurationError",
    "CorruptCheckpointError",
    "IllegalLifecycleTransition",
    "JobExecutionError",
    "KeySerializationError",
    "StateAccessError",
    "StateDescriptorConflictError",
    "StateMigrationError",
    "StateSerializationError",
    "StateSizeExceededError",
    "StreamStateError",
    "TaskFailure",
    "TimestampError",
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


class StateMigrationError(StreamStateError):
    """Restored state is incompatible with the descriptor it is restored into."""


class StateSizeExceededError(StreamStateError):
    """State is larger than the configured in-memory checkpoint storage allows."""


class CheckpointError(StreamStateError):
    """A checkpoint could not be completed."""


class CheckpointStorageError(StreamStateError, OSError):
    """Checkpoint storage cannot be read or written."""


class CorruptCheckpointError(CheckpointStorageError):
    """A checkpoint or savepoint is missing its ``_metadata`` or its files are damaged."""


class JobExecutionError(StreamStateError, RuntimeError):
    """The job failed and the restart strategy allows no further attempt.

    ``__cause__`` carries the last failure (the user's traceback where the user's code raised).
    """


class TaskFailure(StreamStateError, RuntimeError):
    """A subtask failed in a worker; carries the remote Python traceback.

    ``error_type`` is the qualified name of the exception raised in the worker
    (e.g. ``"ValueError"`` or ``"streamstate.errors.KeySerializationError"``).
    """

    def __init__(self, error_type: str, message: str, remote_traceback: str) -> None:
        self.error_type = error_type
        self.remote_traceback = remote_traceback
        super().__init__(f"{error_type}: {message}\n\nworker traceback:\n{remote_traceback}")
