"""The metadata-store contract (metadata_store/api.py): every backend passes the same tests.

Each test has a data set of its own (a memory name, a directory, a ZooKeeper chroot), so paths are
plain. Notifications are awaited, never slept for. Tests read a path before expecting to be told of
its changes: ZooKeeper's watches are set by reads (see metadata_store/zookeeper.py).
"""

from __future__ import annotations

import asyncio

import pytest

from metadata_store import (
    BadVersionError,
    InvalidPathError,
    MetadataStore,
    MetadataStoreError,
    NotFoundError,
    Notification,
    NotificationType,
)
from tests.metadata_store.backends import Backend
from tests.waiting import eventually

CREATED = NotificationType.CREATED
MODIFIED = NotificationType.MODIFIED
DELETED = NotificationType.DELETED
CHILDREN = NotificationType.CHILDREN_CHANGED


class Recorder:
    """A listener that keeps what it was told, and lets a test await one notification."""

    def __init__(self, store: MetadataStore) -> None:
        self.seen: list[Notification] = []
        store.register_listener(self.seen.append)

    async def saw(self, kind: NotificationType, path: str, times: int = 1) -> None:
        note = Notification(kind, path)
        await eventually(lambda: self.seen.count(note) >= times, f"{kind.name} on {path} x{times}; saw {self.seen}")


async def a_peer(backend: Backend, store: MetadataStore) -> MetadataStore:
    """A second session on the same data when the backend has them, else the same store."""
    return await backend.open() if backend.peers else store


# ---- values and versions ---------------------------------------------------------------------------------------


async def test_put_get_versions_and_times(backend: Backend) -> None:
    store = await backend.open()
    assert await store.get("/a") is None
    assert not await store.exists("/a")

    created = await store.put("/a", b"one", None)
    assert (created.path, created.version, created.ephemeral, created.created_by_self) == ("/a", 0, False, False)
    got = await store.get("/a")
    assert got is not None and got.value == b"one" and got.stat == created
    assert await store.exists("/a")

    updated = await store.put("/a", b"two", None)
    assert updated.version == 1
    assert updated.creation_time_ms == created.creation_time_ms
    assert updated.modification_time_ms >= created.modification_time_ms >= created.creation_time_ms > 0
    got = await store.get("/a")
    assert got is not None and got.value == b"two" and got.stat.version == 1

    assert (await store.put("/a", b"", None)).version == 2
    got = await store.get("/a")
    assert got is not None and got.value == b""


async def test_binary_values_round_trip(backend: Backend) -> None:
    store = await backend.open()
    value = bytes(range(256)) * 40
    await store.put("/bin", value, None)
    got = await store.get("/bin")
    assert got is not None and got.value == value


async def test_create_only(backend: Backend) -> None:
    store = await backend.open()
    assert (await store.put("/c", b"x", -1)).version == 0
    with pytest.raises(BadVersionError):
        await store.put("/c", b"y", -1)
    got = await store.get("/c")
    assert got is not None and got.value == b"x"


async def test_compare_and_set(backend: Backend) -> None:
    store = await backend.open()
    await store.put("/cas", b"v0", -1)
    assert (await store.put("/cas", b"v1", 0)).version == 1
    with pytest.raises(BadVersionError):
        await store.put("/cas", b"stale", 0)
    assert (await store.put("/cas", b"v2", 1)).version == 2
    got = await store.get("/cas")
    assert got is not None and got.value == b"v2"
    with pytest.raises(NotFoundError):
        await store.put("/missing", b"x", 0)
    assert not await store.exists("/missing")


async def test_two_writers_race_one_wins(backend: Backend) -> None:
    store = await backend.open()
    peer = await a_peer(backend, store)
    await store.put("/race", b"start", None)
    results = await asyncio.gather(store.put("/race", b"from-1", 0), peer.put("/race", b"from-2", 0),
                                   return_exceptions=True)
    wins = [r for r in results if not isinstance(r, BaseException)]
    losses = [r for r in results if isinstance(r, BaseException)]
    assert len(wins) == 1 and len(losses) == 1, results
    assert isinstance(losses[0], BadVersionError)
    got = await peer.get("/race")
    assert got is not None and got.stat.version == 1 and got.value in (b"from-1", b"from-2")


