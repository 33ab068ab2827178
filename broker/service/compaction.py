"""Topic compaction: the latest message per key, kept durably through the managed ledger.

Compaction reads the last run's compacted view, then the topic after that view's horizon up to a new
horizon (its last entry when the run starts), as Pulsar's compactor reads through a readCompacted
reader: the topic's ledgers before the last horizon may be deleted by retention. It finds for every
key (the partition key) the last message, and keeps only those; a message with an empty payload
(null-value or not) deletes its key; messages without a key are dropped unless
topicCompactionRetainNullKey (Pulsar's default since PIP-318 is to drop them). Batches are read
message by message; one that cannot be read is kept whole, its keys unknown (as Pulsar's compactor
keeps it); an encrypted one is one message under the key of its metadata, kept or dropped whole.

A chunked message (PIP-37: a large message the producer split into chunks, each an entry of its own under
the message's key and uuid) is one message of its key, as its consumers see it: kept with all its chunks when
it is its key's latest, dropped whole when a later message supersedes it; it supersedes its key's earlier
value only once complete (its last chunk read), at its last chunk's position, where consumers receive it.
Pulsar's compactor does not do this: it takes every chunk for a message of the key, so that a key whose latest
value is chunked keeps its last chunk alone, which no client can assemble (the key's value is lost to
read_compacted readers and TableViews). A chunked message still incomplete at the end of a run's range (its
producer still sending it when the run took its horizon) is kept as far as it goes and supersedes nothing, so
that a consumer completes it from the chunks after the horizon and the next run finds it whole; past
INCOMPLETE_CHUNKED_EXPIRY_MS after it was published it is taken as abandoned and dropped. Chunks that lack their
start, or follow a missing one, are dropped.

A run makes two passes over its input, as Pulsar's TwoPhaseCompactor, reading it a chunk at a time
(READ_CHUNK entries) and never whole: the first keeps only each key's latest message (key -> position and
batch index); the second reads everything again and appends what survives to the new view's ledger as it
goes, a bounded number of appends in flight. A run's memory thus follows the number of keys, not the bytes
it reads. Parsing gives the event loop back every PARSE_SLICE messages, so a long run does not hold up the
broker's connections.

The view (service/compacted_view.py: its record format, and how a loaded topic reads it) is a managed ledger of its
own (``<tenant>/<ns>/__compaction/<topic>-<n>``, the local name encoded as in the topic's own managed-ledger name: a
name at the depth of a topic's, beside the topics rather than under one, so that a topic's managed ledger keeps only
its cursors as children and every broker of a cluster knows the view's name; a view of an older version, nested
under its topic, loads from its recorded name on file storage, while on BookKeeper its topic loads again and the
next compaction writes the view anew). The metadata store records which ledger holds the current view and its
horizon; a new run writes a new ledger, switches the record, then deletes the old ledger.
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import logging
import struct
import time
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from google.protobuf.message import DecodeError

from broker.metadata.policy_table import COMPACTION_THRESHOLD
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.commands import from_u64
from broker.protocol.entry import entry_body, entry_meta, read_entry_metadata
from broker.service.compacted_view import CompactedEntry, CompactedView, batch_count, encode_record, view_ledger_config
from broker.topic_name import encode_local_name
from compression_codecs import DecompressionError, decompress
from managed_ledger import Entry, InitialPosition, ManagedLedger, ManagedLedgerFactory, Position
from managed_ledger.stats import ADD_LATENCY_BUCKETS_US

if TYPE_CHECKING:
    from broker.service.topic import PersistentTopic
    from broker.topic_name import TopicName
    from broker.transactions.buffer import TransactionBuffer

log = logging.getLogger(__name__)

_U32 = struct.Struct(">I")
COMPACTION_DOMAIN = "__compaction"  # (in a compacted view's managed-ledger name, in place of the domain)
# The durable cursor that holds the topic's entries after the compaction horizon for the next run
# (Pulsar's Compactor.COMPACTION_SUBSCRIPTION): not expired by message TTL nor as an inactive
# subscription, as Pulsar exempts it (PersistentTopic.isCompactionSubscription).
COMPACTION_CURSOR = "__compaction"
# The non-durable cursor a run reads the topic with (a truncate leaves it where it is: the run still reads what
# is left up to its horizon).
COMPACTION_READER = "__compaction-reader"
READ_CHUNK = 500  # entries per read while compacting
# Bytes per read while compacting (past the first entry): with READ_CHUNK, what one chunk holds in memory.
READ_CHUNK_BYTES = 4 * 1024 * 1024
# Appends to a new compacted ledger in flight at once (Pulsar's AbstractTwoPhaseCompactor.MAX_OUTSTANDING).
MAX_OUTSTANDING_WRITES = 500
# The most a batch is uncompressed to for its keys (the admin API's peek inflates as much): a client's batch is
# far smaller (the Java client's batchingMaxBytes is 128 KiB), and a few KB of ZSTD can announce, and hold, 2 GiB,
# which every run would make twice (once per pass). A batch announcing more is kept whole, its keys unknown.
MAX_BATCH_INFLATE = 64 * 1024 * 1024
# Messages a run parses before it gives the event loop back: about 5 ms of work (4-5 us a message, either
# pass), so that the loop goes on serving every connection of the broker while a long run parses.
PARSE_SLICE = 1000
# A chunked message still incomplete at the end of a run's range, its last chunk published longer ago than this,
# is taken as abandoned (its producer failed midway) and left out of the view. Clients give every chunk the
# message's publish time, so this counts from when the message was sent: ten times the Java consumer's default
# expireTimeOfIncompleteChunkedMessage (60 s, past which a consumer drops what it holds of an incomplete message)
# and far past the producer's default sendTimeout (30 s, past which it fails the message and moves on), so that
# a message still being sent is never taken for abandoned; an abandoned one stays in the views meanwhile, harmless
# (it supersedes nothing, and consumers drop what they cannot complete).
INCOMPLETE_CHUNKED_EXPIRY_MS = 10 * 60_000


class CompactionError(Exception):
    pass


class CompactionStatus(enum.Enum):
    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


# -- reading batches ------------------------------------------------------------------------------------

def _payload_of(entry: bytes) -> tuple[pb.MessageMetadata, bytes]:
    return read_entry_metadata(entry), entry_body(entry)


class ChunkOf(NamedTuple):
    """A chunk of a chunked message: its message's uuid, its index, how many chunks the message has."""

    uuid: str
    chunk_id: int
    num_chunks: int
    publish_time: int


