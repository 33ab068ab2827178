"""Broker processes under exhausted resources: a data directory on a small tmpfs (tests/full_disk.py: private to
the broker, filled through ``/proc/<pid>/root`` with a ballast file and freed again), a low fd limit, a memory
cgroup.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from cluster import processes
from tests.full_disk import Ballast, http_call, metric_value, on_private_tmpfs
from tests.reliability.broker_process import await_ready

# Mounts a block device ($1 = mount point, $2 = device), then becomes the broker.
_MOUNT_DEVICE_AND_EXEC = 'mount "$2" "$1" && mkdir "$1/data" && shift 2 && exec "$@"'


class LimitedBroker:
    """``python -m broker standalone`` started through ``argv_prefix`` with ``config`` lines."""

    def __init__(self, tmp: Path, config: dict[str, object], *, tmpfs_size: str | None = None,
                 nofile: int | None = None, cgroup: Path | list[Path] | None = None,
                 block_device: str | None = None) -> None:
        """``tmpfs_size``: dataDir on a tmpfs of that size; ``block_device``: dataDir on that (formatted) device,
        mounted in a private mount namespace (needs root); ``cgroup``: cgroups (v1: one per controller) the broker
        joins."""
        self.tmp = tmp
        conf = tmp / "broker.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        self.mount = tmp / "mnt"
        self.mount.mkdir(exist_ok=True)
        data_dir = self.mount / "data" if tmpfs_size or block_device else tmp / "data"
        broker = [sys.executable, "-m", "broker", "standalone", "--config", str(conf), "--port", "0",
                  "--web-port", "0", "--data-dir", str(data_dir), "--bind-address", "127.0.0.1"]
        argv = broker
        if tmpfs_size:
            argv = on_private_tmpfs(self.mount, tmpfs_size, "data", broker)
        elif block_device:
            argv = ["unshare", "--mount", "sh", "-c", _MOUNT_DEVICE_AND_EXEC, "sh", str(self.mount), block_device,
                    *broker]
        if nofile is not None:
            argv = ["prlimit", f"--nofile={nofile}:{nofile}", *argv]
        for group in [cgroup] if isinstance(cgroup, Path) else cgroup or []:
            # join the cgroup, then become the broker (exec: the pid is the one in it)
            argv = ["sh", "-c", f'echo $$ > "{group}/cgroup.procs" && exec "$@"', "sh", *argv]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        processes.track(self.proc.pid, "broker with limits")
        self.lines: list[str] = []
        self.port, self.web_port = await_ready(self.proc, self.lines)
        threading.Thread(target=self._keep_reading, daemon=True).start()

    def _keep_reading(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def volume(self) -> Path:
        """The broker's tmpfs, as this process sees it."""
        return Path(f"/proc/{self.proc.pid}/root{self.mount}")

    def usage(self) -> float:
        st = os.statvfs(self.volume)
        return 1.0 - st.f_bavail / st.f_blocks

    @property
    def ballast(self) -> Ballast:
        """The file that fills the broker's tmpfs."""
        return Ballast(self.proc.pid, self.mount)

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def http(self, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
        return http_call(self.web_url, method, path, body)

    def metric(self, name: str) -> float | None:
        return metric_value(self.web_url, name)

    def cpu_seconds(self) -> float:
        """User + system CPU time of the broker process so far (/proc/<pid>/stat)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
