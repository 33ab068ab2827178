"""Broker processes under benchmark: ours and the peer (pulsar-lite), with CPU and RSS readings."""

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

CLK_TCK = os.sysconf("SC_CLK_TCK")
READY_RE = re.compile(r"broker ready in [\d.]+ s: pulsar://[^:]+:(\d+)")
START_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class BrokerProcess:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    notes: str
    log_path: Path
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

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


def start_ours(workdir: Path, *extra_args: str) -> BrokerProcess:
    log_path = workdir / "ours.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "broker", "standalone", "--port", "0", "--web-port", "0",
             "--data-dir", str(workdir / "ours-data"), "--bind-address", "127.0.0.1", *extra_args],
            stdout=log, stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        m = READY_RE.search(log_path.read_text(errors="replace"))
        if m:
            storage = re.search(r"storage (\w+)", log_path.read_text(errors="replace"))
            return BrokerProcess("ours", proc, int(m.group(1)),
                                 f"storage={storage.group(1) if storage else '?'}", log_path)
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"our broker did not start; see {log_path}")


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
