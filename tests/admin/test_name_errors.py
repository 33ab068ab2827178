"""Bad and missing names over the admin REST v2 and the HTTP lookup: the status and the words of Apache Pulsar 4.0.7.

Each expected answer was read from Pulsar's bytecode (javap of AdminResource.validateNamespaceName /
validateTopicName / validatePartitionedTopicName, TenantsBase, NamedEntity.checkName: ``^[-=:.\\w]*$``) and checked
against a live Pulsar 4.0.7 standalone with the same requests, as a super user (authorization off). Clients match on
these words: the Java admin client's exceptions carry them.

- A tenant or namespace name Pulsar refuses is a 412 before anything is looked up: "Namespace name is not valid" on
  the namespace routes and where a namespace's topics are listed, "Topic name is not valid" on a topic's routes,
  "Tenant name is not valid" where a tenant's namespaces are listed or a tenant is created. (Pulsar's tenant routes
  look the tenant up without checking its name: a 404.)
- A missing tenant or namespace is a 404 whose words depend on the route family (below).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from broker.embedded import Broker
from tests.admin.conftest import Admin

NS = "/admin/v2/namespaces"
T = "/admin/v2/tenants"
P = "/admin/v2/persistent"
NP = "/admin/v2/non-persistent"
BAD = "bad$name"  # ('$' is not in Pulsar's NamedEntity pattern)
CLUSTER = {"allowedClusters": ["standalone"]}


def answer(admin: Admin, method: str, path: str, body: object = None) -> tuple[int, str]:
    reply = admin.call(method, path, body)
    return reply.status, reply.reason


TENANT_CASES = [
    ("GET", f"{T}/no-such-tenant", None, 404, "Tenant does not exist"),
    ("GET", f"{T}/{BAD}", None, 404, "Tenant does not exist"),
    ("PUT", f"{T}/{BAD}", CLUSTER, 412, "Tenant name is not valid"),
    ("PUT", f"{T}/bad%20name", CLUSTER, 412, "Tenant name is not valid"),
    ("POST", f"{T}/no-such-tenant", CLUSTER, 404, "Tenant no-such-tenant not found"),
    ("DELETE", f"{T}/no-such-tenant", None, 404, "Tenant doesn't exist"),
    ("PUT", f"{T}/public", CLUSTER, 409, "Tenant already exist"),
    ("PUT", "/admin/v2/clusters/bad$name", {"serviceUrl": "http://localhost:1"}, 412, "Cluster name is not valid"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "reason"), TENANT_CASES)
def test_tenant_routes(admin: Admin, method: str, path: str, body: object, status: int, reason: str) -> None:
    assert answer(admin, method, path, body) == (status, reason)


NAMESPACE_CASES = [
    ("GET", f"{NS}/no-such-tenant", None, 404, "Tenant not found"),
    ("GET", f"{NS}/{BAD}", None, 412, "Tenant name is not valid"),
    ("GET", f"{NS}/public/no-such-ns", None, 404, "Namespace does not exist"),
    ("GET", f"{NS}/no-such-tenant/ns", None, 404, "Namespace does not exist"),
    ("GET", f"{NS}/public/no-such-ns/retention", None, 404, "Namespace does not exist"),
    ("GET", f"{NS}/public/no-such-ns/topics", None, 404, "Namespace does not exist"),
    ("GET", f"{NS}/no-such-tenant/ns/messageTTL", None, 404, "Namespace does not exist"),
    ("PUT", f"{NS}/no-such-tenant/ns", None, 404, "Tenant does not exist"),
    ("DELETE", f"{NS}/public/no-such-ns", None, 404, "Namespace public/no-such-ns does not exist."),
    ("DELETE", f"{NS}/no-such-tenant/ns", None, 404, "Namespace no-such-tenant/ns does not exist."),
    ("PUT", f"{NS}/public/default", None, 409, "Namespace already exists"),
    ("POST", f"{NS}/public/no-such-ns/retention", {"retentionTimeInMinutes": 1, "retentionSizeInMB": 1}, 404,
     "Namespace policies does not exist"),
    ("DELETE", f"{NS}/public/no-such-ns/retention", None, 404, "Namespace policies does not exist"),
    ("POST", f"{NS}/public/no-such-ns/messageTTL", 60, 404, "Namespace does not exist"),
    ("POST", f"{NS}/public/no-such-ns/permissions/role", ["produce"], 404, "Topic's namespace does not exist"),
] + [
    (method, f"{NS}/{path}{tail}", None, 412, "Namespace name is not valid")
    for path in (f"public/{BAD}", f"{BAD}/ns", "t%C3%A9/ns")  # ('é': Java's \w is ASCII only)
    for method, tail in (("GET", ""), ("PUT", ""), ("DELETE", ""), ("GET", "/retention"), ("GET", "/topics"),
                         ("GET", "/messageTTL"))
]


@pytest.mark.parametrize(("method", "path", "body", "status", "reason"), NAMESPACE_CASES)
def test_namespace_routes(admin: Admin, method: str, path: str, body: object, status: int, reason: str) -> None:
    assert answer(admin, method, path, body) == (status, reason)


def topic_cases(base: str, domain: str) -> list[tuple[str, str, object, int, str]]:
    cases: list[tuple[str, str, object, int, str]] = []
    for ns in ("public/no-such-ns", "no-such-tenant/ns"):
        cases += [
            ("GET", f"{base}/{ns}", None, 404, "Namespace does not exist"),
            ("GET", f"{base}/{ns}/partitioned", None, 404, "Namespace does not exist"),
            ("PUT", f"{base}/{ns}/t", None, 404, "Namespace not found"),
            ("GET", f"{base}/{ns}/t/stats", None, 404, "Namespace not found"),
            ("PUT", f"{base}/{ns}/t/partitions", 2, 404, "Namespace not found"),
            ("GET", f"{base}/{ns}/t/partitions", None, 404, "Namespace not found"),
            ("GET", f"/lookup/v2/topic/{domain}/{ns}/t", None, 404, "Namespace not found"),
        ]
        if domain == "persistent":  # (the namespace is not looked up first: the topic is not found)
            cases.append(("DELETE", f"{base}/{ns}/t", None, 404, f"Topic persistent://{ns}/t not found"))
    for ns in (f"public/{BAD}", f"{BAD}/ns"):
        cases += [
            ("GET", f"{base}/{ns}", None, 412, "Namespace name is not valid"),
            ("GET", f"{base}/{ns}/partitioned", None, 412, "Namespace name is not valid"),
            ("PUT", f"{base}/{ns}/t", None, 412, "Namespace name is not valid"),
            ("PUT", f"{base}/{ns}/t/partitions", 2, 412, "Namespace name is not valid"),
            ("GET", f"{base}/{ns}/t/stats", None, 412, "Topic name is not valid"),
            ("GET", f"{base}/{ns}/t/partitions", None, 412, "Topic name is not valid"),
            ("DELETE", f"{base}/{ns}/t", None, 412, "Topic name is not valid"),
            ("PUT", f"{base}/{ns}/t/unload", None, 412, "Topic name is not valid"),
            # (Pulsar: a 500, its IllegalArgumentException uncaught; ours its admin API's 412)
            ("GET", f"/lookup/v2/topic/{domain}/{ns}/t", None, 412, "Topic name is not valid"),
        ]
    full = f"{domain}://public/default/no-such-topic"
    missing = f"{base}/public/default/no-such-topic"
    cases += [
        ("GET", f"{missing}/stats", None, 404, f"Topic {full} not found"),
        ("GET", f"{missing}/subscriptions", None, 404, f"Topic {full} not found"),
        ("PUT", f"{missing}/unload", None, 404, f"Topic {full} not found"),
        ("POST", f"{missing}/partitions", 3, 409, f"Topic {full} is not the partitioned topic."),
        ("DELETE", f"{missing}/partitions", None, 404, f"Topic {full} not found."),
        ("GET", f"{missing}/partitioned-internalStats", None, 404, f"Partitioned Topic {full} not found"),
        ("POST", f"{missing}/createMissedPartitions", None, 404, f"Topic {full} does not exist"),
        ("PUT", f"{base}/public/default/x-partition-abc/partitions", 2, 412,
         "Partitioned Topic Name should not contain '-partition-'"),
        # (Pulsar's PersistentTopics.createMissedPartitions: validatePartitionedTopicName first)
        ("POST", f"{base}/public/default/x-partition-abc/createMissedPartitions", None, 412,
         "Partitioned Topic Name should not contain '-partition-'"),
        ("POST", f"{base}/public/default/x-partition-0/createMissedPartitions", None, 412,
         "Partitioned Topic Name should not contain '-partition-'"),
        # (PersistentTopicsBase.internalCheckTopicExists, allowAclChangesOnNonExistentTopics being false)
        ("GET", f"{missing}/permissions", None, 404, f"Topic {full} not found"),
        ("POST", f"{missing}/permissions/app", ["consume"], 404, f"Topic {full} not found"),
        ("DELETE", f"{missing}/permissions/app", None, 404, f"Topic {full} not found"),
    ]
    # (the persistent and non-persistent resources of Pulsar word this one differently)
    cases.append(("GET", f"{missing}/partitioned-stats", None, 404,
                  f"Partitioned Topic {full} not found" if domain == "persistent"
                  else f"Partitioned topic not found {full}"))
    return cases


TOPIC_CASES = topic_cases(P, "persistent") + topic_cases(NP, "non-persistent")
TOPIC_CASES.append(("DELETE", f"{P}/public/default/no-such-topic", None, 404,
                    "Topic persistent://public/default/no-such-topic not found"))
TOPIC_CASES.append(("GET", f"{P}/public/default/no-such-topic/internalStats", None, 404,
                    "Topic persistent://public/default/no-such-topic not found"))
TOPIC_CASES.append(("POST", f"{P}/public/default/no-such-topic/terminate", None, 404,
                    "Topic persistent://public/default/no-such-topic not found"))
TOPIC_CASES.append(("PUT", f"{P}/public/default/t-partition-1/partitions", 2, 412,
                    "Partitioned Topic Name should not contain '-partition-'"))


@pytest.mark.parametrize(("method", "path", "body", "status", "reason"), TOPIC_CASES)
def test_topic_and_lookup_routes(admin: Admin, method: str, path: str, body: object, status: int,
                                 reason: str) -> None:
    assert answer(admin, method, path, body) == (status, reason)


def test_partitioned_routes_on_a_non_partitioned_topic(admin: Admin) -> None:
    """A non-partitioned topic that exists: growing or deleting it as a partitioned topic is a 409, in Pulsar's words;
    its partitioned stats are the 404 of a partitioned topic that does not exist."""
    full = f"persistent://public/default/plain-{uuid.uuid4().hex[:8]}"
    path = f"{P}/{full.removeprefix('persistent://')}"
    admin.ok("PUT", path)
    assert answer(admin, "POST", f"{path}/partitions", 3) == (409, f"Topic {full} is not the partitioned topic.")
    assert answer(admin, "DELETE", f"{path}/partitions") == (
        409, f"{full} is a non-partitioned topic. Instead of calling delete-partitioned-topic please call delete.")
    assert answer(admin, "GET", f"{path}/partitioned-stats") == (404, f"Partitioned Topic {full} not found")


def test_topic_routes_on_a_partitioned_topic(admin: Admin) -> None:
    """A partitioned topic's own name on a one-topic route: Pulsar's 404 "not found" (its partitions are the topics);
    deleting it as a topic is a 409 that names the right call."""
    full = f"persistent://public/default/parted-{uuid.uuid4().hex[:8]}"
    path = f"{P}/{full.removeprefix('persistent://')}"
    admin.ok("PUT", f"{path}/partitions", 2)
    assert answer(admin, "GET", f"{path}/stats") == (404, f"Topic {full} not found")
    assert answer(admin, "GET", f"{path}/internalStats") == (404, f"Topic {full} not found")
    assert answer(admin, "DELETE", path) == (
        409, f"{full} is a partitioned topic, instead of calling delete topic, please call delete-partitioned-topic.")


def test_a_missing_subscription_of_a_topic(admin: Admin) -> None:
    """A subscription a (non-partitioned) persistent topic does not have: Pulsar's 404 names the topic."""
    full = f"persistent://public/default/subs-{uuid.uuid4().hex[:8]}"
    path = f"{P}/{full.removeprefix('persistent://')}"
    admin.ok("PUT", f"{path}/subscription/present")
    reason = f"Subscription absent not found for topic {full}"
    for method, tail in (("DELETE", ""), ("POST", "/skip_all"), ("POST", "/skip/1"), ("POST", "/expireMessages/10")):
        assert answer(admin, method, f"{path}/subscription/absent{tail}") == (404, reason), (method, tail)


