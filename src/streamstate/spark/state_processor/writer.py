"""``SavepointWriter`` and ``OperatorTransformation``: write a savepoint from DataFrames.

::

    balances = OperatorTransformation.bootstrap_with(accounts_df) \\
        .key_by(lambda row: row.account_id) \\
        .transform(BalanceBootstrapper())
    SavepointWriter.new_savepoint(spark, HashMapStateBackend(), 128) \\
        .with_operator("balances", balances) \\
        .write("/savepoints/bootstrap")
    # then: streamstate run --from-savepoint /savepoints/bootstrap job.py

Keyed bootstrapping is one Spark job: every row is keyed on the executors (the key
selector gets the row as a :class:`~streamstate.common.Row`), shuffled to the task of
its key-group range, and each task runs the bootstrap function over its range's rows
and writes the range's canonical snapshot into the savepoint directory
(``runtime/state_processor/bootstrap.py``). State kept from an existing savepoint is
copied by one task per subtask. The driver then writes and signs ``_metadata``, last. A
failed write deletes the directory it started (it never got ``_metadata``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from streamstate.api.state_processor import (
    BroadcastStateBootstrapFunction,
    KeyedStateBootstrapFunction,
    OperatorIdentifier,
    StateBootstrapFunction,
)
from streamstate.errors import ConfigurationError, KeySerializationError
from streamstate.runtime.checkpoint.metadata import (
    CheckpointMetadata,
    OperatorSubtaskStates,
    SubtaskState,
)
from streamstate.runtime.keygroups import (
    compute_key_group_for_serialized_key,
    compute_operator_index_for_key_group,
)
from streamstate.runtime.operators.base import as_callable
from streamstate.runtime.serializers.key import default_key_serializer
from streamstate.runtime.serializers.registry import serializer_for
from streamstate.runtime.state_processor.bootstrap import (
    KeyedBootstrapSpec,
    OperatorBootstrapSpec,
    bootstrap_keyed_range,
    bootstrap_operator_state,
)
from streamstate.runtime.state_processor.plan import (
    BackendSpec,
    backend_spec,
    load_savepoint,
    split_ranges,
)
from streamstate.runtime.state_processor.writing import (
    check_max_parallelism,
    create_target,
    discard_target,
    relocate_subtask,
    savepoint_metadata,
)
from streamstate.spark.schema import from_spark
from streamstate.spark.session import check_session_python, require_classic

__all__ = [
    "KeyedOperatorTransformation",
    "OneInputOperatorTransformation",
    "OperatorTransformation",
    "SavepointWriter",
    "StateBootstrapTransformation",
]


def _uid(operator: str | OperatorIdentifier) -> str:
    return OperatorIdentifier.of(operator).identifier


# -- tasks (module level: pickled by reference) ---------------------------------------------


def _key_rows(selector: Any, key_serializer: Any, max_parallelism: int, rows: Any) -> Any:
    """``(key group, (key, row))`` of each Spark row, the row as a streamstate Row."""
    for row in rows:
        value = from_spark(row)
        key = selector(value)
        try:
            key_bytes = key_serializer.serialize(key)
        except Exception as e:
            raise KeySerializationError(
                f"bootstrap: the key {key!r:.60} of row {value!r:.80} cannot be serialized "
                f"({type(e).__name__}: {e}); return a str, int, tuple... from the key selector, "
                f"or declare its key_type"
            ) from e
        yield compute_key_group_for_serialized_key(key_bytes, max_parallelism), (key, value)


def _range_of(max_parallelism: int, parallelism: int, key_group: int) -> int:
    return compute_operator_index_for_key_group(max_parallelism, parallelism, key_group)


def _keyed_task(spec: KeyedBootstrapSpec, function: Any, index: int, it: Any) -> Any:
    records = ((key_group, key, value) for key_group, (key, value) in it)
    yield index, bootstrap_keyed_range(spec, index, function, records)


def _operator_task(spec: OperatorBootstrapSpec, function: Any, index: int, rows: Any) -> Any:
    values = (from_spark(row) for row in rows)
    yield index, bootstrap_operator_state(spec, index, function, values)


def _copy_task(target: Any, item: tuple[str, int, SubtaskState]) -> Any:
    uid, index, state = item
    return uid, index, relocate_subtask(target, uid, index, state)


# -- transformations ------------------------------------------------------------------------


class StateBootstrapTransformation:
    """The state of one operator, to be written from a DataFrame (``with_operator``)."""

    def __init__(
        self,
        dataframe: Any,
        function: Any,
        max_parallelism: int | None,
        key_selector: Any = None,
        key_serializer: Any = None,
    ) -> None:
        self.dataframe = dataframe
        self.function = function
        self.max_parallelism = max_parallelism
        self.key_selector = key_selector
        self.key_serializer = key_serializer

    def _parallelism(self, max_parallelism: int) -> int:
        df = self.dataframe
        partitions = max(df.rdd.getNumPartitions(), df.sparkSession.sparkContext.defaultParallelism)
        return max(1, min(partitions, max_parallelism))

    def write(
        self, uid: str, target: Any, backend: BackendSpec, default_max_parallelism: int
    ) -> Any:
        """Run the Spark job; the operator's :class:`OperatorSubtaskStates`."""
        max_parallelism = self.max_parallelism or default_max_parallelism
        if self.key_selector is not None:
            return self._write_keyed(uid, target, backend, max_parallelism)
        broadcast = isinstance(self.function, BroadcastStateBootstrapFunction)
        df = self.dataframe.coalesce(1) if broadcast else self.dataframe
        parallelism = df.rdd.getNumPartitions()
        max_parallelism = max(max_parallelism, parallelism)
        spec = OperatorBootstrapSpec(uid, broadcast, parallelism, max_parallelism, target)
        written = dict(
            df.rdd.mapPartitionsWithIndex(partial(_operator_task, spec, self.function)).collect()
        )
        subtasks = tuple(SubtaskState(operator=(written[i],)) for i in range(parallelism))
        return OperatorSubtaskStates(parallelism, max_parallelism, subtasks)

    def _write_keyed(
        self, uid: str, target: Any, backend: BackendSpec, max_parallelism: int
    ) -> Any:
        parallelism = self._parallelism(max_parallelism)
        ranges = split_ranges(max_parallelism, parallelism)
        spec = KeyedBootstrapSpec(
            uid, max_parallelism, ranges, self.key_serializer, backend, target
        )
        keyed = self.dataframe.rdd.mapPartitions(
            partial(_key_rows, self.key_selector, self.key_serializer, max_parallelism)
        )
        shuffled = keyed.partitionBy(parallelism, partial(_range_of, max_parallelism, parallelism))
        written = dict(
            shuffled.mapPartitionsWithIndex(partial(_keyed_task, spec, self.function)).collect()
        )
        subtasks = tuple(SubtaskState(keyed=(written[i],)) for i in range(parallelism))
        return OperatorSubtaskStates(parallelism, max_parallelism, subtasks)


