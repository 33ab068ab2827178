"""The pure parts of transactions: the status machine, pending acks (conflicts, batch indexes,
their saved form), the coordinator's log records, and the buffer's replay and first snapshot."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, cast

import pytest

from broker.errors import InvalidTxnStatusError, TransactionConflictError
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import build_entry
from broker.transactions.buffer import TransactionBuffer, txn_marker
from broker.transactions.log import LogRecord
from broker.transactions.model import TxnID, TxnMeta, TxnStatus
from broker.transactions.pending_ack import PendingAcks
from managed_ledger import ManagedLedger, ManagedLedgerError, MemoryManagedLedgerFactory, Position
from tests.waiting import eventually

T1, T2 = TxnID(0, 1), TxnID(0, 2)
P1, P2, P3 = Position(3, 1), Position(3, 2), Position(3, 3)


def never_acked(_: Position) -> bool:
    return False


def test_status_moves() -> None:
    meta = TxnMeta(T1, TxnStatus.OPEN, 0, 1000)
    meta.move(TxnStatus.COMMITTING)
    with pytest.raises(InvalidTxnStatusError):
        meta.move(TxnStatus.ABORTING)  # committing: no way back
    with pytest.raises(InvalidTxnStatusError):
        meta.expect_open()
    meta.move(TxnStatus.COMMITTED)
    with pytest.raises(InvalidTxnStatusError):
        meta.move(TxnStatus.COMMITTING)


def test_individual_conflicts_are_all_or_nothing() -> None:
    acks = PendingAcks()
    acks.add_individual(T1, [(P1, None, 0)], never_acked)
    with pytest.raises(TransactionConflictError):
        acks.add_individual(T2, [(P2, None, 0), (P1, None, 0)], never_acked)
    assert not acks.holds(P2)  # nothing of the refused ack was taken
    acks.add_individual(T1, [(P1, None, 0)], never_acked)  # the same transaction again: fine
    with pytest.raises(TransactionConflictError):
        acks.add_individual(T2, [(P3, None, 0)], lambda p: p == P3)  # already acknowledged
    assert acks.holds(P1)
    ended = acks.end(T1)
    assert ended is not None and list(ended.individual) == [P1]
    assert not acks.holds(P1) and not acks
    acks.add_individual(T2, [(P1, None, 0)], never_acked)


def test_batch_index_acks_conflict_only_on_common_messages() -> None:
    acks = PendingAcks()
    # a batch of 4: bit set = still unacked; T1 acks messages 0 and 1, T2 messages 2 and 3
    acks.add_individual(T1, [(P1, [0b1100], 4)], never_acked)
    acks.add_individual(T2, [(P1, [0b0011], 4)], never_acked)
    assert not acks.holds(P1)  # partly acked: the entry is still delivered
    with pytest.raises(TransactionConflictError):
        acks.add_individual(T2, [(P1, [0b1110], 4)], never_acked)  # message 0 is T1's


def test_cumulative_acks_one_transaction_at_a_time() -> None:
    acks = PendingAcks()
    acks.add_cumulative(T1, P2, mark_delete=Position(3, 0))
    assert acks.holds(P1) and acks.holds(P2) and not acks.holds(P3)
    with pytest.raises(TransactionConflictError):
        acks.add_cumulative(T2, P3, mark_delete=Position(3, 0))
    with pytest.raises(TransactionConflictError):
        acks.add_individual(T2, [(P1, None, 0)], never_acked)
    with pytest.raises(TransactionConflictError):
        PendingAcks().add_cumulative(T1, P1, mark_delete=P2)  # already acknowledged


def test_pending_acks_survive_their_saved_form() -> None:
    acks = PendingAcks()
    acks.add_individual(T1, [(P1, None, 0), (P2, [-2, 7], 70)], never_acked)
    back = PendingAcks.from_properties({**acks.to_properties(), "other": 1})
    assert back.by_txn[T1].individual == {P1: None, P2: [-2, 7]}
    assert back.holds(P1) and not back.holds(P2)
    cumulative = PendingAcks()
    cumulative.add_cumulative(T2, P3, mark_delete=Position(3, 0))
    again = PendingAcks.from_properties(cumulative.to_properties())
    assert again.by_txn[T2].cumulative == P3 and again.holds(P1)


def test_log_records_round_trip() -> None:
    for record in (LogRecord(T1, "new", timeout_ms=5, opened_ms=7),
                   LogRecord(T1, "new", timeout_ms=5, opened_ms=7, owner="alice"),
                   LogRecord(T1, "partitions", partitions=("persistent://a/b/c",)),
                   LogRecord(T1, "subscriptions", subscriptions=(("persistent://a/b/c", "s"),)),
                   LogRecord(T1, "status", status=TxnStatus.ABORTING)):
        assert LogRecord.decode(record.encode()) == record


async def test_buffer_saves_aborts_found_by_its_replay_before_moving_past_them() -> None:
    """A crash after an ABORT marker was stored but before the snapshot saved it: the replay at
    load finds the abort; the next snapshot (here after a commit) must save it with the
    mark-delete that passes its marker, or a second crash forgets that the transaction aborted
    (its messages would then be delivered as committed)."""
    factory = MemoryManagedLedgerFactory()
    ledger = await factory.open("t")
    first = TransactionBuffer(ledger)
    await first.prepare()
    assert first.cursor is not None
    ledger.add_entry(build_entry(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1,
                                                    txnid_most_bits=0, txnid_least_bits=1).SerializeToString(),
                                 b"aborted"), lambda *_: None)
    await ledger.add_entry_async(txn_marker(False, T1))  # (stored; the snapshot never ran: crash)
    again = TransactionBuffer(ledger)
    again.cursor = first.cursor
    await again.recover()
    assert T1 in again.aborted
    await again.end(T2, commit=True)
    assert again.cursor is not None and again.cursor.mark_delete_position == ledger.last_confirmed_entry
    assert "aborted:0:1" in again.cursor.properties  # saved with the mark-delete that passed its marker


def _txn_entry(txn: TxnID, seq: int) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1,
                            txnid_most_bits=txn.most, txnid_least_bits=txn.least)
    return build_entry(md.SerializeToString(), b"x")


class _Results:
    """What each append's callback heard, in the order the callbacks ran."""

    def __init__(self) -> None:
        self.got: list[tuple[str, Position | None, BaseException | None]] = []

    def callback(self, name: str) -> Callable[[Position | None, BaseException | None], None]:
        return lambda position, exc: self.got.append((name, position, exc))