@pytest.mark.parametrize("path", ["public/default/no-such-topic", "public/no-such-ns/t", "no-such-tenant/ns/t"])
def test_deleting_a_missing_non_persistent_topic(admin: Admin, path: str) -> None:
    """Pulsar's NonPersistentTopics deletes whatever is loaded under the name, whatever its namespace: nothing there
    is a 204, not a 404."""
    reply = admin.call("DELETE", f"{NP}/{path}")
    assert (reply.status, reply.body) == (204, b"")


def test_deleting_a_missing_persistent_partition_name(admin: Admin) -> None:
    """DELETE of a persistent "-partition-<n>" name that is no topic: Pulsar 4.0.7's 404 "Topic <name> not found"
    (PersistentTopics.deleteTopic -> BrokerService.deleteTopic: not loaded, so the managed ledger's delete, which
    fails with ManagedLedgerNotFoundException), whether its base name is no topic, a non-partitioned topic, or a
    partitioned topic the index is past. Checked on a live standalone, with and without force. (Pulsar's 204 for a
    partition never written to of an admin-created partitioned topic comes from AdminResource.tryCreatePartitionsAsync
    creating each partition's managed ledger with it; ours creates them on first use.)"""
    ns = admin.new_namespace()
    admin.ok("PUT", f"{P}/{ns}/plain")
    admin.ok("PUT", f"{P}/{ns}/parted/partitions", 2)
    for local in ("absent-partition-0", "plain-partition-0", "parted-partition-2"):
        for query in ("", "?force=true"):
            assert answer(admin, "DELETE", f"{P}/{ns}/{local}{query}") == (
                404, f"Topic persistent://{ns}/{local} not found"), (local, query)