class KeyedOperatorTransformation:
    """``bootstrap_with(df).key_by(selector)``: keyed state, one task per key-group range."""

    def __init__(self, source: OneInputOperatorTransformation, selector: Any, key_serializer: Any):
        self._source = source
        self._selector = selector
        self._key_serializer = key_serializer

    def transform(self, function: KeyedStateBootstrapFunction) -> StateBootstrapTransformation:
        if not isinstance(function, KeyedStateBootstrapFunction):
            raise ConfigurationError(
                f"a keyed transformation takes a KeyedStateBootstrapFunction, got {function!r}"
            )
        source = self._source
        return StateBootstrapTransformation(
            source.dataframe,
            function,
            source.max_parallelism,
            self._selector,
            self._key_serializer,
        )


class OneInputOperatorTransformation:
    """``OperatorTransformation.bootstrap_with(df)``: key it, or write operator state."""

    def __init__(self, dataframe: Any) -> None:
        if not hasattr(dataframe, "rdd") or not hasattr(dataframe, "sparkSession"):
            raise ConfigurationError(f"bootstrap_with() takes a Spark DataFrame, got {dataframe!r}")
        self.dataframe = dataframe
        self.max_parallelism: int | None = None

    def set_max_parallelism(self, max_parallelism: int) -> OneInputOperatorTransformation:
        """This operator's max parallelism (default: the savepoint writer's)."""
        self.max_parallelism = check_max_parallelism(max_parallelism)
        return self

    def key_by(self, key_selector: Any, key_type: Any = None) -> KeyedOperatorTransformation:
        """Key the rows as the job keys its stream: the same selector result and
        ``key_type`` (``None``: the default key serializer, as ``key_by`` without one)."""
        selector = as_callable(key_selector, "get_key")
        key_serializer = (
            serializer_for(key_type) if key_type is not None else default_key_serializer()
        )
        return KeyedOperatorTransformation(self, selector, key_serializer)

    def transform(
        self, function: StateBootstrapFunction | BroadcastStateBootstrapFunction
    ) -> StateBootstrapTransformation:
        """Operator state: list / union list state (``StateBootstrapFunction``, one subtask
        per DataFrame partition) or broadcast state (``BroadcastStateBootstrapFunction``)."""
        if not isinstance(function, (StateBootstrapFunction, BroadcastStateBootstrapFunction)):
            raise ConfigurationError(
                f"transform() takes a StateBootstrapFunction or BroadcastStateBootstrapFunction "
                f"(key_by(...) first for a KeyedStateBootstrapFunction), got {function!r}"
            )
        return StateBootstrapTransformation(self.dataframe, function, self.max_parallelism)