async def test_two_creators_race_one_wins(backend: Backend) -> None:
    store = await backend.open()
    peer = await a_peer(backend, store)
    results = await asyncio.gather(*(s.put("/lock/owner", name, -1) for s, name in ((store, b"1"), (peer, b"2"))),
                                   return_exceptions=True)
    assert sorted(type(r).__name__ for r in results) == ["BadVersionError", "Stat"], results


async def test_many_writers_each_version_once(backend: Backend) -> None:
    """Compare-and-set as a counter: every increment lands exactly once."""
    store = await backend.open()
    peer = await a_peer(backend, store)
    await store.put("/counter", b"0", -1)

    async def increment(s: MetadataStore) -> None:
        while True:
            got = await s.get("/counter")
            assert got is not None
            try:
                await s.put("/counter", str(int(got.value) + 1).encode(), got.stat.version)
                return
            except BadVersionError:
                continue

    await asyncio.gather(*(increment(s) for s in [store, peer] * 5))
    got = await store.get("/counter")
    assert got is not None and got.value == b"10" and got.stat.version == 10


# ---- the tree --------------------------------------------------------------------------------------------------


async def test_put_creates_parents(backend: Backend) -> None:
    store = await backend.open()
    await store.put("/p/q/r", b"leaf", None)
    for parent in ("/p", "/p/q"):
        got = await store.get(parent)
        assert got is not None and got.value == b"" and got.stat.version == 0 and not got.stat.ephemeral
    assert await store.get_children("/p") == ["q"]
    assert await store.get_children("/p/q") == ["r"]
    assert "p" in await store.get_children("/")


async def test_children_sorted_names(backend: Backend) -> None:
    store = await backend.open()
    names = ["m", "b", "z", "a-1", "a-10", "a-2"]
    for name in names:
        await store.put(f"/kids/{name}", b"", None)
    await store.put("/kids/b/grandchild", b"", None)
    assert await store.get_children("/kids") == sorted(names)
    assert await store.get_children("/kids/m") == []
    assert await store.get_children("/no/such") == []


async def test_delete(backend: Backend) -> None:
    store = await backend.open()
    with pytest.raises(NotFoundError):
        await store.delete("/d")
    await store.put("/d", b"x", None)
    await store.put("/d", b"y", None)
    with pytest.raises(BadVersionError):
        await store.delete("/d", 0)
    await store.delete("/d", 1)
    assert not await store.exists("/d")

    await store.put("/e", b"x", None)
    await store.delete("/e")
    assert await store.get("/e") is None
    with pytest.raises(NotFoundError):
        await store.delete("/e", 0)


async def test_delete_with_children_refused(backend: Backend) -> None:
    store = await backend.open()
    await store.put("/parent/child", b"", None)
    with pytest.raises(MetadataStoreError) as refused:
        await store.delete("/parent")
    assert not isinstance(refused.value, NotFoundError | BadVersionError)
    assert await store.exists("/parent/child")


async def test_delete_recursive(backend: Backend) -> None:
    store = await backend.open()
    for path in ("/t/a/1", "/t/a/2/x", "/t/b", "/t/c/deep/er/still", "/keep/me"):
        await store.put(path, b"v", None)
    await store.delete_recursive("/t/a")
    assert await store.get_children("/t") == ["b", "c"]
    await store.delete_recursive("/t")
    assert not await store.exists("/t")
    assert await store.exists("/keep/me")
    await store.delete_recursive("/t")  # nothing there: not an error
    await store.delete_recursive("/never/was")


