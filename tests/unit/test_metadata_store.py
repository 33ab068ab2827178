"""The broker's metadata over a metadata store: named operations at Pulsar's paths and in its
JSON (golden values), refusals that change nothing, compare-and-set against other writers, the
cache kept fresh by notifications and re-read on reconnection, the one-time import of the old
metadata.json."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from broker.metadata import layout as L
from broker.metadata.cache import CAS_ATTEMPTS
from broker.metadata.store import (
    AlreadyExistsError,
    BrokerMetadata,
    ConflictError,
    InUseError,
    InvalidError,
    NotFoundError,
    TenantInfo,
)
from metadata_store.api import MetadataStore, SessionEvent
from metadata_store.memory import MemoryMetadataStore
from tests.waiting import eventually

TOPIC = "persistent://acme/ns/t"
PARTED = "persistent://acme/ns/p"
OTHER_PARTED = "persistent://acme/ns/q"


async def node(store: MetadataStore, path: str) -> Any:
    """The JSON at ``path`` as a plain reader (a Pulsar broker, zkCli) sees it."""
    result = await store.get(path)
    assert result is not None, f"no node at {path}"
    return json.loads(result.value)


@pytest.fixture
def tree() -> str:
    """The name of a fresh in-memory tree: stores opened with it are sessions sharing it."""
    return f"test-{uuid.uuid4().hex}"


@pytest.fixture
async def store(tree: str) -> AsyncIterator[MemoryMetadataStore]:
    s = MemoryMetadataStore(tree)
    yield s
    await s.close()


# The stored Policies of the namespaces the bootstrap creates.
DEFAULT_NS = {"replication_clusters": ["standalone"],
              "bundles": {"boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
                          "numBundles": 4}}


@pytest.fixture
async def metadata(store: MemoryMetadataStore) -> AsyncIterator[BrokerMetadata]:
    m = BrokerMetadata("standalone")
    await m.start(store)
    yield m
    await m.close()


async def test_bootstrap_is_pulsars_initial_metadata(metadata: BrokerMetadata, store: MetadataStore) -> None:
    assert await store.get_children("/admin/clusters") == ["standalone"]
    assert await node(store, "/admin/clusters/standalone") == {}
    for tenant in ("public", "pulsar"):
        assert await node(store, f"/admin/policies/{tenant}") == {"adminRoles": [], "allowedClusters": ["standalone"]}
    # Completed as Pulsar's validatePolicies does (an Apache Pulsar broker refuses lookups in a namespace without
    # replication clusters): the local cluster, and defaultNumberOfNamespaceBundles equal bundles.
    for ns in ("public/default", "pulsar/system"):
        assert await node(store, f"/admin/policies/{ns}") == DEFAULT_NS


async def test_the_first_broker_fills_in_the_clusters_urls_once(metadata: BrokerMetadata, store: MetadataStore) -> None:
    """Cluster mode: the cluster's URLs stored as Pulsar's metadata set-up stores them, by the first broker; another
    broker's, or URLs stored by an admin or by Pulsar's own set-up tool, are kept."""
    first = {"serviceUrl": "http://b1:8080", "brokerServiceUrl": "pulsar://b1:6650"}
    await metadata.fill_cluster_urls("standalone", first)
    await metadata.fill_cluster_urls("standalone", {"serviceUrl": "http://b2:8080",
                                                    "brokerServiceUrl": "pulsar://b2:6650"})
    assert await node(store, "/admin/clusters/standalone") == first
    await metadata.fill_cluster_urls("standalone", {"serviceUrl": "http://b2:8080", "serviceUrlTls": "https://b2"})
    assert await node(store, "/admin/clusters/standalone") == {**first, "serviceUrlTls": "https://b2"}
    await metadata.fill_cluster_urls("nowhere", first)  # (not this broker's cluster's business)
    assert "nowhere" not in metadata.clusters


async def test_golden_values_at_pulsars_paths(metadata: BrokerMetadata, store: MetadataStore) -> None:
    m = metadata
    await m.create_cluster("east", {"serviceUrl": "http://east:8080", "brokerServiceUrl": "pulsar://east:6650"})
    await m.create_tenant("acme", TenantInfo(("admin",), ("standalone", "east")))
    await m.create_namespace("acme/ns", {"message_ttl_in_seconds": 60})
    await m.set_policy("acme/ns", "deduplicationEnabled", True)
    await m.grant_namespace_permission("acme/ns", "app", ["produce"])
    await m.grant_topic_permission("acme/ns", TOPIC, "reader", ["consume"])
    await m.grant_subscription_permission("acme/ns", "sub", ["app"])
    await m.create_partitioned_topic(PARTED, 3, {"owner": "me"})
    await m.create_partitioned_topic("non-persistent://acme/ns/a b~c", 2)
    await m.set_topic_policy(PARTED, "maxProducerPerTopic", 2)
    await m.set_topic_properties(TOPIC, {"tier": "gold"})
    await m.mark_terminated(TOPIC, 4, 5)
    await m.set_compaction(TOPIC, "ledger-x", (4, 2), 1)
    assert await m.add_schema_version(TOPIC, {"type": 1}) == 0
    assert await m.add_schema_version(TOPIC, {"type": 2}) == 1

    # ClusterData, TenantInfo, Policies (with AuthPolicies), PartitionedTopicMetadata, TopicPolicies:
    assert await node(store, "/admin/clusters/east") == {"serviceUrl": "http://east:8080",
                                                         "brokerServiceUrl": "pulsar://east:6650"}
    assert (await store.get("/admin/policies/acme")).value == (  # type: ignore[union-attr]
        b'{"adminRoles":["admin"],"allowedClusters":["standalone","east"]}')
    assert await node(store, "/admin/policies/acme/ns") == {
        "message_ttl_in_seconds": 60, "deduplicationEnabled": True, "replication_clusters": ["standalone"],
        # (Created without a count: defaultNumberOfNamespaceBundles equal bundles, as Pulsar stores them.)
        "bundles": {"boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
                    "numBundles": 4},
        "auth_policies": {"namespace_auth": {"app": ["produce"]},
                          "destination_auth": {TOPIC: {"reader": ["consume"]}},
                          "subscription_auth_roles": {"sub": ["app"]}}}
    assert (await store.get("/admin/partitioned-topics/acme/ns/persistent/p")).value == (  # type: ignore[union-attr]
        b'{"partitions":3,"properties":{"owner":"me"},"deleted":false}')
    # (The local name is encoded as Pulsar's Codec.encode does: a space is '+', '~' is %7E.)
    assert await node(store, "/admin/partitioned-topics/acme/ns/non-persistent/a+b%7Ec") == {
        "partitions": 2, "deleted": False}
    assert await node(store, "/admin/topic-policies/local/acme/ns/persistent/p") == {"maxProducerPerTopic": 2}
    # Ours, where Pulsar keeps these elsewhere (managed ledger, cursor properties, BookKeeper):
    assert await node(store, "/pulsar-py/topic-properties/acme/ns/persistent/t") == {"tier": "gold"}
    assert await node(store, "/pulsar-py/terminated/acme/ns/persistent/t") == {"ledgerId": 4, "entryId": 5}
    assert await node(store, "/pulsar-py/compactions/acme/ns/persistent/t") == {
        "ledger": "ledger-x", "horizon": [4, 2], "generation": 1}
    assert await store.get_children("/pulsar-py/schemas/acme/ns/persistent/t") == ["0000000000", "0000000001"]
    assert await node(store, "/pulsar-py/schemas/acme/ns/persistent/t/0000000001") == {"type": 2}
    assert not await store.exists("/schemas")  # (Pulsar's SchemaLocator path: never ours to write)

    # The cache answers at once, in the same formats; a fresh broker reads all of it back.
    again = BrokerMetadata("standalone")
    await again.start(store)
    for view in ("clusters", "tenants", "namespaces", "partitioned_topics", "compactions", "terminated",
                 "topic_policies", "topic_properties"):
        assert dict(getattr(again, view)) == dict(getattr(m, view)), view
    assert again.partitioned_topics["non-persistent://acme/ns/a b~c"] == 2
    assert again.topic_properties[PARTED] == {"owner": "me"}
    assert list(again.schema_versions(TOPIC)) == [{"type": 1}, {"type": 2}]
    assert again.tenant("acme") == TenantInfo(("admin",), ("standalone", "east"))
    await again.close()


async def test_deletes_remove_the_nodes(metadata: BrokerMetadata, store: MetadataStore) -> None:
    m = metadata
    await m.create_tenant("acme", TenantInfo((), ("standalone",)))
    await m.create_namespace("acme/ns", {})
    await m.create_partitioned_topic(PARTED, 2, {"k": "v"})
    await m.set_topic_policy(PARTED, "maxConsumerPerTopic", 1)
    await m.set_topic_properties(PARTED, {"k": "w"})
    assert await node(store, "/admin/partitioned-topics/acme/ns/persistent/p") == {
        "partitions": 2, "properties": {"k": "w"}, "deleted": False}
    await m.set_partitions(PARTED, 4)
    assert m.partitions_of(PARTED) == 4 and m.topic_properties[PARTED] == {"k": "w"}
    await m.delete_partitioned(PARTED)
    assert not await store.exists("/admin/partitioned-topics/acme/ns/persistent/p")
    assert not await store.exists("/admin/topic-policies/local/acme/ns/persistent/p")
    await m.set_topic_policy(TOPIC, "maxConsumerPerTopic", 1)
    await m.mark_terminated(TOPIC, 1, 2)
    await m.add_schema_version(TOPIC, {"type": 0})
    await m.forget_topic(TOPIC)
    await m.delete_schemas(TOPIC)
    for root in (L.TOPIC_POLICIES_ROOT, L.TERMINATED_ROOT, L.SCHEMAS_ROOT):
        assert not await store.exists(f"{root}/acme/ns/persistent/t"), root
    await m.delete_namespace("acme/ns")
    await m.delete_tenant("acme")
    assert not await store.exists("/admin/policies/acme")
    assert "acme" not in m.tenants and not m.topic_policies and not m.terminated


async def test_refusals_change_nothing(metadata: BrokerMetadata) -> None:
    store = metadata
    await store.create_tenant("acme", TenantInfo((), ("standalone",)))
    await store.create_namespace("acme/ns", {})
    generation = store.generation
    with pytest.raises(AlreadyExistsError, match="Cluster already exists"):
        await store.create_cluster("standalone", {})
    with pytest.raises(NotFoundError, match="Cluster does not exist"):
        await store.update_cluster("nowhere", {})
    with pytest.raises(InUseError, match="Cluster not empty"):
        await store.delete_cluster("standalone")
    with pytest.raises(InvalidError, match="Clusters do not exist"):
        await store.create_tenant("other", TenantInfo((), ("nowhere",)))
    with pytest.raises(AlreadyExistsError, match="Tenant already exists"):
        await store.create_tenant("acme", TenantInfo())
    with pytest.raises(InUseError, match="still has active namespaces"):
        await store.delete_tenant("acme")
    with pytest.raises(NotFoundError, match="Tenant does not exist"):
        await store.create_namespace("ghost/ns", {})
    with pytest.raises(AlreadyExistsError, match="Namespace already exists"):
        await store.create_namespace("acme/ns", {})
    with pytest.raises(NotFoundError, match="Namespace does not exist"):
        await store.set_policy("acme/none", "x", 1)
    with pytest.raises(NotFoundError, match="couldn't find subscription"):
        await store.revoke_subscription_permission("acme/ns", "sub", "role")
    assert store.generation == generation
    await store.create_partitioned_topic(PARTED, 2)
    generation = store.generation
    with pytest.raises(AlreadyExistsError, match="This topic already exists"):
        await store.create_partitioned_topic(PARTED, 4)
    with pytest.raises(InUseError, match="Cannot delete non empty namespace"):
        await store.delete_namespace("acme/ns")
    assert store.generation == generation


async def test_a_topic_revoke_takes_the_role_off_each_name_given(metadata: BrokerMetadata) -> None:
    """As Pulsar's PulsarAuthorizationProvider.revokePermissionAsync(TopicName, role) for each: a topic whose grants
    are left empty is dropped, one without the role's grant is passed over (no error), other roles stay."""
    m = metadata
    await m.create_tenant("acme", TenantInfo((), ("standalone",)))
    await m.create_namespace("acme/ns", {})
    part0, part1 = f"{PARTED}-partition-0", f"{PARTED}-partition-1"
    await m.grant_topic_permission("acme/ns", PARTED, "app", ["produce"])
    await m.grant_topic_permission("acme/ns", part0, "app", ["consume"])
    await m.grant_topic_permission("acme/ns", part1, "app", ["consume"])
    await m.grant_topic_permission("acme/ns", part1, "other", ["consume"])
    await m.revoke_topic_permission("acme/ns", [part0, part1, f"{PARTED}-partition-2", PARTED], "app")
    assert m.policy("acme/ns", "auth_policies")["destination_auth"] == {part1: {"other": ["consume"]}}
    await m.revoke_topic_permission("acme/ns", [TOPIC], "app")  # (nothing granted)
    assert m.policy("acme/ns", "auth_policies")["destination_auth"] == {part1: {"other": ["consume"]}}


