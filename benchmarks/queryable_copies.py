"""Keeping queryable state's serving copies current (issue 14): CPU per epoch.

No Spark: the state versions of ``benchmarks/queryable_state.py``'s job, made the way its
subtasks make them, and the serving copies a query host keeps of them. Two subtasks of a
heap keyed operator (max parallelism 128) hold ``--keys`` keys (``Types.LONG()`` ->
``Types.LONG()``, queryable); every epoch changes ``--changed`` consecutive keys (``n %
keys`` of a sequence, as the job does); every ``--full-every`` epochs is a full version.
After each epoch the acks are folded as the driver folds them (superseded files deleted),
and each variant of serving copies is brought to the new lineages and answers
``--lookups`` uniformly random keys (1,000 lookups/s at ~5 epochs/s: 200):

* ``search``: no copies: each lookup searches the lineage's files (``queryable/search.py``,
  what a query host does for this key type since it was built), newest delta first, then
  the base; the refresher only forgets files no newer lineage names;
* ``eager``: copies (``ServingCache(search=False)``): the query host's refresher (``ServingCache.refresh``) moves every copy held,
  then the lookups read current copies (what query hosts do while lookups come);
* ``lazy``: no refresher, a lookup brings its own copy forward;
* ``eager_no_bridge``: as ``eager`` with lineages stripped of their bridge, i.e. before
  full versions carried one (every copy rebuilt from the new base at every full version).

Reported per epoch (process CPU, so the disposal thread's work counts): the job's own
writing of the versions (``commit_keyed_state``, the baseline) and each variant's refresh
and lookups, with their ratio to the baseline, measured in the same run; and what the
bridges cost the job: the delta written at each full version (``bridge_write_ms``, part
of ``full_version_commit_ms``) and its share of all the epochs' version writes.

Run: ``python -m benchmarks.queryable_copies [--keys 1000000] [--epochs 45] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shutil
import statistics
import tempfile
import time
from typing import Any

from benchmarks.results import Sitting, add_result_option, figures_table, publish
from streamstate.common import Types
from streamstate.datastream.state import ValueStateDescriptor
from streamstate.runtime import versions as versions_module
from streamstate.runtime.checkpoint.filesystem import FileSystemCheckpointStorageAccess
from streamstate.runtime.keygroups import (
    compute_key_group_for_serialized_key,
    compute_key_group_range_for_operator_index,
)
from streamstate.runtime.protocol import EpochSpec, SubtaskAck
from streamstate.runtime.queryable.serving import QueryableOperator, ServingCache, ServingSnapshot
from streamstate.runtime.serializers.registry import serializer_for
from streamstate.runtime.state.registry import create_keyed_backend
from streamstate.runtime.versions import StateVersions, commit_keyed_state

MAX_P = 128
P = 2
UID = "count"
VARIANTS = ("search", "eager", "lazy", "eager_no_bridge")


def _descriptor() -> ValueStateDescriptor:
    d = ValueStateDescriptor("count", Types.LONG())
    d.set_queryable("counts")
    return d


def run(args: argparse.Namespace) -> dict[str, Any]:
    key_ser = serializer_for(Types.LONG())
    # read with the job's type infos, as the query host does once the acks named them
    state = ("count", "value", _descriptor()._type_infos())
    kgs = [
        compute_key_group_for_serialized_key(key_ser.serialize(k), MAX_P) for k in range(args.keys)
    ]
    tmp = tempfile.mkdtemp(prefix="streamstate-bench-copies-")
    options = {"local_dir": f"{tmp}/local"} if args.backend == "rocksdb" else {}
    op = QueryableOperator(UID, "count", P, MAX_P, key_ser, args.backend, options)
    backends, states = [], []
    for i in range(P):
        b = create_keyed_backend(
            args.backend,
            operator_name="count",
            key_group_range=compute_key_group_range_for_operator_index(MAX_P, P, i),
            max_parallelism=MAX_P,
            key_serializer=key_ser,
            **options,
        )
        backends.append(b)
        states.append(b.get_partitioned_state(_descriptor()))
    storage = FileSystemCheckpointStorageAccess(f"{tmp}/chk")
    storage.initialize_job("bench")
    versions = StateVersions()
    versions.reset([(UID, i) for i in range(P)], (0, 0))
    variants = VARIANTS if args.backend == "hashmap" else ("eager", "lazy")
    caches = {v: ServingCache(512, search=v == "search") for v in variants}
    rnd = random.Random(7)
    cpu: dict[str, list[float]] = {"commit": []}
    for v in variants:
        cpu[f"{v}_refresh"], cpu[f"{v}_lookups"] = [], []
    full_epochs: list[int] = []
    pos = 0
    # what the job pays for the bridges: the delta written at a full version (timed apart)
    bridge_cpu: list[float] = []
    full_commit: list[float] = []
    write_bridge = versions_module._bridge_delta

    def timed_bridge(*a: Any) -> Any:
        t = time.process_time()
        try:
            return write_bridge(*a)
        finally:
            bridge_cpu.append(time.process_time() - t)

    versions_module._bridge_delta = timed_bridge  # type: ignore[assignment]  # timing only

    def write(keys: range) -> None:
        for k in keys:
            kg = kgs[k]
            i = op.subtask_of(kg)
            backends[i].set_current_key(k, kg)
            s = states[i]
            s.update((s.value() or 0) + 1)

    try:
        write(range(args.keys))  # every key has a value, then epoch 1 is a full version
        for epoch in range(1, args.epochs + 1):
            if epoch > 1:
                write(range(pos, pos + args.changed))
                pos = (pos + args.changed) % (args.keys - args.changed)
            full = epoch == 1 or epoch % args.full_every == 0
            if full:
                full_epochs.append(epoch)
            es = EpochSpec(epoch, 0, None, full, ())
            t0 = time.process_time()
            superseded = []
            for i, b in enumerate(backends):
                got, _ = commit_keyed_state(storage, {UID: b}, i, es, "bench")
                superseded += versions.fold(SubtaskAck(0, i, (0, epoch), versions=got))
            t1 = time.process_time()
            lineages = {k: versions.keyed[k] for k in versions.keyed}
            stripped = {k: dataclasses.replace(v, bridge=None) for k, v in lineages.items()}
            queries = [rnd.randrange(args.keys) for _ in range(args.lookups)]
            for variant, cache in caches.items():
                lins = stripped if variant.endswith("no_bridge") else lineages
                snap = ServingSnapshot("epoch", epoch, 0, None, lins, {UID: op})
                t2 = time.process_time()
                if variant == "search":
                    cache.used = True
                    cache.refresh(snap)  # drops the files the newest lineages do not name
                elif epoch == 1 or variant.startswith("eager"):
                    if epoch == 1:  # the first lookup of every key group builds its copy
                        for kg in sorted({op.serving_range(g).start for g in range(MAX_P)}):
                            cache.read(snap, op, state, kgs.index(kg), kg)
                    cache.used = True
                    cache.refresh(snap)
                t3 = time.process_time()
                for k in queries:
                    cache.read(snap, op, state, k, kgs[k])
                t4 = time.process_time()
                if epoch > 1:  # epoch 1 builds every copy: apart
                    cpu[f"{variant}_refresh"].append(t3 - t2)
                    cpu[f"{variant}_lookups"].append(t4 - t3)
            if epoch > 1:
                cpu["commit"].append(t1 - t0)
                if full:
                    full_commit.append(t1 - t0)
            storage.discard_epoch_state(superseded)
    finally:
        versions_module._bridge_delta = write_bridge  # type: ignore[assignment]  # timing only
        for c in caches.values():
            c.clear()
        for b in backends:
            b.dispose()
        shutil.rmtree(tmp, ignore_errors=True)
    base = statistics.mean(cpu["commit"])
    per_epoch = {k: statistics.mean(v) * 1000 for k, v in cpu.items()}
    fig: dict[str, Any] = {
        "backend": args.backend,
        "keys": args.keys,
        "changed_per_epoch": args.changed,
        "lookups_per_epoch": args.lookups,
        "full_every": args.full_every,
        "epochs_measured": len(cpu["commit"]),
        "cpu_ms_per_epoch": per_epoch,
        "ratio_to_commit": {
            v: (statistics.mean(cpu[f"{v}_refresh"]) + statistics.mean(cpu[f"{v}_lookups"])) / base
            for v in variants
        },
        "builds": {v: c.builds for v, c in caches.items()},
        "bridged": {v: c.bridged for v, c in caches.items()},
    }
    if full_commit:  # the job's full-version epochs: all of the commit, and the bridge's part
        n = len(bridge_cpu) // len(full_epochs) or 1
        measured = bridge_cpu[n:]  # epoch 1 apart, as above
        fig["full_version_commit_ms"] = statistics.mean(full_commit) * 1000
        fig["bridge_write_ms"] = sum(measured) / max(1, len(full_commit)) * 1000
        fig["bridge_share_of_all_commits"] = sum(measured) / sum(cpu["commit"])
    return fig


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--changed", type=int, default=50_000, help="keys changed per epoch")
    p.add_argument("--lookups", type=int, default=200, help="lookups per epoch")
    p.add_argument("--epochs", type=int, default=45)
    p.add_argument("--full-every", type=int, default=20)
    p.add_argument("--backend", default="hashmap", choices=["hashmap", "rocksdb"])
    p.add_argument("--json", help="also write the figures to this file")
    add_result_option(p)
    args = p.parse_args(argv)
    sitting = Sitting.begin("benchmarks.queryable_copies", argv)
    fig = run(args)
    print(json.dumps(fig, indent=2))
    publish("queryable_copies", lambda: sitting.run([figures_table(fig)]), args.result, args.json, fig)


if __name__ == "__main__":
    main()
