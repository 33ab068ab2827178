"""Read-only bookies against in-process fakes (no Java): never in a new ensemble, replaced on EREADONLY, and the
availability guard says when no ensemble can be formed. The same with real bookies whose disks fill up:
test_bookies_full.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from managed_ledger import InitialPosition, StorageUnavailableError
from managed_ledger.bookkeeper import ml_formats
from managed_ledger.bookkeeper.availability import BookieAvailability
from managed_ledger.bookkeeper.client import NotEnoughBookiesError
from managed_ledger.bookkeeper.factory import BookKeeperManagedLedgerFactory
from managed_ledger.bookkeeper.protocol import AddRequest, AddResponse, Request, StatusCode, encode_response
from metadata_store.memory import MemoryMetadataStore
from tests.bookkeeper.fakes import FakeCluster
from tests.waiting import eventually


@pytest.fixture
async def env() -> AsyncIterator[FakeCluster]:
    async with FakeCluster.running(bookies=3) as cluster:
        yield cluster


async def turn_read_only(env: FakeCluster, bookie_id: str) -> None:
    """What a bookie does when its disks are full: registration moved, adds answered EREADONLY."""
    await env.zk.delete(f"/ledgers/available/{bookie_id}")
    await env.zk.create(f"/ledgers/available/readonly/{bookie_id}")

    bookie = env.bookies[bookie_id]

    def refuse(request: Request) -> bytes | None:
        if isinstance(request, AddRequest):
            return encode_response(AddResponse(StatusCode.EREADONLY, request.ledger_id, request.entry_id))
        return bookie.default_response(request)  # reads are still served

    bookie.respond = refuse


async def test_read_only_bookies_are_never_in_a_new_ensemble(env: FakeCluster) -> None:
    read_only = next(iter(env.bookies))
    await turn_read_only(env, read_only)
    assert await env.bk.read_only_bookies() == [read_only]
    for _ in range(5):
        lh = await env.bk.create_ledger(2, 2, 2)
        assert read_only not in lh.metadata.last_ensemble.ensemble
        await lh.add_entry(b"x")
    with pytest.raises(NotEnoughBookiesError):
        await env.bk.create_ledger(3, 2, 2)


async def test_an_ereadonly_answer_changes_the_ensemble(env: FakeCluster) -> None:
    lh = await env.bk.create_ledger(2, 2, 2)
    first = lh.metadata.last_ensemble.ensemble[0]
    await turn_read_only(env, first)
    assert await lh.add_entry(b"x") == 0
    assert first not in lh.metadata.last_ensemble.ensemble


async def test_no_writable_ensemble_fails_the_adds_and_the_guard_says_why(env: FakeCluster) -> None:
    guard = BookieAvailability(env.bk, ensemble_size=2)
    await guard.check()
    assert guard.writable() and guard.bookie_counts == (3, 0) and not guard.warning
    lh = await env.bk.create_ledger(2, 2, 2)
    for bookie_id in list(env.bookies)[:2]:
        await turn_read_only(env, bookie_id)
    await guard.check()
    assert not guard.writable() and guard.bookie_counts == (1, 2)
    assert "1 writable bookies, 2 needed" in guard.reason and "2 read-only" in guard.reason
    with pytest.raises(NotEnoughBookiesError):  # (its ensemble of 2 of 3 has a read-only bookie)
        await lh.add_entry(b"x")
    with pytest.raises(NotEnoughBookiesError):
        await env.bk.create_ledger(2, 2, 2)
    # Room again: the bookies register writable; the next check takes writes again.
    for bookie_id in list(env.bookies)[:2]:
        await make_writable(env, bookie_id)
    await guard.check()
    assert guard.writable() and guard.reason == "" and guard.bookie_counts == (3, 0)
    await (await env.bk.create_ledger(2, 2, 2)).add_entry(b"y")


async def make_writable(env: FakeCluster, bookie_id: str) -> None:
    await env.zk.delete(f"/ledgers/available/readonly/{bookie_id}")
    await env.zk.create(f"/ledgers/available/{bookie_id}")
    env.bookies[bookie_id].respond = env.bookies[bookie_id].default_response


async def test_the_managed_ledger_holds_adds_fails_them_after_the_window_and_resumes(env: FakeCluster) -> None:
    factory = BookKeeperManagedLedgerFactory(env.bk, MemoryMetadataStore(), ensemble_size=2, write_quorum=2,
                                             ack_quorum=2, owns_client=False, add_retry_window_s=0.3,
                                             storage_check_interval_s=0.05)
    try:
        ml = await factory.open("public/default/persistent/held")
        cursor = await ml.open_cursor("check", InitialPosition.EARLIEST)  # (keeps the ledgers from trimming)
        await ml.add_entry_async(b"a")
        read_only = list(env.bookies)[:2]  # any ensemble of 2 of 3 has one of them
        for bookie_id in read_only:
            await turn_read_only(env, bookie_id)
        done: list[tuple[object, BaseException | None]] = []
        ml.add_entry(b"b", lambda pos, exc: done.append((pos, exc)))
        ml.add_entry(b"c", lambda pos, exc: done.append((pos, exc)))
        await eventually(lambda: len(done) == 2, "the held adds to fail after the window")
        assert [pos for pos, _ in done] == [None, None]
        assert all(isinstance(exc, StorageUnavailableError) and "no writable ensemble" in str(exc)
                   for _, exc in done), done
        assert factory.availability.write_disabled and not ml.is_fenced
        assert factory.availability.refused_total >= 1
        # A later add is held; room returns within its window: it is stored, and the guard clears.
        factory.add_retry_window_s = 30.0
        held: list[tuple[object, BaseException | None]] = []
        ml.add_entry(b"d", lambda pos, exc: held.append((pos, exc)))
        for bookie_id in read_only:
            await make_writable(env, bookie_id)
        await eventually(lambda: held, "the held add to be stored")
        assert held[0][1] is None
        await eventually(lambda: not factory.availability.write_disabled, "the guard to clear")
        assert [e.data for e in await cursor.read_entries_async(10)] == [b"a", b"d"]
    finally:
        await factory.close()


async def test_cursor_positions_go_to_the_znode_while_no_ensemble_can_be_formed(env: FakeCluster) -> None:
    store = MemoryMetadataStore()
    factory = BookKeeperManagedLedgerFactory(env.bk, store, ensemble_size=2, write_quorum=2, ack_quorum=2,
                                             owns_client=False, cursor_persist_interval_s=0.0)
    name = "public/default/persistent/cursor-held"
    path = ml_formats.cursor_path(factory.root, name, "sub")

    async def stored() -> ml_formats.StoredCursorInfo:
        value = await store.get(path)
        assert value is not None
        return ml_formats.decode_cursor_info(value.value)

    try:
        ml = await factory.open(name)
        cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        positions = [await ml.add_entry_async(b"%d" % i) for i in range(3)]
        cursor.mark_delete(positions[0])
        await cursor.flush()
        first = await stored()
        assert first.cursors_ledger_id != -1  # a cursor ledger holds the state
        read_only = list(env.bookies)[:2]
        for bookie_id in read_only:
            await turn_read_only(env, bookie_id)
        cursor.mark_delete(positions[1])  # the cursor ledger fails, no new one: into the znode
        await cursor.flush()
        held = await stored()
        assert held.cursors_ledger_id == -1 and held.record.mark_delete == positions[1]
        for bookie_id in read_only:
            await make_writable(env, bookie_id)
        cursor.mark_delete(positions[2])
        await cursor.flush()
        again = await stored()
        assert again.cursors_ledger_id not in (-1, first.cursors_ledger_id)
        assert (await env.bk.read_metadata(again.cursors_ledger_id))[0].ensemble_size == 2
    finally:
        await factory.close()
