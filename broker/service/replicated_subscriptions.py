"""Replicated subscriptions: a subscription's position mirrored to the other clusters of a
geo-replicated topic (Pulsar's ReplicatedSubscriptionsController), so consumers that move to
another cluster carry on about where they were.

Positions differ between clusters, so the clusters exchange markers (entries whose metadata
carries ``marker_type``, never delivered to consumers) through the replicators:

1. Every ``replicatedSubscriptionsSnapshotFrequencyMillis``, a topic that has a replicated
   subscription and took new messages since its last snapshot writes a snapshot *request*
   marker; its replicators carry it to the other clusters.
2. A cluster whose replicator reads a request that came from the asking cluster answers with a
   *response* marker holding its topic's last position, sent back to that cluster only.
3. When every other cluster has answered, the asking cluster asks once more (so that what was
   in flight during the first round is covered), then writes a *snapshot* marker, kept locally:
   its own position (that of the last response) and each cluster's.
4. A replicated subscription's dispatcher reads the snapshot markers as it goes and keeps the
   latest few; when the subscription's mark-delete passes one, an *update* marker with the
   other clusters' positions goes out, and each cluster moves its subscription of that name to
   its position (creating it there if needed).

Markers are processed by the replicator that connects to the cluster they came from (every
replicator reads every marker; only that one acts on it), as in Pulsar.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.errors import BrokerError
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol import pulsar_markers_pb2 as mk
from broker.protocol.entry import REQUEST, RESPONSE, SNAPSHOT, UPDATE, build_entry, entry_body
from broker.protocol.varint import U64_MASK
from broker.tasks import OwnedTasks
from managed_ledger import Position

if TYPE_CHECKING:
    from broker.service.operation_stats import SnapshotStats
    from broker.service.subscription import Subscription
    from broker.service.topic import PersistentTopic

log = logging.getLogger(__name__)

# Markers the replicators carry to other clusters (a snapshot stays where it was taken).
REPLICATED_MARKERS = frozenset({REQUEST, RESPONSE, UPDATE})
# The cursor property that marks a durable subscription as replicated (kept across restarts).
REPLICATED_PROPERTY = "pulsar.replicated.subscription"
MARKER_PRODUCER = "pulsar.marker"


def marker_entry(marker_type: int, payload: bytes, replicate_to: list[str] | None = None) -> bytes:
    """A marker entry as stored: magic, checksum, metadata (marker_type, replicate_to), payload."""
    md = pb.MessageMetadata(producer_name=MARKER_PRODUCER, sequence_id=0, publish_time=int(time.time() * 1000),
                            marker_type=marker_type)
    if replicate_to:
        md.replicate_to.extend(replicate_to)
    return build_entry(md.SerializeToString(), payload)


marker_payload = entry_body  # a marker's payload is what follows its metadata


def _position(p: mk.Position) -> Position:
    return Position(p.ledger_id if p.ledger_id != U64_MASK else -1, p.entry_id if p.entry_id != U64_MASK else -1)


def _cluster_position(cluster: str, p: Position) -> mk.ClusterPosition:
    return mk.ClusterPosition(cluster=cluster, message_id=mk.Position(ledger_id=p.ledger_id & U64_MASK,
                                                                      entry_id=p.entry_id & U64_MASK))


@dataclass
class _Snapshot:
    local: Position
    clusters: list[mk.ClusterPosition]


class SnapshotCache:
    """The latest snapshots a replicated subscription has read, oldest first (at most ``size``)."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self._snapshots: deque[_Snapshot] = deque()

    def add(self, local: Position, clusters: list[mk.ClusterPosition]) -> None:
        if self._snapshots and local <= self._snapshots[-1].local:
            return
        self._snapshots.append(_Snapshot(local, clusters))
        while len(self._snapshots) > self.size:
            self._snapshots.popleft()

    def passed(self, mark_delete: Position) -> list[mk.ClusterPosition] | None:
        """The other clusters' positions of the newest snapshot at or before ``mark_delete``
        (that one and older ones are dropped), or None."""
        found = None
        while self._snapshots and self._snapshots[0].local <= mark_delete:
            found = self._snapshots.popleft()
        return found.clusters if found is not None else None

    def __len__(self) -> int:
        return len(self._snapshots)


@dataclass
class _Pending:
    """A snapshot being gathered: the clusters' answers, round one then round two."""

    started: float
    remotes: frozenset[str]
    entries: int  # the topic's data_entries_added when it began (what it covers)
    second_round: bool = False
    responses: dict[str, mk.ClusterPosition] = field(default_factory=dict)


