"""A topic's dispatchers share parsed entry metadata while it has several subscriptions."""

from __future__ import annotations

import struct

import pytest

from broker.dispatch import entry_metas
from broker.dispatch.entry_metas import SHARED_ENTRY_METAS, SharedEntryMetas
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import EntryMeta, entry_meta
from managed_ledger import Entry, Position


def entry(ledger: int, entry_id: int, batch: int) -> Entry:
    md = pb.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=1, num_messages_in_batch=batch)
    meta = md.SerializeToString()
    return Entry(Position(ledger, entry_id), struct.pack(">I", len(meta)) + meta + b"x")


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    seen: list[bytes] = []

    def counting(data: bytes) -> EntryMeta:
        seen.append(data)
        return entry_meta(data)

    monkeypatch.setattr(entry_metas, "entry_meta", counting)
    return seen


def test_parsed_once_for_every_subscription(parses: list[bytes]) -> None:
    metas = SharedEntryMetas(lambda: True)
    entries = [entry(3, i, batch=i + 1) for i in range(5)]
    for _ in range(10):  # ten subscriptions read the same entries
        assert [metas.get(e).num_messages for e in entries] == [1, 2, 3, 4, 5]
    assert len(parses) == 5


def test_one_subscription_keeps_nothing(parses: list[bytes]) -> None:
    shared = [True]
    metas = SharedEntryMetas(lambda: shared[0])
    e = entry(3, 0, batch=7)
    metas.get(e)
    shared[0] = False  # the other subscription left
    assert metas.get(e).num_messages == 7 and metas.get(e).num_messages == 7
    assert len(parses) == 3 and not metas._memo


def test_bounded(parses: list[bytes]) -> None:
    metas = SharedEntryMetas(lambda: True)
    for i in range(3 * SHARED_ENTRY_METAS):
        metas.get(entry(1, i, batch=2))
    assert len(metas._memo) == SHARED_ENTRY_METAS
    metas.get(entry(1, 0, batch=2))  # long gone: parsed again
    assert len(parses) == 3 * SHARED_ENTRY_METAS + 1
