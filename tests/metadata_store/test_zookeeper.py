"""What only the ZooKeeper backend has: its URL, session events and timeouts, against a real server.

ZooKeeper stopped by pid and started again (same port, same data) -> CONNECTION_LOST, RECONNECTED,
the session and its ephemeral nodes intact, watches re-armed. A network partition (a TCP proxy cut
while the server runs) past the session timeout -> the server expires the session (another client
sees the ephemeral node vanish), the cut-off client declares SESSION_LOST by itself, and once the
network is back SESSION_REESTABLISHED with a new session.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.local import ProcessInfo, free_port, start_zookeeper, stop_process
from metadata_store import MetadataStoreError, Notification, NotificationType, SessionEvent
from metadata_store.api import AlreadyExistsError, BadVersionError
from metadata_store.zookeeper import (
    MAX_REQUEST_BYTES,
    SessionState,
    SessionTracker,
    ZkAddress,
    ZooKeeperMetadataStore,
    parse_zk_url,
)
from tests.metadata_store.tcp_proxy import TcpProxy
from tests.waiting import WAIT_S, eventually
from tests.zookeeper import require_zookeeper, zk_watches

LOST = SessionEvent.CONNECTION_LOST
RECONNECTED = SessionEvent.RECONNECTED
SESSION_LOST = SessionEvent.SESSION_LOST
REESTABLISHED = SessionEvent.SESSION_REESTABLISHED


# ---- the URL and the state machine (no server) ----------------------------------------------------------------


@pytest.mark.parametrize(("url", "expected"), [
    ("zk:127.0.0.1:2181", ZkAddress("127.0.0.1:2181", "")),
    ("zk:a:1,b:2,c:3/pulsar", ZkAddress("a:1,b:2,c:3", "/pulsar")),
    ("zk:a:1/deep/chroot", ZkAddress("a:1", "/deep/chroot")),
    ("zk:a:1/", ZkAddress("a:1", "")),
    ("a:1,b:2", ZkAddress("a:1,b:2", "")),  # no scheme: ZooKeeper, as in Pulsar
    ("zk://a:1/x", ZkAddress("a:1", "/x")),
    ("zk:zookeeper", ZkAddress("zookeeper", "")),  # port 2181, as ZooKeeper's client assumes
])
def test_urls(url: str, expected: ZkAddress) -> None:
    assert parse_zk_url(url) == expected


@pytest.mark.parametrize("url", ["zk:", "zk:/chroot", "zk:a:notaport", "zk:a:70000", "zk:a:1,:2", "zk:a:1/x/"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(MetadataStoreError):
        parse_zk_url(url)


def test_session_tracker_transitions() -> None:
    t = SessionTracker()
    assert t.connected(1) == [] and t.state is SessionState.CONNECTED
    assert t.suspended() == [LOST]
    assert t.suspended() == []
    assert t.connected(1) == [RECONNECTED]
    assert t.suspended() == [LOST]
    assert t.disconnected_too_long() == [SESSION_LOST]
    assert t.lost() == []  # the expiry kazoo reports later is the same loss
    assert t.connected(2) == [REESTABLISHED]
    assert t.lost() == [LOST, SESSION_LOST]  # expired while we thought we were connected
    assert t.connected(3) == [REESTABLISHED]
    assert t.suspended() == [LOST]
    assert t.connected(4) == [SESSION_LOST, REESTABLISHED]  # a new session without an expiry seen
    assert t.disconnected_too_long() == []  # connected: no timer effect
    assert t.suspended() == [LOST]
    assert t.disconnected_too_long() == [SESSION_LOST]
    assert t.connected(4) == [REESTABLISHED]  # the same session after all: owners re-acquire anyway


# ---- against a real server -------------------------------------------------------------------------------------


class Events:
    def __init__(self, store: ZooKeeperMetadataStore) -> None:
        self.seen: list[SessionEvent] = []
        store.register_session_listener(self.seen.append)

    async def reach(self, *expected: SessionEvent, within_s: float = WAIT_S) -> None:
        await eventually(lambda: self.seen == list(expected), f"session events {expected}, got {self.seen}",
                         within_s=within_s)


@contextlib.asynccontextmanager
async def closing(*stores: ZooKeeperMetadataStore) -> AsyncIterator[None]:
    """Close the stores however the test ends: a store left open keeps kazoo's thread reconnecting to a stopped
    server for the rest of the session, and its use of the global ``random`` then fails later Hypothesis tests."""
    try:
        yield
    finally:
        for store in stores:
            with contextlib.suppress(Exception):
                await store.close()


@pytest.fixture
def own_zk(tmp_path: Path) -> Iterator[tuple[Path, list[ProcessInfo]]]:
    """A ZooKeeper of this test's own, which the test may stop and start again (stopped by pid at the end)."""
    require_zookeeper()
    running: list[ProcessInfo] = []
    yield tmp_path, running
    for info in running:
        stop_process(info.pid)


