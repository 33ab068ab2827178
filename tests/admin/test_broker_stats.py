"""Broker-level admin views: broker-stats/topics, broker-stats/load-report, ownedNamespaces."""

from __future__ import annotations

import itertools
import os

import pulsar

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
    assert admin.get("/admin/v2/brokers/standalone/elsewhere:8080/ownedNamespaces").status == 404
    assert admin.get(f"/admin/v2/brokers/nowhere/{broker}/ownedNamespaces").status == 404
