"""Prometheus exposition with Apache Pulsar's metric names and labels.

A custom collector reads the live broker objects at scrape time (no per-message metric updates on
the hot path). Counters such as pulsar_in_messages_total come from plain integers the topic keeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from broker.server import BrokerServer


class BrokerCollector(Collector):
    def __init__(self, server: BrokerServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        server = self.server
        service = server.service
        cluster = server.config.clusterName
        topics = list(service.topics.values())

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=["cluster"])
            g.add_metric([cluster], value)
            return g

        subs = [s for t in topics for s in t.subscriptions.values()]
        yield gauge("pulsar_broker_topics_count", "Topics loaded", len(topics))
        yield gauge("pulsar_broker_subscriptions_count", "Subscriptions", len(subs))
        yield gauge("pulsar_broker_producers_count", "Producers", sum(len(t.producers) for t in topics))
        yield gauge("pulsar_broker_consumers_count", "Consumers", sum(len(s.consumers) for s in subs))
        yield gauge("pulsar_active_connections", "Open client connections", len(server.connections))
        yield gauge("pulsar_connection_created_total_count", "Connections opened", server.connections_created)
        yield gauge("pulsar_connection_closed_total_count", "Connections closed", server.connections_closed)

        tl = ["cluster", "namespace", "topic"]
        producers = GaugeMetricFamily("pulsar_producers_count", "Producers of the topic", labels=tl)
        consumers = GaugeMetricFamily("pulsar_consumers_count", "Consumers of the topic", labels=tl)
        subs_count = GaugeMetricFamily("pulsar_subscriptions_count", "Subscriptions of the topic", labels=tl)
        storage = GaugeMetricFamily("pulsar_storage_size", "Bytes stored for the topic", labels=tl)
        backlog = GaugeMetricFamily("pulsar_msg_backlog", "Entries not yet acknowledged, all subscriptions",
                                    labels=tl)
        in_msgs = CounterMetricFamily("pulsar_in_messages", "Messages published to the topic", labels=tl)
        in_bytes = CounterMetricFamily("pulsar_in_bytes", "Bytes published to the topic", labels=tl)
        sl = [*tl, "subscription"]
        sub_backlog = GaugeMetricFamily("pulsar_subscription_back_log", "Entries after the mark-delete position",
                                        labels=sl)
        sub_unacked = GaugeMetricFamily("pulsar_subscription_unacked_messages", "Delivered, not acknowledged",
                                        labels=sl)
        sub_consumers = GaugeMetricFamily("pulsar_subscription_consumers_count", "Consumers of the subscription",
                                          labels=sl)
        out_msgs = CounterMetricFamily("pulsar_out_messages", "Messages delivered by the subscription", labels=sl)
        out_bytes = CounterMetricFamily("pulsar_out_bytes", "Bytes delivered by the subscription", labels=sl)
        drift = GaugeMetricFamily("pulsar_py_permit_invariant_drift", "Times the dispatcher permit total drifted "
                                  "from the sum over consumers (must stay 0)", labels=sl)
        for t in topics:
            labels = [cluster, t.name.namespace, t.full_name]
            producers.add_metric(labels, len(t.producers))
            tsubs = list(t.subscriptions.values())
            consumers.add_metric(labels, sum(len(s.consumers) for s in tsubs))
            subs_count.add_metric(labels, len(tsubs))
            storage.add_metric(labels, t.ledger.total_size)
            backlog.add_metric(labels, sum(s.backlog for s in tsubs))
            in_msgs.add_metric(labels, t.msg_in)
            in_bytes.add_metric(labels, t.bytes_in)
            for s in tsubs:
                slabels = [*labels, s.name]
                cs = s.consumers
                sub_backlog.add_metric(slabels, s.backlog)
                sub_unacked.add_metric(slabels, sum(c.unacked_messages for c in cs))
                sub_consumers.add_metric(slabels, len(cs))
                out_msgs.add_metric(slabels, sum(c.msg_out for c in cs))
                out_bytes.add_metric(slabels, sum(c.bytes_out for c in cs))
                drift.add_metric(slabels, s.dispatcher.invariant_drift_count if s.dispatcher else 0)
        yield from (producers, consumers, subs_count, storage, backlog, in_msgs, in_bytes,
                    sub_backlog, sub_unacked, sub_consumers, out_msgs, out_bytes, drift)


def make_registry(server: BrokerServer) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(server))
    return registry


def render_metrics(registry: CollectorRegistry) -> bytes:
    return bytes(generate_latest(registry))