class ReplicatedSubscriptionsController:
    """One per replicated topic (see the module docstring)."""

    def __init__(self, topic: PersistentTopic) -> None:
        self.topic = topic
        cfg = topic.service.config
        self.local_cluster = cfg.clusterName
        self.frequency_s = max(0.01, cfg.replicatedSubscriptionsSnapshotFrequencyMillis / 1000)
        self.timeout_s = cfg.replicatedSubscriptionsSnapshotTimeoutSeconds
        self.pending: dict[str, _Pending] = {}
        self.completed = 0  # snapshots written (stats and tests)
        self.covered_entries = 0  # data_entries_added as of the start of the last snapshot written
        self._last_snapshot_entries = -1  # the topic's data_entries_added when the last snapshot began
        self._timer: asyncio.TimerHandle | None = None
        self._tasks = OwnedTasks(f"replicated subscriptions of {topic.name}")  # subscription moves under way
        self.closed = False
        self.stats: SnapshotStats = topic.service.snapshot_stats
        self.stats.seen = True

    def start(self) -> None:
        self._timer = self.topic.loop.call_later(self.frequency_s, self._tick)

    def close(self) -> None:
        self.closed = True
        self.stats.pending -= len(self.pending)
        self.pending.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- snapshots from here -------------------------------------------------------------------------
    def _tick(self) -> None:
        self._timer = None
        if self.closed or self.topic.closed:
            return
        try:
            self._maybe_snapshot()
        finally:
            self._timer = self.topic.loop.call_later(self.frequency_s, self._tick)

    def _maybe_snapshot(self) -> None:
        now = time.monotonic()
        for snapshot_id, pending in list(self.pending.items()):
            if now - pending.started > self.timeout_s:
                log.info("replicated subscriptions of %s: snapshot %s timed out", self.topic.name, snapshot_id)
                del self.pending[snapshot_id]
                self.stats.ended(now - pending.started, written=False)
        remotes = frozenset(r for r, rep in self.topic.replicators.items() if rep.connected)
        if not remotes or self.pending or not any(s.replicated for s in self.topic.subscriptions.values()):
            return
        if self.topic.data_entries_added == self._last_snapshot_entries:
            return  # nothing new since the last snapshot
        self._last_snapshot_entries = self.topic.data_entries_added
        snapshot_id = str(uuid.uuid4())
        self.pending[snapshot_id] = _Pending(now, remotes, self.topic.data_entries_added)
        self.stats.begun()
        self._request(snapshot_id)

    def _request(self, snapshot_id: str) -> None:
        request = mk.SnapshotRequest(snapshot_id=snapshot_id, source_cluster=self.local_cluster)
        self.write(marker_entry(REQUEST, request.SerializeToString()))

    def _response(self, position: Position, response: mk.SnapshotResponse) -> None:
        pending = self.pending.get(response.snapshot_id)
        if pending is None or response.cluster.cluster not in pending.remotes:
            return
        pending.responses[response.cluster.cluster] = response.cluster
        if len(pending.responses) < len(pending.remotes):
            return
        if not pending.second_round:  # again, to cover what was in flight during the first round
            pending.second_round = True
            pending.responses = {}
            self._request(response.snapshot_id)
            return
        del self.pending[response.snapshot_id]
        self.stats.ended(time.monotonic() - pending.started, written=True)
        snapshot = mk.Snapshot(snapshot_id=response.snapshot_id,
                               local_message_id=_cluster_position(self.local_cluster, position).message_id,
                               clusters=list(pending.responses.values()))
        self.write(marker_entry(SNAPSHOT, snapshot.SerializeToString(), [self.local_cluster]))
        self.completed += 1
        self.covered_entries = pending.entries

    # -- markers from the other clusters (via the replicator to the cluster they came from) --------
    def received(self, position: Position, marker_type: int, payload: bytes) -> None:
        try:
            if marker_type == REQUEST:
                request = mk.SnapshotRequest.FromString(payload)
                last = self.topic.ledger.last_confirmed_entry
                answer = mk.SnapshotResponse(snapshot_id=request.snapshot_id,
                                             cluster=_cluster_position(self.local_cluster, last))
                self.write(marker_entry(RESPONSE, answer.SerializeToString(), [request.source_cluster]))
            elif marker_type == RESPONSE:
                self._response(position, mk.SnapshotResponse.FromString(payload))
            elif marker_type == UPDATE:
                self._update(mk.SubscriptionUpdate.FromString(payload))
        except Exception:  # a bad marker from elsewhere must not stop the replicator
            log.exception("replicated subscriptions of %s: marker %d at %s not understood",
                          self.topic.name, marker_type, position)

    def _update(self, update: mk.SubscriptionUpdate) -> None:
        here = next((c for c in update.clusters if c.cluster == self.local_cluster), None)
        if here is None:
            return
        position = _position(here.message_id)
        if position > self.topic.ledger.last_confirmed_entry:
            return  # (not here yet: a later update will do)
        self._tasks.spawn(self._move_subscription(update.subscription_name, position), loop=self.topic.loop)

    async def _move_subscription(self, name: str, position: Position) -> None:
        """Move (or create) the durable subscription ``name`` up to ``position``."""
        topic = self.topic
        if topic.closed:
            return
        sub = topic.subscriptions.get(name)
        if sub is None:
            try:
                sub = await topic.get_or_create_subscription(name, True, pb.CommandSubscribe.Earliest, None)
            except BrokerError as exc:  # (e.g. the topic's subscription limit, or it is closing)
                log.warning("replicated subscription %s on %s not created: %s", name, topic.name, exc)
                return
        sub.set_replicated()
        if position > sub.cursor.mark_delete_position:
            sub.cursor.mark_delete(position)  # (like a cumulative ack: the read position follows)

    # -- the local subscriptions ---------------------------------------------------------------------
    def subscription_moved(self, sub: Subscription) -> None:
        """A replicated subscription's mark-delete moved: send the positions of the newest
        snapshot it passed to the other clusters."""
        if sub.snapshots is None:
            return
        clusters = sub.snapshots.passed(sub.cursor.mark_delete_position)
        if clusters:
            update = mk.SubscriptionUpdate(subscription_name=sub.name, clusters=clusters)
            self.write(marker_entry(UPDATE, update.SerializeToString()))

    def write(self, entry: bytes) -> None:
        if self.topic.closed:
            return

        def done(position: Position | None, exc: BaseException | None) -> None:
            if exc is not None:
                log.warning("replicated subscriptions of %s: marker not stored: %s", self.topic.name, exc)

        self.topic.ledger.add_entry(self.topic.stamp_broker_entry(entry), done)