async def test_a_cluster_with_isolation_policies_is_not_deleted(metadata: BrokerMetadata) -> None:
    # Pulsar 4.0.7's ClustersBase.internalDeleteClusterAsync: 412 "Cluster not empty" while the cluster has namespace
    # isolation policies; none left (an empty map), it is deleted with them.
    await metadata.create_cluster("other", {})
    await metadata.set_isolation_policy("other", "p", {"namespaces": ["acme/.*"], "primary": ["b1"]})
    with pytest.raises(InUseError, match="Cluster not empty"):
        await metadata.delete_cluster("other")
    assert "other" in metadata.clusters
    await metadata.set_isolation_policy("other", "p", None)
    await metadata.delete_cluster("other")
    assert "other" not in metadata.clusters and metadata.isolation_policies("other") is None


async def test_failure_domains_at_pulsars_path_and_seen_by_another_broker(store: MemoryMetadataStore) -> None:
    """FailureDomainResources: /admin/clusters/<cluster>/failureDomain/<domain>, a FailureDomainImpl; another
    broker's metadata sees a domain made, changed and deleted (the cache's notifications), and one a Pulsar broker
    wrote (brokers null: none)."""
    a, b = BrokerMetadata("standalone"), BrokerMetadata("standalone")
    await a.start(store)
    await b.start(store)
    await a.set_failure_domain("standalone", "d1", ["h1:8080", "h2:8080", "h1:8080"])
    assert await node(store, "/admin/clusters/standalone/failureDomain/d1") == {"brokers": ["h1:8080", "h2:8080"]}
    await eventually(lambda: b.failure_domains("standalone") == {"d1": {"brokers": ["h1:8080", "h2:8080"]}},
                     "b sees the new domain")
    assert b.broker_failure_domains("standalone") == {"h1:8080": "d1", "h2:8080": "d1"}
    with pytest.raises(InUseError, match=r"\[h2:8080\] already exists in d1"):
        await b.set_failure_domain("standalone", "d2", ["h3:8080", "h2:8080"])
    await a.set_failure_domain("standalone", "d1", ["h1:8080"])
    await store.put("/admin/clusters/standalone/failureDomain/d2", b'{"brokers":null}', None)  # (as Pulsar may)
    await eventually(lambda: b.failure_domains("standalone") == {"d1": {"brokers": ["h1:8080"]},
                                                                 "d2": {"brokers": []}}, "b sees the change")
    await a.delete_failure_domain("standalone", "d1")
    await eventually(lambda: b.failure_domain("standalone", "d1") is None, "b sees the deletion")
    with pytest.raises(NotFoundError, match="Domain-name d1 or cluster standalone does not exist"):
        await a.delete_failure_domain("standalone", "d1")
    with pytest.raises(NotFoundError):
        await a.set_failure_domain("nowhere", "d", [])
    await a.close()
    await b.close()


