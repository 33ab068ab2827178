"""The per-topic part of /metrics: the series of one topic, subscription, consumer and replicator
(Pulsar's TopicStats names), in the fixed orders the scrape appends their lines in, and the
values read from a topic that the light counters of scrape_stats.py do not carry (transaction
buffer, replay set, compaction).

broker/admin/metrics.py walks the topics and calls these; docs/metrics.md lists the families.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.admin.exposition import Exposition
from broker.admin.metric_families import COMPACTION_LATENCY

if TYPE_CHECKING:
    from broker.admin.scrape_stats import SubscriptionCounters
    from broker.service.broker_service import AnyTopic
    from broker.service.compaction import CompactionRecord
    from broker.service.kinds import AnySubscription

REPLICATION = (("pulsar_replication_rate_in", "msgRateIn"), ("pulsar_replication_rate_out", "msgRateOut"),
               ("pulsar_replication_throughput_in", "msgThroughputIn"),
               ("pulsar_replication_throughput_out", "msgThroughputOut"),
               ("pulsar_replication_backlog", "replicationBacklog"),
               ("pulsar_replication_rate_expired", "msgRateExpired"),
               ("pulsar_replication_delay_in_seconds", "replicationDelayInSeconds"))
_SUB_ZEROS = ("pulsar_subscription_filter_processed_msg_count", "pulsar_subscription_filter_accepted_msg_count",
              "pulsar_subscription_filter_rejected_msg_count", "pulsar_subscription_filter_rescheduled_msg_count",
              "pulsar_subscription_delayed_message_index_size_bytes")
CONSUMER_GAUGES = (("pulsar_consumer_msg_rate_redeliver", "msgRateRedeliver"),
                   ("pulsar_consumer_unacked_messages", "unackedMessages"),
                   ("pulsar_consumer_blocked_on_unacked_messages", "blockedConsumerOnUnackedMsgs"),
                   ("pulsar_consumer_msg_rate_out", "msgRateOut"),
                   ("pulsar_consumer_msg_ack_rate", "messageAckRate"),
                   ("pulsar_consumer_msg_throughput_out", "msgThroughputOut"),
                   ("pulsar_consumer_available_permits", "availablePermits"),
                   ("pulsar_out_bytes_total", "bytesOutCounter"), ("pulsar_out_messages_total", "msgOutCounter"))
_ZEROS = (0,) * len(_SUB_ZEROS)
# A topic's own series (values from the ``values`` dict of BrokerMetrics.write(), then those _write_topic
# reads), in order.
TOPIC_VALUES = ("pulsar_subscriptions_count", "pulsar_producers_count", "pulsar_consumers_count",
                "pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in", "pulsar_throughput_out",
                "pulsar_average_msg_size", "pulsar_storage_size", "pulsar_storage_logical_size",
                "pulsar_msg_backlog", "pulsar_storage_write_rate", "pulsar_storage_read_rate",
                "pulsar_storage_read_cache_misses_rate", "pulsar_storage_backlog_size",
                "pulsar_publish_rate_limit_times", "pulsar_storage_offloaded_size",
                "pulsar_in_bytes_total", "pulsar_in_messages_total")
TOPIC_FAMILIES = (*TOPIC_VALUES, "pulsar_txn_tb_active_total", "pulsar_txn_tb_aborted_total",
                  "pulsar_txn_tb_committed_total", "pulsar_delayed_message_index_size_bytes",
                  "pulsar_storage_backlog_quota_limit", "pulsar_storage_backlog_quota_limit_time",
                  "pulsar_storage_backlog_age_seconds", "pulsar_py_publish_rate_limited_total")

TXN_BUFFER_FAMILIES = ("pulsar_txn_tb_active_total", "pulsar_txn_tb_aborted_total", "pulsar_txn_tb_committed_total")


def txn_buffer_counts(topic: AnyTopic) -> tuple[int, int, int]:
    """(open, aborted, committed) transactions of a topic's transaction buffer (zeros without one)."""
    buffer = getattr(topic, "txn_buffer", None)
    if buffer is None:
        return 0, 0, 0
    return len(buffer.ongoing), buffer.aborted_count, buffer.committed_count


