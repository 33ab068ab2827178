"""Compaction of chunked messages (PIP-37): a chunked message is one message of its key, kept with all its
chunks while it is its key's latest and dropped whole once superseded. Pulsar's compactor takes each chunk for
a message of the key and keeps the last chunk alone, which no client can assemble: the key's latest value is
lost to read_compacted readers (the end-to-end check is in tests/e2e/test_compaction.py)."""

from __future__ import annotations

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import build_entry
from broker.service.compacted_view import CompactedEntry
from broker.service.compaction import INCOMPLETE_CHUNKED_EXPIRY_MS, select_survivors
from managed_ledger import Entry, Position

NOW_MS = 1_000_000_000


def plain(eid: int, key: str, value: bytes = b"v", *, ledger: int = 1) -> Entry:
    md = pb.MessageMetadata(producer_name="q", sequence_id=eid, publish_time=NOW_MS, partition_key=key)
    return Entry(Position(ledger, eid), build_entry(md.SerializeToString(), value))


def chunk(eid: int, key: str, uuid: str, chunk_id: int, num_chunks: int, *, publish_time: int = NOW_MS,
          ledger: int = 1) -> Entry:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=publish_time, partition_key=key,
                            uuid=uuid, chunk_id=chunk_id, num_chunks_from_msg=num_chunks,
                            total_chunk_msg_size=num_chunks * 10, uncompressed_size=num_chunks * 10)
    return Entry(Position(ledger, eid), build_entry(md.SerializeToString(), b"c" * 10))


def kept(entries: list[Entry], previous: list[CompactedEntry] | None = None, now_ms: int = NOW_MS) -> list[int]:
    return [c.entry.position.entry_id for c in select_survivors(entries, False, previous or [], now_ms)]


def test_a_chunked_latest_value_is_kept_with_all_its_chunks() -> None:
    # Pulsar's compactor (and ours before) kept entry 3 alone: the last chunk, which no consumer can assemble.
    entries = [plain(0, "a", b"old"), chunk(1, "a", "p-1", 0, 3), chunk(2, "a", "p-1", 1, 3),
               chunk(3, "a", "p-1", 2, 3), plain(4, "b")]
    assert kept(entries) == [1, 2, 3, 4]


def test_a_superseded_chunked_message_is_dropped_whole() -> None:
    entries = [chunk(0, "a", "p-1", 0, 2), chunk(1, "a", "p-1", 1, 2), plain(2, "a", b"new")]
    assert kept(entries) == [2]


def test_a_chunked_message_supersedes_at_its_last_chunk() -> None:
    # Another producer's value of the key lands between the chunks: consumers receive it first (the chunked
    # message reaches them whole at its last chunk), so the chunked message is the key's latest.
    entries = [chunk(0, "a", "p-1", 0, 2), plain(1, "a", b"between"), plain(2, "b"), chunk(3, "a", "p-1", 1, 2)]
    assert kept(entries) == [0, 2, 3]
    # and a value after its last chunk supersedes it
    assert kept([*entries, plain(4, "a", b"after")]) == [2, 4]


def test_a_tombstone_deletes_a_chunked_value() -> None:
    entries = [chunk(0, "a", "p-1", 0, 2), chunk(1, "a", "p-1", 1, 2), plain(2, "a", b"")]
    assert kept(entries) == []


def test_a_chunked_message_incomplete_at_the_horizon_is_kept_and_completed_by_the_next_run() -> None:
    # The producer is still sending it when the run takes its horizon: its chunks so far stay in the view and
    # supersede nothing (a consumer reads the rest after the horizon); the next run finds it whole.
    first_run = [plain(0, "a", b"old"), chunk(1, "a", "p-1", 0, 3), chunk(2, "a", "p-1", 1, 3)]
    view = select_survivors(first_run, False, (), NOW_MS)
    assert [c.entry.position.entry_id for c in view] == [0, 1, 2]
    after_horizon = [chunk(3, "a", "p-1", 2, 3), plain(4, "b")]
    assert kept(after_horizon, view) == [1, 2, 3, 4]


def test_an_abandoned_chunked_message_is_dropped_and_supersedes_nothing() -> None:
    # Its producer failed midway: published INCOMPLETE_CHUNKED_EXPIRY_MS before the run, it is left out.
    stale = NOW_MS - INCOMPLETE_CHUNKED_EXPIRY_MS
    entries = [plain(0, "a", b"old"), chunk(1, "a", "p-1", 0, 3, publish_time=stale),
               chunk(2, "a", "p-1", 1, 3, publish_time=stale)]
    assert kept(entries) == [0]


def test_chunks_without_their_start_or_with_one_missing_are_dropped() -> None:
    orphans = [plain(0, "a", b"old"), chunk(1, "a", "p-1", 1, 3), chunk(2, "a", "p-1", 2, 3)]
    assert kept(orphans) == [0]
    gap = [plain(0, "a", b"old"), chunk(1, "a", "p-2", 0, 3), chunk(2, "a", "p-2", 2, 3)]
    assert kept(gap) == [0]


def test_chunks_sent_again_do_not_break_their_message() -> None:
    # A producer that reconnects sends its unacknowledged chunks again: a chunk twice, or the message anew.
    resent = [chunk(0, "a", "p-1", 0, 3), chunk(1, "a", "p-1", 1, 3), chunk(2, "a", "p-1", 1, 3),
              chunk(3, "a", "p-1", 2, 3)]
    assert kept(resent) == [0, 1, 2, 3]
    anew = [chunk(0, "a", "p-1", 0, 2), chunk(1, "a", "p-1", 0, 2), chunk(2, "a", "p-1", 1, 2)]
    assert kept(anew) == [1, 2]


def test_a_chunked_value_kept_by_a_run_stays_whole_in_the_next() -> None:
    entries = [chunk(0, "a", "p-1", 0, 2), chunk(1, "a", "p-1", 1, 2), plain(2, "b")]
    view = select_survivors(entries, False, (), NOW_MS)
    assert kept([plain(0, "c", ledger=2)], view) == [0, 1, 2, 0]
    assert kept([plain(0, "a", b"new", ledger=2)], view) == [2, 0]
