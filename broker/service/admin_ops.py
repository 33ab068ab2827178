"""Admin operations on subscriptions and topics: skip, reset cursor, expire, peek, unload, delete.

Built only on the public surface of the service layer (Subscription.reset_cursor,
disconnect_consumers, the ManagedCursor API, PersistentTopic.find_position_by_time), so the
dispatchers stay the only owners of dispatch state. Semantics follow Pulsar's
PersistentSubscription / PersistentMessageExpiryMonitor:

- skip n / skip all / expire move the mark-delete position forward. Entries already sent to a
  consumer stay with it (its later ack is simply ignored), exactly as in Pulsar: nothing in flight
  is recalled, and the dispatcher reads on from the moved position.
- reset cursor (by time or id) is a SEEK: consumers are disconnected and come back at the new place.
- analyze backlog reads the subscription's unacknowledged entries (a reader of its own, the cursor
  untouched) and counts them, as PersistentSubscription.analyzeBacklog does.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from broker.errors import BrokerError, ConsumerBusyError, SubscriptionNotFoundError
from broker.protocol import ack_sets
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import entry_meta
from managed_ledger import Entry, ManagedCursor, ManagedLedgerError, Position

if TYPE_CHECKING:
    from broker.service.broker_service import AnyTopic
    from broker.service.nonpersistent import NonPersistentSubscription, NonPersistentTopic
    from broker.service.subscription import Subscription
    from broker.service.topic import PersistentTopic

log = logging.getLogger(__name__)


class SubscriptionExistsError(BrokerError):
    """Creating a subscription that is already there (Pulsar answers 409 Conflict)."""


class SubscriptionBusyError(ConsumerBusyError):
    """Deleting a subscription that still has consumers, without force (Pulsar: 412)."""


class EntryNotFoundError(BrokerError):
    """Peek past the end of a subscription's backlog (Pulsar: 404 "Message not found")."""


# -- finding subscriptions ------------------------------------------------------------------------

def backlog_of(topic: PersistentTopic, name: str) -> int:
    """Entries in the backlog of subscription ``name`` (live, or a stored durable cursor)."""
    cursor = topic.subscription_cursor(name)
    return cursor.number_of_entries_in_backlog() if cursor is not None else 0


async def subscription(topic: PersistentTopic, name: str) -> Subscription:
    """The subscription ``name``; a stored durable cursor gets its Subscription object now (as Pulsar
    loads every cursor with the topic). SubscriptionNotFoundError when there is neither."""
    sub = topic.subscriptions.get(name)
    if sub is not None:
        return sub
    if name not in topic.ledger.cursors:  # (Pulsar's admin API words)
        raise SubscriptionNotFoundError(f"Subscription {name} not found for topic {topic.full_name}")
    # initial position and start id do not matter: the stored cursor is reopened as it is
    return await topic.get_or_create_subscription(name, True, pb.CommandSubscribe.Latest, None)


async def live_subscription(topic: NonPersistentTopic, name: str) -> NonPersistentSubscription:
    """A non-persistent topic's subscription ``name`` (only live ones: nothing is stored)."""
    sub = topic.subscriptions.get(name)
    if sub is None:
        raise SubscriptionNotFoundError(f"Subscription {name} not found")
    return sub


async def create_subscription(topic: PersistentTopic, name: str, start: Position | None,
                              properties: Mapping[str, str] | None = None) -> Subscription:
    """A durable subscription at ``start`` (a message id, inclusive), or at the end when None, with its
    ``properties`` stored."""
    if name in topic.subscriptions or name in topic.ledger.cursors:
        raise SubscriptionExistsError(f"Subscription {name} already exists for topic {topic.full_name}")
    sub = await topic.get_or_create_subscription(name, True, pb.CommandSubscribe.Latest, None, properties,
                                                 by_client=False)
    if start is not None:
        sub.reset_cursor(clamp_start(topic, start))
    return sub


async def delete_subscription(topic: PersistentTopic, name: str, force: bool) -> None:
    sub = await subscription(topic, name)
    if sub.consumers and not force:
        raise SubscriptionBusyError("Subscription has active connected consumers")  # (Pulsar's words)
    sub.disconnect_consumers()
    await topic.delete_subscription(sub)


# -- moving cursors -------------------------------------------------------------------------------

