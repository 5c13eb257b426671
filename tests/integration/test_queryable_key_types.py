"""Queryable state of a job keyed without a key type, on Spark (query hosts): asking with
a declared type says the job's keys are pickled and what to do; the job's own (pickled)
key type and the query server answer."""

from __future__ import annotations

import pytest

from streamstate.common import Types
from streamstate.datastream.connectors.collect import CollectSink
from streamstate.errors import WrongKeyTypeError
from streamstate.queryablestate import QueryableStateClient
from streamstate.runtime.job_status import JobObserver
from tests.support.envs import make_env
from tests.support.queryable import COUNT, QueryableCount, counts

pytestmark = pytest.mark.spark

RECORDS = [f"k{i % 5}" for i in range(30)]


class Asker(JobObserver):
    def __init__(self) -> None:
        self.seen: list[tuple[int, object, object, object, str]] = []

    def on_epoch(self, job_id, stats):
        with QueryableStateClient.for_job(job_id) as direct:
            try:
                direct.get_kv_state(job_id, "counts", "k1", Types.STRING(), COUNT)
                refused = ""
            except WrongKeyTypeError as e:
                refused = str(e)
            pickled = direct.get_kv_state(job_id, "counts", "k1", Types.PICKLED_BYTE_ARRAY(), COUNT)
            none = direct.get_kv_state(job_id, "counts", "k1", None, COUNT)
        with QueryableStateClient.for_job(job_id, direct=False) as server:
            by_value = server.get_kv_state(job_id, "counts", "k1", Types.STRING(), COUNT)
        self.seen.append((stats.epoch, pickled, none, by_value, refused))


def test_a_declared_key_type_against_pickled_keys_says_what_to_do(spark):
    env = make_env(2, spark=spark, max_records=5)
    asker = Asker()
    env.add_job_observer(asker)
    words = env.from_collection(RECORDS, Types.STRING())
    words.key_by(lambda w: w).process(QueryableCount()).uid("c").sink_to(CollectSink())
    env.execute("pickled keys")
    assert asker.seen
    for epoch, pickled, none, by_value, refused in asker.seen:
        expected = counts(RECORDS[: 5 * epoch]).get("k1")  # one source split, 5 an epoch
        assert pickled.value == none.value == by_value.value == expected
        assert "the job's keys are pickled" in refused
        assert "key_type=" in refused and "Types.PICKLED_BYTE_ARRAY()" in refused
        assert "'string'" in refused and "corrupt key" not in refused