async def test_server_restart_reconnects_the_same_session(own_zk: tuple[Path, list[ProcessInfo]]) -> None:
    state, running = own_zk
    port = free_port()
    # tickTime 1 s: sessions up to 20 s, time enough for a JVM to restart on a busy machine.
    running.append(start_zookeeper(state, port=port, tick_ms=1000))
    url = f"zk:127.0.0.1:{port}/restart"
    store = await ZooKeeperMetadataStore.open(url, session_timeout_s=20.0, operation_timeout_s=1.0)
    other = await ZooKeeperMetadataStore.open(url, session_timeout_s=20.0)
    async with closing(store, other):
        events = Events(store)
        session = store.session_id
        await store.put("/owner", b"me", None, ephemeral=True)
        await store.put("/watched", b"v0", None)
        assert await store.get("/watched") is not None
        await other.close()

        stop_process(running.pop().pid)
        await events.reach(LOST)
        started = time.monotonic()
        with pytest.raises(MetadataStoreError):
            await store.get("/watched")
        assert time.monotonic() - started < 5.0  # bounded by the operation timeout, not hung

        running.append(start_zookeeper(state, port=port, tick_ms=1000))
        # What is promised: the same session back before it expires. A restarted server can take the socket and
        # answer the handshake seconds later on a busy machine, so the wait is the session's, not the usual 10 s.
        await events.reach(LOST, RECONNECTED, within_s=20.0)
        assert store.session_id == session
        owner = await store.get("/owner")
        assert owner is not None and owner.stat.created_by_self

        # the watch on /watched was re-armed on reconnection
        seen: list[Notification] = []
        store.register_listener(seen.append)
        writer = await ZooKeeperMetadataStore.open(url, session_timeout_s=20.0)
        async with closing(writer):
            await writer.put("/watched", b"v1", None)
            await eventually(lambda: Notification(NotificationType.MODIFIED, "/watched") in seen,
                             f"MODIFIED, saw {seen}")


async def test_partition_past_the_session_timeout_loses_the_session(zk_server: ProcessInfo) -> None:
    proxy = TcpProxy(int(zk_server.address.rsplit(":", 1)[1]))
    await proxy.start()
    url = f"127.0.0.1:{proxy.port}/partition-{time.monotonic_ns()}"
    store = await ZooKeeperMetadataStore.open(url, session_timeout_s=2.0)
    observer = await ZooKeeperMetadataStore.open(f"{zk_server.address}{parse_zk_url(url).chroot}")
    try:
        events = Events(store)
        old_session = store.session_id
        await store.put("/owner", b"me", -1, ephemeral=True)
        assert await observer.get("/owner") is not None
        gone: list[Notification] = []
        observer.register_listener(gone.append)

        proxy.cut()
        await events.reach(LOST, SESSION_LOST)  # declared by the client itself: it cannot hear the server
        await eventually(lambda: Notification(NotificationType.DELETED, "/owner") in gone,
                         "the server to expire the session and delete its ephemeral node")
        assert not await observer.exists("/owner")

        proxy.restore()
        await events.reach(LOST, SESSION_LOST, REESTABLISHED)
        assert store.session_id not in (0, old_session)
        again = await store.put("/owner", b"me again", -1, ephemeral=True)
        assert again.created_by_self
        seen = await observer.get("/owner")
        assert seen is not None and seen.value == b"me again" and not seen.stat.created_by_self
    finally:
        await store.close()
        await observer.close()
        await proxy.close()


async def test_close_deletes_ephemerals_at_once_and_later_calls_fail(zk_server: ProcessInfo) -> None:
    url = f"zk:{zk_server.address}/close-{time.monotonic_ns()}"
    store = await ZooKeeperMetadataStore.open(url, session_timeout_s=10.0)
    observer = await ZooKeeperMetadataStore.open(url)
    await store.put("/e", b"", None, ephemeral=True)
    assert await observer.exists("/e")
    await store.close()
    assert not await observer.exists("/e")  # no wait for a session timeout
    with pytest.raises(MetadataStoreError):
        await store.get("/e")
    await observer.close()


async def test_a_value_past_the_request_limit_is_refused_before_sending(zk_server: ProcessInfo) -> None:
    store = await ZooKeeperMetadataStore.open(f"zk:{zk_server.address}/big-{time.monotonic_ns()}")
    events = Events(store)
    with pytest.raises(MetadataStoreError, match=r"jute\.maxbuffer"):
        await store.put("/big", bytes(2 << 20), None)
    await store.put("/big", bytes(MAX_REQUEST_BYTES - 10), None)  # just under: fine
    got = await store.get("/big")
    assert got is not None and len(got.value) == MAX_REQUEST_BYTES - 10
    assert events.seen == []  # the connection never dropped
    await store.close()