async def test_invalid_paths_refused(backend: Backend) -> None:
    store = await backend.open()
    for bad in ("", "a", "a/b", "/a/", "//a", "/a//b", "/a/./b", "/a/../b", "/a\x00b"):
        with pytest.raises(InvalidPathError):
            await store.put(bad, b"", None)
        with pytest.raises(InvalidPathError):
            await store.get(bad)
    with pytest.raises(MetadataStoreError):
        await store.put("/", b"", None)
    with pytest.raises(MetadataStoreError):
        await store.delete("/")
    assert await store.exists("/")


async def test_bad_arguments_refused(backend: Backend) -> None:
    store = await backend.open()
    await store.put("/arg", b"", None)
    for bad in ("0", 1.0, -2):
        with pytest.raises(MetadataStoreError):
            await store.put("/arg", b"", bad)  # type: ignore[arg-type]
    with pytest.raises(MetadataStoreError):
        await store.delete("/arg", "0")  # type: ignore[arg-type]
    with pytest.raises(MetadataStoreError):
        await store.put("/arg", "text", None)  # type: ignore[arg-type]
    with pytest.raises(MetadataStoreError):
        await store.put("/arg", b"", 0, sequential=True)
    got = await store.get("/arg")
    assert got is not None and got.stat.version == 0


async def test_closed_store_raises(backend: Backend) -> None:
    store = await backend.open()
    await store.put("/x", b"", None)
    await store.close()
    with pytest.raises(MetadataStoreError):
        await store.get("/x")
    with pytest.raises(MetadataStoreError):
        await store.put("/y", b"", None)
    await store.close()  # twice is fine


async def test_data_survives_reopen(backend: Backend) -> None:
    """Persistent nodes outlive the session that wrote them (a broker restart)."""
    store = await backend.open()
    await store.put("/durable/a", b"A", None)
    await store.put("/durable/a", b"A2", 0)
    await store.put("/durable/b", b"B", None)
    await store.delete("/durable/b")
    await store.close()
    again = await backend.open()
    got = await again.get("/durable/a")
    assert got is not None and got.value == b"A2" and got.stat.version == 1
    assert await again.get_children("/durable") == ["a"]


# ---- ephemeral and sequential nodes ----------------------------------------------------------------------------


async def test_ephemeral_nodes_go_with_the_session(backend: Backend) -> None:
    store = await backend.open()
    stat = await store.put("/owners/broker-1", b"me", None, ephemeral=True)
    assert stat.ephemeral and stat.created_by_self
    await store.put("/owners/persistent", b"", None)
    got = await store.get("/owners/broker-1")
    assert got is not None and got.stat.ephemeral and got.stat.created_by_self
    if backend.peers:
        peer = await backend.open()
        seen = await peer.get("/owners/broker-1")
        assert seen is not None and seen.stat.ephemeral and not seen.stat.created_by_self
        recorder = Recorder(peer)
    await store.close()
    if backend.peers:
        await recorder.saw(DELETED, "/owners/broker-1")
        assert not await peer.exists("/owners/broker-1")
    after = await backend.open()
    assert not await after.exists("/owners/broker-1")
    assert await after.get_children("/owners") == ["persistent"]


async def test_ephemeral_nodes_have_no_children(backend: Backend) -> None:
    store = await backend.open()
    await store.put("/eph", b"", None, ephemeral=True)
    with pytest.raises(MetadataStoreError):
        await store.put("/eph/child", b"", None)
    assert await store.get_children("/eph") == []


async def test_sequential_names(backend: Backend) -> None:
    """ZooKeeper's names: the count of children ever created under the parent, 10 digits, zero-padded."""
    store = await backend.open()
    first = await store.put("/queue/item-", b"a", None, sequential=True)
    assert first.path == "/queue/item-0000000000" and first.version == 0
    second = await store.put("/queue/item-", b"b", None, sequential=True)
    assert second.path == "/queue/item-0000000001"
    await store.put("/queue/plain", b"", None)  # any child created advances the counter
    await store.delete("/queue/plain")  # a delete does not
    third = await store.put("/queue/item-", b"c", -1, sequential=True)
    assert third.path == "/queue/item-0000000003"
    eph = await store.put("/queue/e-", b"", None, ephemeral=True, sequential=True)
    assert eph.path == "/queue/e-0000000004" and eph.ephemeral
    assert await store.get_children("/queue") == [
        "e-0000000004", "item-0000000000", "item-0000000001", "item-0000000003"]
    got = await store.get("/queue/item-0000000001")
    assert got is not None and got.value == b"b"


