"""Temperature alerts: keyed ValueState, checkpoints and a failure, on Spark.

The job from "Stream Processing with Apache Flink" (ch. 7): for every sensor keep the
last temperature in a ``ValueState`` and raise an alert when a reading jumps more
than ``--threshold`` degrees (1.7 by default) away from the previous one::

    FileSource(text lines) -> map(parse) -> [FailOnce] -> key_by(sensor)
        -> KeyedProcessFunction(ValueState "last_temp") -> CollectSink

The script generates the input (``--sensors`` x ``--readings`` CSV lines
``sensor_id,timestamp,temperature``; a seeded random walk, so every run reads the
same data), then runs the job twice on one SparkSession:

1. failure-free;
2. with a failure injected in epoch 3 on subtask 0; the fixed-delay restart strategy
   restores the latest checkpoint, rewinds the file source and replays.

It prints a short report and exits 1 unless both runs produced the same alerts
(exactly-once: no alert lost, none duplicated).

    python examples/temperature_alerts.py [--readings 500] [--master local[2]]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from streamstate.common import Configuration, Types
from streamstate.common.restart_strategy import RestartStrategies
from streamstate.datastream import (
    ExternalizedCheckpointCleanup,
    KeyedProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
)
from streamstate.datastream.connectors import CollectSink, FileSource, StreamFormat
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.testing import FailOnce

Reading = tuple[str, int, float]  # (sensor_id, timestamp ms, temperature °C)
Alert = tuple[str, int, float, float, float]  # (sensor_id, timestamp, last, current, jump)


# -- the job ------------------------------------------------------------------------------------


def parse(line: str) -> Reading:
    sensor, ts, temp = line.split(",")
    return sensor, int(ts), float(temp)


class TemperatureAlertFunction(KeyedProcessFunction):
    """Alert when a sensor's temperature jumps more than ``threshold`` degrees."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def open(self, runtime_context: RuntimeContext) -> None:
        self.last_temp = runtime_context.get_state(
            ValueStateDescriptor("last_temp", Types.DOUBLE())
        )

    def process_element(self, value: Reading, ctx: Any) -> Iterator[Alert]:
        sensor, ts, temp = value
        last = self.last_temp.value()
        if last is not None:
            jump = abs(temp - last)
            if jump > self.threshold:
                yield sensor, ts, last, temp, round(jump, 2)
        self.last_temp.update(temp)


def build_and_run(
    spark: Any,
    input_dir: str,
    checkpoint_dir: str,
    threshold: float,
    parallelism: int,
    epoch_records: int,
    fail: FailOnce | None = None,
) -> tuple[list[Alert], dict[str, Any]]:
    conf = Configuration()
    conf.set_string("execution.epoch.max-records", str(epoch_records))
    env = StreamExecutionEnvironment.get_execution_environment(conf, spark=spark)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(1)  # a checkpoint at every epoch boundary
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage_dir(checkpoint_dir)
    cc.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))

    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), input_dir).build()
    readings = env.from_source(source, source_name="sensor files").map(parse).uid("parse")
    if fail is not None:
        readings = readings.map(fail).uid("fail-once")
    alerts = (
        readings.key_by(lambda r: r[0]).process(TemperatureAlertFunction(threshold)).uid("alerts")
    )
    sink = CollectSink()
    alerts.sink_to(sink)
    result = env.execute("temperature-alerts")
    return sink.get_results(), result.get_all_accumulator_results()


# -- input --------------------------------------------------------------------------------------


def generate_input(directory: str, sensors: int, readings: int, files: int, seed: int) -> int:
    """Write ``sensors`` x ``readings`` lines into ``files`` CSV files; returns the line count.

    A sensor lives in exactly one file (files are the source's splits, read in
    parallel), so each sensor's readings reach the keyed function in timestamp order.
    """
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    temps = [round(rng.uniform(15.0, 25.0), 2) for _ in range(sensors)]
    t0 = 1_700_000_000_000
    handles = [
        open(os.path.join(directory, f"sensors-{f}.csv"), "w", encoding="utf-8")
        for f in range(files)
    ]
    try:
        for i in range(readings):
            for s in range(sensors):
                temps[s] = round(temps[s] + rng.gauss(0.0, 0.8), 2)
                handles[s % files].write(f"sensor_{s:02d},{t0 + i * 1000},{temps[s]}\n")
    finally:
        for h in handles:
            h.close()
    return sensors * readings


