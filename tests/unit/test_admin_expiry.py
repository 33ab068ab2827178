"""Expiry up to a message id and backlog analysis (broker/service/admin_ops.py) over a memory ledger: Pulsar's
calculatePositionAckSet case by case, what a position that is no stored entry expires, and the scan's limits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.ack_sets import words_between
from broker.protocol.entry import build_entry
from broker.service import admin_ops
from broker.service.admin_ops import BacklogScanLimits, ExpiryTarget, expiry_target
from managed_ledger import InitialPosition, ManagedLedger, ManagedLedgerConfig, Position
from managed_ledger.memory import MemoryManagedLedgerFactory

P = Position(7, 3)
NEXT = Position(7, 4)


@pytest.mark.parametrize("batch_index, batch_size, excluded, expected", [
    # no batch (no index given, or the entry could not be read): the entry; excluded: the next one too
    (-1, 0, False, ExpiryTarget(P, None)),
    (-1, 0, True, ExpiryTarget(NEXT, None)),
    (2, 0, True, ExpiryTarget(NEXT, None)),
    # a batch of 5: the messages before the index are acknowledged (excluded: up to it as well)
    (2, 5, False, ExpiryTarget(P, words_between(2, 5))),
    (2, 5, True, ExpiryTarget(P, words_between(3, 5))),
    # index 0 without excluded: the whole entry (Pulsar's batchIndex - 1 < 0 branch)
    (0, 5, False, ExpiryTarget(P, None)),
    (0, 5, True, ExpiryTarget(P, words_between(1, 5))),
    # nothing left unacknowledged: the whole entry (excluded: and the next)
    (4, 5, True, ExpiryTarget(NEXT, None)),
    (9, 5, False, ExpiryTarget(P, None)),
    (1, 1, False, ExpiryTarget(P, None)),  # (a message not in a batch counts as a batch of 1)
])
def test_expiry_target_is_pulsars_calculate_position_ack_set(batch_index: int, batch_size: int, excluded: bool,
                                                             expected: ExpiryTarget) -> None:
    assert expiry_target(P, batch_index, batch_size, excluded) == expected


@pytest.fixture
async def ledger() -> AsyncIterator[ManagedLedger]:
    factory = MemoryManagedLedgerFactory()
    ml = await factory.open("t", ManagedLedgerConfig(max_entries_per_ledger=3, min_ledger_rollover_time_s=0,
                                                     retention_time_s=-1, retention_size_bytes=-1))
    yield ml
    await factory.close()


def stored(i: int, batch: int | None = None) -> bytes:
    """A stored entry as a producer sends it (a batch of ``batch`` messages, or one message)."""
    md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1)
    if batch is not None:
        md.num_messages_in_batch = batch
    return build_entry(md.SerializeToString(), b"x")


def topic_of(ml: ManagedLedger) -> Any:
    return SimpleNamespace(ledger=ml, full_name="persistent://t/ns/x")


async def test_expire_to_a_position_that_is_no_stored_entry(ledger: ManagedLedger) -> None:
    ps = [await ledger.add_entry_async(f"m{i}".encode()) for i in range(7)]  # ledgers: 3, 3, 1
    cursor = await ledger.open_cursor("s", InitialPosition.EARLIEST)
    topic = topic_of(ledger)
    # past the end of a closed ledger (what an excluded last entry of it gives): up to its last entry
    assert admin_ops.expire_to(topic, cursor, ExpiryTarget(Position(ps[2].ledger_id, 3), None)) == 3
    assert cursor.mark_delete_position == ps[2]
    # at or before the mark-delete: nothing
    assert admin_ops.expire_to(topic, cursor, ExpiryTarget(ps[1], None)) == 0
    # past the last entry: refused (None), nothing moved
    assert admin_ops.expire_to(topic, cursor, ExpiryTarget(Position(ps[6].ledger_id, 1), None)) is None
    assert admin_ops.expire_to(topic, cursor, ExpiryTarget(Position(ps[6].ledger_id + 1, 0), None)) is None
    assert cursor.mark_delete_position == ps[2]
    assert admin_ops.expire_to(topic, cursor, ExpiryTarget(ps[6], None)) == 4


async def test_expire_into_a_batch_keeps_what_was_acknowledged(ledger: ManagedLedger) -> None:
    ps = [await ledger.add_entry_async(f"m{i}".encode()) for i in range(3)]
    cursor = await ledger.open_cursor("s", InitialPosition.EARLIEST)
    topic = topic_of(ledger)
    cursor.set_batch_ack(ps[1], [0b10101])  # messages 1 and 3 of the batch acknowledged already
    assert admin_ops.expire_to(topic, cursor, ExpiryTarget(ps[1], words_between(2, 5))) == 1  # ps[0] left
    assert cursor.mark_delete_position == ps[0]
    assert cursor.batch_acks[ps[1]] == [0b10100]  # 0 expired; 1 and 3 stay acknowledged
    # a batch left with nothing unacknowledged is acknowledged whole
    assert admin_ops.expire_to(topic, cursor, ExpiryTarget(ps[1], words_between(3, 4))) == 1
    assert cursor.mark_delete_position == ps[1] and ps[1] not in cursor.batch_acks


async def test_analyze_backlog_limits(ledger: ManagedLedger) -> None:
    ps = [await ledger.add_entry_async(stored(i, batch=10 if i == 3 else None)) for i in range(5)]
    cursor = await ledger.open_cursor("s", InitialPosition.EARLIEST)
    topic = topic_of(ledger)
    cursor.delete([ps[1]])
    found = await admin_ops.analyze_backlog(topic, cursor, None, BacklogScanLimits(100, 60, 2))
    assert (found.entries, found.messages, found.first, found.last, found.aborted) == (4, 13, ps[0], ps[4], False)
    # the max_entries-th unacknowledged entry stops it, not counted
    found = await admin_ops.analyze_backlog(topic, cursor, None, BacklogScanLimits(3, 60, 2))
    assert (found.entries, found.last, found.aborted) == (2, ps[2], True)
    # out of time before the first read
    found = await admin_ops.analyze_backlog(topic, cursor, None, BacklogScanLimits(100, -1, 2))
    assert (found.entries, found.first, found.aborted) == (0, None, True)
    # a start before the mark-delete counts from the mark-delete; past the end, nothing
    cursor.mark_delete(ps[2])
    found = await admin_ops.analyze_backlog(topic, cursor, ps[0], BacklogScanLimits(100, 60, 2))
    assert (found.entries, found.first) == (2, ps[3])
    found = await admin_ops.analyze_backlog(topic, cursor, Position(ps[4].ledger_id + 5, 0),
                                            BacklogScanLimits(100, 60, 2))
    assert (found.entries, found.aborted) == (0, False)
    assert not [name for name in ledger.cursors if name != "s"]  # (its reader is gone)
