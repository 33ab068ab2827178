"""Broker-level admin views: broker-stats/topics, broker-stats/load-report, broker-stats/metrics,
ownedNamespaces."""

from __future__ import annotations

import itertools
import os
from typing import Any

import pulsar

from broker.admin.broker_stats import ownership_status
from broker.embedded import BrokerThread
from tests.admin.conftest import Admin


def test_broker_stats_topics_groups_loaded_topics_by_namespace_and_bundle(
        admin: Admin, client: pulsar.Client, pulsar_broker: BrokerThread) -> None:
    ns = admin.new_namespace()
    topic, live = f"persistent://{ns}/stored", f"non-persistent://{ns}/live"
    consumer = client.subscribe(topic, "s")
    live_consumer = client.subscribe(live, "l")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(b"m%d" % i)
    client.create_producer(live).send(b"x")
    stats = admin.ok("GET", "/admin/v2/broker-stats/topics")[ns]
    bundles = admin.ok("GET", f"/admin/v2/namespaces/{ns}/bundles")["boundaries"]
    assert set(stats) <= {f"{lo}_{hi}" for lo, hi in itertools.pairwise(bundles)}
    (bundle,) = [b for b, kinds in stats.items() if topic in kinds["persistent"]]
    doc = stats[bundle]["persistent"][topic]
    assert doc["msgInCount"] == 5 and doc["producerCount"] == 1 and doc["publishers"][0]["producerId"] >= 0
    sub = doc["subscriptions"]["s"]
    assert sub["msgBacklog"] == 5 and sub["type"] == "Exclusive" and len(sub["consumers"]) == 1
    assert "storageSize" in doc and "pendingAddEntriesCount" in doc
    (live_doc,) = [kinds["non-persistent"][live] for kinds in stats.values() if live in kinds.get("non-persistent", {})]
    assert live_doc["msgInCount"] == 1 and "msgDropRate" in live_doc["subscriptions"]["l"]
    assert "msgDropRate" not in live_doc  # Pulsar's NonPersistentTopic.updateRates writes it per subscription only
    # The bundle is the one Pulsar's hash picks: clearing that bundle's backlog clears this topic's.
    admin.ok("POST", f"/admin/v2/namespaces/{ns}/{bundle}/clearBacklog")
    assert admin.stats(topic)["subscriptions"]["s"]["msgBacklog"] == 0
    consumer.close()
    live_consumer.close()


def test_load_report_and_owned_namespaces(admin: Admin, client: pulsar.Client, pulsar_broker: BrokerThread) -> None:
    client.create_producer(f"persistent://{admin.new_namespace()}/t").send(b"x")
    report = admin.ok("GET", "/admin/v2/broker-stats/load-report")
    assert report["loadReportType"] == "LocalBrokerData"
    assert report["pulsarServiceUrl"] == pulsar_broker.service_url
    assert report["cpu"]["limit"] == 100.0 * (os.cpu_count() or 1)
    assert 0 < report["memory"]["usage"] < report["memory"]["limit"]
    assert report["numTopics"] >= 1 and report["numProducers"] >= 1
    namespaces = {ns for tenant in admin.ok("GET", "/admin/v2/tenants")
                  for ns in admin.ok("GET", f"/admin/v2/namespaces/{tenant}")}
    assert {b.rsplit("/", 1)[0] for b in report["bundles"]} == namespaces
    assert report["numBundles"] == len(report["bundles"]) == 4 * len(namespaces)
    assert "public/default/0x00000000_0x40000000" in report["bundles"]
    (broker,) = admin.ok("GET", "/admin/v2/brokers/standalone")
    owned = admin.ok("GET", f"/admin/v2/brokers/standalone/{broker}/ownedNamespaces")
    assert owned["public/default/0x00000000_0x40000000"] == {
        "broker_assignment": "shared", "is_controlled": False, "is_active": True}
    # Another broker's id: no such broker registered (Pulsar's maybeRedirectToBroker, before the cluster's check);
    # a cluster of another name passes its check, authorization being off (Pulsar: "any cluster name is valid").
    elsewhere = admin.get("/admin/v2/brokers/nowhere/elsewhere:8080/ownedNamespaces")
    assert (elsewhere.status, elsewhere.json) == (404, {"reason": "Broker id 'elsewhere:8080' not found in "
                                                                    "available brokers."})
    assert admin.ok("GET", f"/admin/v2/brokers/nowhere/{broker}/ownedNamespaces") == owned
    assert admin.ok("GET", "/admin/v2/brokers") == admin.ok("GET", "/admin/v2/brokers/nowhere") == [broker]


