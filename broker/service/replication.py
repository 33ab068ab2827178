"""Geo-replication: copy a topic's messages to the same topic on other clusters (Pulsar's
PersistentReplicator and NonPersistentReplicator).

A topic is replicated to the clusters of its ``replicationClusters`` policy, else of its
namespace's ``replication_clusters`` (which of them: ``remote_clusters``, also when this cluster
serves the namespace only as one of its allowed clusters). For each loaded persistent topic and
each remote cluster, one ``PersistentReplicator`` reads the topic through a durable cursor ``pulsar.repl.<remote
cluster>`` and publishes every entry to the remote cluster's broker (its ``brokerServiceUrl`` in
the cluster data) as producer ``pulsar.repl.<local cluster>``.

The replicator owns its read loop (ARCHITECTURE.md): one read outstanding at a time, the whole
batch handed to the remote producer before the next read, at most ``MAX_PENDING`` entries (and
about ``MAX_PENDING_BYTES``) not yet confirmed, and reads sized to its ``replicatorDispatchRate``
budget (put off while there is none). Receipts acknowledge the positions individually,
so the cursor's mark-delete moves only over what the remote cluster has stored. After a lost
connection the cursor is rewound to its mark-delete position and everything not confirmed is sent
again: at least once (the remote side's deduplication, when on, removes the repeats: it keys
replicated messages by their original producer name and sequence id, as Pulsar does).

Each replicated entry gets ``replicated_from`` = the local cluster in its metadata (and a new
checksum); entries that already carry ``replicated_from`` came from another cluster and are not
sent on (no loops), nor are entries whose ``replicate_to`` list leaves the remote cluster out,
nor markers.

Non-persistent topics have ``NonPersistentReplicator``s instead (best effort, as in Pulsar): while
the topic has producers of its own, each entry they publish is queued for each remote cluster
whose replicator is connected and has room, else dropped and counted; the same send loop takes
it from there, and nothing is sent again after a lost connection.

The remote producer (remote_producer.py) looks the topic up first and produces on the broker that
owns it, with TLS and credentials as configured. The replicator also carries the markers of
replicated subscriptions (replicated_subscriptions.py) and hands those that came from its remote
cluster to the topic's controller. The schema versions messages carry are registered on the
remote topic first, and the messages carry the remote's version numbers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Collection
from typing import TYPE_CHECKING, TypeVar

from broker.metadata.policy_table import REPLICATOR_DISPATCH_RATE
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import (
    BROKER_ENTRY_METADATA_HEAD,
    build_entry,
    entry_body,
    entry_meta,
    parse_payload,
    skip_broker_entry_metadata,
)
from broker.protocol.errors import ProtocolError
from broker.service.peer_link import RemoteError
from broker.service.rate_limits import DispatchRate
from broker.service.remote_producer import RemoteProducer, remote_settings
from broker.service.replicated_subscriptions import REPLICATED_MARKERS, marker_payload
from broker.service.schemas import decode_version, to_proto
from broker.service.subscription import cursor_activity
from managed_ledger import Entry, ManagedCursor, ManagedLedgerError, Position

if TYPE_CHECKING:
    from broker.service.abstract_topic import AbstractTopic
    from broker.service.nonpersistent import NonPersistentTopic
    from broker.service.topic import PersistentTopic

log = logging.getLogger(__name__)

REPLICATOR_PREFIX = "pulsar.repl."
# Entries sent to the remote cluster and not yet confirmed (Pulsar's replicationProducerQueueSize),
# and their bytes: what one replicator may hold in memory and in its socket buffers.
MAX_PENDING = 1000
MAX_PENDING_BYTES = 32 * 1024 * 1024
READ_BATCH = 100
# Reconnect backoff (seconds).
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.1, 60.0
R = TypeVar("R")


def remote_clusters(local: str, clusters: list[str], allowed: Collection[str], *, persistent: bool) -> list[str]:
    """The clusters a topic of this cluster (``local``) replicates to, from the replication clusters in force for it
    and its namespace's allowed clusters (PIP-321), as Pulsar 4.0.7's checkReplication starts replicators:

    - ``local`` among the replication clusters: every other one.
    - ``local`` only among the allowed clusters (it serves the namespace, PIP-321): every replication cluster too -
      Pulsar's loop starts a replicator for each cluster of the list but the local one, and never asks whether the
      local one is in the list. Except for a persistent topic when the list has a single cluster: PersistentTopic
      skips the loop when ``configuredClusters.size() == 1 && replicators.isEmpty()`` (meant for a list holding the
      local cluster alone), so a topic loaded then never replicates to that cluster. (Should a topic have replicators
      already when its list shrinks to one other cluster, Pulsar keeps the one to it until the topic is unloaded;
      ours stops it at once, as it would be after the next load.) NonPersistentTopic has no such shortcut.
    - ``local`` in neither: none. Pulsar deletes such a persistent topic (``cluster_removal``), and its lookups send
      the clients of either kind of topic elsewhere.
    """
    if local in clusters:
        return [c for c in clusters if c != local]
    if local not in allowed or (persistent and len(clusters) == 1):
        return []
    return list(clusters)


def is_replicator_name(name: str) -> bool:
    """A replication cursor (``pulsar.repl.<remote>``) or a replicator producer's name."""
    return name.startswith(REPLICATOR_PREFIX)