async def _gated_buffer(monkeypatch: pytest.MonkeyPatch) -> tuple[TransactionBuffer, asyncio.Event, list[str]]:
    """A buffer whose snapshot cursor is created only once the event is set (or fails, when the list says so)."""
    ledger = await MemoryManagedLedgerFactory().open("t")
    ledger.add_entry(build_entry(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
                                 .SerializeToString(), b"plain-0"), lambda *_: None)
    gate, fail = asyncio.Event(), list[str]()
    real = ledger.open_cursor

    async def gated(*args: Any, **kwargs: Any) -> Any:
        await gate.wait()
        if fail:
            raise ManagedLedgerError(fail[0])
        return await real(*args, **kwargs)

    monkeypatch.setattr(ledger, "open_cursor", gated)
    return TransactionBuffer(ledger), gate, fail


async def test_first_snapshot_holds_every_append_behind_it_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer, gate, _ = await _gated_buffer(monkeypatch)
    ledger, results = buffer.ledger, _Results()
    buffer.append(T1, [_txn_entry(T1, 1)], results.callback("txn-1"))
    buffer.add_entries([b"plain-2"], results.callback("plain-2"))  # (the topic's path for a SEND without a transaction)
    buffer.append(T2, [_txn_entry(T2, 3)], results.callback("txn-3"))
    assert buffer.held is not None and len(buffer.held) == 3
    assert ledger.number_of_entries == 1 and results.got == []  # (nothing stored before the snapshot)
    gate.set()
    await eventually(lambda: len(results.got) == 3, "the held appends stored")
    assert [name for name, _, _ in results.got] == ["txn-1", "plain-2", "txn-3"]
    positions = [p for _, p, _ in results.got]
    assert all(p is not None for p in positions) and positions == sorted(p for p in positions if p is not None)
    assert buffer.held is None and buffer.cursor is not None
    assert buffer.add_entries == ledger.add_entries  # (the hold is over: straight to the ledger again)
    assert positions[0] is not None and buffer.cursor.mark_delete_position < positions[0]
    assert buffer.read_limit() == positions[0]  # T1 open: it holds the limit at its first entry