async def test_a_clusters_deletion_deletes_its_failure_domains(metadata: BrokerMetadata,
                                                               store: MemoryMetadataStore) -> None:
    await metadata.create_cluster("other", {})
    await metadata.set_failure_domain("other", "d", ["h1:8080"])
    await metadata.delete_cluster("other")
    assert not await store.exists("/admin/clusters/other")
    assert metadata.failure_domains("other") == {}


async def test_views_are_read_only(metadata: BrokerMetadata) -> None:
    with pytest.raises(TypeError):
        metadata.tenants["x"] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        del metadata.namespaces["public/default"]  # type: ignore[attr-defined]
    policies = metadata.namespace_policies("public/default")
    policies["message_ttl_in_seconds"] = 1  # a copy: the store is not changed
    assert metadata.policy("public/default", "message_ttl_in_seconds") is None


async def test_modify_policies_is_all_or_nothing(metadata: BrokerMetadata, store: MetadataStore) -> None:
    def half_done(policies: dict[str, object]) -> None:
        policies["message_ttl_in_seconds"] = 10
        raise ValueError("refused half-way")

    with pytest.raises(ValueError):
        await metadata.modify_policies("public/default", half_done)
    assert metadata.policy("public/default", "message_ttl_in_seconds") is None
    assert await node(store, "/admin/policies/public/default") == DEFAULT_NS


