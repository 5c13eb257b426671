"""PyFlink names added for parity, with their semantics: ExecutionConfig, JobClient/JobID,
Configuration extras, ConfigOptions, serialization schemas, Row extras, SlotSharingGroup,
MemorySize, ExternalizedCheckpointRetention, the connector base classes."""

from __future__ import annotations

import pytest

from streamstate.common import (
    ByteArraySchema,
    ConfigOptions,
    Configuration,
    ExecutionConfig,
    JobClient,
    JobID,
    JobStatus,
    Row,
    RowKind,
    SimpleStringSchema,
)
from streamstate.common.serialization import RowFieldExtractorSchema
from streamstate.datastream import (
    CheckpointConfig,
    ExternalizedCheckpointCleanup,
    ExternalizedCheckpointRetention,
    MapFunction,
    MemorySize,
    SlotSharingGroup,
)
from streamstate.datastream.connectors import DeliveryGuarantee, Sink, Source
from streamstate.datastream.connectors.collect import CollectSink
from streamstate.errors import ConfigurationError, OutputTypeError
from tests.support.envs import make_env


def test_execution_config_holds_the_environments_parallelism():
    env = make_env(parallelism=3)
    cfg = env.get_config()
    assert isinstance(cfg, ExecutionConfig)
    assert cfg.get_parallelism() == 3
    cfg.set_parallelism(2).set_max_parallelism(64)
    assert env.get_parallelism() == 2 and env.get_max_parallelism() == 64
    assert ExecutionConfig().get_parallelism() == ExecutionConfig.PARALLELISM_DEFAULT
    with pytest.raises(ConfigurationError):
        cfg.set_parallelism(0)
    with pytest.raises(ConfigurationError):
        cfg.set_max_parallelism(1 << 16)


def test_execution_config_switches_are_kept():
    cfg = ExecutionConfig()
    assert cfg.get_auto_watermark_interval() == 200
    cfg.set_auto_watermark_interval(50).enable_object_reuse().disable_generic_types()
    assert cfg.get_auto_watermark_interval() == 50
    assert cfg.is_object_reuse_enabled() and cfg.has_generic_types_disabled()
    assert cfg.get_registered_kryo_types() == []


class _Upper(MapFunction):
    def open(self, runtime_context):
        self.suffix = runtime_context.get_job_parameter("suffix", "?")

    def map(self, value):
        return value.upper() + self.suffix


def test_global_job_parameters_reach_functions_and_uids_can_be_required():
    env = make_env(parallelism=1)
    env.get_config().set_global_job_parameters({"suffix": "!"})
    assert env.from_collection(["a", "b"]).map(_Upper()).execute_and_collect(limit=2) == [
        "A!",
        "B!",
    ]

    env = make_env(parallelism=1)
    env.get_config().disable_auto_generated_uids()
    env.from_collection(["a"]).uid("src").map(_Upper()).name("upper").print()
    with pytest.raises(ConfigurationError, match="'upper', 'Print' have no uid"):
        env.execute()
    env = make_env(parallelism=1)
    env.get_config().disable_auto_generated_uids()
    sink = CollectSink()
    env.from_collection(["a"]).uid("src").map(_Upper()).uid("up").sink_to(sink).uid("out")
    env.execute()
    assert sink.get_results() == ["A?"]


def test_job_client_reports_id_status_and_result():
    env = make_env(parallelism=1)
    sink = CollectSink()
    env.from_collection([1, 2, 3]).map(lambda v: v * 10).sink_to(sink)
    client = env.execute_async("job-client")
    assert isinstance(client, JobClient)
    result = client.get_job_execution_result().result()
    job_id = client.get_job_id()
    assert isinstance(job_id, JobID) and job_id == result.get_job_id()
    assert client.get_job_status().result() is JobStatus.FINISHED
    assert sorted(sink.get_results()) == [10, 20, 30]
    assert isinstance(client.get_accumulators().result(), dict)


def test_configuration_bytearray_list_values_and_config_options():
    conf = Configuration.from_dict({"a": "1"})
    conf.set_bytearray("blob", b"\x00\xffx")
    assert conf.get_bytearray("blob", b"") == bytearray(b"\x00\xffx")
    assert conf.get_bytearray("none", b"d") == bytearray(b"d")
    assert Configuration.parse_list_value("a;'b;c';d") == ["a", "b;c", "d"]
    assert Configuration.parse_list_value("") == []
    opt = ConfigOptions.key("my.size").int_type().default_value(7)
    assert conf.get(opt) == 7
    conf.set(opt, 9)
    assert conf.get(opt) == 9 and conf.get_integer("my.size", 0) == 9
    with pytest.raises(ConfigurationError):
        ConfigOptions.key("x").int_type().default_value("seven")


def test_serialization_schemas_round_trip():
    s = SimpleStringSchema()
    assert s.deserialize(s.serialize("héllo")) == "héllo"
    b = ByteArraySchema()
    assert b.deserialize(b.serialize(b"\x01")) == b"\x01"
    with pytest.raises(OutputTypeError):
        b.serialize("text")
    assert RowFieldExtractorSchema(1).serialize(Row(b"k", b"v")) == b"v"
    with pytest.raises(OutputTypeError, match="must be bytes"):
        RowFieldExtractorSchema(0).serialize(Row("k", b"v"))