async def test_sequential_names_not_reused_after_reopen(backend: Backend) -> None:
    store = await backend.open()
    made = [(await store.put("/ids/id-", b"", None, sequential=True, ephemeral=e)).path for e in (False, True)]
    await store.close()
    again = await backend.open()
    later = (await again.put("/ids/id-", b"", None, sequential=True)).path
    assert later not in made and later > max(made)


# ---- notifications ---------------------------------------------------------------------------------------------


async def test_notifications_for_each_change(backend: Backend) -> None:
    """A store is told of changes to what it has read (as a cache reads, then watches), by itself or others;
    each watch is re-armed, so every later change is told too."""
    store = await backend.open()
    await store.put("/n", b"", None)
    peer = await a_peer(backend, store)
    mine = Recorder(store)
    theirs = Recorder(peer) if peer is not store else mine
    for reader in {id(s): s for s in (store, peer)}.values():
        assert not await reader.exists("/n/x")
        assert await reader.get_children("/n") == []

    await store.put("/n/x", b"1", None)
    for recorder in (mine, theirs):
        await recorder.saw(CREATED, "/n/x")
        await recorder.saw(CHILDREN, "/n")

    await store.put("/n/x", b"2", None)
    for recorder in (mine, theirs):
        await recorder.saw(MODIFIED, "/n/x")
    await peer.put("/n/x", b"3", None)
    for recorder in (mine, theirs):
        await recorder.saw(MODIFIED, "/n/x", times=2)

    await peer.delete("/n/x")
    for recorder in (mine, theirs):
        await recorder.saw(DELETED, "/n/x")
        await recorder.saw(CHILDREN, "/n", times=2)

    await store.put("/n/x", b"again", None)
    for recorder in (mine, theirs):  # (a node made again in a listed directory: told as it, or as the directory's)
        await eventually(lambda r=recorder: r.seen.count(Notification(CREATED, "/n/x")) >= 2  # type: ignore[misc]
                         or r.seen.count(Notification(CHILDREN, "/n")) >= 3, f"/n/x made again; saw {recorder.seen}")


async def test_writer_is_told_of_later_changes_by_others(backend: Backend) -> None:
    """A put watches the node it wrote: a broker that wrote a value hears when someone else changes it."""
    store = await backend.open()
    peer = await a_peer(backend, store)
    await store.put("/w", b"mine", None)
    recorder = Recorder(store)
    await peer.put("/w", b"theirs", None)
    await recorder.saw(MODIFIED, "/w")


async def test_notifications_for_created_parents_and_recursive_delete(backend: Backend) -> None:
    store = await backend.open()
    await store.put("/r", b"", None)
    recorder = Recorder(store)
    for watched in ("/r/a", "/r/a/b"):
        assert not await store.exists(watched)
    assert await store.get_children("/r") == []
    await store.put("/r/a/b", b"", None)
    await recorder.saw(CREATED, "/r/a")
    await recorder.saw(CREATED, "/r/a/b")
    await recorder.saw(CHILDREN, "/r")
    await store.delete_recursive("/r/a")
    await recorder.saw(DELETED, "/r/a/b")
    await recorder.saw(DELETED, "/r/a")


async def test_a_failing_listener_does_not_stop_the_others(backend: Backend) -> None:
    store = await backend.open()

    def broken(_: Notification) -> None:
        raise RuntimeError("listener bug")

    store.register_listener(broken)
    recorder = Recorder(store)
    assert not await store.exists("/after-broken")
    await store.put("/after-broken", b"", None)
    await recorder.saw(CREATED, "/after-broken")