async def test_multi_is_all_or_nothing(zk_server: ProcessInfo) -> None:
    """``multi``: its creates and version-checked deletes take effect together or not at all (what moving a managed
    ledger's znodes to a new name relies on)."""
    store = await ZooKeeperMetadataStore.open(f"zk:{zk_server.address}/multi-{time.monotonic_ns()}")
    await store.put("/old", b"info", None)
    await store.put("/old/c", b"cursor", None)
    got, cursor = await store.get("/old"), await store.get("/old/c")
    assert got is not None and cursor is not None
    with pytest.raises(BadVersionError):  # (the node changed since it was read: nothing done)
        await store.multi([("/new", b"info"), ("/new/c", b"cursor")],
                          [("/old/c", cursor.stat.version + 1), ("/old", got.stat.version)])
    assert not await store.exists("/new") and await store.exists("/old/c")
    await store.multi([("/new", b"info"), ("/new/c", b"cursor")],
                      [("/old/c", cursor.stat.version), ("/old", got.stat.version)])
    assert not await store.exists("/old")
    moved = await store.get("/new/c")
    assert await store.get_children("/new") == ["c"] and moved is not None and moved.value == b"cursor"
    with pytest.raises(AlreadyExistsError):
        await store.multi([("/new", b"again")], [])
    await store.close()


async def test_nothing_listening_fails_fast_with_a_clear_error() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(MetadataStoreError, match="cannot"):
        await ZooKeeperMetadataStore.open(f"zk:127.0.0.1:{port}", connect_timeout_s=1.0)
    with pytest.raises(MetadataStoreError, match="cannot"):
        await ZooKeeperMetadataStore.open(f"zk:127.0.0.1:{port}/chroot", connect_timeout_s=1.0)
    assert time.monotonic() - started < 10.0


@contextlib.asynccontextmanager
async def store_and_other_client(zk_server: ProcessInfo) -> AsyncIterator[tuple[ZooKeeperMetadataStore, Any,
                                                                                list[Notification]]]:
    """A store, a plain kazoo client on the same (fresh) chroot, and what the store is told."""
    from kazoo.client import KazooClient

    chroot = f"/rearm-{time.monotonic_ns()}"
    store = await ZooKeeperMetadataStore.open(f"{zk_server.address}{chroot}")
    other = KazooClient(hosts=f"{zk_server.address}{chroot}")
    other.start(timeout=10)
    seen: list[Notification] = []
    store.register_listener(seen.append)
    try:
        yield store, other, seen
    finally:
        other.stop()
        other.close()
        await store.close()


async def test_a_deletion_before_the_watch_is_armed_again_is_still_told(zk_server: ProcessInfo) -> None:
    """ZooKeeper's watches are one-shot: between a MODIFIED event and the new watch, the node may go, and no watch
    reports that. Another client changes then deletes the node while this store's event loop is held (so the
    MODIFIED event waits on the loop and the watch is armed again only after the deletion): DELETED is told all the
    same, from the answer of the re-arming read."""
    async with store_and_other_client(zk_server) as (store, other, seen):
        await store.put("/x", b"1", None)
        assert await store.get("/x") is not None  # (arms the watch on /x)
        other.set("/x", b"2")  # the loop is held from here ...
        other.delete("/x")  # ... to here: the MODIFIED event is handled after the deletion
        await eventually(lambda: Notification(NotificationType.DELETED, "/x") in seen, "DELETED on /x")


@pytest.mark.parametrize("first", ["create", "set"])
async def test_a_change_before_the_watch_is_armed_again_is_still_told(zk_server: ProcessInfo, first: str) -> None:
    """As above, for a write: another client makes (or changes) the node and changes it again while this store's
    event loop is held, so the watch is armed again only after the second write, which no watch reports. It is
    told all the same (a second MODIFIED), from the version the re-arming read answers."""
    async with store_and_other_client(zk_server) as (store, other, seen):
        if first == "create":
            assert await store.get("/x") is None  # (arms the watch on the missing /x)
            other.create("/x", b"1")  # the loop is held from here ...
            told = Notification(NotificationType.CREATED, "/x")
        else:
            await store.put("/x", b"1", None)
            assert await store.get("/x") is not None
            other.set("/x", b"2")  # the loop is held from here ...
            told = Notification(NotificationType.MODIFIED, "/x")
        other.set("/x", b"3")  # ... to here: the first write's event is handled after the second write
        modified = Notification(NotificationType.MODIFIED, "/x")
        expected = 1 if first == "create" else 2
        await eventually(lambda: told in seen and seen.count(modified) >= expected, f"{told} then MODIFIED: {seen}")
        # Nothing more is missed: the watch is armed again.
        other.set("/x", b"4")
        await eventually(lambda: seen.count(modified) >= expected + 1, f"MODIFIED x{expected + 1}: {seen}")


