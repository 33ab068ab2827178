"""Storage slower than the producers: the publish buffer holds them back (issue 23, item 3; docs/exhaustion.md#memory).

The broker's data directory is an ext4 file system on a loop device whose writes a blkio cgroup throttles to
WRITE_BPS (cgroup v1 ``blkio.throttle.write_bps_device``, or v2 ``io.max``): with managedLedgerSyncData every add
waits for its fdatasync, which the kernel holds to that rate, so the disk, not the broker, is the bottleneck. The
broker also runs in a memory cgroup. Producers offer far more than the disk takes. What must happen:

- past ``maxMessagePublishBufferSizeInMB`` the broker stops reading the producers' sockets: their unread bytes
  pile up in the kernel (the broker's receive queues, seen in /proc/net/tcp), not in the broker;
- meanwhile its peak RSS stays within the idle RSS + publish buffer + cache + slack, it is not OOM-killed;
- every send completes once the disk has taken it, and every receipted message is stored.

Root only (losetup, mount, cgroups); skipped with the reason elsewhere. The test creates and removes its loop
device, its mount (private mount namespace) and its cgroups.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.reliability.limited_broker import LimitedBroker
from tests.reliability.test_memory_bound import _ROOT as MEMORY_ROOT
from tests.reliability.test_memory_bound import oom_kills, vm_kb
from tests.waiting import wait_for

MB = 1024 * 1024
PUBLISH_BUFFER_MB = 4
CACHE_MB = 4
LIMIT_MB = 192
# Connections, one socket read each past the buffer, the allocator's slack. Tighter than test_memory_bound's: the
# bound must fail if the buffer did not hold (measured: peak - idle ~ 8 MB with the 4 MB buffer, ~ all the data
# offered, 30 of 30 MB, with no buffer limit).
SLACK_MB = 16
WRITE_BPS = 2 * MB  # the disk's write rate
MESSAGE = 128 * 1024
MESSAGES = 320  # 40 MB: about 20 s of this disk, 10x the publish buffer, more than the bound allows
PRODUCERS = 4
TOPIC = "persistent://public/default/backpressure"


def _blkio_root() -> tuple[Path, str] | str:
    """(parent cgroup directory, the write-limit file) for a throttled cgroup, or why there is none."""
    v1 = Path("/sys/fs/cgroup/blkio")
    if (v1 / "blkio.throttle.write_bps_device").exists():
        return (v1, "blkio.throttle.write_bps_device") if os.access(v1, os.W_OK) else "blkio cgroup not writable"
    v2 = Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists():
        if "io" not in (v2 / "cgroup.subtree_control").read_text().split():
            return "the io controller is not enabled for child cgroups"
        return (v2, "io.max") if os.access(v2, os.W_OK) else "the cgroup v2 hierarchy is not writable"
    return "no blkio / io cgroup"


def _unavailable() -> str | None:
    if not sys.platform.startswith("linux"):
        return "Linux only"
    if os.geteuid() != 0:
        return "needs root (losetup, mount, cgroups)"
    for tool in ("losetup", "mkfs.ext4", "unshare"):
        if shutil.which(tool) is None:
            return f"no {tool}"
    if isinstance(MEMORY_ROOT, str):
        return MEMORY_ROOT
    blkio = _blkio_root()
    if isinstance(blkio, str):
        return blkio
    return None


_WHY = _unavailable()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=str(_WHY))


@pytest.fixture
def slow_disk(tmp_path: Path) -> Iterator[tuple[str, list[Path]]]:
    """(the loop device, [the io cgroup, the memory cgroup]) : a 128 MB ext4 image whose writes are throttled for
    processes in the io cgroup."""
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(128 * MB)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
    attached = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True, text=True)
    if attached.returncode != 0:
        pytest.skip(f"no loop device: {attached.stderr.strip()}")
    device = attached.stdout.strip()
    groups: list[Path] = []
    try:
        st = os.stat(device)
        blk = _blkio_root()
        assert not isinstance(blk, str) and not isinstance(MEMORY_ROOT, str)
        io_group = blk[0] / f"pytest-slow-disk-{uuid.uuid4().hex[:8]}"
        io_group.mkdir()
        groups.append(io_group)
        limit = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        (io_group / blk[1]).write_text(f"{limit} {WRITE_BPS}" if blk[1].startswith("blkio") else
                                       f"{limit} wbps={WRITE_BPS}")
        if MEMORY_ROOT[0] == blk[0]:  # cgroup v2: one group does both
            (io_group / MEMORY_ROOT[1]).write_text(str(LIMIT_MB * MB))
        else:
            memory_group = MEMORY_ROOT[0] / io_group.name
            memory_group.mkdir()
            groups.append(memory_group)
            (memory_group / MEMORY_ROOT[1]).write_text(str(LIMIT_MB * MB))
        yield device, groups
    finally:
        for group in groups:
            for pid in (group / "cgroup.procs").read_text().split():  # (our broker only, if still there)
                (group.parent / "cgroup.procs").write_text(pid)
            group.rmdir()
        subprocess.run(["losetup", "-d", device], check=False)


def unread_bytes(port: int) -> int:
    """Bytes the kernel holds that the broker has not read, over its connections on ``port``."""
    total = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].split(":")[1], 16)
        if local_port == port and fields[3] == "01":  # ESTABLISHED, the broker's end
            total += int(fields[4].split(":")[1], 16)  # rx_queue
    return total


def test_a_slow_disk_pauses_producers_instead_of_filling_memory(
        slow_disk: tuple[str, list[Path]], tmp_path: Path) -> None:
    device, groups = slow_disk
    memory_group = groups[-1]
    assert not isinstance(MEMORY_ROOT, str)
    events_file = MEMORY_ROOT[2]
    b = LimitedBroker(tmp_path, {"managedLedgerSyncData": "true",
                                 "maxMessagePublishBufferSizeInMB": PUBLISH_BUFFER_MB,
                                 "managedLedgerCacheSizeMB": CACHE_MB, "brokerDeleteInactiveTopicsEnabled": "false"},
                      cgroup=groups, block_device=device)
    client = pulsar.Client(b.url, operation_timeout_seconds=60)
    try:
        idle_kb = vm_kb(b.proc.pid, "VmRSS")
        producers = [client.create_producer(f"{TOPIC}-{i}", batching_enabled=False, block_if_queue_full=True,
                                            max_pending_messages=MESSAGES, send_timeout_millis=0)
                     for i in range(PRODUCERS)]
        receipted: dict[int, list[bytes]] = {i: [] for i in range(PRODUCERS)}
        failed: list[str] = []
        done = threading.Semaphore(0)
        lock = threading.Lock()
        payload = b"b" * MESSAGE

        def callback(i: int, data: bytes) -> object:
            def sent(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
                with lock:
                    (receipted[i].append(data) if result == pulsar.Result.Ok else failed.append(str(result)))
                done.release()
            return sent

        for n in range(MESSAGES):
            i = n % PRODUCERS
            data = b"%08d" % n + payload
            producers[i].send_async(data, callback(i, data))

        # The disk cannot keep up: the publish buffer fills and the broker stops reading the producers. Their data
        # waits in the kernel, unread, while sends are still outstanding.
        bound_kb = idle_kb + (PUBLISH_BUFFER_MB + CACHE_MB + SLACK_MB) * 1024
        wait_for(lambda: (b.metric("pulsar_broker_throttled_connections_global_limit") or 0) >= 1
                 and unread_bytes(b.port) >= MESSAGE, timeout=60,
                 what="connections paused by the publish buffer, their bytes left unread in the kernel")
        with lock:
            outstanding = MESSAGES - len(failed) - sum(map(len, receipted.values()))
        assert outstanding * MESSAGE > 2 * PUBLISH_BUFFER_MB * MB, outstanding  # far more offered than buffered
        assert vm_kb(b.proc.pid, "VmRSS") <= bound_kb

        for _ in range(MESSAGES):
            assert done.acquire(timeout=180), "sends stalled"
        assert failed == []
        assert b.proc.poll() is None, "".join(b.lines)[-3000:]
        assert oom_kills(memory_group, events_file) == 0
        peak_kb = vm_kb(b.proc.pid, "VmHWM")
        assert peak_kb <= bound_kb, (peak_kb // 1024, bound_kb // 1024)
        # Every receipted message is stored, in order.
        for i in range(PRODUCERS):
            reader = client.create_reader(f"{TOPIC}-{i}", pulsar.MessageId.earliest, receiver_queue_size=10)
            stored = []
            while reader.has_message_available():
                stored.append(reader.read_next(timeout_millis=30_000).data())
            assert stored == receipted[i]
    finally:
        client.close()
        b.stop()
