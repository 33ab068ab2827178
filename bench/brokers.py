"""Broker processes under benchmark: ours, Apache Pulsar standalone and pulsar-lite, with CPU and RSS readings."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from cluster import processes
from cluster.local import LocalCluster

CLK_TCK = os.sysconf("SC_CLK_TCK")
READY_RE = re.compile(r"broker ready in [\d.]+ s: pulsar://[^:]+:(\d+)")
START_TIMEOUT_S = 30.0
STANDALONE_CONF = Path(__file__).resolve().parent.parent / "conf" / "standalone.conf"
# The BookKeeper kind's ledgers: 3 bookies, each entry on 2 of them, acknowledged when both have it
# (Pulsar's defaults are 2/2/2; 3/2/2 spreads the entries over the three bookies).
BK_ENSEMBLE, BK_WRITE_QUORUM, BK_ACK_QUORUM = 3, 2, 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of one process (its threads included, exited ones too); 0 once it has gone.

    Read from the process's CPU clock (nanoseconds) where the OS has one: /proc's stat counts in
    clock ticks (10 ms), and a window of 20-50 ms of broker CPU over 100,000 messages (the consume
    rows) then reads as 0.2-0.5 us per message for the same work."""
    try:
        return time.clock_gettime(_process_cpu_clock(pid))
    except (OSError, OverflowError):
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _process_cpu_clock(pid: int) -> int:
    """Linux's clock id for another process's CPU time, as clock_getcpuclockid(3) makes it:
    (~pid << 3) | CPUCLOCK_SCHED (2), process-wide (the thread bit, 4, clear)."""
    return ((~pid) << 3) | 2


@dataclass
class BrokerProcess:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    notes: str
    log_path: Path
    extra: dict[str, str] = field(default_factory=dict)
    # Processes whose CPU is the storage's cost, reported apart from the broker's (the bookies).
    storage_pids: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def storage_cpu_seconds(self) -> float:
        return sum(process_cpu_seconds(pid) for pid in self.storage_pids)

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        processes.forget(self.proc.pid)


def start_ours(workdir: Path, *extra_args: str, name: str = "ours",
               settings: dict[str, str] | None = None) -> BrokerProcess:
    """Our broker in a process of its own; ``settings`` (Pulsar keys) go into a config file made of
    conf/standalone.conf with those keys appended (the last value of a key wins)."""
    log_path = workdir / f"{name}.log"
    config_args: list[str] = []
    if settings:
        config = workdir / f"{name}.conf"
        base = STANDALONE_CONF.read_text() if STANDALONE_CONF.exists() else ""
        config.write_text(base + "\n" + "".join(f"{k}={v}\n" for k, v in settings.items()))
        config_args = ["--config", str(config)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "broker", "standalone", *config_args, "--port", "0", "--web-port", "0",
             "--data-dir", str(workdir / f"{name}-data"), "--bind-address", "127.0.0.1", *extra_args],
            stdout=log, stderr=subprocess.STDOUT,
        )
    processes.track(proc.pid, f"broker {name} ({log_path})")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        m = READY_RE.search(log_path.read_text(errors="replace"))
        if m:
            storage = re.search(r"storage (\w+)", log_path.read_text(errors="replace"))
            return BrokerProcess(name, proc, int(m.group(1)),
                                 f"storage={storage.group(1) if storage else '?'}", log_path)
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"our broker did not start; see {log_path}")


def bookkeeper_settings(cluster: LocalCluster, ensemble: int = BK_ENSEMBLE, write_quorum: int = BK_WRITE_QUORUM,
                        ack_quorum: int = BK_ACK_QUORUM) -> dict[str, str]:
    """Our broker's keys for topics on the cluster's bookies, metadata in its ZooKeeper."""
    return {
        "managedLedgerStorage": "bookkeeper",
        "metadataStoreUrl": cluster.metadata_store_url,
        "managedLedgerDefaultEnsembleSize": str(ensemble),
        "managedLedgerDefaultWriteQuorum": str(write_quorum),
        "managedLedgerDefaultAckQuorum": str(ack_quorum),
    }


def start_ours_bk(workdir: Path, cluster: LocalCluster, name: str = "ours-bk") -> BrokerProcess:
    """Our broker with managedLedgerStorage=bookkeeper on ``cluster``; its bookies' CPU is the storage's."""
    broker = start_ours(workdir, name=name, settings=bookkeeper_settings(cluster))
    broker.notes = (f"storage=bookkeeper, {len(cluster.bookies)} local bookies (journalSyncData=false), "
                    f"ensemble {BK_ENSEMBLE} / write {BK_WRITE_QUORUM} / ack {BK_ACK_QUORUM}, "
                    f"metadata in ZooKeeper")
    broker.storage_pids = [b.pid for b in cluster.bookies]
    return broker


def find_pulsar_lite() -> str | None:
    """The pulsar-lite binary shipped inside the PyPI wheel (or one on PATH)."""
    try:
        import pulsar_lite

        candidate = Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite"
        if candidate.exists():
            return str(candidate)
    except ImportError:
        pass
    return shutil.which("pulsar-lite")


def start_pulsar_lite(workdir: Path) -> BrokerProcess | None:
    binary = find_pulsar_lite()
    if binary is None:
        return None
    port = _free_port()
    config = workdir / "pulsar-lite.toml"
    config.write_text("default_partitions = 0\n")
    log_path = workdir / "pulsar-lite.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [binary, "--config", str(config), "--addr", f"127.0.0.1:{port}", "--db-path",
             str(workdir / "lite-data"), "--log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if _port_open(port):
            return BrokerProcess("pulsar-lite", proc, port, "RocksDB, no fsync", log_path)
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"pulsar-lite did not start; see {log_path}")


def start_apache_pulsar(workdir: Path, heap: list[str] | None = None) -> BrokerProcess | None:
    """Apache Pulsar standalone from the jars of `make pulsar-deps` (None when they are missing): one JVM with the
    broker, one bookie (journal fsync on) and RocksDB metadata, so its CPU and RSS include its storage, as ours do.
    ``heap``: the JVM's memory options (default: apache_pulsar.HEAP_OPTS, sized for this machine)."""
    from cluster import apache_pulsar

    why = apache_pulsar.missing_dependencies()
    if why is not None:
        print(f"Apache Pulsar skipped: {why}")
        return None
    p = apache_pulsar.start_standalone(workdir / "apache-pulsar", heap=heap)
    jvm = " ".join(apache_pulsar.HEAP_OPTS if heap is None else heap)
    notes = (f"Apache Pulsar {apache_pulsar.pulsar_version()} standalone (PulsarStandaloneStarter), one JVM "
             f"{jvm}: broker + 1 bookie (DbLedgerStorage, journalSyncData=true) + "
             f"RocksDB metadata; functions worker and stream storage off")
    return BrokerProcess("pulsar", p.proc, p.port, notes, p.log_path)