class _Message(NamedTuple):
    key: str | None
    null_value: bool  # the client's null value
    tombstone: bool  # deletes its key: a null value, or an empty payload
    chunk: ChunkOf | None = None  # (an entry that is one chunk of a chunked message)


def _message(key: str | None, null_value: bool, payload_size: int) -> _Message:
    return _Message(key, null_value, _is_tombstone(null_value, payload_size))


def _is_tombstone(null_value: bool, payload_size: int) -> bool:
    """Pulsar's compactor deletes a key on a message whose payload is empty (its size, uncompressed,
    is 0), null_value flagged or not: an empty value (Java's ``value(new byte[0])``) deletes too."""
    return null_value or payload_size == 0


class UnreadableBatchError(ValueError):
    """A batch whose messages cannot be read: it does not uncompress, or its messages do not fit it."""


def messages_of(entry: bytes) -> Iterator[_Message]:
    """Key and null flag of every message of an entry (one for a non-batch entry); UnreadableBatchError
    for a batch that cannot be read."""
    md, payload = _payload_of(entry)
    if md.num_chunks_from_msg > 1:  # (a chunk: never a batch, its size the whole message's)
        chunk = ChunkOf(md.uuid, md.chunk_id, md.num_chunks_from_msg, md.publish_time)
        key = md.partition_key if md.HasField("partition_key") else None
        yield _Message(key, md.null_value, False, chunk)
        return
    if not md.HasField("num_messages_in_batch") or _sealed(md):
        # (an encrypted batch, whose messages only its consumers can read, is one message under the
        # key of its metadata, which the client copies from its first message: Pulsar's
        # RawBatchConverter.isReadableBatch and extractKeyAndSize)
        size = md.uncompressed_size if md.HasField("uncompressed_size") else len(payload)
        yield _message(md.partition_key if md.HasField("partition_key") else None, md.null_value, size)
        return
    if md.compression != pb.NONE and md.uncompressed_size > MAX_BATCH_INFLATE:
        raise UnreadableBatchError(f"it announces {md.uncompressed_size} bytes uncompressed, past {MAX_BATCH_INFLATE}")
    try:
        data = decompress(md.compression, payload, md.uncompressed_size)
    except DecompressionError as exc:
        raise UnreadableBatchError(str(exc)) from exc
    pos = 0
    for i in range(md.num_messages_in_batch):
        try:
            (size,) = _U32.unpack_from(data, pos)
            if pos + 4 + size > len(data):
                raise DecodeError(f"its metadata ({size} bytes) goes past the batch's end")
            single = pb.SingleMessageMetadata()
            single.ParseFromString(data[pos + 4:pos + 4 + size])
            # (a negative size read the same message again, once per message the batch claims: up to 2^31)
            if not 0 <= single.payload_size <= len(data) - pos - 4 - size:
                raise DecodeError(f"its payload size {single.payload_size} does not fit the batch")
        except (struct.error, DecodeError) as exc:
            raise UnreadableBatchError(f"message {i} of {md.num_messages_in_batch}: {exc}") from exc
        pos += 4 + size + single.payload_size
        key = single.partition_key if single.HasField("partition_key") else None
        yield _message(key, single.null_value, single.payload_size)