@pytest.mark.parametrize("domain", ["persistent", "non-persistent"])
def test_partition_names_of_topics_that_are_not_there(admin: Admin, domain: str) -> None:
    """A partition's name that is no topic: Pulsar's 404 says why (topicNotFoundReasonAsync): a partition past the
    partitioned topic's count was "not yet created"; a partition of a topic that is not partitioned names that."""
    parted = f"{domain}/public/default/parted-{uuid.uuid4().hex[:8]}"
    admin.ok("PUT", f"/admin/v2/{parted}/partitions", 2)
    for tail in ("stats", "internalStats", "subscriptions"):
        if domain == "non-persistent" and tail == "internalStats":
            continue
        assert answer(admin, "GET", f"/admin/v2/{parted}-partition-5/{tail}") == (
            404, "Topic partitions were not yet created"), tail
    assert answer(admin, "PUT", f"/admin/v2/{parted}-partition-5/unload") == (
        404, "Topic partitions were not yet created")
    plain = f"{domain}/public/default/plain-{uuid.uuid4().hex[:8]}"
    assert answer(admin, "GET", f"/admin/v2/{plain}-partition-0/stats") == (
        404, f"Partitioned Topic not found: {plain.replace('/', '://', 1)}-partition-0 has zero partitions")


@pytest.mark.parametrize("domain", ["persistent", "non-persistent"])
def test_unloading_a_partitioned_topic_whose_partitions_were_never_used(admin: Admin, domain: str) -> None:
    """Nothing of it is loaded, nothing to unload: 204 (Pulsar creates the partitions with the partitioned topic, so
    its unload of each of them succeeds)."""
    parted = f"/admin/v2/{domain}/public/default/parted-{uuid.uuid4().hex[:8]}"
    admin.ok("PUT", f"{parted}/partitions", 2)
    reply = admin.call("PUT", f"{parted}/unload")
    assert (reply.status, reply.body) == (204, b"")


