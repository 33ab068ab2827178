"""The light stats path of /metrics and OpenTelemetry: a topic's counters read straight from the
live objects into slotted records, without the admin stats JSON (``stats.topic_stats`` builds a
dict per topic, subscription, consumer and producer, with ISO dates and metadata copies, and the
exposition then read a few numbers from it: a third of a 10,000-topic scrape).

The values are the same as the JSON's (same sampler rates, same counters, same backlog estimate);
``tests/unit/test_scrape_stats.py`` checks the two agree. Per-consumer and per-producer series are
off by default (their switches), so they still come from the JSON builders when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.admin.stats import ZERO, StatsSampler
from broker.service.backlog_quota import estimated_backlog_size

if TYPE_CHECKING:
    from broker.service.broker_service import AnyTopic
    from broker.service.kinds import AnySubscription
    from broker.service.nonpersistent import NonPersistentTopic
    from broker.service.topic import PersistentTopic

class SubscriptionCounters:
    """What the subscription series need of one subscription (a stored cursor has ``sub`` None)."""

    __slots__ = ("ack_rate", "backlog", "blocked", "bytes_out", "consumers", "drop_rate", "last_acked_ms",
                 "last_consumed_ms", "last_expire_ms", "last_flow_ms", "last_mark_delete_ms", "msg_out", "name",
                 "rate_expired", "rate_out", "rate_redeliver", "sub", "throughput_out", "total_expired", "unacked")

    def __init__(self, name: str, sub: AnySubscription | None) -> None:
        self.name = name
        self.sub = sub
        self.rate_out = self.throughput_out = self.rate_redeliver = self.ack_rate = self.rate_expired = 0.0
        self.msg_out = self.bytes_out = self.backlog = self.unacked = self.total_expired = self.consumers = 0
        self.last_expire_ms = self.last_acked_ms = self.last_consumed_ms = self.last_mark_delete_ms = 0
        self.last_flow_ms = 0
        self.blocked = False
        self.drop_rate: float | None = None  # non-persistent subscriptions only (Pulsar's msgDropRate)


class TopicCounters:
    """What the topic series need of one topic, its subscriptions' included."""

    __slots__ = ("average_msg_size", "backlog_size", "bytes_in", "bytes_out", "msg_in", "msg_out", "rate_in",
                 "rate_limited_times", "rate_out", "storage_size", "subscriptions", "throughput_in",
                 "throughput_out")

    def __init__(self) -> None:
        self.subscriptions: list[SubscriptionCounters] = []
        self.rate_in = self.throughput_in = self.rate_out = self.throughput_out = self.average_msg_size = 0.0
        self.msg_in = self.bytes_in = self.msg_out = self.bytes_out = 0
        self.storage_size = self.backlog_size = self.rate_limited_times = 0


def _live(sc: SubscriptionCounters, sub: AnySubscription, sampler: StatsSampler) -> None:
    """The fields every live subscription has (persistent or not)."""
    consumers = sub.consumers
    totals = sampler.subscription_totals(sub)
    rate = sampler.sub_out.get(sub, ZERO)
    sc.rate_out, sc.throughput_out = rate.msgs, rate.bytes
    sc.msg_out, sc.bytes_out = totals.msg_out, totals.bytes_out
    sc.consumers = len(consumers)
    if consumers:
        sc.last_consumed_ms = max(int(c.last_consumed * 1000) for c in consumers)
        sc.last_flow_ms = max(int(c.last_flow * 1000) for c in consumers)


def _stored(topic: PersistentTopic, t: TopicCounters, sampler: StatsSampler) -> None:
    expiry = sampler.ctx.service.expiry_stats
    ledger = topic.ledger
    for name in topic.subscription_names():
        sub = topic.subscriptions.get(name)
        sc = SubscriptionCounters(name, sub)
        record = expiry.get(topic.full_name, name)
        sc.rate_expired = sampler.sub_expired.get((topic.full_name, name), 0.0)
        sc.total_expired, sc.last_expire_ms = record.total_expired, record.last_expire_ms
        if sub is None:
            sc.backlog = ledger.cursors[name].number_of_entries_in_backlog()
        else:
            sc.backlog = sub.cursor.number_of_entries_in_backlog()
            _live(sc, sub, sampler)
            sc.rate_redeliver = sampler.sub_redeliver.get(sub, 0.0)
            sc.ack_rate = sampler.sub_ack.get(sub, 0.0)
            sc.unacked = sum(c.unacked_messages for c in sub.consumers)
            sc.blocked = bool(getattr(sub.dispatcher, "blocked_on_unacked", False))
            sc.last_acked_ms = int(sub.last_acked * 1000)
            sc.last_mark_delete_ms = int(sub.last_mark_delete_advanced * 1000)
        t.subscriptions.append(sc)
    t.storage_size = ledger.total_size
    t.backlog_size = estimated_backlog_size(topic)


def _not_stored(topic: NonPersistentTopic, t: TopicCounters, sampler: StatsSampler) -> None:
    for name, sub in sorted(topic.subscriptions.items()):
        sc = SubscriptionCounters(name, sub)
        _live(sc, sub, sampler)
        sc.drop_rate = sampler.sub_drop.get(sub, 0.0)
        t.subscriptions.append(sc)


def topic_counters(topic: AnyTopic, sampler: StatsSampler) -> TopicCounters:
    """The counters of ``topic`` (the numbers of ``stats.topic_stats``, without building its JSON)."""
    t = TopicCounters()
    rate_in = sampler.topic_in.get(topic, ZERO)
    t.rate_in, t.throughput_in = rate_in.msgs, rate_in.bytes
    t.average_msg_size = rate_in.bytes / rate_in.msgs if rate_in.msgs else 0.0
    t.msg_in, t.bytes_in = topic.msg_in, topic.bytes_in
    t.rate_limited_times = topic.publish_throttle.throttled_times
    topic.match_kind(lambda p: _stored(p, t, sampler), lambda n: _not_stored(n, t, sampler))
    for sc in t.subscriptions:
        t.rate_out += sc.rate_out
        t.throughput_out += sc.throughput_out
        t.msg_out += sc.msg_out
        t.bytes_out += sc.bytes_out
    return t

