"""Query a running job's keyed state (Flink's ``org.apache.flink.queryablestate.client``).

::

    from streamstate.queryablestate import QueryableStateClient

    client = QueryableStateClient.for_job(job_id)        # address and token from the registry
    answer = client.get_kv_state(job_id, "balances", "alice", Types.STRING(),
                                 ValueStateDescriptor("balance", Types.LONG()))
    answer.value, answer.epoch                          # the value as of the last epoch
"""

from streamstate.queryablestate.client import (
    KvStateResponse,
    KvStatesResponse,
    QueryableStateClient,
)

__all__ = ["KvStateResponse", "KvStatesResponse", "QueryableStateClient"]
