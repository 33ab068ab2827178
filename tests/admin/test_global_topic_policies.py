"""A topic's global policies (``?isGlobal=true``, pulsar-admin's ``topic-policies ... -g``) beside its local ones,
and ``DELETE .../policies``.

Each kind is read, set and removed on its own; in force is the local value, else the global one, else the
namespace's, else the broker's (Pulsar's PolicyHierarchyValue). Before, ``isGlobal`` was ignored: a global set wrote
the local value and a global read answered it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from broker.embedded import BrokerThread
from broker.metadata import layout as L
from broker.metadata import policy_copies as C
from tests.admin.conftest import Admin, rest_path
from tests.admin.test_topic_policies import NS, is_unset, new_topic, policy_path
from tests.waiting import wait_for

GLOBAL = "?isGlobal=true"
FILESYSTEM = {"managedLedgerOffloadDriver": "filesystem", "fileSystemURI": "file:///tmp/offloaded"}


@pytest.fixture(scope="module")
def pulsar_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with BrokerThread(data_dir=tmp_path_factory.mktemp("global-policies")) as b:
        yield b


@pytest.mark.parametrize(("policy", "local", "global_", "query"), [
    ("maxProducers", 3, 5, None),
    ("retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10},
     {"retentionTimeInMinutes": 30, "retentionSizeInMB": 20}, None),
    ("messageTTL", 100, 200, "messageTTL"),
    ("subscriptionTypesEnabled", ["Shared"], ["Exclusive", "Failover"], None),
    ("offloadPolicies", {**FILESYSTEM, "managedLedgerOffloadThresholdInBytes": 10},
     {**FILESYSTEM, "managedLedgerOffloadThresholdInBytes": 20}, None),
])
def test_local_and_global_values_are_kept_apart(admin: Admin, policy: str, local: object, global_: object,
                                               query: str | None) -> None:
    _, topic = new_topic(admin)
    path = policy_path(topic, policy)

    def set_value(value: object, suffix: str = "") -> None:
        if query is None:
            assert admin.post(path + suffix, value).status == 204
        else:
            sep = "&" if suffix else "?"
            assert admin.post(f"{path}{suffix}{sep}{query}={value}").status == 204

    def value_of(reply_json: object) -> object:
        if policy == "offloadPolicies" and isinstance(reply_json, dict):  # (the fields set; the rest defaults)
            return {k: reply_json[k] for k in (*FILESYSTEM, "managedLedgerOffloadThresholdInBytes")}
        return reply_json

    broker_value = value_of(admin.get(path + "?applied=true").json)
    set_value(global_, GLOBAL)
    assert value_of(admin.ok("GET", path + GLOBAL)) == global_
    assert is_unset(admin.get(path), policy)  # the local value is not set
    assert value_of(admin.ok("GET", path + "?applied=true")) == global_  # in force: the global one
    set_value(local)
    assert value_of(admin.ok("GET", path)) == local
    assert value_of(admin.ok("GET", path + GLOBAL)) == global_
    assert value_of(admin.ok("GET", path + "?applied=true")) == local  # the local one wins
    assert admin.delete(path).status == 204
    assert value_of(admin.ok("GET", path + "?applied=true")) == global_
    assert admin.delete(path + GLOBAL).status == 204
    assert is_unset(admin.get(path + GLOBAL), policy, changed=True)
    assert value_of(admin.get(path + "?applied=true").json) == broker_value


def test_a_global_limit_applies_and_a_local_one_overrides_it(admin: Admin, client: pulsar.Client) -> None:
    ns, topic = new_topic(admin)
    admin.ok("POST", policy_path(topic, "maxProducers") + GLOBAL, 1)
    first = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    admin.ok("POST", policy_path(topic, "maxProducers"), 2)  # local: wins over the global 1
    second = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    second.close()
    admin.ok("DELETE", policy_path(topic, "maxProducers"))  # the global 1 again, over the namespace's 5
    admin.ok("POST", f"{NS}/{ns}/maxProducersPerTopic", 5)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    first.close()


def test_backlog_quotas_and_a_subscription_dispatch_rate_per_kind(admin: Admin) -> None:
    _, topic = new_topic(admin)
    base = f"/admin/v2/{rest_path(topic)}"
    size = "?backlogQuotaType=destination_storage"
    age = "?backlogQuotaType=message_age"
    global_quota = {"limitSize": 5 << 20, "limitTime": -1, "policy": "producer_request_hold"}
    local_age = {"limitSize": -1, "limitTime": 600, "policy": "producer_exception"}
    assert admin.post(f"{base}/backlogQuota{size}&isGlobal=true", global_quota).status == 204
    assert admin.post(f"{base}/backlogQuota{age}", local_age).status == 204
    def limits(quotas: dict[str, dict[str, object]]) -> dict[str, tuple[object, object, object]]:
        return {kind: (q["limitSize"], q["limitTime"], q["policy"]) for kind, q in quotas.items()}

    assert limits(admin.ok("GET", f"{base}/backlogQuotaMap{GLOBAL}")) == {
        "destination_storage": (5 << 20, -1, "producer_request_hold")}
    assert limits(admin.ok("GET", f"{base}/backlogQuotaMap")) == {"message_age": (-1, 600, "producer_exception")}
    # (applied: the topic's own map when it has one, as Pulsar answers; the broker enforces both types, below)
    assert limits(admin.ok("GET", f"{base}/backlogQuotaMap?applied=true")) == {
        "message_age": (-1, 600, "producer_exception")}
    assert admin.delete(f"{base}/backlogQuota{size}&isGlobal=true").status == 204
    assert admin.ok("GET", f"{base}/backlogQuotaMap{GLOBAL}") == {}

    rate = {"dispatchThrottlingRateInMsg": 5, "dispatchThrottlingRateInByte": 1000, "ratePeriodInSecond": 2,
            "relativeToPublishRate": False}
    sub_rate = policy_path(topic, "billing/dispatchRate")
    assert admin.post(sub_rate + GLOBAL, rate).status == 204
    assert admin.ok("GET", sub_rate + GLOBAL) == rate
    assert admin.get(sub_rate).unset
    assert admin.ok("GET", sub_rate + "?applied=true") == rate
    assert admin.delete(sub_rate + GLOBAL).status == 204
    assert admin.get(sub_rate + GLOBAL).unset


def test_the_broker_enforces_a_global_backlog_quota_type_by_type(admin: Admin, client: pulsar.Client) -> None:
    """A global storage quota applies beside a local quota of the other type (the map is resolved per type)."""
    _, topic = new_topic(admin, "quota")
    base = f"/admin/v2/{rest_path(topic)}"
    consumer = client.subscribe(topic, "slow")
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(5):
        producer.send(b"x" * 100)
    admin.ok("POST", f"{base}/backlogQuota?backlogQuotaType=message_age",
             {"limitSize": -1, "limitTime": 3600, "policy": "producer_exception"})
    admin.ok("POST", f"{base}/backlogQuota?backlogQuotaType=destination_storage&isGlobal=true",
             {"limitSize": 100, "limitTime": -1, "policy": "producer_exception"})
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer(topic)
    admin.ok("DELETE", f"{base}/backlogQuota?backlogQuotaType=destination_storage&isGlobal=true")
    client.create_producer(topic).close()
    producer.close()
    consumer.close()


def test_delete_policies_removes_local_and_global(admin: Admin, client: pulsar.Client) -> None:
    ns, topic = new_topic(admin)
    admin.ok("POST", policy_path(topic, "maxProducers"), 1)
    admin.ok("POST", policy_path(topic, "maxConsumers") + GLOBAL, 1)
    admin.ok("POST", policy_path(topic, "retention") + GLOBAL, {"retentionTimeInMinutes": 5, "retentionSizeInMB": 5})
    assert admin.delete(f"/admin/v2/{rest_path(topic)}/policies").status == 204
    for policy in ("maxProducers", "maxConsumers", "retention", "subscriptionTypesEnabled"):
        for suffix in ("", GLOBAL):  # (none of either kind: subscriptionTypesEnabled is no content again)
            assert is_unset(admin.get(policy_path(topic, policy) + suffix), policy), (policy, suffix)
    producers = [client.create_producer(topic) for _ in range(2)]  # no limit left
    for p in producers:
        p.close()
    # As Pulsar's: no check that the topic (or any policy) exists; a bad name is still refused.
    assert admin.delete(f"/admin/v2/persistent/{ns}/never-made/policies").status == 204
    reply = admin.delete("/admin/v2/persistent/public/bad$ns/t/policies")
    assert (reply.status, reply.reason) == (412, "Topic name is not valid")


def test_global_replication_clusters_stay_within_the_namespace_s(admin: Admin) -> None:
    """Pulsar's internalSetReplicationClusters for global topic policies: they are copied to the namespace's
    replication clusters only, so the namespace must replicate and the list name none but its clusters; the local
    cluster may be left out (the local-policy rule is not theirs)."""
    other = f"other-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/admin/v2/clusters/{other}", {"serviceUrl": "http://127.0.0.9:8080"})
    third = f"third-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/admin/v2/clusters/{third}", {"serviceUrl": "http://127.0.0.10:8080"})
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["standalone", other, third]})
    ns = admin.new_namespace(tenant)
    topic = f"persistent://{ns}/t"
    admin.ok("PUT", f"/admin/v2/{rest_path(topic)}")
    path = policy_path(topic, "replication") + GLOBAL
    reply = admin.post(path, ["standalone"])
    assert (reply.status, reply.reason) == (
        412, "Please do not use the global topic level policy when namespace-level replication is not enabled, "
             "because the global level policy relies on namespace-level replication")
    admin.ok("POST", f"{NS}/{ns}/replication", ["standalone", other])
    reply = admin.post(path, ["standalone", third])
    assert (reply.status, reply.reason) == (
        412, "The policies at the global topic level will only be copied to the clusters included in the namespace "
             "level replication. Therefore, please do not set the policies including other clusters")
    assert admin.post(path, ["standalone", other]).status == 204
    assert admin.ok("GET", path) == ["standalone", other]
    assert admin.get(policy_path(topic, "replication")).unset
    # Without the local cluster (allowed for a global list): in force, so the topic leaves this cluster, deleted here
    # as Pulsar deletes a topic whose replication clusters no longer hold the local one.
    assert admin.post(path, [other]).status == 204
    wait_for(lambda: admin.get(f"/admin/v2/{rest_path(topic)}/stats").status == 404, what="the topic to be deleted")
    admin.ok("DELETE", f"{NS}/{ns}")
    admin.ok("DELETE", f"/admin/v2/tenants/{tenant}")
    for cluster in (other, third):
        admin.ok("DELETE", f"/admin/v2/clusters/{cluster}")


def test_global_policies_survive_a_restart_and_go_with_their_topic(tmp_path: Path) -> None:
    with BrokerThread(data_dir=tmp_path) as broker:
        admin = Admin(broker.web_url)
        _, topic = new_topic(admin)
        admin.ok("POST", policy_path(topic, "maxProducers") + GLOBAL, 4)
        assert admin.get(policy_path(topic, "maxProducers")).unset
    with BrokerThread(data_dir=tmp_path) as broker:
        admin = Admin(broker.web_url)
        assert admin.ok("GET", policy_path(topic, "maxProducers") + GLOBAL) == 4
        assert broker.server.service.metadata.topic_policy(topic, "maxProducerPerTopic", is_global=True) == 4
        assert L.GLOBAL_TOPIC_POLICIES.path(topic).startswith(L.GLOBAL_TOPIC_POLICIES_ROOT + "/")
        admin.ok("DELETE", f"/admin/v2/{rest_path(topic)}")
        admin.ok("PUT", f"/admin/v2/{rest_path(topic)}")
        assert admin.get(policy_path(topic, "maxProducers") + GLOBAL).unset


def test_changes_wait_in_the_store_until_taken_and_go_with_their_cluster(tmp_path: Path) -> None:
    """Each global change is kept in the metadata store, one queue per namespace and other cluster, until that
    cluster took it (here: "near", this very broker, which stores a copy without copying it on) or refused it
    ("refusing": a 404); an unreachable cluster's ("far") survive a restart, in order, a newer change of a policy
    having replaced the older; a deleted topic's stay; a cluster no longer among the namespace's replication
    clusters loses its queue, and so does every cluster when the namespace is deleted."""
    def link_clusters(admin: Admin, web_url: str) -> None:
        for cluster, url in (("far", "http://127.0.0.1:1"), ("near", web_url), ("refusing", f"{web_url}/nowhere")):
            method = "POST" if admin.get(f"/admin/v2/clusters/{cluster}").status == 200 else "PUT"
            admin.ok(method, f"/admin/v2/clusters/{cluster}", {"serviceUrl": url})

    def waiting(broker: BrokerThread, cluster: str) -> list[tuple[str, str, object]] | None:
        doc = broker.server.service.metadata.global_policy_copies.get(C.queue_key(ns, cluster))
        return None if doc is None else [(c.call.method, c.call.policy_path, c.call.body) for c in C.changes(doc)]

    with BrokerThread(data_dir=tmp_path) as broker:
        admin = Admin(broker.web_url)
        link_clusters(admin, broker.web_url)
        tenant = f"t-{uuid.uuid4().hex[:6]}"
        admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["standalone", "far", "near", "refusing"]})
        ns = admin.new_namespace(tenant)
        admin.ok("POST", f"{NS}/{ns}/replication", ["standalone", "far", "near", "refusing"])
        topic = f"persistent://{ns}/t"
        admin.ok("PUT", f"/admin/v2/{rest_path(topic)}")
        admin.ok("POST", policy_path(topic, "maxProducers") + GLOBAL, 4)
        assert waiting(broker, "far") == [("POST", "maxProducers", 4)]  # (stored before the call answered)
        admin.ok("POST", policy_path(topic, "messageTTL") + GLOBAL + "&messageTTL=60")
        admin.ok("POST", policy_path(topic, "maxProducers") + GLOBAL, 5)
        wait_for(lambda: waiting(broker, "near") is None and waiting(broker, "refusing") is None,
                 what="near to take the changes and refusing to refuse them")
        assert waiting(broker, "far") == [("POST", "messageTTL", None), ("POST", "maxProducers", 5)]
    with BrokerThread(data_dir=tmp_path) as broker:
        admin = Admin(broker.web_url)
        assert waiting(broker, "far") == [("POST", "messageTTL", None), ("POST", "maxProducers", 5)]
        link_clusters(admin, broker.web_url)
        admin.ok("DELETE", f"/admin/v2/{rest_path(topic)}")
        other = f"persistent://{ns}/u"
        admin.ok("PUT", f"/admin/v2/{rest_path(other)}")
        admin.ok("POST", policy_path(other, "maxConsumers") + GLOBAL, 2)
        assert waiting(broker, "far") == [("POST", "messageTTL", None), ("POST", "maxProducers", 5),
                                          ("POST", "maxConsumers", 2)]
        admin.ok("POST", f"{NS}/{ns}/replication", ["standalone", "near"])
        wait_for(lambda: waiting(broker, "far") is None, what="far's queue to go with far")
        admin.ok("POST", f"{NS}/{ns}/replication", ["standalone", "far"])
        admin.ok("POST", policy_path(other, "maxConsumers") + GLOBAL, 3)
        assert waiting(broker, "far") == [("POST", "maxConsumers", 3)]
        admin.ok("DELETE", f"/admin/v2/{rest_path(other)}")
        admin.ok("DELETE", f"{NS}/{ns}")
        wait_for(lambda: waiting(broker, "far") is None, what="the queue to go with its namespace")
