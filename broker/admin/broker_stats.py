"""Admin REST v2: the broker's own view (Pulsar's ``/admin/v2/broker-stats/...`` and owned
namespaces), what dashboards such as Pulsar Manager collect from each broker.

- ``GET /admin/v2/broker-stats/topics``: every loaded topic's rates and counters, grouped as
  Pulsar groups them: ``{namespace: {bundle: {"persistent" | "non-persistent": {topic: stats}}}}``
  (the bundle is the range the topic's name hashes into). Built from the same sampled rates as the
  topic stats.
- ``GET /admin/v2/broker-stats/load-report``: Pulsar's LocalBrokerData: the process's CPU (per
  cent of one core, limit 100 per core) and memory (MB), message and byte rates, counts of topics,
  bundles, producers and consumers, each bundle's load (``lastStats``, bundles with a topic loaded) and the
  bundles gained and lost since the previous report.
- ``GET /admin/v2/broker-stats/metrics``: Pulsar's MetricsGenerator list (``pulsar-admin broker-stats
  monitoring-metrics``): ``[{"metrics": {...}, "dimensions": {...}}]``; monitoring_metrics.py says what is in it.
- ``GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces``: the bundles this broker owns (a standalone broker:
  every bundle of every namespace): ``{"tenant/ns/0x..._0x...": {"broker_assignment": "shared", ...}}``; asked of
  another broker, a 307 to that one.

All are super-user operations (the access table's default).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin import stats as S
from broker.admin.cluster import redirect_to_broker, validate_cluster_ownership
from broker.admin.common import json_response
from broker.admin.monitoring_metrics import CORES, LocalLoad, MonitoringMetrics
from broker.cluster.data import BundleLoad
from broker.cluster.load import memory_limit_mb, rss_mb
from broker.cluster.placement import isolation_policy_of, matches_any
from broker.service.topic import PersistentTopic
from broker.version import __version__

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.service.broker_service import AnyTopic, BrokerService

MODULAR_LOAD_MANAGER = "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"
# Pulsar writes broker-stats/topics with a stream of its own (PersistentTopic.updateRates, StreamingStats): these
# fields, in this order, of each publisher, consumer, subscription and topic; a field is left out where Pulsar
# leaves it out (the unacked counts outside Shared and Key_Shared, a null client version).
_PUBLISHER_FIELDS = ("msgRateIn", "msgThroughputIn", "averageMsgSize", "address", "producerId", "producerName",
                     "connectedSince", "clientVersion", "metadata")
_CONSUMER_FIELDS = ("address", "consumerName", "availablePermits", "connectedSince", "msgRateOut", "msgThroughputOut",
                    "msgRateRedeliver", "avgMessagesPerEntry", "messageAckRate", "unackedMessages",
                    "blockedConsumerOnUnackedMsgs", "clientVersion", "metadata")
_SUB_RATES = ("msgBacklog", "msgRateExpired", "msgRateOut", "messageAckRate", "msgThroughputOut", "msgRateRedeliver")
_FILTER_COUNTS = ("filterProcessedMsgCount", "filterAcceptedMsgCount", "filterRejectedMsgCount",
                  "filterRescheduledMsgCount")
_INDIVIDUAL_ACK_TYPES = ("Shared", "Key_Shared")


def _entries_since_first_unacked(topic: AnyTopic, name: str) -> int:
    if not isinstance(topic, PersistentTopic):
        return 0
    cursor = topic.subscription_cursor(name)
    return S.entries_since_first_unacked(topic, cursor) if cursor is not None else 0


def _picked(stats: dict[str, Any], fields: tuple[str, ...], leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    return {k: stats[k] for k in fields if k in stats and k not in leave_out and stats[k] is not None}


class BrokerStatsResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service
        self.local_load = LocalLoad()
        self.monitoring = MonitoringMetrics(web_service.ctx)
        # The bundles the previous load report named (its gains and losses are against them).
        self._reported_bundles: set[str] = set()

    def register(self, r: web.UrlDispatcher) -> None:
        r.add_get("/admin/v2/broker-stats/topics", self.topics)
        r.add_get("/admin/v2/broker-stats/load-report", self.load_report)
        r.add_get("/admin/v2/broker-stats/metrics", self.metrics)
        r.add_get("/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", self.owned_namespaces)

    @property
    def service(self) -> BrokerService:
        return self.web.service

    async def topics(self, request: web.Request) -> web.Response:
        out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        for topic in self.service.all_topics():
            stats = S.topic_stats(topic, self.web.sampler)
            domain = topic.name.domain
            bundles = out.setdefault(topic.name.namespace, {})
            bundle = self.web.metadata.namespace_bundles(topic.name.namespace).find(topic.full_name)
            kinds = bundles.setdefault(bundle.range_name, {"persistent": {}})
            kinds.setdefault(domain, {})[topic.full_name] = self._topic(topic, stats, domain)
        return json_response(out)

    @staticmethod
    def _topic(topic: AnyTopic, stats: dict[str, Any], domain: str) -> dict[str, Any]:
        stored = domain == "persistent"
        subs = {}
        for name, s in stats["subscriptions"].items():
            individual = s["type"] in _INDIVIDUAL_ACK_TYPES
            unacked = () if individual else ("unackedMessages", "blockedConsumerOnUnackedMsgs")
            sub: dict[str, Any] = {"consumers": [_picked(c, _CONSUMER_FIELDS, unacked) for c in s["consumers"]],
                                   **_picked(s, _SUB_RATES)}
            if stored:
                sub["numberOfEntriesSinceFirstNotAckedMessage"] = _entries_since_first_unacked(topic, name)
                sub["totalNonContiguousDeletedMessagesRange"] = s["nonContiguousDeletedMessagesRanges"]
            sub["type"] = s["type"]
            sub.update(_picked(s, _FILTER_COUNTS))
            if stored and individual:
                sub["blockedSubscriptionOnUnackedMsgs"] = s["blockedSubscriptionOnUnackedMsgs"]
                sub["unackedMessages"] = s["unackedMessages"]
            if not stored:
                sub["msgDropRate"] = s.get("msgDropRate", 0.0)
            subs[name] = sub
        doc: dict[str, Any] = {
            "publishers": [_picked(p, _PUBLISHER_FIELDS) for p in stats["publishers"]],
            "replication": stats["replication"],
            "subscriptions": subs,
            "producerCount": len(stats["publishers"]),
            "averageMsgSize": stats["averageMsgSize"],
            "msgRateIn": stats["msgRateIn"],
            "msgRateOut": stats["msgRateOut"],
            "msgInCount": stats["msgInCounter"],
            "bytesInCount": stats["bytesInCounter"],
            "msgOutCount": stats["msgOutCounter"],
            "bytesOutCount": stats["bytesOutCounter"],
            "msgThroughputIn": stats["msgThroughputIn"],
            "msgThroughputOut": stats["msgThroughputOut"],
        }
        if stored:
            doc.update(storageSize=stats["storageSize"], backlogSize=stats["backlogSize"],
                       pendingAddEntriesCount=sum(p.pending for p in topic.producers.values()))
        # (No entry filters here: nothing filtered. A non-persistent topic's drops are its subscriptions'
        # msgDropRate: Pulsar's NonPersistentTopic.updateRates writes none for the topic.)
        doc["filteredEntriesCount"] = 0
        return doc

    async def load_report(self, request: web.Request) -> web.Response:
        process, service, sampler = self.web.ctx.process, self.service, self.web.sampler
        topics = service.all_topics()
        in_msgs = sum(r.msgs for r in sampler.topic_in.values())
        in_bytes = sum(r.bytes for r in sampler.topic_in.values())
        out_msgs = sum(r.msgs for r in sampler.sub_out.values())
        out_bytes = sum(r.bytes for r in sampler.sub_out.values())
        namespaces = sorted(service.metadata.namespaces)
        bundles = [str(b) for ns in namespaces for b in service.metadata.namespace_bundles(ns).bundles]
        now, before = set(bundles), self._reported_bundles
        self._reported_bundles = now
        cpu = self.local_load.cpu.look()
        report: dict[str, Any] = {
            "webServiceUrl": process.web_url,
            "webServiceUrlTls": process.web_url_tls or None,
            "pulsarServiceUrl": process.service_url,
            "pulsarServiceUrlTls": process.service_url_tls or None,
            "persistentTopicsEnabled": True,
            "nonPersistentTopicsEnabled": True,
            "cpu": {"usage": cpu, "limit": 100.0 * CORES},
            "memory": {"usage": rss_mb(), "limit": memory_limit_mb()},
            "directMemory": {"usage": 0.0, "limit": 0.0},
            "bandwidthIn": {"usage": in_bytes / 1024, "limit": 0.0},
            "bandwidthOut": {"usage": out_bytes / 1024, "limit": 0.0},
            "msgThroughputIn": in_bytes,
            "msgThroughputOut": out_bytes,
            "msgRateIn": in_msgs,
            "msgRateOut": out_msgs,
            "lastUpdate": int(time.time() * 1000),
            "lastStats": {name: load.to_json() for name, load in sorted(self._bundle_loads(topics).items())},
            "numTopics": len(topics),
            "numBundles": len(bundles),
            "numConsumers": sum(len(s.consumers) for t in topics for s in t.subscriptions.values()),
            "numProducers": sum(len(t.producers) for t in topics),
            "bundles": bundles,
            "lastBundleGains": sorted(now - before),
            "lastBundleLosses": sorted(before - now),
            "brokerVersionString": __version__,
            "protocols": {},
            "advertisedListeners": {},
            "loadReportType": "LocalBrokerData",
            # The modular load manager's, whose LocalBrokerData this is; the highest usage against its limit
            # (a fraction) among CPU and bandwidth, as placement reads it (0 for a limit that is unknown).
            "loadManagerClassName": MODULAR_LOAD_MANAGER,
            "startTimestamp": service.started_at_ms,
            "maxResourceUsage": cpu / (100.0 * CORES),
        }
        # (a TLS URL the broker does not have is left out, as Pulsar's JSON leaves out nulls)
        return json_response({k: v for k, v in report.items() if v is not None})

    def _bundle_loads(self, topics: list[AnyTopic]) -> dict[str, BundleLoad]:
        """Pulsar's NamespaceBundleStats of each bundle with a topic loaded: the sampled rates and the counts of
        its topics, producers and consumers."""
        sampler, metadata = self.web.sampler, self.service.metadata
        sums: dict[str, list[float]] = {}
        for topic in topics:
            try:
                bundle = str(metadata.namespace_bundles(topic.name.namespace).find(topic.full_name))
            except Exception:  # (its namespace is gone)
                continue
            rate_in = sampler.topic_in.get(topic)
            outs = [r for sub in topic.subscriptions.values() if (r := sampler.sub_out.get(sub)) is not None]
            add = (rate_in.msgs if rate_in else 0.0, sum(r.msgs for r in outs),
                   rate_in.bytes if rate_in else 0.0, sum(r.bytes for r in outs),
                   sum(len(s.consumers) for s in topic.subscriptions.values()), len(topic.producers), 1)
            sums[bundle] = [a + b for a, b in zip(sums.get(bundle, [0.0] * 7), add, strict=True)]
        return {name: BundleLoad(msg_rate_in=v[0], msg_rate_out=v[1], msg_throughput_in=v[2], msg_throughput_out=v[3],
                                 consumer_count=int(v[4]), producer_count=int(v[5]), topics=int(v[6]))
                for name, v in sums.items()}

    async def metrics(self, request: web.Request) -> web.Response:
        usage = self.local_load.usage(self.service)
        return json_response(self.monitoring.documents(self.web.sampler, usage))

    async def owned_namespaces(self, request: web.Request) -> web.Response:
        """Pulsar's BrokersBase.getOwnedNamespaces: asked of another broker, the 307 there (Pulsar's
        maybeRedirectToBroker), then the cluster's check, then the bundles this broker owns, each with its
        NamespaceOwnershipStatus (NamespaceService.getOwnedNameSpacesStatusAsync). A standalone broker owns every
        bundle of every namespace."""
        await redirect_to_broker(self.web.ctx, request, request.match_info["broker"])
        validate_cluster_ownership(self.web.ctx, request, request.match_info["cluster"])
        metadata = self.service.metadata
        ownership = self.service.ownership
        owned = (ownership.owned_bundles() if ownership.distributed
                 else [b for ns in sorted(metadata.namespaces) for b in metadata.namespace_bundles(ns).bundles])
        policies = metadata.isolation_policies(self.web.ctx.cluster) or {}
        host = self.web.ctx.process.advertised_host
        return json_response({str(b): ownership_status(b.namespace, host, policies) for b in owned})


def ownership_status(namespace: str, host: str, policies: Mapping[str, Any]) -> dict[str, Any]:
    """Pulsar's NamespaceOwnershipStatus of an owned (active) bundle of ``namespace`` on the broker at ``host``:
    ``shared`` and not controlled unless an isolation policy names the namespace; then controlled, and ``primary`` or
    ``secondary`` when the policy names this broker's host so (NamespaceService.getNamespaceOwnershipStatus)."""
    policy = isolation_policy_of(namespace, policies)
    assignment = "shared"
    if policy is not None and matches_any(policy.get("primary"), host):
        assignment = "primary"
    elif policy is not None and matches_any(policy.get("secondary"), host):
        assignment = "secondary"
    return {"broker_assignment": assignment, "is_controlled": policy is not None, "is_active": True}