def _sealed(md: pb.MessageMetadata) -> bool:
    """An encrypted batch: kept or dropped whole."""
    return md.HasField("num_messages_in_batch") and len(md.encryption_keys) > 0


# -- choosing the survivors --------------------------------------------------------------------------------

class _Sequence:
    """A chunked message being read: its key, its first chunk, the chunk expected next."""

    __slots__ = ("first", "key", "next_id", "publish_time")

    def __init__(self, key: str, first: Position, publish_time: int) -> None:
        self.key = key
        self.first = first
        self.next_id = 1
        self.publish_time = publish_time  # (of the last chunk read)


class _Chunked(NamedTuple):
    """A key's latest message when it is chunked: its uuid and its first chunk (the key's position is its last)."""

    uuid: str
    first: Position


class LatestByKey:
    """Each key's latest message, all the first pass of a run keeps (so a run's memory follows its keys): key ->
    (ledger id, entry id, batch index), for keys whose latest message is not a tombstone (a deleted key is
    absent). A chunked message counts once complete, at its last chunk (see the module's doc)."""

    def __init__(self) -> None:
        self.positions: dict[str, tuple[int, int, int]] = {}
        self.chunked: dict[str, _Chunked] = {}  # key -> its latest message, when that is chunked
        self._reading: dict[str, _Sequence] = {}  # uuid -> a chunked message not complete yet
        self.unfinished: dict[str, Position] = {}  # uuid -> first chunk: incomplete at the end, kept (finish)

    def __len__(self) -> int:
        return len(self.positions)

    def put(self, key: str, at: tuple[int, int, int]) -> bool:
        """``at`` is now ``key``'s latest message; whether it supersedes one."""
        superseded = key in self.positions
        self.positions[key] = at
        self.chunked.pop(key, None)
        return superseded

    def delete(self, key: str) -> None:
        self.positions.pop(key, None)
        self.chunked.pop(key, None)

    def chunk(self, key: str, chunk: ChunkOf, pos: Position) -> bool:
        """A chunk of a message of ``key``: the message is its key's latest once its last chunk is read in
        order after its first. Returns whether it then supersedes an earlier message of the key."""
        seq = self._reading.get(chunk.uuid)
        if chunk.chunk_id == 0:  # (again, for a message its producer sent anew: from here)
            seq = self._reading[chunk.uuid] = _Sequence(key, pos, chunk.publish_time)
        elif seq is None or chunk.chunk_id < seq.next_id:
            return False  # a chunk without its start (dropped), or one sent again (ignored, as consumers do)
        elif chunk.chunk_id > seq.next_id:  # (a chunk is missing: the message can never be assembled)
            del self._reading[chunk.uuid]
            return False
        else:
            seq.next_id += 1
            seq.publish_time = chunk.publish_time
        if seq.next_id < chunk.num_chunks:
            return False
        del self._reading[chunk.uuid]
        superseded = self.put(seq.key, (pos.ledger_id, pos.entry_id, 0))
        self.chunked[seq.key] = _Chunked(chunk.uuid, seq.first)
        return superseded

    def finish(self, now_ms: int) -> None:
        """End of the first pass: the chunked messages still incomplete are kept as far as they go, unless
        abandoned (published INCOMPLETE_CHUNKED_EXPIRY_MS or more before now)."""
        self.unfinished = {uuid: seq.first for uuid, seq in self._reading.items()
                           if now_ms - seq.publish_time < INCOMPLETE_CHUNKED_EXPIRY_MS}
        self._reading.clear()

    def keeps(self, m: _Message, pos: Position, index: int) -> bool:
        """Second pass: whether message ``index`` at ``pos``, of a key, is (part of) its key's latest."""
        assert m.key is not None
        if m.chunk is None:
            return self.positions.get(m.key) == (pos.ledger_id, pos.entry_id, index)
        first = self.unfinished.get(m.chunk.uuid)
        if first is not None and first <= pos:
            return True
        latest = self.chunked.get(m.key)
        return (latest is not None and latest.uuid == m.chunk.uuid and latest.first <= pos
                and (pos.ledger_id, pos.entry_id, 0) <= self.positions[m.key])


