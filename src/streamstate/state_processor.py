"""The State Processor API: read and write savepoints as Spark DataFrames.

Flink has it in Java (``org.apache.flink.state.api``); PyFlink lacks it. Here it runs on
Spark: reading a savepoint (or a retained checkpoint) of any state backend and format is
a Spark job with one task per key-group range, and writing one bootstraps a job's state
from DataFrames::

    from streamstate.state_processor import (
        KeyedStateReaderFunction, OperatorTransformation, SavepointReader, SavepointWriter,
    )

    reader = SavepointReader.read(spark, "/savepoints/savepoint-1a2b3c-...", HashMapStateBackend())
    balances = reader.read_keyed_state("balances", BalanceReader())  # schema inferred, or
    # output_type=Types.ROW_NAMED(["id", "balance"], [...]) to declare it

    SavepointWriter.new_savepoint(spark, HashMapStateBackend(), 128).with_operator(
        "balances",
        OperatorTransformation.bootstrap_with(accounts_df)
            .key_by(lambda row: row.id).transform(BalanceBootstrapper()),
    ).write("/savepoints/bootstrapped")

See docs/state-processor.md for how it works (and what it does not do: merging windows).
"""

from __future__ import annotations

from streamstate.api.state_processor import (
    BroadcastStateBootstrapFunction,
    Collector,
    KeyedStateBootstrapFunction,
    KeyedStateReaderFunction,
    OperatorIdentifier,
    StateBootstrapFunction,
    WindowReaderFunction,
)
from streamstate.common.savepoint import SavepointFormatType
from streamstate.spark.state_processor.reader import SavepointReader, WindowSavepointReader
from streamstate.spark.state_processor.writer import (
    KeyedOperatorTransformation,
    OneInputOperatorTransformation,
    OperatorTransformation,
    SavepointWriter,
    StateBootstrapTransformation,
)

__all__ = [
    "BroadcastStateBootstrapFunction",
    "Collector",
    "KeyedOperatorTransformation",
    "KeyedStateBootstrapFunction",
    "KeyedStateReaderFunction",
    "OneInputOperatorTransformation",
    "OperatorIdentifier",
    "OperatorTransformation",
    "SavepointFormatType",
    "SavepointReader",
    "SavepointWriter",
    "StateBootstrapFunction",
    "StateBootstrapTransformation",
    "WindowReaderFunction",
    "WindowSavepointReader",
]