def clamp_start(topic: PersistentTopic, start: Position) -> Position:
    """Where a reset to message id ``start`` reads from, as SEEK does: (-1,-1) is the earliest
    entry, an id past the end (Long.MAX for "latest") is the next entry to be written."""
    ledger = topic.ledger
    if start.ledger_id < 0 or start.entry_id < 0:
        return ledger.first_position
    if start > ledger.last_confirmed_entry:
        return ledger.next_valid_position(ledger.last_confirmed_entry)
    return start


def skip_all(sub: Subscription) -> None:
    """Acknowledge everything written so far (Pulsar's clear-backlog)."""
    sub.cursor.clear_backlog()
    _acknowledged(sub)


def skip(sub: Subscription, n: int) -> None:
    """Acknowledge the next ``n`` unacknowledged entries."""
    if n < 0:
        raise ValueError("number of messages to skip must be >= 0")
    sub.cursor.skip_entries(n)
    _acknowledged(sub)


def _acknowledged(sub: Subscription) -> None:
    """The dispatcher hears of entries an admin call acknowledged as of acks (Pulsar's clearBacklogComplete and
    skipEntriesComplete call its afterAckMessages): one paused on its acknowledgement holes may resume."""
    if sub.dispatcher is not None:
        sub.dispatcher.on_acked([])


async def reset_by_time(topic: PersistentTopic, sub: Subscription, timestamp_ms: int) -> Position:
    """Rewind or advance to the first entry published at or after ``timestamp_ms``."""
    position = await topic.find_position_by_time(timestamp_ms)
    sub.reset_cursor(position)
    return position


async def reset_to(topic: PersistentTopic, sub: Subscription, start: Position, excluded: bool = False,
                   batch_index: int = -1) -> Position:
    """Reset to message id ``start`` (Pulsar's internalResetCursorOnPosition): the subscription reads from it
    again, with ``excluded`` from the one after it. With a ``batch_index`` (>= 0) inside a batch entry, the
    messages of the batch before that index count as acknowledged (with ``excluded``, the one at it too), so a
    consumer gets the batch from there on: the ack set Pulsar's calculatePositionAckSet gives, the same one an
    expiry by message id acts on (``expiry_target``). An index that leaves nothing of the batch moves on to the
    next entry with ``excluded``; without it Pulsar records an empty ack set, which is dispatched as none, so
    the whole batch comes again: here, a reset to the entry. An id that is no stored entry (or a batch size that
    cannot be read) ignores the index, as Pulsar's getEntryBatchSize answers 0 then."""
    position = clamp_start(topic, start)
    size = await batch_size_at(topic, position) if batch_index >= 0 and position == start else 0
    target = expiry_target(position, batch_index, size, excluded)
    if target.ack_set is None and target.position != position and position <= topic.ledger.last_confirmed_entry:
        position = topic.ledger.next_valid_position(position)  # (excluded: the entry after it)
    sub.reset_cursor(position, target.ack_set)
    return position


async def expire_cursor(topic: PersistentTopic, cursor: ManagedCursor, older_than_s: float,
                        now_ms: int | None = None) -> int:
    """Acknowledge every entry published more than ``older_than_s`` ago; returns how many entries
    left the backlog. The log is searched by publish time, so the cost is O(log entries)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff_ms = now_ms - int(older_than_s * 1000)
    first_live = await topic.find_position_by_time(cutoff_ms)
    newest_expired = topic.ledger.previous_position(first_live)
    if cursor.is_closed or newest_expired <= cursor.mark_delete_position \
            or newest_expired > topic.ledger.last_confirmed_entry:
        return 0
    before = cursor.number_of_entries_in_backlog()
    try:
        cursor.mark_delete(newest_expired)
    except ManagedLedgerError as exc:  # cursor closed or log trimmed while we searched
        log.debug("expiry on %s/%s skipped: %s", topic.full_name, cursor.name, exc)
        return 0
    return max(0, before - cursor.number_of_entries_in_backlog())


class ExpiryTarget(NamedTuple):
    """Where an expiry up to a message id moves a cursor: every entry before ``position``, and ``position`` too,
    but for the messages of its batch that ``ack_set`` leaves unacknowledged (its set bits; None: all of it)."""

    position: Position
    ack_set: list[int] | None


def expiry_target(message: Position, batch_index: int, batch_size: int, excluded: bool) -> ExpiryTarget:
    """Pulsar's calculatePositionAckSet, which the expiry by message id acts on. ``batch_size``: the messages in the
    entry at ``message`` (0 when no batch index was given or the entry could not be read).

    Pulsar's ``isExcluded`` (``excluded`` in the JSON) expires one step further, not one less: without a batch the
    entry at ``message`` is expired, with ``excluded`` the entry after it as well (Pulsar takes the position's
    next). Within a batch, the messages before ``batch_index`` are expired, with ``excluded`` the one at it as well;
    the whole entry when that leaves none of them (with ``excluded``: the next entry too), or when ``batch_index``
    is 0 without ``excluded``."""
    after = Position(message.ledger_id, message.entry_id + 1)
    if batch_size <= 0:
        return ExpiryTarget(after if excluded else message, None)
    if not excluded and batch_index < 1:
        return ExpiryTarget(message, None)
    expired = max(batch_index + 1 if excluded else batch_index, 0)
    if expired >= batch_size:
        return ExpiryTarget(after if excluded else message, None)
    return ExpiryTarget(message, ack_sets.words_between(expired, batch_size))


async def batch_size_at(topic: PersistentTopic, position: Position) -> int:
    """The messages stored in the entry at ``position`` (1 for one not in a batch); 0 when it cannot be read,
    as Pulsar's getEntryBatchSize answers."""
    try:
        entry = await topic.ledger.read_entry(position)
    except ManagedLedgerError:
        return 0
    return entry_meta(entry.data).num_messages


