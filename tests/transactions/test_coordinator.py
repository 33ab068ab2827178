"""The coordinator on its own (an in-memory log, participants that answer at once): what its log
keeps across a restart when requests overlap, and how it finishes an end whose log write failed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from broker.transactions import coordinator as coordinator_module
from broker.transactions.coordinator import TransactionCoordinator
from broker.transactions.log import TransactionLog, log_ledger_name
from broker.transactions.model import TxnID, TxnStatus
from managed_ledger import ManagedLedger, ManagedLedgerError, MemoryManagedLedgerFactory, Position
from tests.waiting import eventually


class Participants:
    """Topics and subscriptions that hear every end at once."""

    def __init__(self) -> None:
        self.ended: list[tuple[str, TxnID, bool]] = []

    async def end_on_partition(self, topic: str, txn: TxnID, commit: bool, low_watermark: int | None = None) -> None:
        self.ended.append((topic, txn, commit))

    async def end_on_subscription(self, topic: str, subscription: str, txn: TxnID, commit: bool,
                                  low_watermark: int | None = None) -> None:
        self.ended.append((f"{topic}/{subscription}", txn, commit))


async def open_coordinator(factory: MemoryManagedLedgerFactory, participants: Participants) -> TransactionCoordinator:
    ledger = await factory.open(log_ledger_name(0))
    tc = TransactionCoordinator(0, await TransactionLog.open(ledger), participants)
    await tc.recover()
    return tc


class HeldAdds:
    """Wraps a ledger's add_entry_async: the entry is stored at once (the ledger's last confirmed entry moves on),
    but its caller hears of it only when released, in the order given, as a batch of adds completed by one flush
    is heard."""

    def __init__(self, ledger: ManagedLedger, monkeypatch: pytest.MonkeyPatch) -> None:
        self.held: list[tuple[bytes, asyncio.Future[Position]]] = []
        real: Callable[[bytes], Awaitable[Position]] = ledger.add_entry_async
        self.holding = False

        async def add(data: bytes) -> Position:
            position = await real(data)
            if not self.holding:
                return position
            done: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
            self.held.append((data, done))
            await done
            return position

        monkeypatch.setattr(ledger, "add_entry_async", add)

    def release(self) -> None:
        self.holding = False
        for _data, done in self.held:
            done.set_result(Position(0, 0))  # (the value is not used: the wrapper returns the real one)
        self.held.clear()


async def test_an_open_transaction_whose_record_was_stored_with_an_end_survives_a_restart(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """NEW_TXN's record and another transaction's final status stored by one flush: the end's trim of the log must
    not pass the new transaction's record before it knows where that record is."""
    factory = MemoryManagedLedgerFactory()
    participants = Participants()
    tc = await open_coordinator(factory, participants)
    first = await tc.new_txn(60_000)
    await tc.add_partitions(first, ["persistent://public/default/a"])
    adds = HeldAdds(tc.log.ledger, monkeypatch)
    adds.holding = True
    ending = asyncio.create_task(tc.end_txn(first, commit=True))
    await eventually(lambda: len(adds.held) == 1, "the COMMITTING record stored")
    adds.release()
    adds.holding = True
    await eventually(lambda: len(adds.held) == 1, "the COMMITTED record stored")
    opening = asyncio.create_task(tc.new_txn(60_000))
    await eventually(lambda: len(adds.held) == 2, "the new transaction's record stored")
    adds.release()  # (the end hears first, as it asked first)
    await ending
    second = await opening
    await tc.close()

    again = await open_coordinator(factory, participants)
    assert second in again.txns and again.txns[second].status is TxnStatus.OPEN
    await again.close()


async def test_an_end_whose_final_status_could_not_be_logged_is_finished_by_the_coordinator(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Pulsar's TransactionMetadataStoreService retries an end that failed on a managed-ledger error; the
    transaction must not stay COMMITTING (holding the log and the low watermark) with every END_TXN failing."""
    monkeypatch.setattr(coordinator_module, "RETRY_FIRST_S", 0.01)
    factory = MemoryManagedLedgerFactory()
    participants = Participants()
    tc = await open_coordinator(factory, participants)
    txn = await tc.new_txn(60_000)
    await tc.add_partitions(txn, ["persistent://public/default/a"])
    real = tc.log.append
    failures = [ManagedLedgerError("bookie write failed")]

    async def append(record: Any) -> Position:
        if record.op == "status" and record.status is TxnStatus.COMMITTED and failures:
            raise failures.pop()
        return await real(record)

    monkeypatch.setattr(tc.log, "append", append)
    await asyncio.wait_for(tc.end_txn(txn, commit=True), 10)
    assert txn not in tc.txns and tc.committed == 1
    await tc.close()


async def test_the_owner_of_an_open_transaction_survives_a_restart() -> None:
    """The role that opened a transaction is in its log record: after a restart only it may still end it."""
    factory = MemoryManagedLedgerFactory()
    tc = await open_coordinator(factory, Participants())
    owned, anyone = await tc.new_txn(60_000, owner="alice"), await tc.new_txn(60_000)
    await tc.close()
    again = await open_coordinator(factory, Participants())
    assert again.get(owned).owner == "alice" and again.get(anyone).owner is None
    await again.close()
