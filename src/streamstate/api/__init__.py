"""The user-facing contracts that the runtime implements (Flink's ``org.apache.flink.api``).

Functions (``MapFunction``, ``KeyedProcessFunction``, ``CheckpointedFunction``, ...), state
descriptors and the ``State`` interfaces, ``StateTtlConfig``, windows (assigners, triggers,
window functions), the timer service, time domains and output tags. These modules import
only :mod:`streamstate.common` and :mod:`streamstate.errors`; the runtime implements them
and :mod:`streamstate.datastream` re-exports them under PyFlink's module paths, which is
where user code imports them from (``streamstate.datastream.state.ValueStateDescriptor``).
"""