def expire_to(topic: PersistentTopic, cursor: ManagedCursor, target: ExpiryTarget) -> int | None:
    """Expire every message up to ``target`` (PersistentMessageExpiryMonitor.expireMessages(Position)): how many
    entries left the backlog; None when ``target`` is past the last entry (Pulsar refuses it: 409). A target that
    is no stored entry expires up to the newest stored entry before it; one already acknowledged changes nothing.

    (Pulsar honours the batch's ack_set only for an entry of a closed ledger: for one of the ledger being written
    it expires the whole entry, having found it again by a search. Here the ack_set is honoured wherever it is.)"""
    ledger = topic.ledger
    position, ack_set = target
    if position > ledger.last_confirmed_entry:
        return None
    if ledger.count_entries_between(position, position) == 0:
        position, ack_set = ledger.previous_position(ledger.next_valid_position(position)), None
    if cursor.is_closed or position <= cursor.mark_delete_position:
        return 0
    before = cursor.number_of_entries_in_backlog()
    try:
        if ack_set is None:
            cursor.mark_delete(position)
        else:
            cursor.mark_delete(ledger.previous_position(position))
            # messages acknowledged already stay so
            ack_set = ack_sets.merged(cursor.batch_acks.get(position), ack_set)
            if any(ack_set):
                cursor.set_batch_ack(position, ack_set)
            else:
                cursor.mark_delete(position)
    except ManagedLedgerError as exc:  # cursor closed meanwhile (Pulsar's markDeleteFailed: logged only)
        log.debug("expiry of %s/%s to %s skipped: %s", topic.full_name, cursor.name, position, exc)
        return 0
    return max(0, before - cursor.number_of_entries_in_backlog())


# -- analyzing a backlog --------------------------------------------------------------------------

@dataclass(frozen=True)
class BacklogScanLimits:
    """How far one analysis reads (Pulsar's subscriptionBacklogScanMaxEntries and ...MaxTimeMs, and the read size,
    dispatcherMaxReadBatchSize)."""

    max_entries: int
    max_time_s: float
    read_batch: int


@dataclass(frozen=True)
class BacklogAnalysis:
    """What an analysis of a subscription's backlog found (Pulsar's AnalyzeBacklogResult). With no entry filters,
    every entry is accepted."""

    entries: int
    messages: int
    first: Position | None
    last: Position | None
    aborted: bool  # a limit stopped it before the end of the backlog


async def analyze_backlog(topic: PersistentTopic, cursor: ManagedCursor, start: Position | None,
                          limits: BacklogScanLimits) -> BacklogAnalysis:
    """Count the entries and messages the subscription has not acknowledged, from ``start`` (else its mark-delete
    position) on, through a reader of its own. Like Pulsar's scan it stops, aborted, at the ``max_entries``-th
    unacknowledged entry (which it leaves out) or once ``max_time_s`` has passed."""
    ledger = topic.ledger
    after = cursor.mark_delete_position
    if start is not None and start > after:
        after = ledger.previous_position(start)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.max_time_s
    reader = ledger.new_non_durable_cursor(after, f"__analyze-backlog-{uuid.uuid4().hex[:12]}")
    entries = messages = 0
    remaining = limits.max_entries
    first: Position | None = None
    last: Position | None = None
    try:
        while reader.has_more_entries():
            if loop.time() > deadline:
                return BacklogAnalysis(entries, messages, first, last, aborted=True)
            for entry in await reader.read_entries_async(limits.read_batch):
                if cursor.is_acked(entry.position):
                    continue
                remaining -= 1
                if remaining <= 0:
                    return BacklogAnalysis(entries, messages, first, last, aborted=True)
                if first is None:
                    first = entry.position
                last = entry.position
                entries += 1
                messages += entry_meta(entry.data).num_messages
    finally:
        await reader.close()
    return BacklogAnalysis(entries, messages, first, last, aborted=False)