async def test_compare_and_set_keeps_both_writers_changes(tree: str, store: MemoryMetadataStore) -> None:
    """Two brokers change the same namespace at once: neither change is lost."""
    other = MemoryMetadataStore(tree)
    a, b = BrokerMetadata("standalone"), BrokerMetadata("standalone")
    await a.start(store)
    await b.start(other)
    orig_get = store.get
    rounds = 0

    async def get_then_b_writes(path: str, *, watch_missing: bool = True) -> Any:
        nonlocal rounds
        result = await orig_get(path, watch_missing=watch_missing)
        rounds += 1
        if rounds == 1:  # b writes between a's read and a's put: a's put fails, a reads again
            await b.set_policy("public/default", "deduplicationEnabled", True)
        return result

    store.get = get_then_b_writes  # type: ignore[method-assign]
    await a.set_policy("public/default", "message_ttl_in_seconds", 30)
    store.get = orig_get  # type: ignore[method-assign]
    assert rounds == 2
    expected = {**DEFAULT_NS, "message_ttl_in_seconds": 30, "deduplicationEnabled": True}
    assert await node(store, "/admin/policies/public/default") == expected
    await eventually(lambda: a.namespace_policies("public/default") == expected
                     and b.namespace_policies("public/default") == expected, "both caches agree")
    await a.close()
    await b.close()
    await other.close()


