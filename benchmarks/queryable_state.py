"""Queryable state: point-lookup latency and rate, and what lookups cost the job (issue 14).

A keyed running count over ``--keys`` keys (default 10^6; ``n % keys`` of a number sequence,
``key_by(..., key_type=Types.LONG())``, a ``ValueState(Types.LONG())`` made queryable with
``set_queryable``) runs on Spark ``local[2]`` at parallelism 2 on the heap backend, unpaced
(every epoch reads ``--epoch-records`` records per source subtask). Once every key has a
value:

1. **Latency and rate.** ``QueryableStateClient`` point lookups of uniformly random keys in
   a closed loop for ``--seconds`` from 1 client process, then from 4: p50 / p99 of the
   round trip (client to the driver's query server and back) and lookups/s in total.
2. **Cost to the job.** Phases of ``--phase-seconds`` alternate between no lookups and
   ``--rate`` lookups/s (one paced client process), ``--rounds`` times each; the job's
   throughput in a phase is its records over its epochs' time (epochs that started and
   ended inside the phase). Reported: the ratio with / without, measured in the same run,
   and what the lookups cost in CPU seconds per 1000 lookups, split by component: the
   paced client process, the driver's query-server threads and refresher (the job
   metrics ``queryable_server_cpu_us`` / ``queryable_refresh_cpu_us``) and the query host
   process (``/proc``), summed over the phases with lookups; ``query_host_copies`` is the
   part of the query host's that kept its copies current (its ``stats``: thread CPU of
   bringing copies forward, by its refresher or by lookups) or, for the key types whose
   lookups search the version files (integer keys, as here: ``queryable/search.py``), read
   and parsed those files, ``query_host_direct`` the part
   its client connections took (receiving, answering and sending direct lookups; copies a
   lookup brought forward count in both).

   ``driver_pin_wall`` is not CPU: the wall time the driver loop waited for its pins.

3. **The floor.** A bare TCP echo between two fresh processes at the paced client's
   requests/s (``--rate / --batch``; a single-key lookup's size), while the job runs: the CPU any
   request-answer hop costs in wake-ups and system calls, to set the client's and the
   query host's figures against (``echo_floor_cpu_s_per_1000_requests``); with
   ``--echo-rounds N``, also N rounds of the job's throughput with that echo as the load
   against without (``echo_throughput``: what any request-answer hop at that rate costs the
   job, whatever it answers).

With ``--serve-on-executors true`` (the default) lookups are answered by the query host on
the executor machine, with ``false`` by the driver's own copies. With ``--direct true``
(the default) clients send them to the query host directly (the driver's CPU is then mostly
pinning each published snapshot on the hosts: ``driver_pin``, the job metric
``queryable_pin_cpu_us``), with ``false`` through the driver's query
server, which forwards them.

Run: ``python -m benchmarks.queryable_state [--keys 1000000] [--seconds 10]
[--serve-on-executors true|false] [--direct true|false] [--batch N] [--json FILE]``
(``--batch``: the paced client looks its ``--rate`` keys/s up ``N`` keys per request).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import socket
import statistics
import threading
import time
from typing import Any

from benchmarks.results import Sitting, add_result_option, figures_table, publish
from streamstate.common import Configuration, Types
from streamstate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from streamstate.datastream.connectors import DiscardingSink
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.queryablestate import QueryableStateClient
from streamstate.runtime.job_status import EpochStats, JobObserver
from streamstate.runtime.queryable.query_host import query_host_pid, query_host_stats
from streamstate.runtime.queryable.service import service_of

NAME = "counts"


class QueryableCount(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        d = ValueStateDescriptor("count", Types.LONG())
        d.set_queryable(NAME)
        self.count = ctx.get_state(d)

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.count.update((self.count.value() or 0) + 1)
        return None


class Epochs(JobObserver):
    """Every finished epoch: (end time, duration s, records)."""

    def __init__(self) -> None:
        self.epochs: list[tuple[float, float, int]] = []
        self.records = 0
        self.job_id: str | None = None
        self.lock = threading.Lock()

    def on_epoch(self, job_id: str, stats: EpochStats) -> None:
        with self.lock:
            self.job_id = job_id
            self.records += stats.source_records
            self.epochs.append((time.time(), stats.duration_ms / 1000.0, stats.source_records))


def _client_loop(args: tuple[str, int, int, float, int | None, bool]) -> list[float]:
    """One client process: lookups for ``seconds`` (paced at ``rate``/s when given);
    the round-trip latencies in ms."""
    job_id, keys, seed, seconds, rate, direct = args
    client = QueryableStateClient.for_job(job_id, direct=direct)
    desc = ValueStateDescriptor("count", Types.LONG())
    rnd = random.Random(seed)
    out: list[float] = []
    start = time.perf_counter()
    n = 0
    while True:
        now = time.perf_counter()
        if now - start >= seconds:
            break
        if rate is not None:
            due = start + n / rate
            if due > now:
                time.sleep(due - now)
        t0 = time.perf_counter()
        r = client.get_kv_state(job_id, NAME, rnd.randrange(keys), Types.LONG(), desc)
        out.append((time.perf_counter() - t0) * 1000.0)
        if r.value is None:
            raise AssertionError("a key without a value: the job did not preload every key")
        n += 1
    client.close()
    return out


def _paced(
    job_id: str,
    keys: int,
    rate: int,
    on: Any,
    stop: Any,
    ready: Any,
    out: Any,
    direct: bool,
    batch: int = 1,
) -> None:
    """A client process kept for the whole comparison: ``rate`` lookups/s while ``on`` is
    set (started before the phases, so its start-up is no phase's cost); with ``batch`` >
    1, ``rate / batch`` requests/s of ``batch`` keys each (``get_kv_states``)."""
    client = QueryableStateClient.for_job(job_id, direct=direct)
    desc = ValueStateDescriptor("count", Types.LONG())
    rnd = random.Random(7)
    lat: list[float] = []
    cpu = 0.0
    client.get_kv_state(job_id, NAME, 0, Types.LONG(), desc)  # connected
    ready.set()
    while not stop.is_set():
        if not on.wait(0.05):
            continue
        start, n, cpu0 = time.perf_counter(), 0, time.process_time()
        while on.is_set():
            due = start + n * batch / rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            t0 = time.perf_counter()
            if batch == 1:
                client.get_kv_state(job_id, NAME, rnd.randrange(keys), Types.LONG(), desc)
            else:
                ks = [rnd.randrange(keys) for _ in range(batch)]
                client.get_kv_states(job_id, NAME, ks, Types.LONG(), desc)
            lat.append((time.perf_counter() - t0) * 1000.0)
            n += 1
        cpu += time.process_time() - cpu0
    client.close()
    out.put((lat, cpu, len(lat) * batch))


def _echo_server(port_out: Any, cpu_out: Any) -> None:
    """The floor's server: one thread echoing frames (what a query host does per request,
    without the lookup); its thread CPU per request."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port_out.put(sock.getsockname()[1])
    conn, _ = sock.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t0, n = time.thread_time(), 0
    while True:
        data = conn.recv(65536)
        if not data:
            break
        conn.sendall(data)
        n += 1
    cpu_out.put((time.thread_time() - t0) / max(1, n))