def _is_server_marker(e: Entry) -> bool:
    """A server-only marker: never in a view, as in Pulsar, whatever retains key-less messages."""
    return entry_meta(e.data).is_marker


def _read_messages(e: Entry, warn: bool) -> list[_Message] | None:
    """The messages of an entry; None for a batch that cannot be read (``warn``: log it)."""
    try:
        return list(messages_of(e.data))
    except UnreadableBatchError as exc:
        # Kept whole, its keys unknown, as Pulsar's compactor keeps it: failing the run would fail
        # every later one too, and the consumers' own client decides what the batch holds.
        if warn:
            log.warning("compaction: the batch at %s cannot be read (%s); it is kept whole", e.position, exc)
        return None
    except Exception as exc:
        raise CompactionError(f"cannot read entry {e.position}: {exc}") from exc


def note_latest(latest: LatestByKey, e: Entry, ack_set: list[int] | None, msgs: list[_Message],
                retain_null_key: bool) -> int:
    """First pass: the messages of ``e`` (those an earlier run left in it) are now their keys' latest.
    Returns the messages it removes, as Pulsar's compactor counts its removed events in its first pass: one
    that supersedes an earlier message of its key, one that deletes its key (a tombstone), and one without
    a key unless they are retained."""
    pos = e.position
    removed = 0
    for i, m in enumerate(msgs):
        if not _present(ack_set, i):
            continue
        if m.key is None:
            removed += not retain_null_key
        elif m.chunk is not None:
            removed += latest.chunk(m.key, m.chunk, pos)
        elif m.tombstone:
            latest.delete(m.key)
            removed += 1
        else:
            removed += latest.put(m.key, (pos.ledger_id, pos.entry_id, i))
    return removed