def _by_dimensions(documents: list[dict[str, Any]]) -> dict[tuple[tuple[str, str], ...], dict[str, Any]]:
    keys = [tuple(sorted(d["dimensions"].items())) for d in documents]
    assert len(set(keys)) == len(keys), "objects with equal dimensions are merged into one"
    return {key: d["metrics"] for key, d in zip(keys, documents, strict=True)}


def test_monitoring_metrics_as_pulsars_metrics_generator() -> None:
    # pulsar-admin broker-stats monitoring-metrics. The sampler runs when the test says so (the rates and the
    # add buckets are of the interval up to its last run).
    with BrokerThread(statsUpdateFrequencyInSecs=3600) as broker:
        admin = Admin(broker.web_url)
        ns = admin.new_namespace()
        stored, live = f"persistent://{ns}/stored", f"non-persistent://{ns}/live"
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            client.subscribe(stored, "s")
            client.subscribe(live, "l")
            producer = client.create_producer(stored, batching_enabled=False)
            for _ in range(5):
                producer.send(b"x" * 100)
            client.create_producer(live).send(b"y")
            broker.run_coroutine(broker.server.web.sampler.sample_async())
            documents = admin.ok("GET", "/admin/v2/broker-stats/metrics")
            # The topics' part is taken once per stats interval, as Pulsar's NamespaceStats: a producer added since
            # shows after the sampler's next run, not before.
            client.create_producer(stored, batching_enabled=False)
            before = _by_dimensions(admin.ok("GET", "/admin/v2/broker-stats/metrics"))[(("namespace", ns),)]
            broker.run_coroutine(broker.server.web.sampler.sample_async())
            after = _by_dimensions(admin.ok("GET", "/admin/v2/broker-stats/metrics"))[(("namespace", ns),)]
            assert (before["brk_no_of_producers"], after["brk_no_of_producers"]) == (2, 3)
        finally:
            client.close()
    assert all(set(d) == {"metrics", "dimensions"} and list(d["metrics"]) == sorted(d["metrics"]) for d in documents)
    assert all(isinstance(v, int | float) or v == "NaN" for d in documents for v in d["metrics"].values())
    objects = _by_dimensions(documents)
    # The namespace's topic stats (NamespaceStats), and its managed ledgers' sums (ManagedLedgerMetrics) under the
    # namespace Pulsar parses from a ledger's name (its domain included), as a Pulsar 4.0.7 standalone lists them.
    namespace = objects[(("namespace", ns),)]
    ledgers = objects[(("namespace", f"{ns}/persistent"),)]
    assert not any(name.startswith("brk_ml_") for name in namespace)
    assert namespace["brk_no_of_producers"] == 2 and namespace["brk_no_of_subscriptions"] == 2
    assert namespace["brk_no_of_consumers"] == 2 and namespace["brk_no_of_replicators"] == 0
    assert namespace["brk_msg_backlog"] == 5.0  # (the stored subscription's; the live one keeps none)
    assert namespace["brk_in_rate"] > 0 and namespace["brk_in_tp_rate"] >= 500 * namespace["brk_in_rate"] / 6
    assert namespace["brk_out_rate"] > 0 and namespace["brk_replication_backlog"] == 0.0
    assert namespace["brk_storage_size"] > 0  # (the stored subscription's backlog, estimated)
    assert namespace["brk_max_replication_delay_second"] == 0.0
    buckets = [name for name in namespace if name.startswith("brk_AddEntryLatencyBuckets_")]
    assert "brk_AddEntryLatencyBuckets_0.0_0.5" in buckets and "brk_AddEntryLatencyBuckets_OVERFLOW" in buckets
    assert len(buckets) == 10 and all(isinstance(namespace[b], int) for b in buckets)
    assert ledgers["brk_ml_AddEntrySucceed"] == 5.0  # (the stored topic's five entries; the live topic has none)
    assert ledgers["brk_ml_AddEntryMessagesRate"] > 0 and ledgers["brk_ml_StoredMessagesSize"] > 0
    assert ledgers["brk_ml_NumberOfMessagesInBacklog"] == 5.0
    entry_sizes = {name: v for name, v in ledgers.items() if name.startswith("brk_ml_EntrySizeBuckets_")}
    assert entry_sizes["brk_ml_EntrySizeBuckets_128.0_512.0"] == 5.0 and sum(entry_sizes.values()) == 5.0
    assert {"brk_ml_AddEntryLatencyBuckets_0.0_0.5", "brk_ml_LedgerSwitchLatencyBuckets_OVERFLOW",
            "brk_ml_EntrySizeBuckets_102400.0_1048576.0"} <= set(ledgers)
    # The entry cache, broker-wide (ManagedLedgerCacheMetrics): empty dimensions.
    cache = objects[()]
    assert cache["brk_ml_count"] >= 1 and {"brk_ml_cache_used_size", "brk_ml_cache_hits_rate"} <= set(cache)
    # BrokerOperabilityMetrics: the broker's connections, health and topic loads.
    host = broker.service_url.removeprefix("pulsar://").rsplit(":", 1)[0]
    base = (("broker", host), ("cluster", "standalone"))
    connections = objects[(*base, ("metric", "broker_connection"))]
    assert connections["brk_active_connections"] == 1  # (the client's, open when the list was asked for)
    assert connections["brk_connection_create_success_count"] == connections["brk_connection_created_total_count"] == 1
    assert connections["brk_connection_create_fail_count"] == connections["brk_connection_closed_total_count"] == 0
    assert objects[(*base, ("metric", "broker_health"))] == {"brk_health": -1}  # (no health check has run)
    loads = objects[(*base, ("metric", "pulsar_topic_load_times"))]
    assert loads["brk_topic_load_failed_count"] == 0 and "brk_topic_load_time_99_9_percentile_ms" in loads
    assert loads["brk_topic_load_failed_count"] == 0.0 and isinstance(loads["brk_topic_load_rate_s"], float)
    # The load, as load-report has it (per cent of each limit; cluster mode: tests/cluster/test_lookup.py).
    usage = objects[(("broker", host), ("metric", "loadBalancing"))]
    assert 0 < usage["brk_lb_memory_usage"] < 100 and usage["brk_lb_cpu_usage"] >= 0
    assert usage["brk_lb_bandwidth_in_usage"] == usage["brk_lb_directMemory_usage"] == 0.0
    assert not any(dict(key).get("metric") == "jvm_metrics" for key in objects)  # (no JVM)


def test_ownership_status_follows_the_namespace_isolation_policies() -> None:
    """NamespaceService.getNamespaceOwnershipStatus: controlled when a policy names the namespace, primary or
    secondary as the policy names this broker's host, else shared."""
    policies = {"iso": {"namespaces": ["iso/.*"], "primary": ["127\\.0\\.0\\.2"], "secondary": ["127\\.0\\.0\\.3"],
                        "auto_failover_policy": {"policy_type": "min_available", "parameters": {"min_limit": "1"}}}}

    def status(assignment: str, controlled: bool) -> dict[str, Any]:
        return {"broker_assignment": assignment, "is_controlled": controlled, "is_active": True}

    assert ownership_status("iso/a", "127.0.0.2", policies) == status("primary", True)
    assert ownership_status("iso/a", "127.0.0.3", policies) == status("secondary", True)
    assert ownership_status("iso/a", "127.0.0.4", policies) == status("shared", True)
    assert ownership_status("public/default", "127.0.0.2", policies) == status("shared", False)