def _echo_connect(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def _echo_requests(conn: socket.socket, rate: int, going: Any) -> int:
    """Requests of a lookup's size paced at ``rate``/s while ``going()``; how many."""
    msg = b"Q" + bytes(20)
    start, n = time.perf_counter(), 0
    while going():
        due = start + n / rate
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        conn.sendall(msg)
        conn.recv(65536)
        n += 1
    return n


def _echo_client(port: int, rate: int, seconds: float, cpu_out: Any) -> None:
    """The floor's client: requests of a lookup's size paced as the paced client's."""
    conn = _echo_connect(port)
    end, cpu0 = time.perf_counter() + seconds, time.process_time()
    n = _echo_requests(conn, rate, lambda: time.perf_counter() < end)
    cpu_out.put((time.process_time() - cpu0) / max(1, n))
    conn.close()


def _echo_paced(port: int, rate: int, on: Any, stop: Any, ready: Any) -> None:
    """The floor's load on the job: bare echo requests at ``rate``/s while ``on`` is set."""
    conn = _echo_connect(port)
    ready.set()
    while not stop.is_set():
        if on.wait(0.05):
            _echo_requests(conn, rate, on.is_set)
    conn.close()


def echo_job_ratio(probe: Any, rate: int, rounds: int, seconds: float) -> dict[str, Any]:
    """The job's throughput with a bare TCP echo at ``rate`` requests/s against without,
    alternating as the lookup rounds do: what any request-answer hop between two processes
    on the job's cores costs the job, whatever it answers (the floor of the lookups' ratio)."""
    ctx = mp.get_context("spawn")
    port, cpu_s = ctx.Queue(), ctx.Queue()
    flag, stop, ready = ctx.Event(), ctx.Event(), ctx.Event()
    server = ctx.Process(target=_echo_server, args=(port, cpu_s))
    server.start()
    client = ctx.Process(target=_echo_paced, args=(port.get(timeout=60), rate, flag, stop, ready))
    client.start()
    ready.wait(60)
    off: list[float] = []
    on: list[float] = []
    for _ in range(rounds):
        t0 = time.time()
        time.sleep(seconds)
        off.append(throughput(probe.epochs, t0, time.time()))
        flag.set()
        t0 = time.time()
        time.sleep(seconds)
        on.append(throughput(probe.epochs, t0, time.time()))
        flag.clear()
        print(f"echo: throughput without {off[-1]:,.0f} rec/s, with {on[-1]:,.0f}", flush=True)
    stop.set()
    client.join(30)
    server.join(30)
    return {
        "without_rec_per_s": statistics.mean(off),
        "with_rec_per_s": statistics.mean(on),
        "ratio_with_over_without": statistics.mean(on) / statistics.mean(off),
        "median_round_ratio": statistics.median(
            [a / b for a, b in zip(on, off, strict=True) if a and b] or [0.0]
        ),
        "requests_per_s": rate,
        "rounds": rounds,
    }


def echo_floor(rate: int, seconds: float) -> dict[str, float]:
    """CPU s per 1,000 requests of a bare TCP echo between two processes at ``rate``/s:
    the wake-ups and system calls any request-answer hop costs (the floor a lookup's
    client and query host cannot go below), measured while the job runs."""
    ctx = mp.get_context("spawn")
    port, cpu_s, cpu_c = ctx.Queue(), ctx.Queue(), ctx.Queue()
    server = ctx.Process(target=_echo_server, args=(port, cpu_s))
    server.start()
    client = ctx.Process(target=_echo_client, args=(port.get(timeout=60), rate, seconds, cpu_c))
    client.start()
    out = {"client": cpu_c.get(timeout=seconds + 60) * 1000.0}
    client.join(30)
    out["server"] = cpu_s.get(timeout=60) * 1000.0
    server.join(30)
    return out


def clients(
    job_id: str, keys: int, procs: int, seconds: float, rate: int | None, direct: bool = True
) -> list[float]:
    ctx = mp.get_context("spawn")
    with ctx.Pool(procs) as pool:
        parts = pool.map(
            _client_loop, [(job_id, keys, i, seconds, rate, direct) for i in range(procs)]
        )
    return [x for p in parts for x in p]


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def _proc_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) process ``pid`` used so far (0 when unknown)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class CpuProbe:
    """What lookups cost in CPU seconds, summed over phases: the driver's query-server
    threads and refresher (job metrics) and the query host process (``/proc``)."""

    def __init__(self, job_id: str, stats: dict[str, int]) -> None:
        self.stats, self.host, self.job_id = stats, query_host_pid(job_id), job_id
        self.acc = dict.fromkeys(
            (
                "driver_server",
                "driver_refresh",
                "driver_pin",
                "driver_pin_wall",
                "query_host",
                "query_host_copies",
                "query_host_direct",
            ),
            0.0,
        )
        self._at: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        host = query_host_stats(self.job_id) if self.host is not None else None
        return {
            "driver_server": self.stats.get("queryable_server_cpu_us", 0) / 1e6,
            "driver_refresh": self.stats.get("queryable_refresh_cpu_us", 0) / 1e6,
            "driver_pin": self.stats.get("queryable_pin_cpu_us", 0) / 1e6,
            "driver_pin_wall": self.stats.get("queryable_pin_wall_us", 0) / 1e6,
            "query_host": _proc_cpu(self.host),
            # of which bringing its copies forward (refresher and lookups; ServingCache)
            "query_host_copies": (host or {}).get("maintain_cpu_s", 0.0),
            # of which the threads answering clients' direct lookups (receive, read, send)
            "query_host_direct": (host or {}).get("direct_cpu_s", 0.0),
        }

    def start(self) -> None:
        self._at = self._now()

    def stop(self) -> None:
        for k, v in self._now().items():
            self.acc[k] += v - self._at[k]