def test_row_of_kind_and_fields_by_names():
    row = Row.of_kind(RowKind.DELETE, a=1, b="x")
    assert row.get_row_kind() is RowKind.DELETE
    assert row.get_fields_by_names(["b", "a"]) == ["x", 1]
    with pytest.raises(ValueError, match="not exist"):
        row.get_fields_by_names(["c"])


def test_slot_sharing_group_and_memory_size():
    ssg = (
        SlotSharingGroup.builder("heavy")
        .set_cpu_cores(2.0)
        .set_task_heap_memory_mb(512)
        .set_external_resource("gpu", 1)
        .build()
    )
    assert ssg.get_name() == "heavy" and ssg.get_cpu_cores() == 2.0
    assert ssg.get_task_heap_memory() == MemorySize.of_mebi_bytes(512)
    assert ssg.get_external_resources() == {"gpu": 1.0}
    assert MemorySize(bytes_size=3 << 30).get_gibi_bytes() == 3
    assert MemorySize.of_mebi_bytes(1) < MemorySize.of_mebi_bytes(2)
    with pytest.raises(ConfigurationError, match="cpu cores and task heap"):
        SlotSharingGroup.builder("x").set_managed_memory_mb(10).build()


def test_externalized_checkpoint_retention_is_pyflink_2_name_of_cleanup():
    cc = CheckpointConfig()
    cc.set_externalized_checkpoint_retention(ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION)
    assert (
        cc.get_externalized_checkpoint_retention()
        is ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION
    )


def test_connector_base_classes():
    from streamstate.datastream.connectors import FileSource, NumberSequenceSource

    assert issubclass(NumberSequenceSource, Source) and issubclass(FileSource, Source)
    env = make_env(parallelism=1)
    wrapped = Source(NumberSequenceSource(1, 3)._runtime_source())
    sink = CollectSink()
    env.from_source(wrapped, source_name="seq").sink_to(Sink(sink))
    env.execute()
    assert sorted(sink.get_results()) == [1, 2, 3]
    with pytest.raises(ConfigurationError, match="runtime source"):
        Source(object())
    assert DeliveryGuarantee.EXACTLY_ONCE.value == "exactly-once"


def test_sql_types_internal_forms_are_pyflinks():
    import datetime

    from streamstate.common import Types

    assert not Types.INT().need_conversion() and Types.INT().to_internal_type(3) == 3
    date = Types.SQL_DATE()
    assert date.need_conversion()
    assert date.to_internal_type(datetime.date(1970, 1, 11)) == 10
    assert date.from_internal_type(10) == datetime.date(1970, 1, 11)
    t = Types.SQL_TIME()
    assert t.to_internal_type(datetime.time(0, 0, 1, 5)) == 1_000_005
    ts = Types.SQL_TIMESTAMP()
    aware = datetime.datetime(1970, 1, 1, 0, 0, 2, 7, tzinfo=datetime.UTC)
    assert ts.to_internal_type(aware) == 2_000_007
    naive = datetime.datetime(2024, 5, 6, 7, 8, 9, 10)
    assert ts.from_internal_type(ts.to_internal_type(naive)) == naive


def test_flink_pipeline_keys_set_the_execution_config():
    env = make_env(
        parallelism=1,
        conf={
            "pipeline.global-job-parameters": "suffix:!,region:eu",
            "pipeline.auto-generate-uids": "false",
            "pipeline.auto-watermark-interval": "50 ms",
        },
    )
    cfg = env.get_config()
    assert cfg.get_global_job_parameters() == {"suffix": "!", "region": "eu"}
    assert not cfg.has_auto_generated_uids_enabled()
    assert cfg.get_auto_watermark_interval() == 50
    with pytest.raises(ConfigurationError, match="k1:v1"):
        make_env(conf={"pipeline.global-job-parameters": "novalue"})


def test_job_client_answers_futures_as_pyflink():
    from streamstate.common import CompletableFuture
    from streamstate.datastream.connectors.collect import DiscardingSink
    from streamstate.testing import TickingClock
    from tests.support.control import Gate

    gate = Gate(1)
    env = make_env(parallelism=1, max_records=1)
    env.set_clock(TickingClock())
    env.add_job_observer(gate)
    env.from_collection(list(range(100))).sink_to(DiscardingSink())
    client = env.execute_async("futures")
    gate.wait()
    status = client.get_job_status()
    assert isinstance(status, CompletableFuture) and status.result() is JobStatus.RUNNING
    outcome = client.get_job_execution_result()
    assert isinstance(outcome, CompletableFuture) and not outcome.done()
    stopped = client.cancel()
    gate.release()
    assert stopped.result(60) is None
    assert outcome.result(60).get_job_id() == client.get_job_id()
    assert client.get_job_status().result() is JobStatus.CANCELED
