"""PyFlink peer for the keyed running-count benchmark (standalone; needs apache-flink).

Run with the PyFlink virtualenv (see Makefile.inc), not the project's .venv, and do not
import streamstate here:

    .bench-venv-pyflink/bin/python benchmarks/peers/pyflink_count.py --records 1000000

Workload: ``records`` rows ``(f"k{i % keys}", 1)``, keyed by key, counted by a
``KeyedProcessFunction`` holding a ``ValueState`` (the running count) at parallelism 2,
Python execution mode ``thread``, streaming runtime mode. Like the Spark peers, the running
count is kept in state and not emitted per record; each key emits its final count once,
from an event-time timer that fires on the end-of-input watermark, as a ``key,count`` line
to a JVM file sink; the lines are read back after the job and checked (sum == records, every
key == its expected count). (``execute_and_collect`` was not used: pulling 10k rows through
its py4j iterator alone took ~20 s, more than the keyed count of 200k records.)

The input list is built and handed to the JVM (``from_collection``, a JVM source) before
the timer starts, mirroring the Spark peers whose input files are written before timing.
The timed part is building the job graph, and running the job on the local mini-cluster
(including writing the final counts). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import site
import sys
import tempfile
import time

from pyflink.common import Configuration, Encoder, Types
from pyflink.datastream import (
    KeyedProcessFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from pyflink.datastream.connectors.file_system import FileSink
from pyflink.datastream.state import ValueStateDescriptor

# Far in the future but below Long.MAX_VALUE: fires only on the end-of-input watermark.
END_OF_INPUT_TIMER = 2**62


class RunningCount(KeyedProcessFunction):
    def open(self, runtime_context) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        current = self.count.value()
        if current is None:
            current = 0
            ctx.timer_service().register_event_time_timer(END_OF_INPUT_TIMER)
        self.count.update(current + value[1])
        return iter(())

    def on_timer(self, timestamp, ctx):
        yield f"{ctx.get_current_key()},{self.count.value()}"


def read_final_counts(out_dir: str) -> dict[str, int]:
    """Read the ``key,count`` lines the file sink wrote (any part file, finished or not)."""
    final: dict[str, int] = {}
    for dirpath, _, files in os.walk(out_dir):
        for name in files:
            with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        key, count = line.strip().rsplit(",", 1)
                        if key in final:
                            raise AssertionError(f"key {key} emitted twice")
                        final[key] = int(count)
    return final


def expected_counts(records: int, keys: int) -> dict[str, int]:
    base, extra = divmod(records, keys)
    return {f"k{j}": base + (1 if j < extra else 0) for j in range(min(keys, records))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="PyFlink keyed running-count peer")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--execution-mode", default="thread", choices=["thread", "process"])
    args = parser.parse_args(argv)

    # In thread mode the Python functions run in an interpreter embedded in the JVM (PEMJA),
    # which does not know it belongs to a virtualenv: hand it this venv's site-packages
    # (pemja, pyflink, ...) through PYTHONPATH, inherited by the JVM we are about to start.
    site_dirs = [p for p in site.getsitepackages() if os.path.isdir(p)]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        site_dirs + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )

    config = Configuration()
    config.set_string("python.execution-mode", args.execution_mode)
    # The Python functions (and, in thread mode, PEMJA's libpython lookup) must use this
    # virtualenv's interpreter, not whatever `python` is on PATH.
    config.set_string("python.executable", sys.executable)
    config.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_runtime_mode(RuntimeExecutionMode.STREAMING)
    env.set_parallelism(args.parallelism)

    row_type = Types.TUPLE([Types.STRING(), Types.LONG()])
    keys = args.keys
    data = [(f"k{i % keys}", 1) for i in range(args.records)]
    source = env.from_collection(data, type_info=row_type)
    del data

    out_dir = tempfile.mkdtemp(prefix="pyflink-count-")
    try:
        start = time.perf_counter()
        counts = (
            source.key_by(lambda r: r[0], key_type=Types.STRING())
            .process(RunningCount(), output_type=Types.STRING())
            .name("running-count")
        )
        counts.sink_to(
            FileSink.for_row_format(out_dir, Encoder.simple_string_encoder()).build()
        ).name("final-counts")
        env.execute("pyflink-keyed-running-count")
        seconds = time.perf_counter() - start
        final = read_final_counts(out_dir)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)

    expected = expected_counts(args.records, args.keys)
    total = sum(final.values())
    if total != args.records or final != expected:
        bad = sorted(k for k in set(final) | set(expected) if final.get(k) != expected.get(k))
        print(
            f"pyflink: wrong result: sum={total} (expected {args.records}), "
            f"{len(bad)} wrong keys, e.g. {[(k, final.get(k), expected.get(k)) for k in bad[:5]]}",
            file=sys.stderr,
        )
        return 1

    print(
        json.dumps(
            {
                "engine": "pyflink",
                "records": args.records,
                "seconds": round(seconds, 3),
                "records_per_second": round(args.records / seconds, 1),
                "keys": args.keys,
                "parallelism": args.parallelism,
                "execution_mode": args.execution_mode,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
