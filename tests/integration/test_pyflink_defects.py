"""Regression tests of PyFlink programs that failed when ported by changing imports only
(issue 10): the collect iterator, sinks after key_by, print to stdout, and record classes
defined in the job script."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streamstate.common import Row, Types
from streamstate.datastream import CloseableIterator
from streamstate.errors import ConfigurationError
from tests.support import envs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5)]


def test_execute_and_collect_is_a_closeable_iterator_and_limit_a_list_in_order():
    env = envs.make_env(2)
    ds = env.from_collection(DATA)
    with ds.execute_and_collect() as results:
        assert isinstance(results, CloseableIterator)
        assert list(results) == DATA  # a parallelism-1 collect sink keeps the order
    first = envs.make_env(2).from_collection(DATA).map(lambda v: v).execute_and_collect(limit=3)
    assert isinstance(first, list) and len(first) == 3 and set(first) <= set(DATA)


def test_a_sink_after_key_by_gets_the_records_and_print_goes_to_stdout(spark, capfd):
    env = envs.make_env(2, spark=spark)
    env.from_collection(DATA).key_by(lambda v: v[0]).print()
    env.execute("keyed-print")
    out, err = capfd.readouterr()
    lines = [ln for ln in out.splitlines() if "> " in ln]
    values = sorted(ln.split("> ", 1)[1] for ln in lines)
    assert values == sorted(str(v) for v in DATA)  # the records, not (key group, key, value)
    assert all(ln.split("> ", 1)[0] in ("1", "2") for ln in lines)
    assert "('a', 1)" not in err


def test_from_collection_with_a_row_type_yields_rows():
    t = Types.ROW_NAMED(["name", "amount"], [Types.STRING(), Types.INT()])
    env = envs.make_env(1)
    ds = env.from_collection([("a", 1), ("b", 2), ("a", 3)], type_info=t)
    with ds.map(lambda r: r.name).execute_and_collect() as names:
        assert list(names) == ["a", "b", "a"]  # row.field works
    env = envs.make_env(1)
    ds = env.from_collection([("a", 1), ("b", 2), ("a", 3)], type_info=t)
    summed = ds.key_by(lambda r: r.name).sum("amount").execute_and_collect(limit=10)
    assert summed == [Row(name="a", amount=1), Row(name="b", amount=2), Row(name="a", amount=4)]
    positional = envs.make_env(1).from_collection([(1, 2)], Types.ROW([Types.INT(), Types.INT()]))
    # Types.ROW fields are named f0, f1, ... as in PyFlink (its row coder sets them)
    assert positional.execute_and_collect(limit=1) == [Row(f0=1, f1=2)]
    with pytest.raises(ConfigurationError, match="has 1 fields"):
        envs.make_env(1).from_collection([("a",)], type_info=t)


@pytest.mark.parametrize("hosts", ["true", "false"])
def test_record_classes_of_the_job_script_travel(hosts):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "main_class_job.py"), hosts],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = sorted(ln for ln in proc.stdout.splitlines() if "> Order(" in ln)
    assert len(printed) == 5  # every reduce output, printed on the driver's stdout
    assert "Order(user='a', amount=9)" in proc.stdout
    assert "COLLECTED [('a', 1), ('a', 4), ('a', 9), ('b', 2), ('b', 6)]" in proc.stdout
