"""A subscription: a named cursor on a topic, its dispatcher and its consumers.

It meets ``AnySubscription`` (kinds.py), as the non-persistent subscription does."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from google.protobuf.message import DecodeError

from broker.dispatch.base import Dispatcher
from broker.dispatch.factory import persistent_dispatcher
from broker.errors import ConsumerBusyError, ExclusiveConsumerBusyError, NotAllowedError, ServiceNotReadyError
from broker.metadata.policy_table import MAX_CONSUMERS, MAX_CONSUMERS_PER_SUBSCRIPTION
from broker.protocol import ack_sets, commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol import pulsar_markers_pb2 as mk
from broker.protocol.errors import ProtocolError
from broker.service.consumer import DepartedOut
from broker.service.dispatch_context import persistent_context
from broker.service.rate_limits import DispatchRate
from broker.service.replicated_subscriptions import REPLICATED_PROPERTY, SnapshotCache, marker_payload
from broker.transactions.model import TxnID
from broker.transactions.pending_ack import PendingAcks, TxnAcks
from managed_ledger import ManagedCursor, Position

if TYPE_CHECKING:
    from broker.service.consumer import Consumer
    from broker.service.kinds import AnySubscription
    from broker.service.topic import PersistentTopic

log = logging.getLogger(__name__)
Sub = pb.CommandSubscribe


_new_tuple = tuple.__new__  # a NamedTuple without its keyword-taking __new__ (per acknowledged id)
_I64_LIMIT = 1 << 63


def position_of(mid: pb.MessageIdData) -> Position:
    ledger_id, entry_id = mid.ledgerId, mid.entryId
    if ledger_id >= _I64_LIMIT or entry_id >= _I64_LIMIT:  # negative ids, as uint64 on the wire
        return Position(commands.from_u64(ledger_id), commands.from_u64(entry_id))
    return _new_tuple(Position, (ledger_id, entry_id))


def check_consumer_admission(sub: AnySubscription, consumer: Consumer) -> None:
    """Pulsar's checks before a consumer joins a subscription, for both kinds of topic."""
    members = sub.consumers
    active_type = sub.sub_type
    if members and active_type is not None and active_type != consumer.sub_type:
        raise ConsumerBusyError(  # Pulsar's checkForConsumerCompatibilityErrorWithDispatcher
            "Subscription is of different type. Active subscription type of "
            f"'{Sub.SubType.Name(active_type)}' is different than the connecting consumer's type "
            f"'{Sub.SubType.Name(consumer.sub_type)}'.")
    if consumer.sub_type == Sub.Exclusive and members:  # (server_cnx checks the holder's connection is alive)
        raise ExclusiveConsumerBusyError("Exclusive consumer is already connected", next(iter(members)).cnx)
    service, name = sub.topic.service, sub.topic.name
    if 0 < service.policies.get(name, MAX_CONSUMERS_PER_SUBSCRIPTION) <= len(members):
        raise ConsumerBusyError("Subscription reached max consumers limit")
    if 0 < service.policies.get(name, MAX_CONSUMERS) <= sum(len(s.consumers) for s in sub.topic.subscriptions.values()):
        raise ConsumerBusyError("Topic reached max consumers limit")


def cursor_activity(topic: PersistentTopic, cursor: ManagedCursor, reading: bool) -> bool:
    """Whether a cursor someone reads through (``reading``) should be active: not when it is
    backlogged, managedLedgerCursorBackloggedThreshold entries or more behind (0 = never)."""
    threshold = topic.service.config.managedLedgerCursorBackloggedThreshold
    if not reading or threshold <= 0:
        return reading
    ledger = topic.ledger
    read, last = cursor.read_position, ledger.last_confirmed_entry
    return read > last or ledger.count_entries_between(read, last) < threshold