async def test_a_writer_that_always_loses_gives_up_with_a_conflict(metadata: BrokerMetadata,
                                                                   store: MemoryMetadataStore) -> None:
    rounds = 0

    def change(policies: dict[str, Any]) -> None:
        nonlocal rounds
        rounds += 1
        policies["message_ttl_in_seconds"] = rounds

    orig_get = store.get

    async def someone_else_always_first(path: str, *, watch_missing: bool = True) -> Any:
        result = await orig_get(path, watch_missing=watch_missing)
        await store.put(path, b"{}", None)  # another writer, every time
        return result

    store.get = someone_else_always_first  # type: ignore[method-assign]
    with pytest.raises(ConflictError, match="changed by others"):
        await metadata.modify_policies("public/default", change)
    store.get = orig_get  # type: ignore[method-assign]
    assert rounds == CAS_ATTEMPTS
    assert metadata.policy("public/default", "message_ttl_in_seconds") is None


async def test_another_brokers_changes_arrive_by_notification(store: MemoryMetadataStore) -> None:
    a, b = BrokerMetadata("standalone"), BrokerMetadata("standalone")
    await a.start(store)
    await b.start(store)
    seen: list[int] = []
    b.listeners.append(lambda: seen.append(b.generation))
    await a.create_tenant("acme", TenantInfo((), ("standalone",)))
    await a.create_namespace("acme/ns", {})
    await a.set_policy("acme/ns", "message_ttl_in_seconds", 7)
    await a.create_partitioned_topic(PARTED, 3)
    await a.add_schema_version(PARTED, {"type": 4})
    await eventually(lambda: b.policy("acme/ns", "message_ttl_in_seconds") == 7 and b.partitions_of(PARTED) == 3
                     and list(b.schema_versions(PARTED)) == [{"type": 4}], "b sees a's changes")
    assert seen  # b's listeners (the dispatchers, the replication) were told
    await a.delete_partitioned(PARTED)
    await eventually(lambda: b.partitions_of(PARTED) == 0, "b sees the deletion")
    await a.close()
    await b.close()


