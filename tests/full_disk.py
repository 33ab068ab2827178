"""A disk that fills up, for tests of a broker or a bookie process: a private tmpfs and the ballast that fills it.

The tmpfs is mounted inside a private mount namespace (``unshare --user --map-root-user --mount``, root or not)
by a shell that then becomes the process (exec: the pid stays), so it exists only for that process and vanishes
with it: nothing outside the test is touched. The test reaches the mount through ``/proc/<pid>/root`` and fills it
with a ballast file (``Ballast``), then frees it again. Also the two HTTP look-ups such tests make of a broker
process (an admin call and a /metrics value), and what a full disk must leave working for the official client.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pulsar
import pytest

# Mounts the tmpfs ($1 = mount point, $2 = size, $3 = the directory made in it), then becomes the process.
_MOUNT_AND_EXEC = 'mount -t tmpfs -o size="$2" tmpfs "$1" && mkdir "$1/$3" && shift 3 && exec "$@"'


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


def on_private_tmpfs(mount: Path, size: str, directory: str, argv: list[str]) -> list[str]:
    """``argv`` run with a tmpfs of ``size`` (``16m``) mounted at ``mount`` and ``mount/directory`` made in it."""
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", _MOUNT_AND_EXEC, "sh",
            str(mount), size, directory, *argv]


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


class Ballast:
    """The file that fills the private tmpfs at ``mount`` of process ``pid``, seen from this process."""

    def __init__(self, pid: int, mount: Path) -> None:
        self.path = Path(f"/proc/{pid}/root{mount}/ballast")

    def fill(self, until_usage: float | None = None) -> int:
        """Until the tmpfs is that full (None: really full, ENOSPC); the bytes written."""
        return fill(self.path, until_usage)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def http_call(web_url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
    """(status, text) of an HTTP call to a broker, errors included."""
    request = urllib.request.Request(web_url + path, data=body, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metric_value(web_url: str, name: str) -> float | None:
    """The value of the first sample of ``name`` in the broker's /metrics (None when absent)."""
    _, text = http_call(web_url, "GET", "/metrics")
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


# -- what a full disk must leave working, as the official client sees it ------------------------------------------
def sends_fail(producer: pulsar.Producer, sends: int = 3) -> None:
    """Each send fails (the client's send timeout: the broker holds the adds it cannot store, then refuses them)."""
    for i in range(sends):
        with pytest.raises(pulsar.PulsarException):
            producer.send(b"refused-%d" % i)


def new_producer_accepted_but_refused(client: pulsar.Client, topic: str, send_timeout_ms: int) -> None:
    """A new producer is accepted; its sends then fail the same way."""
    other = client.create_producer(topic, batching_enabled=False, send_timeout_millis=send_timeout_ms)
    with pytest.raises(pulsar.PulsarException):
        other.send(b"refused")
    other.close()


def stored_messages_readable(readers: pulsar.Client, consumer: pulsar.Consumer, topic: str,
                             receipted: list[bytes]) -> pulsar.Reader:
    """A new reader reads every receipted message (and is returned); the consumer receives and acknowledges each
    of them."""
    reader = readers.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(timeout_millis=10_000).data() for _ in receipted] == receipted
    got = []
    for _ in receipted:
        msg = consumer.receive(timeout_millis=10_000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert got == receipted
    return reader
