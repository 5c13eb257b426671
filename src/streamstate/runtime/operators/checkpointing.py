"""How operators drive ``CheckpointedFunction`` / ``ListCheckpointed`` user functions.

``ListCheckpointed`` state is kept in an even-split list state named
``_default_`` (Flink's name), so it redistributes like any list state.
"""

from __future__ import annotations

from typing import Any

from streamstate.api.checkpointing import (
    CheckpointedFunction,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    ListCheckpointed,
)

__all__ = [
    "LIST_CHECKPOINTED_STATE",
    "StateInitializationContext",
    "StateSnapshotContext",
    "initialize_function_state",
    "snapshot_function_state",
]

LIST_CHECKPOINTED_STATE = "_default_"


class StateInitializationContext(FunctionInitializationContext):
    def __init__(self, restored: bool, operator_store: Any, keyed_store: Any) -> None:
        self._restored = restored
        self._operator_store = operator_store
        self._keyed_store = keyed_store

    def is_restored(self) -> bool:
        return self._restored

    def get_operator_state_store(self) -> Any:
        return self._operator_store

    def get_keyed_state_store(self) -> Any:
        return self._keyed_store


class StateSnapshotContext(FunctionSnapshotContext):
    __slots__ = ("_cid", "_ts")

    def __init__(self, checkpoint_id: int | None, timestamp_ms: int) -> None:
        self._cid = checkpoint_id
        self._ts = timestamp_ms

    def get_checkpoint_id(self) -> int | None:
        return self._cid

    def get_checkpoint_timestamp(self) -> int:
        return self._ts


def _list_checkpointed_state(context: FunctionInitializationContext) -> Any:
    from streamstate.api.state import ListStateDescriptor

    store = context.get_operator_state_store()
    return store.get_list_state(ListStateDescriptor(LIST_CHECKPOINTED_STATE))


def initialize_function_state(fn: Any, context: FunctionInitializationContext) -> None:
    if fn is None or isinstance(fn, type):
        return
    if isinstance(fn, CheckpointedFunction):
        fn.initialize_state(context)
    elif isinstance(fn, ListCheckpointed):
        state = _list_checkpointed_state(context)
        fn._streamstate_list_state = state  # type: ignore[attr-defined]  # the ListCheckpointed adapter keeps its state on the user function
        if context.is_restored():
            fn.restore_state(list(state.get()))


def snapshot_function_state(fn: Any, checkpoint_id: int | None, timestamp_ms: int) -> None:
    if fn is None or isinstance(fn, type):
        return
    if isinstance(fn, CheckpointedFunction):
        fn.snapshot_state(StateSnapshotContext(checkpoint_id, timestamp_ms))
    elif isinstance(fn, ListCheckpointed):
        values = fn.snapshot_state(checkpoint_id, timestamp_ms)
        fn._streamstate_list_state.update(list(values or ()))  # type: ignore[attr-defined]  # the ListCheckpointed adapter keeps its state on the user function
