"""The broker under a memory limit it must not cross (issue 23, item 3; docs/exhaustion.md#memory).

The broker runs in a memory cgroup the test creates (v1 ``memory.limit_in_bytes`` or v2
``memory.max``; skipped with the reason where the test may not create one) with a small publish
buffer and read cache. Producers push far more data than the limit, as fast as the broker takes
it. The broker must not be OOM-killed: it slows the producers (it stops reading their sockets past
``maxMessagePublishBufferSizeInMB``) instead of buffering, its peak RSS stays within the stated
bound (base + publish buffer + cache + connections), and every receipted message is stored. Past
``brokerMaxConnections`` and ``maxTopicsPerNamespace`` new connections and topics are refused
with clear errors, which caps the per-connection and per-topic parts of the bound.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from tests.reliability.limited_broker import LimitedBroker

MB = 1024 * 1024
PUBLISH_BUFFER_MB = 8
CACHE_MB = 8
LIMIT_MB = 192  # the cgroup's limit: page cache of the data files counts too (reclaimable)
MESSAGE = 256 * 1024
MESSAGES = 1200  # 300 MB in all, well past the limit
PRODUCERS = 6
TOPIC = "persistent://public/default/memory-bound"
# What the bound allows on top of the idle broker (docs/exhaustion.md#memory): the publish buffer
# (exceeded by at most one socket read per connection) and the cache, plus the producers'
# connections and their in-flight frames, and the allocator's slack.
SLACK_MB = 48
# The per-connection and per-topic parts of the bound are capped by Pulsar's limits, refused past them.
MAX_CONNECTIONS = 40
MAX_TOPICS = 100


def _cgroup_root() -> tuple[Path, str, str] | str:
    """(parent directory, limit file, events file) of a cgroup we may create, or why not."""
    v1 = Path("/sys/fs/cgroup/memory")
    if (v1 / "memory.limit_in_bytes").exists():
        return (v1, "memory.limit_in_bytes", "memory.oom_control") if os.access(v1, os.W_OK) \
            else "the memory cgroup hierarchy is not writable"
    v2 = Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists():
        if "memory" not in (v2 / "cgroup.subtree_control").read_text():
            return "the memory controller is not enabled for child cgroups"
        return (v2, "memory.max", "memory.events") if os.access(v2, os.W_OK) \
            else "the cgroup v2 hierarchy is not writable"
    return "no memory cgroup"


_ROOT = _cgroup_root() if sys.platform.startswith("linux") else "Linux cgroups only"
pytestmark = pytest.mark.skipif(isinstance(_ROOT, str), reason=str(_ROOT))


@pytest.fixture
def cgroup() -> Iterator[tuple[Path, str]]:
    assert not isinstance(_ROOT, str)
    parent, limit_file, events_file = _ROOT
    group = parent / f"pytest-memory-bound-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        (group / limit_file).write_text(str(LIMIT_MB * MB))
        yield group, events_file
    finally:
        for pid in (group / "cgroup.procs").read_text().split():  # (our broker only, if it is still there)
            (parent / "cgroup.procs").write_text(pid)
        group.rmdir()


def vm_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key}")


def connect_frame() -> bytes:
    cmd = pb.BaseCommand(type=pb.BaseCommand.CONNECT)
    cmd.connect.client_version = "memory-bound-test"
    cmd.connect.protocol_version = 20
    return commands.frame(cmd)


def first_command(sock: socket.socket) -> str | None:
    """The name of the broker's first command on sock, or None if it closed the connection."""
    sock.settimeout(30)
    data = b""
    try:
        while len(data) < 8 or len(data) < 4 + struct.unpack_from(">I", data)[0]:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
    except ConnectionResetError:
        return None
    cmd = pb.BaseCommand()
    cmd.ParseFromString(data[8:8 + struct.unpack_from(">I", data, 4)[0]])
    return pb.BaseCommand.Type.Name(cmd.type)


def oom_kills(group: Path, events_file: str) -> int:
    for line in (group / events_file).read_text().splitlines():
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    return 0