def throughput(epochs: list[tuple[float, float, int]], t0: float, t1: float) -> float:
    inside = [(d, r) for end, d, r in epochs if end - d >= t0 and end <= t1]
    secs = sum(d for d, _ in inside)
    return sum(r for _, r in inside) / secs if secs else 0.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.peers import spark_stateful as peers

    spark = peers.build_spark("streamstate-bench-queryable")
    spark.sparkContext.setLogLevel("ERROR")
    conf = Configuration()
    conf.set_string("execution.epoch.max-records", str(args.epoch_records))
    conf.set_string("execution.progress", "none")
    conf.set_string("state.backend.type", args.backend)
    conf.set_string("queryable-state.serve-on-executors", args.serve_on_executors)
    env = StreamExecutionEnvironment.get_execution_environment(conf, spark=spark)
    env.set_parallelism(2)
    probe = Epochs()
    env.add_job_observer(probe)
    keys = args.keys
    env.from_sequence(0, 10**12).key_by(lambda n: n % keys, key_type=Types.LONG()).process(
        QueryableCount()
    ).sink_to(DiscardingSink())
    job = env.execute_async("queryable-bench")
    try:
        # every key has a value: each of the 2 source subtasks reads its half of the sequence
        # from a multiple of ``keys``, so both must have read ``keys`` numbers
        while probe.records < 2 * keys:
            time.sleep(0.5)
        assert probe.job_id is not None
        jid = probe.job_id
        # warm-up: the serving copy of every key group is built by its first lookup (the
        # base's section of that group and every delta since); time those apart
        t0 = time.perf_counter()
        with QueryableStateClient.for_job(jid) as c:
            desc = ValueStateDescriptor("count", Types.LONG())
            for k in range(3000):  # consecutive keys hash to every one of the 128 groups
                c.get_kv_state(jid, NAME, k, Types.LONG(), desc)
        cold = time.perf_counter() - t0
        fig: dict[str, Any] = {
            "keys": keys,
            "backend": args.backend,
            "warm_up_s_3000_lookups": cold,
        }
        print(f"warm-up (the first lookup of every key group): {cold:.1f} s", flush=True)
        for procs in (1, 4):
            lat = clients(jid, keys, procs, args.seconds, None, args.direct == "true")
            fig[f"clients_{procs}"] = {
                "lookups": len(lat),
                "lookups_per_s": len(lat) / args.seconds,
                "p50_ms": statistics.median(lat),
                "p99_ms": _pct(lat, 0.99),
            }
            print(procs, "client(s):", fig[f"clients_{procs}"], flush=True)
        off: list[float] = []
        on: list[float] = []
        ctx = mp.get_context("spawn")
        flag, stop, ready, out = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Queue()
        paced = ctx.Process(
            target=_paced,
            args=(jid, keys, args.rate, flag, stop, ready, out, args.direct == "true", args.batch),
        )
        paced.start()
        ready.wait(120)  # its start-up (imports, connection) before the first phase
        time.sleep(1.0)
        stats = service_of(jid).stats  # type: ignore[union-attr]  # the job runs here
        cpu_on, cpu_off = CpuProbe(jid, stats), CpuProbe(jid, stats)
        for _ in range(args.rounds):
            t0 = time.time()
            cpu_off.start()
            time.sleep(args.phase_seconds)
            cpu_off.stop()
            off.append(throughput(probe.epochs, t0, time.time()))
            flag.set()
            t0 = time.time()
            cpu_on.start()
            time.sleep(args.phase_seconds)
            cpu_on.stop()
            on.append(throughput(probe.epochs, t0, time.time()))
            flag.clear()
            print(f"throughput without {off[-1]:,.0f} rec/s, with {on[-1]:,.0f} rec/s", flush=True)
        stop.set()
        lat_on, client_cpu, looked_up = out.get(timeout=60)
        paced.join(60)
        per = 1000.0 / max(1, looked_up)
        split = {"client": client_cpu * per}
        split.update({k: v * per for k, v in cpu_on.acc.items()})
        split["total"] = sum(
            v
            for k, v in split.items()
            if not k.startswith("query_host_") and k != "driver_pin_wall"
        )
        # CPU the same components used while no lookups came (should be ~0)
        fig["cpu_s_per_1000_lookups"] = split
        fig["cpu_s_in_phases_without_lookups"] = dict(cpu_off.acc)
        floor = echo_floor(max(1, args.rate // args.batch), args.phase_seconds * 2)
        fig["echo_floor_cpu_s_per_1000_requests"] = floor
        print(f"bare TCP echo at the same rate, CPU s per 1000 requests: {floor}", flush=True)
        print("CPU s per 1000 lookups:", {k: round(v, 3) for k, v in split.items()}, flush=True)
        fig["throughput"] = {
            "without_rec_per_s": statistics.mean(off),
            "with_rec_per_s": statistics.mean(on),
            "ratio_with_over_without": statistics.mean(on) / statistics.mean(off),
            # a phase without a whole epoch in it (a very loaded machine) has no throughput
            "median_round_ratio": statistics.median(
                [a / b for a, b in zip(on, off, strict=True) if a and b] or [0.0]
            ),
            "rounds_without_a_whole_epoch": sum(1 for x in on + off if not x),
            "lookup_rate": args.rate,
            "lookups_done_per_s": looked_up / (args.rounds * args.phase_seconds),
            "keys_per_request": args.batch,
            "p99_ms_at_rate": _pct(lat_on, 0.99),
            "rounds": args.rounds,
        }
        if args.echo_rounds:
            fig["echo_throughput"] = echo_job_ratio(
                probe, max(1, args.rate // args.batch), args.echo_rounds, args.phase_seconds
            )
        fig["epochs"] = len(probe.epochs)
        # the query host's copies over the whole run: built, bridged across new bases
        fig["query_host_copies"] = query_host_stats(jid)
        fig["served"] = {
            "serve_on_executors": args.serve_on_executors,
            "by_query_hosts": stats.get("queryable_lookups_remote", 0),
            "by_driver": stats.get("queryable_lookups_driver", 0),
            "direct_requests_reported_by_hosts": stats.get("queryable_requests_direct", 0),
            "direct": args.direct,
        }
        return fig
    finally:
        job.cancel()
        try:
            job.get_job_execution_result().result(120)
        finally:
            spark.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--epoch-records", type=int, default=25_000)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rate", type=int, default=1000)
    p.add_argument("--phase-seconds", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument(
        "--echo-rounds",
        type=int,
        default=0,
        help="then as many rounds with a bare TCP echo at the lookups' request rate as the "
        "load instead (the job's ratio under any request-answer hop: the floor)",
    )
    p.add_argument("--backend", default="hashmap", choices=["hashmap", "rocksdb"])
    p.add_argument(
        "--serve-on-executors",
        default="true",
        choices=["true", "false"],
        help="queryable-state.serve-on-executors: query hosts next to the state, or the driver",
    )
    p.add_argument(
        "--direct",
        default="true",
        choices=["true", "false"],
        help="clients ask the query hosts directly (QueryableStateClient(direct=...)), or the "
        "driver's query server, which forwards",
    )
    p.add_argument(
        "--batch",
        type=int,
        default=1,
        help="the paced client's keys per request (get_kv_states; --rate stays keys/s)",
    )
    p.add_argument("--json", help="also write the figures to this file")
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.queryable_state", argv)
    fig = run(args)
    print(json.dumps(fig, indent=2))
    publish("queryable_state", lambda: sitting.run([figures_table(fig)]), args.result, args.json, fig)


if __name__ == "__main__":
    main()