async def test_first_snapshot_failing_or_given_up_fails_the_appends_behind_it(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer, gate, fail = await _gated_buffer(monkeypatch)
    results = _Results()
    fail.append("no space")
    buffer.append(T1, [_txn_entry(T1, 1)], results.callback("txn-1"))
    buffer.append(None, [b"plain-2"], results.callback("plain-2"))
    gate.set()
    await eventually(lambda: len(results.got) == 2, "the held appends failed")
    assert [(name, p, str(exc)) for name, p, exc in results.got] == [("txn-1", None, "no space"),
                                                                      ("plain-2", None, "no space")]
    assert buffer.held is None and buffer.cursor is None and buffer.ledger.number_of_entries == 1
    # The next transactional SEND tries again; the topic closing meanwhile fails it and what waits behind it.
    fail.clear()
    gate.clear()
    buffer.append(T2, [_txn_entry(T2, 3)], results.callback("txn-3"))
    buffer.add_entries([b"plain-4"], results.callback("plain-4"))
    await buffer.close()
    assert [name for name, p, exc in results.got[2:] if p is None and isinstance(exc, ManagedLedgerError)] == [
        "txn-3", "plain-4"]
    assert buffer.held is None and buffer.cursor is None and buffer.ledger.number_of_entries == 1


class _SteppedLedger:
    """A ledger whose adds wait, in order, until the test lets them through: storage slow to confirm, so that
    appends are in flight exactly when the test wants them to be (still confirmed in order, as every ledger's)."""

    def __init__(self, ledger: ManagedLedger) -> None:
        self._ledger = ledger
        self.waiting: deque[tuple[list[bytes], Callable[[Position | None, BaseException | None], None]]] = deque()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    def add_entries(self, data: list[bytes], callback: Callable[[Position | None, BaseException | None], None]
                    ) -> None:
        self.waiting.append((data, callback))

    def add_entry(self, data: bytes, callback: Callable[[Position | None, BaseException | None], None]) -> None:
        self.waiting.append(([data], callback))

    async def add_entry_async(self, data: bytes) -> Position:
        stored: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self.add_entry(data, lambda p, exc: stored.set_exception(exc) if exc is not None
                       else stored.set_result(cast(Position, p)))
        return await stored

    def release(self, n: int) -> None:
        for _ in range(n):
            data, callback = self.waiting.popleft()
            self._ledger.add_entries(data, callback)


async def test_buffer_snapshot_keeps_up_while_first_appends_are_in_flight() -> None:
    """A steady stream of small transactions: whenever one ends, the next one's first entry is stored and the
    one after it is still being written. Each end's snapshot moves the mark-delete to just before the oldest
    open transaction's first entry (it used to wait for a moment with no first append in flight, which such a
    stream never gives, and lagged for good), and never past what it records: a buffer loaded from the
    snapshot at any step (a crash then) finds the same open transaction and every abort."""
    ledger = _SteppedLedger(await MemoryManagedLedgerFactory().open("t"))
    buffer = TransactionBuffer(cast(ManagedLedger, ledger))
    await buffer.prepare()
    cursor = buffer.cursor
    assert cursor is not None
    txns = [TxnID(0, i) for i in range(1, 21)]
    firsts: dict[TxnID, Position] = {}

    def stored(txn: TxnID) -> Callable[[Position | None, BaseException | None], None]:
        def done(position: Position | None, exc: BaseException | None) -> None:
            assert exc is None and position is not None
            firsts[txn] = position
        return done

    buffer.append(txns[0], [_txn_entry(txns[0], 0)], stored(txns[0]))
    buffer.append(txns[1], [_txn_entry(txns[1], 1)], stored(txns[1]))
    ledger.release(1)
    await eventually(lambda: txns[0] in firsts, "the first transaction's entry stored")
    aborted: set[TxnID] = set()
    for k in range(len(txns) - 2):
        ending, following, after = txns[k], txns[k + 1], txns[k + 2]
        commit = k % 3 != 1
        end = asyncio.ensure_future(buffer.end(ending, commit=commit))
        await eventually(lambda: len(ledger.waiting) == 2, "the marker written behind the next first entry")
        ledger.release(2)  # the next transaction's first entry, then the marker
        buffer.append(after, [_txn_entry(after, k + 2)], stored(after))  # in flight while the end finishes
        await end
        if not commit:
            aborted.add(ending)
        assert "startPosition" not in buffer.txn_stats(after)  # (still in flight: its position is not known)
        assert cursor.mark_delete_position == ledger.previous_position(firsts[following]), k
        again = TransactionBuffer(cast(ManagedLedger, ledger))
        again.cursor = cursor
        await again.recover()
        assert again.ongoing == {following: firsts[following]}, k
        assert set(again.aborted) == aborted, k
    ledger.release(len(ledger.waiting))
    for txn in txns[-2:]:
        end = asyncio.ensure_future(buffer.end(txn, commit=True))
        await eventually(lambda: len(ledger.waiting) == 1, "the marker written")
        ledger.release(1)
        await end
    assert cursor.mark_delete_position == ledger.last_confirmed_entry  # nothing open: all of it