# -- reading --------------------------------------------------------------------------------------

async def peek(topic: PersistentTopic, sub: Subscription, n: int) -> Entry:
    """The n-th (1-based) entry after the mark-delete position, acknowledged or not (Pulsar's
    peekNthMessage counts individually acknowledged entries too)."""
    if n < 1:
        raise ValueError("message position must be >= 1")
    ledger = topic.ledger
    last = ledger.last_confirmed_entry
    position = sub.cursor.mark_delete_position
    first = ledger.next_valid_position(position)
    if n > ledger.count_entries_between(first, last):
        raise EntryNotFoundError("Message not found")
    nth = ledger.nth_position(first, n - 1)  # (not n steps: a consumer role may ask for the n-millionth)
    assert nth is not None  # (n entries are stored from first)
    return await ledger.read_entry(nth)


async def examine(topic: PersistentTopic, from_latest: bool, n: int) -> Entry:
    """The n-th (1-based) stored entry counted from the oldest, or from the newest with
    ``from_latest``; n past the end gives the entry at that end (Pulsar's examineMessage)."""
    ledger = topic.ledger
    first = ledger.first_position
    total = ledger.count_entries_between(first, ledger.last_confirmed_entry)  # (not adds still in flight)
    if total <= 0:
        raise EntryNotFoundError("Could not examine messages due to the total message is zero")
    n = min(max(n, 1), total)
    index = total - n if from_latest else n - 1  # 0-based from the oldest
    position = ledger.nth_position(first, index)  # (not index steps: n may be in the millions)
    assert position is not None  # (index < total)
    return await ledger.read_entry(position)


# -- clients --------------------------------------------------------------------------------------

def disconnect_clients(topic: AnyTopic) -> None:
    """Close every producer and consumer of the topic on the client side (they reconnect)."""
    # Waiting producers first: removing the exclusive holder would otherwise grant the slot to them.
    for producer, _ in list(topic.waiting_producers):
        producer.cnx.producer_closed_by_broker(producer.producer_id)
        topic.remove_producer(producer)
    disconnect_producers(topic)
    subs: list[Subscription | NonPersistentSubscription] = [*topic.subscriptions.values()]
    for sub in subs:
        sub.disconnect_consumers()


def disconnect_producers(topic: AnyTopic) -> None:
    for producer in list(topic.producers.values()):
        producer.cnx.producer_closed_by_broker(producer.producer_id)
        topic.remove_producer(producer)


def has_clients(topic: AnyTopic) -> bool:
    return bool(topic.producers or topic.waiting_producers
                or any(s.consumers for s in topic.subscriptions.values()))


def busy_reason(topic: AnyTopic) -> str:
    """Why a topic with clients is not deleted, in Pulsar's words (its usage count: producers and consumers)."""
    count = len(topic.producers) + sum(len(s.consumers) for s in topic.subscriptions.values())
    return f"Topic has {count} connected producers/consumers"


# -- expiry statistics ----------------------------------------------------------------------------

@dataclass
class ExpiryRecord:
    total_expired: int = 0
    last_expire_ms: int = 0


class ExpiryStats:
    """Per (topic, subscription): entries expired by TTL or by admin request (msgRateExpired,
    totalMsgExpired, lastExpireTimestamp in stats and metrics)."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], ExpiryRecord] = {}

    def record(self, topic: str, sub: str, expired: int, now_ms: int) -> None:
        if expired <= 0:
            return
        rec = self._records.setdefault((topic, sub), ExpiryRecord())
        rec.total_expired += expired
        rec.last_expire_ms = now_ms

    def get(self, topic: str, sub: str) -> ExpiryRecord:
        return self._records.get((topic, sub)) or ExpiryRecord()

    def forget(self, topic: str, sub: str | None = None) -> None:
        for key in [k for k in self._records if k[0] == topic and (sub is None or k[1] == sub)]:
            del self._records[key]