def write_compaction(out: Exposition, labels: str, r: CompactionRecord) -> None:
    """Pulsar's per-topic compaction series (only for topics compacted at least once)."""
    for name, value in (("pulsar_compaction_removed_event_count", r.removed_events),
                        ("pulsar_compaction_succeed_count", r.succeeded), ("pulsar_compaction_failed_count", r.failed),
                        ("pulsar_compaction_duration_time_in_mills", r.last_duration_ms),
                        ("pulsar_compaction_read_throughput", r.last_read_bytes_per_s),
                        ("pulsar_compaction_write_throughput", r.last_write_bytes_per_s),
                        ("pulsar_compaction_compacted_entries_count", r.compacted_entries),
                        ("pulsar_compaction_compacted_entries_size", r.compacted_bytes)):
        out.add(name, labels, value)
    prefix, names, _doc = COMPACTION_LATENCY
    for bucket, n in zip(names, r.latency_counts, strict=True):
        out.add(f"{prefix}_{bucket}", labels, n)
    out.add(f"{prefix}_sum", labels, r.latency_sum_us)
    out.add(f"{prefix}_count", labels, sum(r.latency_counts))


def in_replay(sub: AnySubscription | None) -> int:
    dispatcher = sub.dispatcher if sub is not None else None
    return len(getattr(dispatcher, "replay", ()))


# Pulsar's subscription series, in the order write_subscription writes their values.
_THROTTLED_FAMILIES = ("pulsar_subscription_dispatch_throttled_msg_events",
                       "pulsar_subscription_dispatch_throttled_bytes_events")
_SUB_FAMILIES = ("pulsar_subscription_back_log", "pulsar_subscription_back_log_no_delayed",
                 "pulsar_subscription_delayed", "pulsar_subscription_msg_rate_redeliver",
                 "pulsar_subscription_unacked_messages", "pulsar_subscription_msg_rate_out",
                 "pulsar_subscription_msg_ack_rate", "pulsar_subscription_msg_throughput_out", "pulsar_out_bytes_total",
                 "pulsar_out_messages_total", "pulsar_subscription_last_expire_timestamp",
                 "pulsar_subscription_last_acked_timestamp", "pulsar_subscription_last_consumed_flow_timestamp",
                 "pulsar_subscription_last_consumed_timestamp",
                 "pulsar_subscription_last_mark_delete_advanced_timestamp", "pulsar_subscription_msg_rate_expired",
                 "pulsar_subscription_total_msg_expired", "pulsar_subscription_in_replay",
                 "pulsar_subscription_blocked_on_unacked_messages", "pulsar_subscription_msg_drop_rate",
                 "pulsar_subscription_consumers_count", *_SUB_ZEROS)


# A dispatcher's dispatch rate limits by their index in its rates (the topic's, the subscription's, then the
# broker's when it has one), in Pulsar's order of them: the metric's reason label and the stats JSON's word.
THROTTLE_LIMITS = (("subscription", 1), ("topic", 0), ("broker", 2))


def write_subscription(out: Exposition, sl: str, s: SubscriptionCounters) -> None:
    """Pulsar's subscription series of one subscription."""
    values = (s.backlog, s.backlog, 0, s.rate_redeliver, s.unacked, s.rate_out, s.ack_rate, s.throughput_out,
              s.bytes_out, s.msg_out, s.last_expire_ms, s.last_acked_ms, s.last_flow_ms, s.last_consumed_ms,
              s.last_mark_delete_ms, s.rate_expired, s.total_expired, in_replay(s.sub), 1 if s.blocked else 0,
              s.drop_rate if s.drop_rate is not None else 0.0, s.consumers, *_ZEROS)
    for lines, name, value in zip(out.families(_SUB_FAMILIES), _SUB_FAMILIES, values, strict=True):
        lines.append(f"{name}{{{sl}}} {value!r}\n")
    # Reads cut short by a dispatch rate limit, by the limit's kind (AbstractBaseDispatcher's counters).
    dispatcher = getattr(s.sub, "dispatcher", None)
    msg_events = getattr(dispatcher, "throttled_msg_events", None) or (0, 0)
    bytes_events = getattr(dispatcher, "throttled_bytes_events", None) or (0, 0)
    msg_lines, bytes_lines = out.families(_THROTTLED_FAMILIES)
    for reason, i in THROTTLE_LIMITS:
        msg_lines.append(f'pulsar_subscription_dispatch_throttled_msg_events{{{sl},reason="{reason}"}} '
                         f"{msg_events[i] if i < len(msg_events) else 0}\n")
        bytes_lines.append(f'pulsar_subscription_dispatch_throttled_bytes_events{{{sl},reason="{reason}"}} '
                           f"{bytes_events[i] if i < len(bytes_events) else 0}\n")