# -- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sensors", type=int, default=20)
    p.add_argument("--readings", type=int, default=300, help="readings per sensor")
    p.add_argument("--threshold", type=float, default=1.7, help="alert above this jump (°C)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--master",
        help="Spark master (default: the submitted one under spark-submit, else local[2])",
    )
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--epoch-records", type=int, default=500, help="records per source subtask")
    p.add_argument("--fail-epoch", type=int, default=3, help="epoch of the injected failure")
    p.add_argument("--work-dir", help="input, checkpoints, markers (default: a temp dir)")
    args = p.parse_args(argv)

    tmp = None
    work_dir = args.work_dir
    if work_dir is None:
        work_dir = tmp = tempfile.mkdtemp(prefix="streamstate-demo-")
    input_dir = os.path.join(work_dir, "input")
    marker_dir = os.path.join(work_dir, "markers")
    for d in (input_dir, marker_dir):  # a re-used work dir starts clean
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(marker_dir)
    n = generate_input(input_dir, args.sensors, args.readings, files=4, seed=args.seed)

    from streamstate.spark.session import get_or_create_spark

    print(f"streamstate demo: temperature alerts (threshold {args.threshold} °C)")
    print(f"  input: {args.sensors} sensors x {args.readings} readings = {n} lines in {input_dir}")
    t = time.time()
    conf = {"spark.ui.enabled": "false"}
    if args.master:  # only an explicit --master overrides spark-submit's
        conf["spark.master"] = args.master
    spark = get_or_create_spark(
        Configuration(conf), app_name="streamstate-demo", default_master="local[2]"
    )
    spark.sparkContext.setLogLevel("FATAL")  # the injected failure would print Java stack traces
    print(f"  Spark {spark.version} on {spark.sparkContext.master} ({time.time() - t:.1f}s)")

    runs: dict[str, tuple[list[Alert], dict[str, Any], float]] = {}
    fail = FailOnce(marker_dir, epoch=args.fail_epoch, subtask=0)
    for name, injected in (("failure-free", None), ("with failure", fail)):
        t = time.time()
        alerts, acc = build_and_run(
            spark,
            input_dir,
            os.path.join(work_dir, "checkpoints", name.replace(" ", "-")),
            args.threshold,
            args.parallelism,
            args.epoch_records,
            injected,
        )
        runs[name] = (alerts, acc, time.time() - t)

    print()
    print(f"  {'':24}{'failure-free':>14}{'with failure':>14}")
    rows = [
        ("records", lambda a, acc: acc.get("records-in.parse", n)),
        ("alerts", lambda a, acc: len(a)),
        ("epochs", lambda a, acc: acc.get("epochs")),
        ("checkpoints", lambda a, acc: acc.get("checkpoints")),
        ("restarts", lambda a, acc: acc.get("restarts")),
    ]
    for label, get in rows:
        cells = [get(runs[r][0], runs[r][1]) for r in runs]
        print(f"  {label:24}{cells[0]!s:>14}{cells[1]!s:>14}")
    times = [f"{runs[r][2]:.1f}s" for r in runs]
    print(f"  {'time':24}{times[0]:>14}{times[1]:>14}")
    print()
    fired = fail.fired
    print(
        f"  injected failure (epoch {args.fail_epoch}, subtask 0) fired: {'yes' if fired else 'no'}"
    )
    reference, failed_run = sorted(runs["failure-free"][0]), sorted(runs["with failure"][0])
    identical = reference == failed_run
    print(f"  alerts identical to the failure-free run: {'yes' if identical else 'no'}")
    if not identical:
        missing = len([a for a in reference if a not in failed_run])
        extra = len(failed_run) - len(reference) + missing
        print(f"    {missing} alerts missing, {extra} extra")
    for a in runs["failure-free"][0][:3]:
        print(f"    e.g. {a[0]} at t={a[1]}: {a[2]:.2f} -> {a[3]:.2f} °C (jump {a[4]})")
    latest = runs["with failure"][1].get("latest-checkpoint")
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
        print("  (temporary work dir removed; keep it and its checkpoints with --work-dir DIR)")
    elif latest:
        print(
            f"  inspect the state: streamstate state {latest} --operator alerts --state last_temp"
        )
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
