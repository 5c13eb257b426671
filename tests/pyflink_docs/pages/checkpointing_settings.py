"""Checkpoint settings through ``env.get_checkpoint_config()`` (the calls of the
checkpointing page's "Enabling and Configuring Checkpointing", our values and words)."""

from __future__ import annotations

from streamstate.datastream import (
    CheckpointingMode,
    ExternalizedCheckpointCleanup,
    StreamExecutionEnvironment,
)

INTERVAL_MS = 2000
MIN_PAUSE_MS = 250
TIMEOUT_MS = 30_000
TOLERATED_FAILURES = 3


def configured_environment() -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(INTERVAL_MS)
    checkpoints = env.get_checkpoint_config()
    checkpoints.set_checkpointing_mode(CheckpointingMode.EXACTLY_ONCE)
    checkpoints.set_min_pause_between_checkpoints(MIN_PAUSE_MS)
    checkpoints.set_checkpoint_timeout(TIMEOUT_MS)
    checkpoints.set_tolerable_checkpoint_failure_number(TOLERATED_FAILURES)
    checkpoints.set_max_concurrent_checkpoints(1)
    checkpoints.enable_externalized_checkpoints(
        ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION
    )
    checkpoints.enable_unaligned_checkpoints()
    return env