async def test_reconnection_rereads_everything(tree: str, metadata: BrokerMetadata,
                                               store: MemoryMetadataStore) -> None:
    """Notifications missed while disconnected: RECONNECTED brings a full re-read."""
    other = MemoryMetadataStore(tree)  # the same tree, another session
    await metadata.cache.settled()  # (the bootstrap's notifications: re-read before it goes deaf)
    metadata.cache._closed = True  # (deaf for a while: nothing is re-read on notifications)
    await other.put("/admin/policies/public/default", b'{"message_ttl_in_seconds":5}', None)
    await other.put("/admin/policies/public/gone", b"{}", None)
    await other.put("/admin/clusters/west", b'{"serviceUrl":"http://west"}', None)
    await metadata.cache.settled()
    assert metadata.policy("public/default", "message_ttl_in_seconds") is None
    metadata.cache._closed = False
    store.post_session_event(SessionEvent.RECONNECTED)
    await eventually(lambda: metadata.policy("public/default", "message_ttl_in_seconds") == 5, "the re-read")
    assert metadata.namespace_exists("public/gone") and "west" in metadata.clusters
    await other.close()


async def test_a_namespace_not_heard_of_yet_is_read_through(tree: str, metadata: BrokerMetadata) -> None:
    """Cluster mode: another broker created the namespace, its notification not here yet. A lookup there must not
    answer "does not exist" (the broker reads the store on a miss, as Pulsar's metadata cache loads a key)."""
    other = MemoryMetadataStore(tree)
    await metadata.cache.settled()  # (the bootstrap's notifications: re-read before it goes deaf)
    metadata.cache._closed = True  # (deaf: the notification does not arrive)
    await other.put("/admin/policies/public/fresh", b"{}", None)
    await metadata.cache.settled()
    assert not metadata.namespace_exists("public/fresh")
    assert await metadata.namespace_exists_fresh("public/fresh")
    assert metadata.namespace_exists("public/fresh")  # (now cached)
    assert not await metadata.namespace_exists_fresh("public/never")
    metadata.cache._closed = False
    await other.close()


async def test_a_partitioned_topic_not_heard_of_yet_is_read_through(tree: str, metadata: BrokerMetadata) -> None:
    """The same for a partitioned topic: another broker created it and asks this one, the owner of a partition, to
    create that partition (createMissedPartitions); refused with 412 ("there isn't a partitioned topic") when the
    notification had not come yet."""
    other = MemoryMetadataStore(tree)
    await metadata.cache.settled()
    metadata.cache._closed = True
    await other.put(L.PARTITIONED_TOPICS.path("persistent://public/default/fresh"), b'{"partitions":3}', None)
    await metadata.cache.settled()
    assert metadata.partitions_of("persistent://public/default/fresh") == 0
    assert await metadata.partitions_of_fresh("persistent://public/default/fresh") == 3
    assert metadata.partitions_of("persistent://public/default/fresh") == 3  # (now cached)
    assert await metadata.partitions_of_fresh("persistent://public/default/never") == 0
    metadata.cache._closed = False
    await other.close()


async def test_a_tenant_not_heard_of_yet_is_read_through(tree: str, metadata: BrokerMetadata) -> None:
    """The same for a tenant (the HTTP refusals tell a missing tenant from a refused role: 404, not 401)."""
    other = MemoryMetadataStore(tree)
    await metadata.cache.settled()
    metadata.cache._closed = True
    await other.put("/admin/policies/fresh", b'{"adminRoles":[],"allowedClusters":["standalone"]}', None)
    await metadata.cache.settled()
    assert "fresh" not in metadata.tenants
    assert await metadata.tenant_exists_fresh("fresh")
    assert "fresh" in metadata.tenants  # (now cached)
    assert not await metadata.tenant_exists_fresh("never")
    metadata.cache._closed = False
    await other.close()