class Subscription:
    # Nothing is dropped: what no consumer can take now waits in the backlog.
    msg_dropped = 0

    def __init__(self, topic: PersistentTopic, name: str, cursor: ManagedCursor, durable: bool) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        # Active (keeping entries in the read cache) only while consumers read through it.
        cursor.set_active(False)
        self.durable = durable
        self.sub_type: int | None = None
        self.dispatcher: Dispatcher | None = None
        # A seek disconnected the consumers; keep a non-durable subscription for their return.
        self.seek_pending = False
        self.last_acked = 0.0
        self.last_mark_delete_advanced = 0.0
        self.msg_ack_counter = 0
        self.departed = DepartedOut()
        service = topic.service
        # A replicated subscription (replicate_subscription_state): its position is mirrored to
        # the topic's other clusters through the snapshots it reads (replicated_subscriptions.py).
        self.snapshots: SnapshotCache | None = None
        if durable and cursor.properties.get(REPLICATED_PROPERTY):
            self.snapshots = SnapshotCache(service.config.replicatedSubscriptionsSnapshotMaxCachedPerSubscription)
        # Transactional acks waiting for their transaction (transactions enabled, or some stored).
        self.pending_acks: PendingAcks | None = None
        # Transactions whose acknowledgements ended here: committed (True), aborted (False); OpenTelemetry's
        # pulsar.broker.transaction.pending.ack.store.transaction.count.
        self.txns_ended = {True: 0, False: 0}
        if service.config.transactionCoordinatorEnabled or any(map(PendingAcks.is_own_property, cursor.properties)):
            self.pending_acks = PendingAcks.from_properties(cursor.properties)
        # Dispatch rate limits: the topic's (shared by its subscriptions), this subscription's and, when
        # the broker sets one, the broker's (shared by every subscription), in that order (the metrics go by it).
        policies = service.policies
        rates: tuple[DispatchRate, ...] = (
            topic.dispatch_rate,
            DispatchRate(service.metadata, lambda: policies.subscription_dispatch_rate(topic.name, name).as_tuple(),
                         published=topic.published_totals))
        if service.broker_dispatch_rate is not None:
            rates += (service.broker_dispatch_rate,)
        self.dispatch_rates = rates

    def add_dispatch_rate(self, rate: DispatchRate) -> None:
        """One more limit over what this subscription dispatches (the broker's, set while it runs), last."""
        self.dispatch_rates += (rate,)
        if self.dispatcher is not None:
            self.dispatcher.context_changed(dataclasses.replace(self.dispatcher.context, rates=self.dispatch_rates))

    @property
    def replicated(self) -> bool:
        return self.snapshots is not None

    def set_replicated(self, enabled: bool = True) -> bool:
        """Make this durable subscription replicated, or no longer (saved with its cursor). False
        when it cannot be: a non-durable one, or enableReplicatedSubscriptions is off."""
        cfg = self.topic.service.config
        if not self.durable or (enabled and not cfg.enableReplicatedSubscriptions):
            return False
        properties = dict(self.cursor.properties)
        if enabled:
            if self.snapshots is None:
                self.snapshots = SnapshotCache(cfg.replicatedSubscriptionsSnapshotMaxCachedPerSubscription)
            properties[REPLICATED_PROPERTY] = 1
        else:
            self.snapshots = None
            properties.pop(REPLICATED_PROPERTY, None)
        if properties != self.cursor.properties:
            self.cursor.set_properties(properties)
        return True

    def snapshot_read(self, position: Position, entry: bytes) -> None:
        """The dispatcher read a snapshot marker at ``position``; one that cannot be read is
        skipped (as Pulsar's dispatchers do), not raised into the dispatcher's read."""
        if self.snapshots is not None:
            try:
                snapshot = mk.Snapshot.FromString(marker_payload(entry))
            except (DecodeError, ProtocolError) as exc:
                log.warning("subscription %s on %s: snapshot marker at %s not understood (%s); skipped",
                            self.name, self.topic.name, position, exc)
                return
            self.snapshots.add(position, list(snapshot.clusters))

    def mark_delete_moved(self) -> None:
        """The mark-delete moved (acks, or markers the dispatcher acknowledged itself)."""
        if self.snapshots is not None:
            controller = self.topic.replicated_subscriptions
            if controller is not None:
                controller.subscription_moved(self)

    @property
    def batch_ack_sets(self) -> Mapping[Position, list[int]]:
        """Batch-index acks: entry -> ack_set words, bit i set = message i of the batch still
        unacked. Only partly acknowledged entries; kept by the cursor (durable with its state)."""
        return self.cursor.batch_acks

    @property
    def consumers(self) -> list[Consumer]:
        # The dispatcher knows its members as dispatch.context.Consumer; every one of them was
        # added by add_consumer, which takes a service Consumer.
        return cast("list[Consumer]", self.dispatcher.consumers) if self.dispatcher is not None else []

    # -- consumers ---------------------------------------------------------------------------------
    def _make_dispatcher(self, consumer: Consumer) -> Dispatcher:
        return persistent_dispatcher(consumer.sub_type, consumer.key_shared_meta, persistent_context(self),
                                     self.cursor)

    def add_consumer(self, consumer: Consumer) -> None:
        if self.topic.closed:  # unloaded or deleted while the consumer was being set up: it retries
            raise ServiceNotReadyError(f"Topic {self.topic.name} is being closed; retry")
        check_consumer_admission(self, consumer)
        d = self.dispatcher
        if d is None or self.sub_type != consumer.sub_type or (d.renew_when_empty and not d.consumers):
            if d is not None:
                d.close()
                # The old dispatcher may hold entries it read but never delivered (its replay set):
                # start the new one from the mark-delete so every unacknowledged entry comes again.
                self.cursor.rewind()
            d = self._make_dispatcher(consumer)
            self.dispatcher = d
            self.sub_type = consumer.sub_type
        d.validate_new_consumer(consumer)
        self.seek_pending = False
        d.add_consumer(consumer)
        self.cursor.touch()
        self.update_cursor_activity()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.departed.add(consumer)
        consumer.closed = True
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)
        self.cursor.touch()  # (subscription expiry counts from here)
        self.cursor.save_now()  # its acks reach the disk now, not at the next mark-delete tick
        self.update_cursor_activity()
        if not self.consumers and not self.durable and not self.seek_pending:
            self.topic.remove_subscription(self)

    def update_cursor_activity(self) -> None:
        """The cursor is active (the read cache keeps entries for it) while consumers read through
        it and it is not backlogged: fewer than managedLedgerCursorBackloggedThreshold entries
        unread, as in Pulsar. A backlogged reader would otherwise pin everything it has not read
        yet in the cache, at the expense of the readers at the tail; it reads from disk until it
        catches up."""
        self.cursor.set_active(cursor_activity(self.topic, self.cursor, bool(self.consumers)))

    def drop_if_unused(self) -> None:
        """A reader's subscription whose consumer never joined (it went away while subscribing)."""
        if not self.consumers and not self.durable:
            self.topic.remove_subscription(self)

    # -- acknowledgements --------------------------------------------------------------------------
    def acknowledge(self, consumer: Consumer, cumulative: bool, message_ids: Sequence[pb.MessageIdData]) -> None:
        """An ACK: an id with an ack_set acknowledges only part of its batch."""
        if cumulative:
            if len(message_ids) == 1:  # Pulsar ignores a cumulative ack naming several ids
                mid = message_ids[0]
                pos = position_of(mid)
                if mid.ack_set and any(mid.ack_set):
                    # Everything before the entry is acked; the entry itself only partly.
                    self.ack_cumulative(consumer, self.topic.ledger.previous_position(pos))
                    self.ack_partial(consumer, pos, self._ack_words(mid.ack_set))
                else:
                    self.ack_cumulative(consumer, pos)
            return
        positions: list[Position] = []
        # Acks held by open transactions (usually none: then not asked per id).
        pending = self.pending_acks if self.pending_acks else None
        for mid in message_ids:
            pos = position_of(mid)
            if pending is not None and pending.holds(pos):
                continue  # acknowledged in an open transaction: that transaction decides
            ack_set = mid.ack_set
            if ack_set and any(ack_set):
                self.ack_partial(consumer, pos, self._ack_words(ack_set))
            else:
                positions.append(pos)
        if positions:
            self.ack_individual(consumer, positions)

    def _ack_words(self, ack_set: Sequence[int]) -> list[int]:
        """A client's ack_set words, cut to what a batch can hold: no batch holds more messages than its
        largest frame fits (each takes a 4-byte size and 2 bytes of metadata at least), so words past that
        are no messages, only memory (a client sent 4 MiB sets)."""
        most_words = -(-self.topic.service.config.maxMessageSize // 6 // 64)
        return list(ack_set[:most_words])

    def ack_partial(self, consumer: Consumer, pos: Position, ack_set: list[int]) -> None:
        """A batch-index ack: ``ack_set`` has a bit set for every message still unacknowledged."""
        if self.cursor.is_acked(pos):
            return
        merged = ack_sets.merged(self.batch_ack_sets.get(pos), ack_set)
        remaining = ack_sets.unacked(merged)
        if not remaining:
            self.ack_individual(consumer, [pos])
            return
        self.cursor.set_batch_ack(pos, merged)
        for c in self.consumers:
            c.set_pending_messages(pos, remaining)
        if self.dispatcher is not None:
            # Fewer unacked messages: a consumer or the subscription blocked on its unacked limit
            # may be under half of it now (Pulsar's individualAckNormal: addAndGetUnAckedMsgs).
            self.dispatcher.trigger_read()

    def ack_individual(self, consumer: Consumer, positions: list[Position]) -> None:
        for p in consumer.remove_pending_many(positions):
            # Acks for messages delivered to another consumer of the subscription are valid.
            for other in self.consumers:
                if other is not consumer and other.remove_pending(p):
                    break
        before = self.cursor.mark_delete_position
        self.cursor.delete(positions)
        self._after_ack(consumer, positions, before)

    def ack_cumulative(self, consumer: Consumer, position: Position) -> None:
        if self.sub_type in (Sub.Shared, Sub.Key_Shared):
            return  # Pulsar ignores cumulative acks on shared subscriptions
        consumer.remove_pending_up_to(position)
        before = self.cursor.mark_delete_position
        self.cursor.mark_delete(position)
        self._after_ack(consumer, [position], before)

    def _after_ack(self, consumer: Consumer, positions: list[Position], before: Position) -> None:
        now = time.time()
        consumer.last_acked = now
        self.last_acked = now
        self.msg_ack_counter += len(positions)
        consumer.msg_ack_counter += len(positions)
        if self.cursor.mark_delete_position != before:
            self.last_mark_delete_advanced = now
            self.mark_delete_moved()
        if self.dispatcher is not None:
            self.dispatcher.on_acked(positions)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if self.dispatcher is not None:
            self.dispatcher.redeliver(consumer, positions)

    # -- transactional acknowledgements (broker/transactions/pending_ack.py) -----------------------
    async def acknowledge_in_txn(self, consumer: Consumer, txn: TxnID, cumulative: bool,
                                 message_ids: Sequence[pb.MessageIdData]) -> None:
        """An ACK with a transaction id: held as pending until the transaction ends (saved with
        the cursor before the answer). TransactionConflict when it collides."""
        pending = self.pending_acks
        if pending is None:
            raise NotAllowedError("Transactions are not enabled.")
        if cumulative:
            if self.sub_type in (Sub.Shared, Sub.Key_Shared):
                raise NotAllowedError("Cumulative acknowledge with transaction is only supported by "
                                      "Exclusive and Failover subscriptions")
            if len(message_ids) != 1:
                raise NotAllowedError("Cumulative acknowledge with transaction takes one message id")
            pos = position_of(message_ids[0])
            pending.add_cumulative(txn, pos, self.cursor.mark_delete_position)
            consumer.remove_pending_up_to(pos)
        else:
            acks = [(position_of(m), self._ack_words(m.ack_set) if m.ack_set and any(m.ack_set) else None,
                     m.batch_size if m.HasField("batch_size") else 0) for m in message_ids]
            pending.add_individual(txn, acks, self.cursor.is_acked, self.cursor.batch_acks.get)
            # Batch indexes held by the transaction no longer count as unacked (Pulsar's
            # individualAckWithTransaction subtracts them at once): a consumer blocked on its unacked
            # limit is unblocked now, not at the commit.
            partial = [(pos, ack_set) for pos, ack_set, _ in acks if ack_set is not None]
            for pos, ack_set in partial:
                remaining = ack_sets.unacked(ack_sets.merged(self.batch_ack_sets.get(pos), ack_set))
                for c in self.consumers:
                    c.lower_pending_messages(pos, remaining)
            if partial and self.dispatcher is not None:
                self.dispatcher.trigger_read()
            held = [pos for pos, ack_set, _ in acks if ack_set is None]
            for pos in held:
                if not consumer.remove_pending(pos):
                    for other in self.consumers:
                        if other is not consumer and other.remove_pending(pos):
                            break
            if held and self.dispatcher is not None:
                self.dispatcher.on_acked(held)  # (no longer pending on anyone, not to be replayed)
        await self._save_pending()

    async def _save_pending(self) -> None:
        if self.pending_acks is None or not self.durable:
            return
        kept = {k: v for k, v in self.cursor.properties.items() if not PendingAcks.is_own_property(k)}
        self.cursor.set_properties({**kept, **self.pending_acks.to_properties()})
        await self.cursor.flush()

    async def end_txn(self, txn: TxnID, commit: bool, low_watermark: int | None = None) -> None:
        """END_TXN_ON_SUBSCRIPTION: the transaction's acks become real (commit) or are dropped
        and their messages delivered again (abort). ``low_watermark`` (Pulsar's): every
        transaction of ``txn``'s coordinator at or below it has ended, so acks still pending for
        one of them (its end never came) are dropped as an abort would, as Pulsar's
        PendingAckHandleImpl does."""
        pending = self.pending_acks
        if pending is not None:
            pending.low_watermarks[txn.most] = (low_watermark if low_watermark is not None
                                                else pending.low_watermarks.get(txn.most, -1))
        if pending is not None and low_watermark is not None:
            for stale in [t for t in pending.by_txn if t.most == txn.most and t.least <= low_watermark and t != txn]:
                log.warning("%s/%s: transaction %s is below its coordinator's low watermark %d: its acks dropped",
                            self.topic.name, self.name, stale, low_watermark)
                await self.end_txn(stale, commit=False)
        acks = pending.end(txn) if pending is not None else None
        if acks is None:
            return
        started = time.perf_counter()
        try:
            await self._apply_end(acks, commit)
        except Exception:
            self._count_end(commit, started, failed=True)
            raise
        self.txns_ended[commit] += 1
        self._count_end(commit, started, failed=False)

    def _count_end(self, commit: bool, started: float, *, failed: bool) -> None:
        """pulsar_txn_tp_*: one transaction's acknowledgements ended here."""
        transactions = self.topic.service.transactions
        if transactions is not None:
            transactions.pending_ack_stats.done(self.topic.full_name, self.name, commit, started, failed=failed)

    async def _apply_end(self, acks: TxnAcks, commit: bool) -> None:
        """A transaction's acks become real (commit), or their messages go out again (abort)."""
        cursor = self.cursor
        if commit:
            before = cursor.mark_delete_position
            whole = [p for p, ack_set in acks.individual.items() if ack_set is None]
            for pos, ack_set in acks.individual.items():
                if ack_set is not None and not cursor.is_acked(pos):
                    merged = ack_sets.merged(cursor.batch_acks.get(pos), ack_set)
                    if any(merged):  # (some message still unacknowledged)
                        cursor.set_batch_ack(pos, merged)
                    else:
                        whole.append(pos)
            if whole:
                cursor.delete(whole)
            if acks.cumulative is not None:
                cursor.mark_delete(acks.cumulative)
            self.msg_ack_counter += len(acks.individual)
            if cursor.mark_delete_position != before:
                self.last_mark_delete_advanced = time.time()
                self.mark_delete_moved()
            if self.dispatcher is not None:
                self.dispatcher.on_acked(whole + ([acks.cumulative] if acks.cumulative is not None else []))
        elif self.dispatcher is not None:
            self.dispatcher.redeliver_positions(sorted(p for p, a in acks.individual.items() if a is None))
        await self._save_pending()

    # -- cursor moves ------------------------------------------------------------------------------
    async def seek(self, message_id: pb.MessageIdData | None, publish_time: int) -> None:
        """SEEK: (-1,-1) or less is the earliest entry, an id past the end the next one written."""
        ledger = self.topic.ledger
        if message_id is not None:
            lid = commands.from_u64(message_id.ledgerId)
            eid = commands.from_u64(message_id.entryId)
            if lid < 0 or eid < 0:
                pos = ledger.first_position
            elif Position(lid, eid) > ledger.last_confirmed_entry:
                pos = ledger.next_valid_position(ledger.last_confirmed_entry)
            else:
                pos = Position(lid, eid)
        else:
            pos = await self.topic.find_position_by_time(publish_time)
        self.reset_cursor(pos)

    async def unsubscribed(self) -> None:
        await self.topic.delete_subscription(self)

    @property
    def last_mark_delete(self) -> Position | None:
        md = self.cursor.mark_delete_position
        return md if md.ledger_id >= 0 else None

    def disconnect_consumers(self) -> None:
        """Tell every consumer to reconnect (Pulsar does this around seek and reset)."""
        for c in list(self.consumers):
            c.cnx.consumer_closed_by_broker(c)

    def reset_cursor(self, position: Position, ack_set: list[int] | None = None) -> None:
        """SEEK: drop consumers (they come back with fresh permits), then move the cursor. ``ack_set``: the
        entry at ``position`` is a batch whose messages with clear bits count as acknowledged (a reset to a
        message inside a batch): it is dispatched with that ack_set, so the client skips them."""
        self.seek_pending = not self.durable
        self.disconnect_consumers()
        if self.dispatcher is not None:
            # A read parked at the old position would be served from the new one by the reset and
            # its entries dropped as stale: the cursor would skip them. Cancel it first.
            self.dispatcher.cancel_reads()
        self.cursor.reset(position, ack_set)
        if self.dispatcher is not None:
            self.dispatcher.on_cursor_reset()

    @property
    def subscription_properties(self) -> Mapping[str, str]:
        """SUBSCRIBE.subscription_properties of the SUBSCRIBE that created it, or set over REST: the cursor's
        (Pulsar's cursorProperties), so they survive unloads and restarts."""
        return self.cursor.cursor_properties

    async def set_subscription_properties(self, properties: Mapping[str, str]) -> None:
        await self.cursor.set_cursor_properties(properties)

    @property
    def backlog(self) -> int:
        return self.cursor.number_of_entries_in_backlog()

    def type_name(self) -> str:
        return self.dispatcher.type_name if self.dispatcher is not None else "Exclusive"

    def close(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.close()