def test_a_broker_in_a_memory_cgroup_slows_producers_instead_of_dying(
        cgroup: tuple[Path, str], tmp_path: Path) -> None:
    group, events_file = cgroup
    b = LimitedBroker(tmp_path, {"maxMessagePublishBufferSizeInMB": PUBLISH_BUFFER_MB,
                                 "managedLedgerCacheSizeMB": CACHE_MB, "brokerDeleteInactiveTopicsEnabled": "false",
                                 "brokerMaxConnections": MAX_CONNECTIONS, "maxTopicsPerNamespace": MAX_TOPICS},
                      cgroup=group)
    proc = b.proc
    client = pulsar.Client(b.url, operation_timeout_seconds=60)
    try:
        idle_kb = vm_kb(proc.pid, "VmRSS")
        producers = [client.create_producer(f"{TOPIC}-{i % 3}", batching_enabled=False, block_if_queue_full=True,
                                            max_pending_messages=200, send_timeout_millis=0)
                     for i in range(PRODUCERS)]
        receipted: dict[int, list[bytes]] = {i: [] for i in range(PRODUCERS)}
        done = threading.Semaphore(0)
        payload = b"m" * MESSAGE

        def callback(i: int, data: bytes) -> object:
            def sent(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
                if result == pulsar.Result.Ok:
                    receipted[i].append(data)
                done.release()
            return sent

        for n in range(MESSAGES):
            i = n % PRODUCERS
            data = b"%08d" % n + payload
            producers[i].send_async(data, callback(i, data))
        for _ in range(MESSAGES):
            assert done.acquire(timeout=120), "sends stalled"
        peak_kb = vm_kb(proc.pid, "VmHWM")
        assert proc.poll() is None, "".join(b.lines)[-3000:]
        assert oom_kills(group, events_file) == 0
        assert sum(map(len, receipted.values())) == MESSAGES
        bound_kb = idle_kb + (PUBLISH_BUFFER_MB + CACHE_MB + SLACK_MB) * 1024
        assert peak_kb <= bound_kb, (peak_kb // 1024, bound_kb // 1024)
        # Past the connection and topic limits, new work is refused with a clear error.
        flood = [socket.create_connection(("127.0.0.1", b.port), timeout=10) for _ in range(2 * MAX_CONNECTIONS)]
        try:
            for sock in flood:
                sock.sendall(connect_frame())
            answers = [first_command(sock) for sock in flood]
        finally:
            for sock in flood:
                sock.close()
        # (refused: closed, "Reached the maximum number of connections")
        assert sum(a != "CONNECTED" for a in answers) >= MAX_CONNECTIONS, answers
        assert "CONNECTED" in answers
        refused: list[str] = []
        for i in range(MAX_TOPICS + 20):
            try:
                client.create_producer(f"{TOPIC}-many-{i}").close()
            except pulsar.PulsarException as exc:
                refused.append(str(exc))
        assert len(refused) >= 20 and all("NotAllowed" in r or "opic" in r for r in refused), refused[:3]
        assert proc.poll() is None
        assert vm_kb(proc.pid, "VmHWM") <= bound_kb
        # Everything receipted is stored. The readers keep the client's default receiver queue (1,000 permits:
        # 250 MB of these messages): dispatcherMaxReadSizeBytes, not the permits, bounds what one read holds (with
        # only the 100-entry batch limit, 25 MB a read, the broker reached the cgroup's limit and stalled).
        for t in range(3):
            reader = client.create_reader(f"{TOPIC}-{t}", pulsar.MessageId.earliest)
            count = 0
            while reader.has_message_available():
                reader.read_next(timeout_millis=30_000)
                count += 1
            assert count == sum(len(receipted[i]) for i in range(PRODUCERS) if i % 3 == t)
            reader.close()
        assert proc.poll() is None
        assert oom_kills(group, events_file) == 0
        assert vm_kb(proc.pid, "VmHWM") <= bound_kb, (vm_kb(proc.pid, "VmHWM") // 1024, bound_kb // 1024)
    finally:
        client.close()
        b.stop()
