"""A failed add on the BookKeeper managed ledger, with real bookies (Pulsar's ``OpAddEntry.handleAddFailure``): the
failed ledger is closed where the acknowledged adds end, a new ledger is created once enough bookies are writable,
and the pending adds succeed on it, in their order, with no entry stored twice and none missing.

The module has a cluster of its own (ZooKeeper + 3 bookies): it stops two bookies and starts them again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator

import pytest

from cluster.local import LocalCluster, kill_bookie, restart_bookie, running_cluster
from managed_ledger import InitialPosition, ManagedLedgerConfig, Position
from managed_ledger.bookkeeper.client import BookKeeper
from managed_ledger.bookkeeper.factory import BookKeeperManagedLedgerFactory
from managed_ledger.bookkeeper.metadata import LedgerState
from tests.bookkeeper.conftest import require_cluster_deps

WAIT_S = 90.0  # bookies stop and start (JVMs) on a shared machine
NAME = "public/default/persistent/add-failure"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    require_cluster_deps()
    with running_cluster(tmp_path_factory.mktemp("add-failure"), bookies=3) as running:
        yield running


def factory_on(cluster: LocalCluster, root: str) -> BookKeeperManagedLedgerFactory:
    # Ensemble 2 of 3 bookies, both must acknowledge: with two bookies gone the ensemble cannot be replaced, and
    # no new ledger can be created until two bookies are writable again.
    return BookKeeperManagedLedgerFactory(BookKeeper(cluster.zk_address), f"zk:{cluster.zk_address}", root=root,
                                          ensemble_size=2, write_quorum=2, ack_quorum=2, add_retry_window_s=WAIT_S)


async def until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """Await a condition with no event to wait on (a znode's content, callbacks counted), bounded by WAIT_S."""
    try:
        async with asyncio.timeout(WAIT_S):
            while not await condition():  # noqa: ASYNC110 - znodes and callbacks: no event to await
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def read_all(factory: BookKeeperManagedLedgerFactory, expected: int) -> list[tuple[Position, bytes]]:
    ml = await factory.open(NAME)
    cursor = await ml.open_cursor(f"reader-{uuid.uuid4().hex[:6]}", InitialPosition.EARLIEST)
    seen: list[tuple[Position, bytes]] = []
    while len(seen) < expected:
        entries = await asyncio.wait_for(cursor.read_entries_or_wait_async(100), WAIT_S)
        seen.extend((e.position, e.data) for e in entries)
    return seen


async def test_pending_adds_move_to_a_new_ledger_in_order(cluster: LocalCluster) -> None:
    root = f"/ml-tests/{uuid.uuid4().hex}/managed-ledgers"
    factory = factory_on(cluster, root)
    try:
        ml = await factory.open(NAME, ManagedLedgerConfig(retention_time_s=-1, retention_size_bytes=-1))
        for i in range(20):
            await ml.add_entry_async(b"m%d" % i)
        failed_ledger = ml.current_ledger_id
        metadata, _ = await factory.bk.read_metadata(failed_ledger)
        ensemble = metadata.last_ensemble.ensemble
        # Both bookies of the ensemble stop (gracefully: they leave the writable list at once); one is left.
        stopped = [b for b in cluster.bookies if b.address in ensemble]
        await asyncio.gather(*(asyncio.to_thread(kill_bookie, cluster, b.address, False) for b in stopped))

        done: list[tuple[int, Position | None, BaseException | None]] = []

        def record(i: int) -> Callable[[Position | None, BaseException | None], None]:
            return lambda pos, exc: done.append((i, pos, exc))

        for i in range(20, 50):
            ml.add_entry(b"m%d" % i, record(i))

        # The adds failed on the bookies: the ledger is closed where the acknowledged adds end ...
        async def closed_at_last_acknowledged() -> bool:
            md, _ = await factory.bk.read_metadata(failed_ledger)
            return md.state == LedgerState.CLOSED and md.last_entry_id == 19

        await until(closed_at_last_acknowledged, "the failed ledger closed at entry 19")
        # ... and the pending adds wait for a ledger (one writable bookie cannot make an ensemble of two).
        assert done == [] and not ml.is_fenced

        await asyncio.gather(*(asyncio.to_thread(restart_bookie, cluster, b) for b in stopped))
        async def all_done() -> bool:
            return len(done) == 30

        await until(all_done, "the 30 pending adds")

        assert [i for i, _, _ in done] == list(range(20, 50)), "callbacks out of add order"
        assert [exc for _, _, exc in done] == [None] * 30
        new_ledger = ml.current_ledger_id
        assert new_ledger > failed_ledger
        assert [pos for _, pos, _ in done] == [Position(new_ledger, e) for e in range(30)]
        assert not ml.is_fenced
        assert [(i.ledger_id, i.entries) for i in ml.ledgers_info()][-2:] == [(failed_ledger, 20), (new_ledger, 30)]

        seen = await read_all(factory, 50)
        assert [data for _, data in seen] == [b"m%d" % i for i in range(50)]
    finally:
        await factory.close()

    # The ledger list in ZooKeeper says the same to the next owner.
    second = factory_on(cluster, root)
    try:
        seen = await read_all(second, 50)
        assert [data for _, data in seen] == [b"m%d" % i for i in range(50)]
        assert [p for p, _ in seen][19:21] == [Position(failed_ledger, 19), Position(new_ledger, 0)]
    finally:
        await second.close()