def survivor(e: Entry, ack_set: list[int] | None, msgs: list[_Message] | None, latest: LatestByKey,
             retain_null_key: bool) -> CompactedEntry | None:
    """Second pass: what of ``e`` goes into the view (None: nothing), given every key's latest message."""
    if msgs is None:  # (unreadable: kept whole)
        count = batch_count(e.data) or 0
        return CompactedEntry(e, None, count, count - 1)
    pos = e.position
    alive = [i for i, m in enumerate(msgs)
             if _present(ack_set, i)
             and ((m.key is None and retain_null_key and not m.null_value)
                  or (m.key is not None and latest.keeps(m, pos, i)))]
    if not alive:
        return None
    md = read_entry_metadata(e.data)
    if _sealed(md):
        count = md.num_messages_in_batch
        return CompactedEntry(e, None, count, count - 1)
    if len(alive) == len(msgs):
        return CompactedEntry(e, None, len(msgs), alive[-1] if md.HasField("num_messages_in_batch") else -1)
    words = [0] * ((len(msgs) + 63) // 64)
    for i in alive:
        words[i // 64] |= 1 << (i % 64)
    signed = [from_u64(w) for w in words]
    return CompactedEntry(e, signed, len(alive), alive[-1])


def select_survivors(entries: Sequence[Entry], retain_null_key: bool,
                     previous: Sequence[CompactedEntry] = (), now_ms: int | None = None) -> list[CompactedEntry]:
    """The two passes of a run over entries held in memory (the run streams them; this states the rule).

    ``previous``: the view of the last run, which comes first: as Pulsar's compactor reads the
    compacted ledger and then the topic after its horizon, a key whose topic ledgers retention has
    deleted since lives on in the view, unless a later message of the topic supersedes it.
    """
    inputs = [(c.entry, c.ack_set) for c in previous] + [(e, None) for e in entries]
    parsed = [(e, ack_set, _read_messages(e, warn=True)) for e, ack_set in inputs if not _is_server_marker(e)]
    latest = LatestByKey()
    for e, ack_set, msgs in parsed:
        if msgs is not None:
            note_latest(latest, e, ack_set, msgs, retain_null_key)
    latest.finish(int(time.time() * 1000) if now_ms is None else now_ms)
    return [c for e, ack_set, msgs in parsed if (c := survivor(e, ack_set, msgs, latest, retain_null_key)) is not None]


# -- the compactor ----------------------------------------------------------------------------------------

def _hidden(e: Entry, buffer: TransactionBuffer) -> bool:
    """Never in a compacted view: transaction markers and entries of aborted transactions."""
    meta = entry_meta(e.data)
    return (meta.is_marker and meta.txn is not None) or (meta.txn is not None and buffer.is_aborted(*meta.txn))


def _present(ack_set: list[int] | None, index: int) -> bool:
    """Whether message ``index`` of an entry is in it: all are, unless an earlier run kept the entry
    with an ack_set (its clear bits were compacted away and stay away)."""
    return ack_set is None or bool((ack_set[index // 64] >> (index % 64)) & 1)


# What a run reads, one chunk at a time: an entry and the ack_set the previous view kept it with.
Chunk = list[tuple[Entry, list[int] | None]]


async def _range_chunks(topic: PersistentTopic, after: Position, horizon: Position) -> AsyncGenerator[Chunk, None]:
    """The topic's entries after ``after`` up to ``horizon`` (but transaction markers and aborted ones)."""
    buffer = topic.txn_buffer
    cursor = topic.ledger.new_non_durable_cursor(after, COMPACTION_READER)
    try:
        while True:
            batch = await cursor.read_entries_async(READ_CHUNK, READ_CHUNK_BYTES)
            within = [e for e in batch if e.position <= horizon]
            if within:
                yield [(e, None) for e in within if not _hidden(e, buffer)]
            if len(within) < len(batch) or not within or within[-1].position >= horizon \
                    or not cursor.has_more_entries():
                return
    finally:
        await cursor.close()


async def _records(view: CompactedView) -> AsyncGenerator[Chunk, None]:
    async with aclosing(view.chunks(READ_CHUNK, READ_CHUNK_BYTES)) as chunks:
        async for chunk in chunks:
            yield [(c.entry, c.ack_set) for c in chunk]


@dataclass
class _Inputs:
    """What a run reads, twice (once per pass), never whole: the previous view, then the topic after its
    horizon up to the new one."""

    topic: PersistentTopic
    previous: CompactedView | None
    horizon: Position
    entries: int = 0  # read by the first pass (server markers included), for the run's record
    size: int = 0

    async def parsed(self, warn: bool) -> AsyncGenerator[tuple[Entry, list[int] | None, list[_Message] | None], None]:
        """Every entry (but server markers) with its messages (None: unreadable). The parsing gives the event
        loop back every PARSE_SLICE messages: a long run must not hold up every connection of the broker."""
        count = not warn  # (the first pass counts, the second warns: each once)
        budget = PARSE_SLICE
        sources: list[AsyncGenerator[Chunk, None]] = []
        if self.previous is not None:
            sources.append(_records(self.previous))
        after = self.previous.horizon if self.previous is not None else Position(-1, -1)
        sources.append(_range_chunks(self.topic, after, self.horizon))
        for source in sources:
            async with aclosing(source) as chunks:
                async for chunk in chunks:
                    for e, ack_set in chunk:
                        if count:
                            self.entries += 1
                            self.size += len(e.data)
                        if _is_server_marker(e):
                            continue
                        msgs = _read_messages(e, warn)
                        yield e, ack_set, msgs
                        budget -= len(msgs) if msgs else 1
                        if budget <= 0:
                            budget = PARSE_SLICE
                            await _give_way()


async def _give_way() -> None:
    """Let the event loop run whatever is ready (a read from storage completed inline does not)."""
    await asyncio.sleep(0)


class _Appender:
    """Appends records to a new compacted ledger with at most MAX_OUTSTANDING_WRITES in flight."""

    def __init__(self, ledger: ManagedLedger, record: CompactionRecord) -> None:
        self._ledger = ledger
        self._record = record
        self._pending = 0
        self._room: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self.entries = 0
        self.size = 0

    async def append(self, data: bytes) -> None:
        while self._pending >= MAX_OUTSTANDING_WRITES:
            await self._wait()
        self._check()
        self._pending += 1
        self.entries += 1
        self.size += len(data)
        started = time.monotonic()
        self._ledger.add_entry(data, lambda _pos, exc: self._added(started, exc))

    async def drain(self) -> None:
        """Wait for every append; raise the first that failed."""
        while self._pending:
            await self._wait()
        self._check()

    def _added(self, started: float, exc: BaseException | None) -> None:
        self._pending -= 1
        if exc is not None:
            self._error = self._error or exc
        else:
            self._record.add_latency(int((time.monotonic() - started) * 1e6))
        if self._room is not None and not self._room.done():
            self._room.set_result(None)

    async def _wait(self) -> None:
        self._room = asyncio.get_running_loop().create_future()
        await self._room

    def _check(self) -> None:
        if self._error is not None:
            raise CompactionError(f"cannot write the compacted ledger: {self._error}") from self._error


@dataclass
class CompactionRecord:
    """Pulsar's CompactionRecord, for the pulsar_compaction_* metrics and the topic stats' ``compaction``: what
    the runs of one topic did."""

    succeeded: int = 0
    failed: int = 0
    removed_events: int = 0  # messages the runs removed, all runs (``note_latest`` says which count)
    # The last run's (success or failure): removed messages, duration, and when the last run of each
    # outcome ended (epoch ms, 0 if none did), as Pulsar's CompactionRecord.addCompactionEndOp sets them.
    last_removed_events: int = 0
    last_duration_ms: int = 0
    last_succeeded_ms: int = 0
    last_failed_ms: int = 0
    duration_ms: int = 0  # all runs (Pulsar's compactionDurationTimeInMills, OTel's compaction.duration)
    read_bytes: int = 0  # read by all runs (OTel's compaction.incoming.size)
    write_bytes: int = 0  # written to compacted ledgers by all runs (OTel's compaction.outgoing.size)
    last_read_bytes_per_s: float = 0.0
    last_write_bytes_per_s: float = 0.0
    compacted_entries: int = 0  # in the current compacted view
    compacted_bytes: int = 0
    # Write latency of the compacted ledger's entries, all runs: per bucket, not cumulative (Pulsar's
    # CompactionRecord.WRITE_LATENCY_BUCKETS_USEC: the managed ledger's bounds, one more past the
    # last), and their sum in microseconds.
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(ADD_LATENCY_BUCKETS_US) + 1))
    latency_sum_us: int = 0

    _run_removed: int = field(default=0, init=False, repr=False)  # (the run under way's)
    _run_started: float = field(default=0.0, init=False, repr=False)

    def add_latency(self, us: int) -> None:
        self.latency_counts[bisect.bisect_left(ADD_LATENCY_BUCKETS_US, us)] += 1
        self.latency_sum_us += us

    def run_started(self) -> None:
        self._run_removed = 0
        self._run_started = time.monotonic()

    def add_removed(self, events: int) -> None:
        self._run_removed += events
        self.removed_events += events

    def run_ended(self, succeeded: bool) -> None:
        self.last_duration_ms = int((time.monotonic() - self._run_started) * 1000)
        self.duration_ms += self.last_duration_ms
        self.last_removed_events = self._run_removed
        now_ms = int(time.time() * 1000)
        if succeeded:
            self.succeeded += 1
            self.last_succeeded_ms = now_ms
        else:
            self.failed += 1
            self.last_failed_ms = now_ms

    @property
    def runs(self) -> int:
        return self.succeeded + self.failed


class Compactor:
    """Runs compaction for one topic at a time and keeps its status (for GET .../compaction)."""

    def __init__(self, topic: PersistentTopic) -> None:
        self.topic = topic
        self.status = CompactionStatus.NOT_RUN
        self.last_error = ""
        self.record = CompactionRecord()
        self._task: asyncio.Task[None] | None = None
        self._switching = False  # (the run under way writes the record of its new view: see compact)

    async def hold_for_first_run(self) -> None:
        """At load, for a topic with a compaction threshold: the __compaction cursor, so what is published
        before the first run stays for it (Pulsar's preCreateSubscriptionForCompactionIfNeeded)."""
        topic = self.topic
        if COMPACTION_CURSOR in topic.ledger.cursors or topic.service.policies.get(topic.name,
                                                                                   COMPACTION_THRESHOLD) <= 0:
            return
        await topic.ledger.open_cursor(COMPACTION_CURSOR, InitialPosition.EARLIEST)

    def trigger(self) -> bool:
        """Start a run unless one is going; returns False when one already runs. Nothing on a closed topic (found
        before its unload or delete: Pulsar's triggerCompaction skips a topic closing or deleting), where a run
        would outlive its topic."""
        if self._task is not None and not self._task.done():
            return False
        if self.topic.closed:
            log.info("compaction of %s not started: the topic is closed", self.topic.name)
            return True
        self.status = CompactionStatus.RUNNING
        self.last_error = ""
        self._task = asyncio.get_running_loop().create_task(self._run())
        return True

    async def _run(self) -> None:
        self.record.run_started()
        try:
            await self.compact()
            self.status = CompactionStatus.SUCCESS
            self.record.run_ended(succeeded=True)
        except asyncio.CancelledError:
            self.status = CompactionStatus.ERROR
            self.last_error = "cancelled"
            self.record.run_ended(succeeded=False)
            raise
        except Exception as exc:
            log.exception("compaction of %s failed", self.topic.name)
            self.status = CompactionStatus.ERROR
            # (Pulsar's lastError is its exception's "class: message"; never empty, whatever the message)
            self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self.record.run_ended(succeeded=False)

    async def compact(self) -> CompactedView:
        topic = self.topic
        service = topic.service
        # Created by the first run at the earliest entry (as Pulsar's compactor subscribes): from then
        # on nothing after the last horizon goes before the next run has read it.
        cursor = await topic.ledger.open_cursor(COMPACTION_CURSOR, InitialPosition.EARLIEST)
        horizon = topic.ledger.last_confirmed_entry
        limit = topic.txn_buffer.read_limit()
        if limit is not None:  # an open transaction: compact only what consumers may read
            horizon = min(horizon, topic.ledger.previous_position(limit))
        # Incremental, as Pulsar's compactor (a readCompacted reader: the compacted ledger, then the
        # topic after its horizon): the topic's ledgers up to the last horizon may be gone already.
        old = topic.compacted_view
        horizon = max(horizon, old.horizon if old is not None else Position(-1, -1))
        inputs = _Inputs(topic, old, horizon)
        # Two passes, as Pulsar's TwoPhaseCompactor: the first keeps only each key's latest message, the
        # second reads everything again and appends what survives as it goes.
        latest = LatestByKey()
        retain_null_key = service.config.topicCompactionRetainNullKey
        async with aclosing(inputs.parsed(warn=False)) as first:
            async for e, ack_set, msgs in first:
                if msgs is not None:
                    self.record.add_removed(note_latest(latest, e, ack_set, msgs, retain_null_key))
        latest.finish(int(time.time() * 1000))
        generation = service.metadata.compactions.get(topic.full_name, {}).get("generation", 0) + 1
        name = compacted_ledger_name(topic.name, generation)
        factory = service.ledger_factory
        if factory.exists(name):
            # Left by a run that did not finish (killed before the metadata switched to it): what it
            # holds is not this run's; appended to, it would bring back the values it had kept.
            log.warning("compaction of %s: deleting %s, left by a run that did not finish", topic.name, name)
            await factory.delete(name)
        # (opened in a task of its own: a run cancelled while the ledger is being made learns when it is made,
        # and deletes it; the factory's open goes on without its caller)
        opening = asyncio.ensure_future(factory.open(name, view_ledger_config(service.ledger_config)))
        record, started = self.record, time.monotonic()
        last: CompactedEntry | None = None
        try:
            ledger = await asyncio.shield(opening)
            appender = _Appender(ledger, record)
            async with aclosing(inputs.parsed(warn=True)) as second:
                async for e, ack_set, msgs in second:
                    c = survivor(e, ack_set, msgs, latest, retain_null_key)
                    if c is not None:
                        last = c
                        await appender.append(encode_record(c))
            await appender.drain()
        except BaseException:
            # As Pulsar's compactor deletes the ledger of a failed run (phaseTwoSeekThenLoop).
            await asyncio.shield(_discard(factory, name, opening))
            raise
        # (the ledger just written stays open: the view is read from it)
        view = CompactedView(horizon, ledger, appender.entries,
                             (last.entry.position, last.last_index) if last is not None else None)
        # From the metadata write on, the run goes to its end: a close waits for it rather than cancel it (the
        # record may be written even so, naming a ledger the cancelled run would delete: the topic would load
        # without a view). A write that failed but whose record names the new view (its answer lost) switched
        # all the same; otherwise the ledger stays, closed, for the store may have it written even so: if it
        # does not, the next run deletes it before it writes (see above).
        self._switching = True
        try:
            try:
                await service.metadata.set_compaction(topic.full_name, name, (horizon.ledger_id, horizon.entry_id),
                                                      generation)
            except BaseException as exc:
                if not isinstance(exc, Exception) or self._recorded(topic) != name:
                    await ledger.close()
                    raise
                log.warning("compaction of %s: its new view is recorded despite %r", topic.name, exc)
            elapsed = max(time.monotonic() - started, 1e-9)
            record.read_bytes += inputs.size
            record.write_bytes += appender.size
            record.last_read_bytes_per_s = inputs.size / elapsed
            record.last_write_bytes_per_s = appender.size / elapsed
            record.compacted_entries, record.compacted_bytes = appender.entries, appender.size
            topic.compacted_view = view
            if horizon.entry_id >= 0 and horizon > cursor.mark_delete_position and not cursor.is_closed:
                cursor.mark_delete(horizon)  # (the view holds what came before)
            if old is not None and old.ledger_name != name:
                await _retire(factory, old)
        finally:
            self._switching = False
        log.info("compacted %s up to %s: %d of %d entries kept (%d keys)", topic.name, horizon, appender.entries,
                 inputs.entries, len(latest))
        return view

    @staticmethod
    def _recorded(topic: PersistentTopic) -> str | None:
        """The ledger the metadata records for the topic's view."""
        record = topic.service.metadata.compactions.get(topic.full_name)
        return record.get("ledger") if record else None

    async def close(self) -> None:
        """Stop a run in progress (its ledger is deleted; the view stays the last one); one that is switching
        the topic to its new view goes to its end first."""
        task = self._task
        if task is not None and not task.done():
            if not self._switching:
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _discard(factory: ManagedLedgerFactory, name: str, opening: asyncio.Future[ManagedLedger]) -> None:
    """Delete the ledger of a failed run, once its open has ended (what an open under way makes would stay)."""
    await asyncio.wait([opening])
    if not opening.cancelled():
        opening.exception()  # (retrieved: the run raised it, or was cancelled before it came)
    if factory.exists(name):
        await _delete_quietly(factory, name)


async def _retire(factory: ManagedLedgerFactory, old: CompactedView) -> None:
    """The view a run replaced: closed once its reads under way are served, and deleted. The run has succeeded
    by then (the record names the new view), whatever happens here."""
    try:
        await old.close(finish_reads=True)
    except Exception:
        log.warning("could not close %s, a replaced compacted view", old.ledger_name, exc_info=True)
    await _delete_quietly(factory, old.ledger_name)


async def _delete_quietly(factory: ManagedLedgerFactory, name: str) -> None:
    try:
        await factory.delete(name)
    except Exception:  # (a run's own: the next run deletes it before writing; a replaced view: the topic's delete)
        log.warning("could not delete %s, the ledger of a compacted view no longer used", name, exc_info=True)


def compacted_ledger_name(name: TopicName, generation: int, *, raw: bool = False) -> str:
    """The managed ledger of a topic's compacted view, generation ``generation`` (see the module's doc): its local
    name encoded as the topic's own ledger's is (``TopicName.persistence_path``), so a "/" in it is no path step.
    ``raw``: as versions before that spelled it (the local name as it is)."""
    local = name.local_name if raw else encode_local_name(name.local_name)
    return f"{name.tenant}/{name.namespace_part}/{COMPACTION_DOMAIN}/{local}-{generation}"


def compacted_ledger_names(name: TopicName, record: Mapping[str, Any] | None) -> list[str]:
    """The managed ledgers a topic's compacted views may occupy, given its metadata record (for the topic's
    delete): the recorded one, the next generation (left by a run that failed or was killed before it
    recorded its view: the next run would have deleted it) and the previous one (a replaced view the run
    could not delete)."""
    generation = record.get("generation", 0) if record else 0
    names = [compacted_ledger_name(name, g, raw=raw) for g in (generation - 1, generation + 1) if g > 0
             for raw in (False, True)]  # (and as an older version spelled them: the recorded one is as it was made)
    return list(dict.fromkeys([record["ledger"], *names] if record else names))
