"""Configuration checked at execute(): values of known keys, typos, Flink keys without effect."""

from __future__ import annotations

import logging

import pytest

from streamstate.common import Configuration
from streamstate.datastream.config_validation import KNOWN_KEYS, validate_configuration
from streamstate.errors import ConfigurationError
from tests.support import envs


def run(**keys: str) -> None:
    env = envs.make_env(conf=keys)
    env.from_collection([1, 2, 3]).map(lambda v: v).print()
    env.execute("config")


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("execution.checkpointing.intervall", "execution.checkpointing.interval"),
        ("state.backend.typ", "state.backend.type"),
        ("restart-strategy.fixed-delay.attempt", "restart-strategy.fixed-delay.attempts"),
    ],
)
def test_a_typo_in_a_known_namespace_warns_with_did_you_mean(typo, meant, caplog):
    with caplog.at_level(logging.WARNING, logger="streamstate"):
        run(**{typo: "1"})
    assert f"unknown configuration key '{typo}'" in caplog.text
    assert f"did you mean '{meant}'" in caplog.text


def test_strict_config_turns_the_warning_into_an_error():
    with pytest.raises(ConfigurationError, match="intervall.*did you mean"):
        run(**{"execution.checkpointing.intervall": "10 s", "pipeline.strict-config": "true"})


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("execution.epoch.max-records", "0", "must be >= 1"),
        ("execution.epoch.max-records", "-5", "must be >= 1"),
        ("execution.epoch.max-records", "many", "must be an integer"),
        ("execution.epoch.full-snapshot-interval", "0", "must be >= 1"),
        ("execution.epoch.idle-wait-ms", "-1", "must be >= 0"),
        ("execution.checkpointing.timeout", "soon", "must be a duration"),
        ("execution.checkpointing.num-retained", "0", "must be >= 1"),
        ("execution.runner", "cluster", "must be one of spark, rdd, dataframe, barrier, local"),
        ("state.backend.incremental", "yes", "must be true or false"),
        ("restart-strategy.exponential-delay.jitter-factor", "2", r"must be in \[0.0, 1.0\]"),
        ("execution.task-failure-logs", "maybe", "must be true or false"),
    ],
)
def test_bad_values_of_known_keys_are_typed_errors(key, value, match):
    with pytest.raises(ConfigurationError, match=match):
        validate_configuration({key: value})


def test_bad_max_records_fails_at_execute_instead_of_hanging():
    with pytest.raises(ConfigurationError, match="execution.epoch.max-records must be >= 1"):
        run(**{"execution.epoch.max-records": "0"})


def test_flink_keys_without_effect_and_foreign_namespaces():
    warnings = validate_configuration(
        Configuration()
        .set_string("execution.buffer-timeout", "100 ms")
        .set_string("spark.executor.memory", "2g")
        .set_string("python.executable", "python3")
        .set_string("my.own.key", "x")
    )
    assert warnings == [
        "execution.buffer-timeout has no effect in streamstate: there are no network buffers: "
        "records move in epochs"
    ]


def test_every_key_the_code_reads_is_known():
    import pathlib
    import re

    from streamstate.datastream.config_validation import IGNORED_FLINK_KEYS

    src = pathlib.Path(__file__).resolve().parents[3] / "src" / "streamstate"
    owned = r"(execution|state|restart-strategy|pipeline|parallelism)"
    read = set()
    for p in src.rglob("*.py"):
        read |= set(re.findall(rf'"({owned}[.a-zA-Z0-9_-]*)"', p.read_text()))
    keys = {k for k, _ in read if "." in k or k == "restart-strategy"}
    keys -= {"state.backend.rocksdb"}  # a prefix, not a key
    unknown = sorted(
        k for k in keys if k not in KNOWN_KEYS and k not in IGNORED_FLINK_KEYS and k[-1] != "."
    )
    assert unknown == []