def restamp(entry: bytes, md: pb.MessageMetadata, local_cluster: str) -> bytes | None:
    """The entry (its metadata ``md``) as the remote cluster must receive it (``replicated_from``
    set, new checksum), or None when it is not replicated from here: it came from another
    cluster, or it is a marker other than the replicated-subscription ones that travel."""
    if md.HasField("replicated_from") or (md.HasField("marker_type") and md.marker_type not in REPLICATED_MARKERS):
        return None
    md.replicated_from = local_cluster
    return build_entry(md.SerializeToString(), entry_body(entry))


class Replicator(ABC):
    """Replicates one topic to one remote cluster: the connection, the send loop and the receipts.
    Where the entries come from, and what a confirmation does, is the subclasses' part."""

    def __init__(self, topic: AbstractTopic, remote_cluster: str) -> None:
        self.topic = topic
        self.remote_cluster = remote_cluster
        self.local_cluster = topic.service.config.clusterName
        self.producer: RemoteProducer | None = None
        self.connected = False
        self.connected_since = 0.0
        self.msg_out = 0
        self.bytes_out = 0
        # Messages dropped because the remote could not take them (non-persistent only; stats).
        self.msg_dropped = 0
        self.last_error = ""
        # (sequence id, position, publish time in ms, bytes) of the entries sent and not yet
        # confirmed, in send order.
        self._pending: deque[tuple[int, Position, int, int]] = deque()
        self._pending_bytes = 0
        self._next_seq = 0
        # Schema versions here -> the remote topic's (learnt per connection).
        self._schema_versions: dict[bytes, bytes] = {}
        self._room = asyncio.Event()
        self._lost: asyncio.Future[BaseException] | None = None
        self._progress = False  # a receipt came on the current connection
        self._task: asyncio.Task[None] | None = None  # the send loop, while started
        # Set while disconnect() stops the loop: a start() meanwhile waits for it.
        self._stopping: asyncio.Future[None] | None = None
        self.closed = False
        # replicatorDispatchRate (topic, namespace, broker): each replicator has its own buckets; with
        # relativeToPublishRate they follow the topic's publish rate, as a subscription's do.
        policies = topic.service.policies
        self.dispatch_rate = DispatchRate(topic.service.metadata,
                                          lambda: policies.get(topic.name, REPLICATOR_DISPATCH_RATE).as_tuple(),
                                          published=topic.published_totals)

    @property
    def remote_url(self) -> str | None:
        producer = self.producer
        return producer.url if producer is not None and self.connected else None

    @property
    def delay_s(self) -> float:
        """Age of the oldest message sent and not yet confirmed (0 when none is waiting)."""
        if not self._pending:
            return 0.0
        return max(0.0, time.time() - self._pending[0][2] / 1000)

    @property
    @abstractmethod
    def backlog(self) -> int:
        """Entries waiting to be sent."""

    @abstractmethod
    def _read(self, count: int, max_bytes: int) -> Awaitable[list[Entry]]:
        """The next entries to send (at most ``count``, and ``max_bytes`` past the first), once
        there are some."""

    @abstractmethod
    def _done(self, positions: list[Position]) -> None:
        """These entries were confirmed by the remote cluster, or are not for it."""

    @abstractmethod
    def _connection_changed(self) -> None:
        """Connected or disconnected (``connected`` says which)."""

    @abstractmethod
    def _rewind(self) -> None:
        """A new connection: what was sent and not confirmed before is forgotten here."""

    @abstractmethod
    def _inspect(self, entry: Entry, md: pb.MessageMetadata) -> None:
        """Every entry read, before it is sent or skipped."""

    @property
    def started(self) -> bool:
        """The send loop runs (connected or retrying); False once disconnect() or close() stopped it."""
        return self._task is not None

    def start(self) -> None:
        """Start the send loop (nothing if it runs, or once closed); after a disconnect(), again
        (Pulsar's startProducer, which its topic calls for every producer it adds)."""
        if self.closed or self._task is not None:
            return
        if self._stopping is not None:  # a disconnect() is under way: start once it is done
            self._stopping.add_done_callback(lambda _: self.start())
            return
        self._connection_changed()
        self._task = self.topic.loop.create_task(self._run())

    async def disconnect(self) -> bool:
        """Stop the send loop and close the remote producer, unless entries wait to be sent or
        confirmed: False then, and the loop goes on (Pulsar's Replicator.disconnect(), which fails
        with "Cannot close a replicator with backlog"). The replicator and its cursor stay; start()
        resumes it."""
        if self.backlog > 0:
            return False
        if self._task is None or self._stopping is not None:
            return True
        self._stopping = self.topic.loop.create_future()
        try:
            await self._stop("the replicator is disconnected")
        finally:
            stopping, self._stopping = self._stopping, None
            stopping.set_result(None)
        log.info("replicator %s -> %s disconnected", self.topic.name, self.remote_cluster)
        return True

    async def close(self) -> None:
        self.closed = True
        await self._stop("the replicator is closing")

    async def _stop(self, why: str) -> None:
        # Whatever the loop awaits through _wait ends now, even if the cancel below were lost.
        self._connection_lost(RemoteError(why))
        task = self._task
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._task = None
        await self._disconnect()

    # -- the loop ----------------------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while not self.closed:
            self._progress = False
            try:
                await self._connect()
                if self.closed:  # (closed while connecting)
                    break
                await self._replicate()
            except asyncio.CancelledError:
                raise
            except (TimeoutError, OSError, RemoteError, ProtocolError, ManagedLedgerError) as exc:
                if self.closed:
                    break
                backoff = self._next_backoff(backoff)
                self.last_error = str(exc) or type(exc).__name__
                log.warning("replicator %s -> %s: %s; retrying in %.1f s", self.topic.name, self.remote_cluster,
                            self.last_error, backoff)
            except Exception as exc:  # never die silently: a stuck replicator would hold its backlog
                backoff = self._next_backoff(backoff)
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("replicator %s -> %s failed; retrying in %.1f s", self.topic.name,
                              self.remote_cluster, backoff)
            await self._disconnect()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _next_backoff(self, backoff: float) -> float:
        """The wait before the next attempt: from the start again after a connection that got
        receipts or stayed up longer than that wait (as Pulsar resets its backoff once connected),
        else ``backoff`` (a remote that is away, or refuses every message at once, is not retried
        at full speed)."""
        lasted = self.connected and time.time() - self.connected_since >= backoff
        return BACKOFF_MIN_S if self._progress or lasted else backoff

    async def _connect(self) -> None:
        cluster = self.topic.service.metadata.clusters.get(self.remote_cluster, {})
        settings = remote_settings(self.topic.service.config, self.remote_cluster, cluster)
        self._lost = self.topic.loop.create_future()
        self.producer = RemoteProducer(settings, self.topic.full_name, REPLICATOR_PREFIX + self.local_cluster,
                                       self._receipt, self._connection_lost)
        await self.producer.connect()
        self.connected = True
        self.connected_since = time.time()
        self._connection_changed()
        self._schema_versions.clear()
        self._pending.clear()
        self._pending_bytes = 0
        self._rewind()
        log.info("replicator %s -> %s connected", self.topic.name, self.remote_cluster)

    async def _disconnect(self) -> None:
        if self.connected:
            self.connected = False
            self._connection_changed()
        producer, self.producer = self.producer, None
        if producer is not None:
            await producer.close()

    async def _replicate(self) -> None:
        """One read outstanding; a read's entries all go to the remote producer before the next."""
        assert self._lost is not None
        while True:
            room, room_bytes = MAX_PENDING - len(self._pending), MAX_PENDING_BYTES - self._pending_bytes
            if room <= 0 or room_bytes <= 0:
                self._room.clear()
                await self._wait(self._room.wait())
                continue
            count, max_bytes = min(room, READ_BATCH), room_bytes
            budget = self.dispatch_rate.budget()
            if budget is not None:
                messages, nbytes = budget
                if messages <= 0:
                    await self._wait(asyncio.sleep(self.dispatch_rate.wait()))
                    continue
                count = min(count, messages)  # (entries: a batch may take the budget below zero)
                max_bytes = min(max_bytes, nbytes) if nbytes is not None else max_bytes
            entries = await self._wait(self._read(count, max_bytes))
            parsed = self._parse(entries)
            await self._wait(self._map_schemas(parsed))
            self.dispatch_rate.consume(*self._send(parsed))

    async def _wait(self, awaitable: Awaitable[R]) -> R:
        """Await ``awaitable`` unless the connection is lost first (RemoteError then)."""
        assert self._lost is not None
        task = asyncio.ensure_future(awaitable)
        try:
            await asyncio.wait((task, self._lost), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():  # lost, or this replicator is closing (a parked read is cancelled)
                task.cancel()
        if not task.done() or task.cancelled():
            raise RemoteError(str(self._lost.result()) if self._lost.done() else "closed")
        return task.result()

    def _parse(self, entries: list[Entry]) -> list[tuple[Entry, pb.MessageMetadata | None]]:
        out: list[tuple[Entry, pb.MessageMetadata | None]] = []
        for entry in entries:
            if entry.data[:2] == BROKER_ENTRY_METADATA_HEAD:  # (this cluster's own: not replicated)
                entry = Entry(entry.position, skip_broker_entry_metadata(entry.data))
            try:
                out.append((entry, parse_payload(entry.data, verify=False).metadata))
            except ProtocolError as exc:  # (entries are checked on the way in: never seen)
                log.error("replicator %s -> %s: entry %s cannot be read (%s); not replicated",
                          self.topic.name, self.remote_cluster, entry.position, exc)
                out.append((entry, None))
        return out

    async def _map_schemas(self, parsed: list[tuple[Entry, pb.MessageMetadata | None]]) -> None:
        """Register on the remote topic the schema versions these messages carry and learn the
        remote's version numbers, which the replicated messages then carry instead (the remote
        cluster keeps its own schema registry)."""
        assert self.producer is not None
        for _, md in parsed:
            if md is None or not md.schema_version or md.schema_version in self._schema_versions:
                continue
            version = decode_version(md.schema_version)
            found = self.topic.service.schemas.get(self.topic.name.base.full, version) if version is not None else None
            if found is None:
                self._schema_versions[md.schema_version] = md.schema_version  # unknown here: as it is
                continue
            self._schema_versions[md.schema_version] = await self.producer.schema_version(to_proto(found[0]))

    def _send(self, parsed: list[tuple[Entry, pb.MessageMetadata | None]]) -> tuple[int, int]:
        """Send what is to be replicated; (messages, bytes) sent."""
        assert self.producer is not None
        skipped: list[Position] = []
        sent_messages = sent_bytes = 0
        for entry, md in parsed:
            if md is None:
                skipped.append(entry.position)
                continue
            if md.schema_version:
                md.schema_version = self._schema_versions.get(md.schema_version, md.schema_version)
            self._inspect(entry, md)
            payload = restamp(entry.data, md, self.local_cluster)
            if payload is None or (md.replicate_to and self.remote_cluster not in md.replicate_to):
                skipped.append(entry.position)
                continue
            seq = self._next_seq
            self._next_seq += 1
            self._pending.append((seq, entry.position, md.publish_time, len(payload)))
            self._pending_bytes += len(payload)
            messages = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1
            self.producer.send(seq, messages, payload, md.num_chunks_from_msg > 1)
            sent_messages += messages
            sent_bytes += len(payload)
        self.msg_out += sent_messages
        self.bytes_out += sent_bytes
        if skipped:
            self._done(skipped)
        return sent_messages, sent_bytes

    # -- from the remote producer ------------------------------------------------------------------
    def _receipt(self, sequence_id: int) -> None:
        if not self._pending or self._pending[0][0] != sequence_id:
            self._connection_lost(RemoteError(f"unexpected receipt for sequence id {sequence_id}"))
            return
        self._progress = True
        _, position, _, nbytes = self._pending.popleft()
        self._pending_bytes -= nbytes
        self._done([position])
        self._room.set()

    def _connection_lost(self, exc: BaseException) -> None:
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(exc)


class PersistentReplicator(Replicator):
    """Reads a persistent topic through its durable cursor ``pulsar.repl.<remote>``: receipts
    acknowledge positions, a new connection rewinds to the mark-delete position (at least once)."""

    def __init__(self, topic: PersistentTopic, remote_cluster: str, cursor: ManagedCursor) -> None:
        super().__init__(topic, remote_cluster)
        self.persistent_topic = topic
        self.cursor = cursor

    @property
    def backlog(self) -> int:
        return self.cursor.number_of_entries_in_backlog()

    def update_cursor_activity(self) -> None:
        """Active (its entries kept in the read cache) while connected and not backlogged, as for
        a subscription: a replicator whose remote cluster is away must not pin the cache."""
        self.cursor.set_active(cursor_activity(self.persistent_topic, self.cursor, self.connected))

    _connection_changed = update_cursor_activity

    def _rewind(self) -> None:
        self.cursor.rewind()  # what was not confirmed is sent again, from the mark-delete position

    def _read(self, count: int, max_bytes: int) -> Awaitable[list[Entry]]:
        return self.cursor.read_entries_or_wait_async(count, max_bytes)

    def _done(self, positions: list[Position]) -> None:
        self.cursor.delete(positions)

    def _inspect(self, entry: Entry, md: pb.MessageMetadata) -> None:
        """A replicated-subscription marker that came from this replicator's cluster: every
        replicator reads it, this one acts on it."""
        if md.replicated_from == self.remote_cluster and md.marker_type in REPLICATED_MARKERS:
            controller = self.persistent_topic.replicated_subscriptions
            if controller is not None:
                controller.received(entry.position, md.marker_type, marker_payload(entry.data))

    async def _stop(self, why: str) -> None:
        self.cursor.cancel_pending_read()
        await super()._stop(why)


class NonPersistentReplicator(Replicator):
    """Forwards what a non-persistent topic's own producers publish, as Pulsar's
    NonPersistentReplicator does: best effort, nothing stored. An entry is queued for sending
    while the replicator is connected and has room (``MAX_PENDING`` entries, ``MAX_PENDING_BYTES``,
    queued and unconfirmed together), else dropped and counted (``msg_dropped``, the stats'
    ``msgDropRate``). After a lost connection nothing is sent again."""

    def __init__(self, topic: NonPersistentTopic, remote_cluster: str) -> None:
        super().__init__(topic, remote_cluster)
        self._queue: deque[Entry] = deque()
        self._queued_bytes = 0
        self._next_id = 0
        self._queued = asyncio.Event()

    @property
    def backlog(self) -> int:
        return len(self._queue)

    def offer(self, data: bytes, messages: int) -> None:
        """An entry a local producer published: queued for the remote cluster, or dropped."""
        if (not self.connected or len(self._queue) + len(self._pending) >= MAX_PENDING
                or self._queued_bytes + self._pending_bytes >= MAX_PENDING_BYTES):
            self.msg_dropped += messages
            return
        self._queue.append(Entry(Position(0, self._next_id), data))
        self._next_id += 1
        self._queued_bytes += len(data)
        self._queued.set()

    async def _read(self, count: int, max_bytes: int) -> list[Entry]:
        while not self._queue:
            self._queued.clear()
            await self._queued.wait()
        out: list[Entry] = []
        size = 0
        while self._queue and len(out) < count and (not out or size + len(self._queue[0].data) <= max_bytes):
            entry = self._queue.popleft()
            out.append(entry)
            size += len(entry.data)
        self._queued_bytes -= size
        return out

    def _done(self, positions: list[Position]) -> None:
        """Nothing to remember."""

    def _rewind(self) -> None:
        """Nothing is sent again."""

    def _inspect(self, entry: Entry, md: pb.MessageMetadata) -> None:
        """No markers on non-persistent topics."""

    def _connection_changed(self) -> None:
        if not self.connected:  # what waited for this connection is dropped with it
            for entry in self._queue:
                self.msg_dropped += entry_meta(entry.data).num_messages
            self._queue.clear()
            self._queued_bytes = 0