def test_peeking_a_missing_subscription_creates_it(admin: Admin) -> None:
    """Pulsar's peek (getSubscriptionReference) creates a subscription that is not there, durable, at the earliest
    message: on an empty topic the answer is 404 "Message not found", and the subscription stays."""
    path = f"{P}/public/default/peek-{uuid.uuid4().hex[:8]}"
    admin.ok("PUT", path)
    assert answer(admin, "GET", f"{path}/subscription/absent/position/1") == (404, "Message not found")
    assert admin.ok("GET", f"{path}/subscriptions") == ["absent"]


@pytest.mark.parametrize("domain", ["persistent", "non-persistent"])
def test_partitioned_metadata_of_topics_that_are_not_there(admin: Admin, domain: str) -> None:
    """GET .../partitions (Pulsar's internalGetPartitionedMetadataAsync): a topic that is not there is a 404 "Topic
    <name> not found", unless the caller asks checkAllowAutoCreation=true (the clients' HTTP lookup does) and the
    namespace's auto-creation would create it; a partition past its partitioned topic's count is not there either."""
    ns = admin.new_namespace()
    missing = f"{domain}://{ns}/absent"
    path = f"/admin/v2/{domain}/{ns}/absent/partitions"
    assert answer(admin, "GET", path) == (404, f"Topic {missing} not found")
    assert answer(admin, "GET", f"{path}?checkAllowAutoCreation=false") == (404, f"Topic {missing} not found")
    assert admin.ok("GET", f"{path}?checkAllowAutoCreation=true") == {"partitions": 0, "deleted": False}
    parted = f"/admin/v2/{domain}/{ns}/parted"
    admin.ok("PUT", f"{parted}/partitions", 2)
    assert admin.ok("GET", f"{parted}-partition-1/partitions") == {"partitions": 0, "deleted": False}
    assert answer(admin, "GET", f"{parted}-partition-2/partitions?checkAllowAutoCreation=true") == (
        404, f"Topic {domain}://{ns}/parted-partition-2 not found")
    admin.ok("POST", f"{NS}/{ns}/autoTopicCreation", {"allowAutoTopicCreation": False})
    assert answer(admin, "GET", f"{path}?checkAllowAutoCreation=true") == (404, f"Topic {missing} not found")
    if domain == "persistent":
        admin.ok("PUT", f"/admin/v2/{domain}/{ns}/present")
        assert admin.ok("GET", f"/admin/v2/{domain}/{ns}/present/partitions") == {"partitions": 0, "deleted": False}


async def test_permissions_of_a_topic_that_is_not_there_when_allowed() -> None:
    """allowAclChangesOnNonExistentTopics=true (Pulsar's setting): a topic's permissions are read, granted and revoked
    without the topic."""
    async with Broker(allowAclChangesOnNonExistentTopics=True) as b:
        admin = Admin(b.web_url)
        base = "/admin/v2/persistent/public/default/not-created/permissions"
        await asyncio.to_thread(admin.ok, "POST", f"{base}/app", ["consume"])
        assert await asyncio.to_thread(admin.ok, "GET", base) == {"app": ["consume"]}
        await asyncio.to_thread(admin.ok, "DELETE", f"{base}/app")