async def test_another_brokers_split_is_read_from_the_store_before_its_notification(
        tree: str, metadata: BrokerMetadata) -> None:
    """``stored_namespace_bundles`` answers what the store has (the cache keeps it), not what the cache last heard."""
    other = MemoryMetadataStore(tree)
    splitter = BrokerMetadata("standalone")
    await splitter.start(other)
    before = metadata.namespace_bundles("public/default")
    await metadata.cache.settled()  # (the bootstrap's notifications: re-read before it goes deaf)
    metadata.cache._closed = True  # (deaf: the split's notification does not arrive)
    parent = before.bundles[0]
    after = await splitter.split_bundle("public/default", parent, [parent.lower + (parent.upper - parent.lower) // 2])
    await metadata.cache.settled()
    assert metadata.namespace_bundles("public/default") == before
    assert await metadata.stored_namespace_bundles("public/default") == after
    assert metadata.namespace_bundles("public/default") == after  # (now cached)
    assert await metadata.stored_namespace_bundles("public/never") is None
    metadata.cache._closed = False
    await splitter.close()
    await other.close()


async def test_the_old_metadata_json_is_imported_once(tmp_path: Path, store: MemoryMetadataStore) -> None:
    legacy = tmp_path / "metadata.json"
    legacy.write_text(json.dumps({
        "clusters": {"standalone": {}, "east": {"serviceUrl": "http://east"}},
        "tenants": {"public": {"adminRoles": [], "allowedClusters": ["standalone"]},
                    "acme": {"adminRoles": ["boss"], "allowedClusters": ["standalone"]}},
        "namespaces": {"public/default": {"message_ttl_in_seconds": 9}, "acme/ns": {"deduplicationEnabled": True}},
        "partitioned_topics": {PARTED: 2},
        "schemas": {TOPIC: [{"type": 1}, {"type": 2}]},
        "compactions": {TOPIC: {"ledger": "l", "horizon": [1, 2], "generation": 3}},
        "terminated": {TOPIC: [1, 2]},
        "topic_policies": {TOPIC: {"maxProducerPerTopic": 1}},
        "topic_properties": {PARTED: {"k": "v"}, TOPIC: {"a": "b"}},
        "saved_at": 1.0,
    }))
    m = BrokerMetadata("standalone")
    await m.start(store, legacy)
    assert not legacy.exists() and (tmp_path / "metadata.json.imported").exists()
    assert m.policy("public/default", "message_ttl_in_seconds") == 9
    assert m.tenant("acme") == TenantInfo(("boss",), ("standalone",))
    assert "east" in m.clusters and m.partitions_of(PARTED) == 2
    assert m.topic_properties[PARTED] == {"k": "v"} and m.topic_properties[TOPIC] == {"a": "b"}
    assert list(m.schema_versions(TOPIC)) == [{"type": 1}, {"type": 2}]
    assert m.terminated[TOPIC] == [1, 2] and m.compactions[TOPIC]["generation"] == 3
    assert m.topic_policy(TOPIC, "maxProducerPerTopic") == 1
    assert await node(store, "/admin/partitioned-topics/acme/ns/persistent/p") == {
        "partitions": 2, "properties": {"k": "v"}, "deleted": False}
    assert m.namespace_exists("pulsar/system")  # (the defaults the file lacked are made as usual)
    await m.close()
    # Started again: nothing to import (the renamed file is not read).
    again = BrokerMetadata("standalone")
    await again.start(store, legacy)
    assert again.policy("public/default", "message_ttl_in_seconds") == 9
    await again.close()


async def test_the_import_never_overwrites_what_the_store_has(tmp_path: Path, metadata: BrokerMetadata,
                                                              store: MemoryMetadataStore) -> None:
    await metadata.set_policy("public/default", "message_ttl_in_seconds", 1)
    legacy = tmp_path / "metadata.json"
    legacy.write_text(json.dumps({"namespaces": {"public/default": {"message_ttl_in_seconds": 9}}}))
    m = BrokerMetadata("standalone")
    await m.start(store, legacy)
    assert m.policy("public/default", "message_ttl_in_seconds") == 1
    await m.close()


def test_paths_round_trip() -> None:
    for kind, key in ((L.CLUSTERS, "c"), (L.TENANTS, "t"), (L.NAMESPACES, "t/ns"),
                      (L.PARTITIONED_TOPICS, "persistent://t/ns/a b/c%d~e"),
                      (L.TOPIC_POLICIES, "non-persistent://t/ns/x-partition-1"), (L.SCHEMAS, "persistent://t/ns/s"),
                      (L.ISOLATION_POLICIES, "c"), (L.FAILURE_DOMAINS, "c/d")):
        assert L.classify(kind.path(key)) == (kind, key)
    assert L.classify(L.SCHEMAS.path("persistent://t/ns/s") + "/0000000003") == (L.SCHEMAS, "persistent://t/ns/s")
    assert L.PARTITIONED_TOPICS.path("persistent://t/ns/a b/c") == "/admin/partitioned-topics/t/ns/persistent/a+b%2Fc"
    assert L.classify("/admin/partitioned-topics/t/ns") is None  # (a directory, no record)
    assert L.ISOLATION_POLICIES.path("c") == "/admin/clusters/c/namespaceIsolationPolicies"
    assert L.FAILURE_DOMAINS.path("c/d") == "/admin/clusters/c/failureDomain/d"
    assert L.classify("/admin/clusters/c/failureDomain") is None  # (a directory, no record)
    assert L.classify("/managed-ledgers/t/ns/persistent/x") is None


async def test_update_policy_reads_modifies_and_writes_one_value(metadata: BrokerMetadata,
                                                                 store: MetadataStore) -> None:
    await metadata.update_policy("public/default", "properties", lambda p: {**(p or {}), "a": "1"})
    await metadata.update_policy("public/default", "properties", lambda p: {**(p or {}), "b": "2"})
    assert await node(store, "/admin/policies/public/default") == {**DEFAULT_NS, "properties": {"a": "1", "b": "2"}}
    await metadata.update_policy("public/default", "properties", lambda _: None)
    assert metadata.policy("public/default", "properties") is None
    await metadata.update_topic_policy(TOPIC, "backlogQuotaMap", lambda q: {**(q or {}), "x": 1})
    await metadata.update_topic_policy(TOPIC, "backlogQuotaMap", lambda _: None)
    # (the document stays, empty, as Pulsar's TopicPolicies object does; deleting the topic's policies removes it)
    assert metadata.topic_policies[TOPIC] == {}
    assert await node(store, L.TOPIC_POLICIES.path(TOPIC)) == {}
    await metadata.forget_topic_policies(TOPIC)
    assert TOPIC not in metadata.topic_policies
    assert not await store.exists(L.TOPIC_POLICIES.path(TOPIC))


async def test_update_topic_properties_merges_into_the_stored_ones(metadata: BrokerMetadata,
                                                                   store: MetadataStore) -> None:
    await metadata.create_partitioned_topic(PARTED, 2, {"a": "1"})
    await metadata.update_topic_properties(PARTED, lambda p: {**p, "b": "2"})
    assert await node(store, L.PARTITIONED_TOPICS.path(PARTED)) == {
        "partitions": 2, "properties": {"a": "1", "b": "2"}, "deleted": False}
    # Emptied, the map stays (Pulsar's PartitionedTopicMetadata then has "properties": {}); one with none gets none.
    await metadata.update_topic_properties(PARTED, lambda _: {})
    assert await node(store, L.PARTITIONED_TOPICS.path(PARTED)) == {"partitions": 2, "properties": {},
                                                                    "deleted": False}
    await metadata.create_partitioned_topic(OTHER_PARTED, 2)
    await metadata.update_topic_properties(OTHER_PARTED, lambda p: p)
    assert await node(store, L.PARTITIONED_TOPICS.path(OTHER_PARTED)) == {"partitions": 2, "deleted": False}
    await metadata.update_topic_properties(TOPIC, lambda p: {**p, "c": "3"})
    await metadata.update_topic_properties(TOPIC, lambda p: {**p, "d": "4"})
    assert metadata.topic_properties[TOPIC] == {"c": "3", "d": "4"}
    await metadata.update_topic_properties(TOPIC, lambda _: None)
    assert not await store.exists(L.TOPIC_PROPERTIES.path(TOPIC)) and TOPIC not in metadata.topic_properties


async def test_a_policy_once_stored_under_another_name_is_read_and_rewritten_under_pulsars(
        metadata: BrokerMetadata, store: MetadataStore) -> None:
    """Earlier versions kept the namespace publish rate as ``publish_max_message_rate``; Pulsar's Policies
    field (what its brokers read) is ``publishMaxMessageRate``."""
    rate = {"standalone": {"publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": -1}}
    path = "/admin/policies/public/default"
    stored = await node(store, path)
    await store.put(path, json.dumps({**stored, "publish_max_message_rate": rate}).encode(), None)
    await eventually(lambda: metadata.policy("public/default", "publishMaxMessageRate") == rate, "the change")
    assert "publish_max_message_rate" not in metadata.namespace_policies("public/default")
    await metadata.set_policy("public/default", "properties", {"a": "1"})  # any change writes Pulsar's name
    written = await node(store, path)
    assert written["publishMaxMessageRate"] == rate and "publish_max_message_rate" not in written
