"""Broker processes under exhausted resources: a data directory on a small tmpfs, a low fd limit,
a memory cgroup.

The tmpfs is mounted inside a private mount namespace (``unshare --user --map-root-user --mount``,
root or not), so it exists only for the broker process and vanishes with it: nothing outside the
test's own process is touched. The test reaches the mount through ``/proc/<pid>/root`` (to fill
it with a ballast file and free it again).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.reliability.broker_process import READY_RE, STARTUP_TIMEOUT_S

# Mounts the tmpfs ($1 = mount point, $2 = size), then becomes the broker (exec: the pid stays).
_MOUNT_AND_EXEC = 'mount -t tmpfs -o size="$2" tmpfs "$1" && mkdir "$1/data" && shift 2 && exec "$@"'
# Mounts a block device ($1 = mount point, $2 = device), then becomes the broker.
_MOUNT_DEVICE_AND_EXEC = 'mount "$2" "$1" && mkdir "$1/data" && shift 2 && exec "$@"'


def private_mounts_unavailable() -> str | None:
    """Why a private tmpfs cannot be mounted here (None if it can)."""
    if not sys.platform.startswith("linux"):
        return "needs Linux mount namespaces"
    unshare = shutil.which("unshare")
    if unshare is None:
        return "no unshare(1) (util-linux)"
    probe = subprocess.run([unshare, "--user", "--map-root-user", "--mount", "sh", "-c",
                            "d=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs \"$d\"; r=$?; umount \"$d\"; "
                            "rmdir \"$d\"; exit $r"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot mount a tmpfs in a user+mount namespace: {probe.stderr.strip() or probe.returncode}"
    return None


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
            argv = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", _MOUNT_AND_EXEC, "sh",
                    str(self.mount), tmpfs_size, *broker]
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
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            m = READY_RE.search(line)
            if m:
                self.port, self.web_port = int(m.group(1)), int(m.group(2))
                threading.Thread(target=self._keep_reading, daemon=True).start()
                return
        self.proc.kill()
        self.proc.wait()
        raise AssertionError("broker did not report ready:\n" + "".join(self.lines))

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

    def http(self, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.web_port}{path}", data=body, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metric(self, name: str) -> float | None:
        _, text = self.http("GET", "/metrics")
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

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


def fill(path: Path, until_usage: float | None = None) -> int:
    """Write a ballast file at path until the file system is that full (None: until it is full:
    ENOSPC even for one 4 KiB block). Returns the bytes written."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (64 * 1024, 4096):
            block = b"\0" * chunk
            while True:
                if until_usage is not None:
                    st = os.statvfs(path)
                    if 1.0 - st.f_bavail / st.f_blocks >= until_usage:
                        return written
                try:
                    written += os.write(fd, block)
                except OSError:
                    if until_usage is not None:
                        raise
                    break
    finally:
        os.close(fd)
    return written