async def test_names_that_came_and_went_keep_no_watch(zk_server: ProcessInfo) -> None:
    """Topics, cursors and partitioned topics come and go; a broker reads each one. A node deleted in a directory
    whose children the store watches, or read there and not found, keeps no watch: its coming is told as the
    directory's CHILDREN_CHANGED. So the watches, on the server and in the store, do not grow with names that came
    and went (each used to keep one for good)."""
    async with store_and_other_client(zk_server) as (store, other, seen):
        await store.put("/topics", b"", None)
        assert await store.get_children("/topics") == []
        before = zk_watches(zk_server.address)
        for i in range(40):
            await store.put(f"/topics/t{i}", b"x", None)  # (made and read here, deleted by another broker)
            assert await store.get(f"/topics/t{i}") is not None
            other.delete(f"/topics/t{i}")
            assert await store.get(f"/topics/never-{i}") is None
            assert not await store.exists(f"/topics/nor-{i}")
        await eventually(lambda: Notification(NotificationType.DELETED, "/topics/t39") in seen, "the last deletion")
        assert zk_watches(zk_server.address) <= before + 2
        # A name made again is told as its directory's change, and watched again once read.
        listed = Notification(NotificationType.CHILDREN_CHANGED, "/topics")
        told = seen.count(listed)
        other.create("/topics/t0", b"again")
        await eventually(lambda: seen.count(listed) > told, "the directory's change")
        assert await store.get("/topics/t0") is not None
        other.set("/topics/t0", b"changed")
        await eventually(lambda: Notification(NotificationType.MODIFIED, "/topics/t0") in seen, "MODIFIED on t0")


async def test_listed_nodes_that_came_and_went_keep_no_watch(zk_server: ProcessInfo) -> None:
    """A node whose children are listed (a topic's schema versions), in a directory whose children the store
    watches: deleted with its children and listed again (the cache re-reads it on the children's change, before or
    after it hears of the deletion), it keeps no watch. Its coming again and a version added are told."""
    async with store_and_other_client(zk_server) as (store, other, seen):
        await store.put("/schemas", b"", None)
        assert await store.get_children("/schemas") == []
        before = zk_watches(zk_server.address)
        for i in range(30):
            other.create(f"/schemas/t{i}/v0", b"x", makepath=True)
            assert await store.get_children(f"/schemas/t{i}") == ["v0"]
            other.delete(f"/schemas/t{i}", recursive=True)
            assert await store.get_children(f"/schemas/t{i}") == []  # (read again: not there)
            assert await store.get_children(f"/schemas/never-{i}") == []
        # (Their deletions are told as /schemas' CHILDREN_CHANGED, or as their DELETED when the children's watch
        # was armed again before it.)
        await eventually(lambda: zk_watches(zk_server.address) <= before + 2, "no watch left on the deleted nodes")
        other.create("/schemas/t0/v0", b"again", makepath=True)
        await eventually(lambda: Notification(NotificationType.CHILDREN_CHANGED, "/schemas") in seen, "the coming")
        assert await store.get_children("/schemas/t0") == ["v0"]
        other.create("/schemas/t0/v1", b"more")
        await eventually(lambda: Notification(NotificationType.CHILDREN_CHANGED, "/schemas/t0") in seen, "a version")


async def test_a_read_that_does_not_watch_missing_nodes_leaves_no_watch(zk_server: ProcessInfo) -> None:
    """``watch_missing=False`` (the broker's reads through for a name asked about, in a directory it may not list
    yet: every lookup reads a topic's partitioned metadata): a node not there gets no watch; one there is watched as
    always, so its changes are told."""
    async with store_and_other_client(zk_server) as (store, other, seen):
        await store.put("/elsewhere", b"", None)  # (the session's own watches, before counting)
        before = zk_watches(zk_server.address)
        for i in range(20):
            assert await store.get(f"/unlisted/a{i}", watch_missing=False) is None
            assert not await store.exists(f"/unlisted/b{i}", watch_missing=False)
        assert zk_watches(zk_server.address) == before
        other.create("/unlisted/there", b"1", makepath=True)
        assert await store.get("/unlisted/there", watch_missing=False) is not None
        assert await store.exists("/unlisted/there", watch_missing=False)
        other.set("/unlisted/there", b"2")
        await eventually(lambda: Notification(NotificationType.MODIFIED, "/unlisted/there") in seen, "MODIFIED")