class OperatorTransformation:
    """Entry point of bootstrapping: ``OperatorTransformation.bootstrap_with(dataframe)``."""

    @staticmethod
    def bootstrap_with(dataframe: Any) -> OneInputOperatorTransformation:
        return OneInputOperatorTransformation(dataframe)


# -- the writer -----------------------------------------------------------------------------


class SavepointWriter:
    """Builds a savepoint: new operators from DataFrames, kept, removed or renamed ones from
    an existing savepoint; :meth:`write` runs the Spark jobs and writes ``_metadata``."""

    def __init__(
        self,
        spark: Any,
        backend: BackendSpec,
        max_parallelism: int,
        base: CheckpointMetadata | None = None,
    ) -> None:
        self.spark = require_classic(spark, "the State Processor API (SavepointWriter)")
        self.backend = backend
        self.max_parallelism = max_parallelism
        self._base = base
        self._new: dict[str, StateBootstrapTransformation] = {}
        self._removed: set[str] = set()
        self._renamed: dict[str, str] = {}

    @staticmethod
    def new_savepoint(
        spark: Any, backend: Any = None, max_parallelism: int = 128
    ) -> SavepointWriter:
        """An empty savepoint; its operators' max parallelism is ``max_parallelism``
        (it must equal the restoring job's: 128 by default for parallelism <= 85)."""
        return SavepointWriter(spark, backend_spec(backend), check_max_parallelism(max_parallelism))

    @staticmethod
    def from_existing_savepoint(spark: Any, path: str, backend: Any = None) -> SavepointWriter:
        """Start from the savepoint (or retained checkpoint) at ``path``: its operators are
        kept (copied) unless removed; its source positions too."""
        metadata = load_savepoint(path)
        max_parallelism = max(
            (operator.max_parallelism for operator in metadata.operator_states.values()),
            default=128,
        )
        return SavepointWriter(spark, backend_spec(backend), max_parallelism, metadata)

    def _existing(self) -> dict[str, OperatorSubtaskStates]:
        return dict(self._base.operator_states) if self._base is not None else {}

    def _current_uids(self) -> set[str]:
        kept = {self._renamed.get(uid, uid) for uid in self._existing() if uid not in self._removed}
        return kept | set(self._new)

    def with_operator(
        self, uid: str | OperatorIdentifier, transformation: StateBootstrapTransformation
    ) -> SavepointWriter:
        """Add the state of operator ``uid`` written by ``transformation``."""
        operator_uid = _uid(uid)
        if not isinstance(transformation, StateBootstrapTransformation):
            raise ConfigurationError(
                f"with_operator() takes a transformation "
                f"(OperatorTransformation.bootstrap_with(df)...transform(fn)), got {transformation!r}"
            )
        if operator_uid in self._current_uids():
            raise ConfigurationError(
                f"the savepoint already has operator {operator_uid!r}: "
                f"remove_operator({operator_uid!r}) first to replace its state"
            )
        self._new[operator_uid] = transformation
        return self

    def remove_operator(self, uid: str | OperatorIdentifier) -> SavepointWriter:
        """Drop operator ``uid``'s state (of the existing savepoint, or added here)."""
        operator_uid = _uid(uid)
        if self._new.pop(operator_uid, None) is not None:
            return self
        old = next((old for old, new in self._renamed.items() if new == operator_uid), operator_uid)
        if old not in self._existing() or old in self._removed:
            known = ", ".join(repr(uid) for uid in sorted(self._current_uids())) or "none"
            raise ConfigurationError(
                f"the savepoint has no operator {operator_uid!r}; its operators: {known}"
            )
        self._removed.add(old)
        return self

    def change_operator_identifier(
        self, from_uid: str | OperatorIdentifier, to_uid: str | OperatorIdentifier
    ) -> SavepointWriter:
        """Move an existing operator's state to another uid (a job whose uid changed)."""
        old, new = _uid(from_uid), _uid(to_uid)
        if old in self._renamed:
            raise ConfigurationError(
                f"operator {old!r} is already renamed to {self._renamed[old]!r}"
            )
        if old not in self._existing() or old in self._removed:
            raise ConfigurationError(
                f"change_operator_identifier: the existing savepoint has no operator {old!r}; "
                f"its operators: {', '.join(repr(u) for u in sorted(self._existing())) or 'none'}"
            )
        if new in self._current_uids():
            raise ConfigurationError(f"the savepoint already has operator {new!r}")
        self._renamed[old] = new
        return self

    def write(self, path: str) -> str:
        """Write the savepoint into the new directory ``path``; returns ``path``."""
        if not self._current_uids():
            raise ConfigurationError(
                "the savepoint would hold no operator: add one with with_operator"
            )
        check_session_python(self.spark)  # its tasks run streamstate: a clear error, not a stack
        target = create_target(path)
        try:
            operators = self._copy_existing(target)
            for uid, transformation in self._new.items():
                operators[uid] = transformation.write(
                    uid, target, self.backend, self.max_parallelism
                )
            metadata = savepoint_metadata(self._base, operators, self._renamed, self._removed)
            target.store_metadata(metadata)
        except BaseException:
            discard_target(target)
            raise
        return target.url

    def _copy_existing(self, target: Any) -> dict[str, OperatorSubtaskStates]:
        kept = {uid: op for uid, op in self._existing().items() if uid not in self._removed}
        items = [
            (self._renamed.get(uid, uid), index, subtask)
            for uid, op in kept.items()
            for index, subtask in enumerate(op.subtasks)
            if subtask.keyed or subtask.operator
        ]
        copied: dict[tuple[str, int], SubtaskState] = {}
        if items:
            spark_context = self.spark.sparkContext
            tasks = spark_context.parallelize(items, len(items)).map(partial(_copy_task, target))
            for uid, index, subtask in tasks.collect():
                copied[(uid, index)] = subtask
        out: dict[str, OperatorSubtaskStates] = {}
        for uid, op in kept.items():
            new_uid = self._renamed.get(uid, uid)
            subtasks = tuple(
                copied.get((new_uid, index), subtask) for index, subtask in enumerate(op.subtasks)
            )
            out[new_uid] = OperatorSubtaskStates(op.parallelism, op.max_parallelism, subtasks)
        return out
