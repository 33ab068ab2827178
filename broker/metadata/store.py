"""The broker's metadata: clusters, tenants, namespaces, partitioned topics, topic policies, schemas, resource
quotas.

Kept in a metadata store (``metadata_store``: local files, or ZooKeeper shared by brokers) at
Apache Pulsar's paths and in its value formats where Pulsar has them (``broker.metadata.layout``
has the table). ``BrokerMetadata`` is what the rest of the broker sees:

- named operations, shaped like Apache Pulsar's metadata resources (``ClusterResources``,
  ``TenantResources``, ``NamespaceResources`` with its partitioned-topic part, the topic policies
  service, the schema storage). Each checks its preconditions, then writes with compare-and-set
  (``broker.metadata.cache``) and is async;
- synchronous reads, from a cache of everything the broker needs (loaded at start, kept fresh by
  the store's notifications): read-only views of the stored documents, in Pulsar's JSON field names.

Refusals are typed by kind (``NotFoundError``, ``AlreadyExistsError``, ``InUseError``,
``InvalidError``, ``ConflictError``) and carry Pulsar's wording; the admin layer turns them into
HTTP statuses. A store that cannot be reached raises ``metadata_store.MetadataStoreError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections import ChainMap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, NamedTuple, TypeVar

from broker.metadata import layout as L
from broker.metadata import policies as P
from broker.metadata import policy_copies as C
from broker.metadata.bundles import DEFAULT_NUMBER_OF_BUNDLES, BundleError, NamespaceBundle, NamespaceBundles
from broker.metadata.cache import KEEP, ConcurrentChangeError, MetadataCache
from broker.metadata.cluster_data import PEER_CLUSTER_NAMES
from broker.metadata.layout import ResourceQuota
from broker.metadata.legacy import import_legacy_file
from broker.metadata.policy_table import REPLICATION_CLUSTERS
from broker.topic_name import TopicName
from metadata_store import api as store_api
from metadata_store.api import MetadataStore
from metadata_store.factory import LOCAL_SCHEME, local_directory, open_metadata_store

log = logging.getLogger(__name__)

DEFAULT_TENANTS = ("public", "pulsar")
DEFAULT_NAMESPACES = ("public/default", "pulsar/system")

# The Policies fields of a namespace's grants (Pulsar's AuthPolicies), as stored.
_AUTH_PARTS = (P.NAMESPACE_AUTH, P.DESTINATION_AUTH, P.SUBSCRIPTION_AUTH_ROLES)

T = TypeVar("T")
JsonDoc = dict[str, Any]  # a stored document (Pulsar's JSON field names)


# The quota of a bundle that has none, when no default one is stored: Pulsar 4.0.7's BundlesQuotas.INITIAL_QUOTA.
INITIAL_RESOURCE_QUOTA = ResourceQuota(msg_rate_in=40.0, msg_rate_out=120.0, bandwidth_in=100000.0,
                                       bandwidth_out=300000.0, memory=80.0, dynamic=True)

ANTI_AFFINITY_GROUP = "namespaceAntiAffinityGroup"  # LocalPolicies' field
BOOKIE_AFFINITY_GROUP = "bookieAffinityGroup"  # LocalPolicies' field: a BookieAffinityGroupData
BOOKIE_AFFINITY_FIELDS = ("bookkeeperAffinityGroupPrimary", "bookkeeperAffinityGroupSecondary")


class MetadataStoreError(Exception):
    """A metadata change refused before anything was changed."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFoundError(MetadataStoreError):
    """The cluster, tenant, namespace (or the grant, the record) does not exist."""


class AlreadyExistsError(MetadataStoreError):
    pass


class InUseError(MetadataStoreError):
    """Still referenced: a tenant with namespaces, a cluster a tenant or namespace uses..."""


class InvalidError(MetadataStoreError):
    """The new value names something that does not exist (e.g. an unknown cluster)."""


class ConflictError(MetadataStoreError):
    """Other writers changed the record every time we tried (compare-and-set gave up)."""


@dataclass(frozen=True)
class TenantInfo:
    """Pulsar's TenantInfo: who administers the tenant, which clusters its namespaces may use. Admin roles never
    given are None and left out of the document, as Pulsar writes and answers them (an empty list stays one)."""

    admin_roles: tuple[str, ...] | None = None
    allowed_clusters: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TenantInfo:
        roles = doc.get("adminRoles")
        return cls(None if roles is None else tuple(roles), tuple(doc.get("allowedClusters") or ()))

    def to_json(self) -> JsonDoc:
        doc: JsonDoc = {} if self.admin_roles is None else {"adminRoles": list(self.admin_roles)}
        doc["allowedClusters"] = list(self.allowed_clusters)
        return doc


class TopicGrant(NamedTuple):
    """A role's actions on one topic, the topic by its full name (Pulsar's GrantTopicPermissionOptions)."""

    topic: str
    role: str
    actions: tuple[str, ...]


class TopicRole(NamedTuple):
    """A role's grant on one topic, to revoke (Pulsar's RevokeTopicPermissionOptions)."""

    topic: str
    role: str


class BrokerMetadata:
    """The broker's view of the metadata store (see the module docstring). ``start`` loads it."""

    def __init__(self, cluster: str, *, default_bundles: int = DEFAULT_NUMBER_OF_BUNDLES) -> None:
        self.cluster = cluster
        # Pulsar's defaultNumberOfNamespaceBundles: a namespace created without a bundle count
        # (and one whose stored documents have no bundles) has this many equal bundles.
        self.default_bundles = default_bundles
        self.cache = MetadataCache()
        t = self.cache.tables
        self._clusters = t[L.CLUSTERS.name]
        self._tenants = t[L.TENANTS.name]
        self._namespaces = t[L.NAMESPACES.name]
        # namespace -> its LocalPolicies document (Pulsar keeps the split bundles there)
        self._local_policies = t[L.LOCAL_POLICIES.name]
        self._isolation = t[L.ISOLATION_POLICIES.name]
        # "<cluster>/<domain>" -> its FailureDomainImpl document ({"brokers": [broker id]})
        self._failure_domains = t[L.FAILURE_DOMAINS.name]
        self._bundles_generation = -1
        self._bundles: dict[str, NamespaceBundles] = {}
        # Namespaces that exist without a stored document, as Pulsar's heartbeat namespaces (pulsar/<brokerId>): the
        # broker says which (``BrokerService``); they have no policies (every default applies), one full bundle
        # (Pulsar's registerNamespace: "pre-registered namespaces have bundles disabled"), and are not listed.
        self.implicit_namespace: Callable[[str], bool] = lambda namespace: False
        # base topic name -> its PartitionedTopicMetadata document
        self._partitioned = t[L.PARTITIONED_TOPICS.name]
        # base topic name (without partition suffix) -> list of versions (index = version)
        self._schemas = t[L.SCHEMAS.name]
        # full topic name -> {"ledger": compacted ledger name, "horizon": [l, e], "generation": n}
        self._compactions = t[L.COMPACTIONS.name]
        # full topic name -> [ledgerId, entryId] of its last message when it was terminated
        self._terminated = t[L.TERMINATED.name]
        # Topic-level policies: topic name (a partitioned topic's base name covers its partitions)
        # -> {Pulsar's TopicPolicies field name: value}
        self._topic_policies = t[L.TOPIC_POLICIES.name]
        # ... and the global ones (set with isGlobal=true), which a topic's local value of the same policy overrides
        self._global_topic_policies = t[L.GLOBAL_TOPIC_POLICIES.name]
        # A non-partitioned topic's properties (a partitioned topic's are in its metadata document)
        self._topic_properties = t[L.TOPIC_PROPERTIES.name]
        self._dynamic_configuration = t[L.DYNAMIC_CONFIGURATION.name]
        # NamespaceBundle.toString() -> its ResourceQuota; the default one under DEFAULT_RESOURCE_QUOTA_NODE
        self._resource_quotas = t[L.RESOURCE_QUOTAS.name]
        self._default_resource_quota = t[L.DEFAULT_RESOURCE_QUOTA.name]
        # "<tenant>/<ns>/<cluster>" -> the namespace's global topic policy changes waiting for that cluster
        self._policy_copies = t[L.GLOBAL_POLICY_COPIES.name]
        self._views_generation = -1
        self._partition_counts: dict[str, int] = {}
        self._partitioned_properties: dict[str, dict[str, str]] = {}

    # -- start and stop --------------------------------------------------------------------------------
    async def start(self, store: MetadataStore, legacy_file: Path | None = None) -> None:
        """Load the cache from ``store``; import ``legacy_file`` (the old one-file metadata) when
        it exists; create this cluster and the default tenants and namespaces when missing."""
        await self.cache.load(store)
        if legacy_file is not None:
            await import_legacy_file(self, legacy_file)
        await self._bootstrap()

    async def close(self) -> None:
        """Stop following the store (closing the store is its opener's business)."""
        await self.cache.close()

    async def _bootstrap(self) -> None:
        """Pulsar's initialize-cluster-metadata, each record created only when missing (so that
        brokers starting together on one store agree)."""
        if self.cluster not in self._clusters:
            await self.cache.create(L.CLUSTERS, self.cluster, {})
        for tenant in DEFAULT_TENANTS:
            if tenant not in self._tenants:
                await self.cache.create(L.TENANTS, tenant, TenantInfo((), (self.cluster,)).to_json())
        for ns in DEFAULT_NAMESPACES:
            if ns not in self._namespaces:
                # As Pulsar's set-up writes them (an Apache Pulsar broker on the same store refuses lookups in a
                # namespace without replication clusters); bundles: default_bundles equal ones.
                await self.cache.create(L.NAMESPACES, ns, self._new_namespace_policies(ns, {}))

    @property
    def generation(self) -> int:
        """Bumped on every change: a cheap "has anything changed?" for caches (see Derived)."""
        return self.cache.generation

    @property
    def listeners(self) -> list[Callable[[], None]]:
        """Called after every change (ours or another broker's), on the event loop."""
        return self.cache.listeners

    async def _modify(self, kind: L.Kind, key: str, change: Callable[[Any], Any]) -> Any:
        try:
            return await self.cache.modify(kind, key, change)
        except ConcurrentChangeError as exc:
            raise ConflictError(f"Concurrent modification: {exc}") from None

    async def _create(self, kind: L.Kind, key: str, value: Any, exists_message: str) -> None:
        if not await self.cache.create(kind, key, value):
            raise AlreadyExistsError(exists_message)

    # -- read-only views of the stored documents ------------------------------------------------------
    @property
    def clusters(self) -> Mapping[str, Mapping[str, Any]]:
        return MappingProxyType(self._clusters)

    @property
    def tenants(self) -> Mapping[str, Mapping[str, Any]]:
        return MappingProxyType(self._tenants)

    @property
    def namespaces(self) -> Mapping[str, Mapping[str, Any]]:
        """namespace -> its stored Policies document."""
        return MappingProxyType(self._namespaces)

    def _refresh_views(self) -> None:
        if self._views_generation != self.cache.generation:
            self._partition_counts = {k: doc["partitions"] for k, doc in self._partitioned.items()}
            self._partitioned_properties = {k: doc["properties"] for k, doc in self._partitioned.items()
                                            if doc.get("properties")}
            self._views_generation = self.cache.generation

    @property
    def partitioned_topics(self) -> Mapping[str, int]:
        self._refresh_views()
        return MappingProxyType(self._partition_counts)

    @property
    def compactions(self) -> Mapping[str, Mapping[str, Any]]:
        return MappingProxyType(self._compactions)

    @property
    def terminated(self) -> Mapping[str, Sequence[int]]:
        return MappingProxyType(self._terminated)

    @property
    def topic_policies(self) -> Mapping[str, Mapping[str, Any]]:
        return MappingProxyType(self._topic_policies)

    @property
    def global_topic_policies(self) -> Mapping[str, Mapping[str, Any]]:
        return MappingProxyType(self._global_topic_policies)

    @property
    def topic_properties(self) -> Mapping[str, Mapping[str, str]]:
        """Topic name -> its properties (a partitioned topic's base name for its partitions)."""
        self._refresh_views()
        return MappingProxyType(ChainMap(self._partitioned_properties, self._topic_properties))

    # -- dynamic configuration (Pulsar's DynamicConfigurationResources) ----------------------------
    @property
    def dynamic_configuration(self) -> Mapping[str, Any]:
        """The stored settings every broker applies over its configuration (setting -> its value as text; empty
        when there are none). Written by any broker of the cluster, or by Pulsar's."""
        return MappingProxyType(self._dynamic_configuration.get(L.DYNAMIC_CONFIGURATION_NODE) or {})

    async def read_dynamic_configuration(self) -> None:
        """Read the stored settings from the store now (another broker may have just changed them, its
        notification on its way); a change is applied as a notified one is."""
        await self.cache.read_through(L.DYNAMIC_CONFIGURATION, L.DYNAMIC_CONFIGURATION_NODE)

    async def update_dynamic_configuration(self, change: Callable[[JsonDoc], None]) -> None:
        """Compare-and-set of the stored settings: ``change`` edits the map in place (the node is made when
        missing, and kept, empty, when the last setting goes, as Pulsar keeps it)."""
        def modify(current: JsonDoc | None) -> JsonDoc:
            doc = dict(current or {})
            change(doc)
            return doc

        await self._modify(L.DYNAMIC_CONFIGURATION, L.DYNAMIC_CONFIGURATION_NODE, modify)

    # -- clusters (Pulsar's ClusterResources) -------------------------------------------------------
    async def create_cluster(self, name: str, data: Mapping[str, Any]) -> None:
        if name in self._clusters:
            raise AlreadyExistsError("Cluster already exists")
        await self._create(L.CLUSTERS, name, copy.deepcopy(dict(data)), "Cluster already exists")

    async def update_cluster(self, name: str, data: Mapping[str, Any]) -> None:
        self._cluster_must_exist(name)
        new = copy.deepcopy(dict(data))
        await self._modify(L.CLUSTERS, name, lambda current: _replace(current, new, "Cluster does not exist"))

    async def fill_cluster_urls(self, name: str, urls: Mapping[str, str]) -> None:
        """Store ``urls`` (ClusterData's serviceUrl, brokerServiceUrl...) in the cluster's data where it has none of
        its own: what PulsarClusterMetadataSetup writes before a cluster's first broker starts (ours has no such
        step: its first broker writes them). URLs already stored, an admin's or Pulsar's setup tool's, are kept."""
        if name not in self._clusters or all(self._clusters[name].get(k) for k in urls):
            return

        def fill(current: Any) -> Any:
            data = copy.deepcopy(dict(_must_exist(current, "Cluster does not exist")))
            for key, value in urls.items():
                if not data.get(key):
                    data[key] = value
            return data
        with contextlib.suppress(ConflictError):  # (another broker starting with this one wrote its own first)
            await self._modify(L.CLUSTERS, name, fill)

    async def set_peer_clusters(self, name: str, peers: list[str] | None) -> None:
        """Replace the cluster's ``peerClusterNames`` (None removes them), keeping the rest of its data."""
        self._cluster_must_exist(name)

        def change(current: Any) -> Any:
            data = copy.deepcopy(dict(_must_exist(current, "Cluster does not exist")))
            if peers is None:
                data.pop(PEER_CLUSTER_NAMES, None)
            else:
                data[PEER_CLUSTER_NAMES] = list(peers)
            return data
        await self._modify(L.CLUSTERS, name, change)

    async def delete_cluster(self, name: str) -> None:
        """Refused while it is this broker's cluster, a tenant may use it, a namespace replicates to it (ours: Pulsar
        4.0.7's ClusterResources.isClusterUsedAsync looks for V1 namespaces only), or it has namespace isolation
        policies (as Pulsar's ClustersBase.internalDeleteClusterAsync). Being another cluster's peer, or in a
        namespace's allowed clusters, does not keep it, as in Pulsar."""
        self._cluster_must_exist(name)
        used = any(name in (t.get("allowedClusters") or []) for t in self._tenants.values()) or any(
            name in (p.get(REPLICATION_CLUSTERS.namespace_field) or []) for p in self._namespaces.values())
        if used or name == self.cluster or self._isolation.get(name):
            raise InUseError("Cluster not empty")
        if name in self._isolation:  # (an empty map left by the last policy's removal: it goes first, as in Pulsar)
            await self.cache.delete(L.ISOLATION_POLICIES, name)
        # Its failure domains are deleted with it (ClustersBase.internalDeleteClusterAsync:
        # FailureDomainResources.deleteFailureDomainsAsync, before the cluster's node).
        for domain in self.failure_domains(name):
            await self.cache.delete(L.FAILURE_DOMAINS, f"{name}/{domain}")
        # (Pulsar keeps the cluster's isolation policies and failure domains below its node.)
        await self.cache.delete(L.CLUSTERS, name, recursive=True)

    def _cluster_must_exist(self, name: str) -> None:
        if name not in self._clusters:
            raise NotFoundError("Cluster does not exist")

    # -- tenants (Pulsar's TenantResources) ---------------------------------------------------------
    def tenant(self, name: str) -> TenantInfo | None:
        doc = self._tenants.get(name)
        return None if doc is None else TenantInfo.from_json(doc)

    async def create_tenant(self, name: str, info: TenantInfo) -> None:
        self._check_clusters_exist(info.allowed_clusters)
        if name in self._tenants:
            raise AlreadyExistsError("Tenant already exists")
        await self._create(L.TENANTS, name, info.to_json(), "Tenant already exists")

    async def update_tenant(self, name: str, info: TenantInfo) -> None:
        self._check_clusters_exist(info.allowed_clusters)
        self._tenant_must_exist(name)
        await self._modify(L.TENANTS, name, lambda current: _replace(current, info.to_json(),
                                                                     "Tenant does not exist"))

    async def delete_tenant(self, name: str) -> None:
        self._tenant_must_exist(name)
        if self.namespaces_of(name):
            raise InUseError("The tenant still has active namespaces")
        await self.cache.delete(L.TENANTS, name)

    async def tenant_exists_fresh(self, name: str) -> bool:
        """Whether tenant ``name`` exists, reading the store when the cache has no such tenant (as
        ``namespace_exists_fresh``: another broker may have just created it)."""
        if name not in self._tenants:
            try:
                await self.cache.read_through(L.TENANTS, name)
            except store_api.MetadataStoreError as exc:
                log.warning("tenant %s not read from the metadata store: %s", name, exc)
        return name in self._tenants

    def _tenant_must_exist(self, name: str) -> None:
        if name not in self._tenants:
            raise NotFoundError("Tenant does not exist")

    def _check_clusters_exist(self, clusters: Iterable[str]) -> None:
        unknown = [c for c in clusters if c not in self._clusters]
        if unknown:
            raise InvalidError(f"Clusters do not exist: {unknown}")

    # -- namespaces (Pulsar's NamespaceResources) ---------------------------------------------------
    def namespace_exists(self, namespace: str) -> bool:
        return namespace in self._namespaces or self.implicit_namespace(namespace)

    async def namespace_exists_fresh(self, namespace: str) -> bool:
        """``namespace_exists``, reading the store when the cache has no such namespace: another broker may have
        just created it, its notification not here yet. (A store that cannot be read: the cache's answer.)"""
        if namespace not in self._namespaces:
            try:
                for kind in (L.NAMESPACES, L.LOCAL_POLICIES):
                    await self.cache.read_through(kind, namespace)
            except store_api.MetadataStoreError as exc:
                log.warning("namespace %s not read from the metadata store: %s", namespace, exc)
        return self.namespace_exists(namespace)

    def namespaces_of(self, tenant: str) -> list[str]:
        return sorted(ns for ns in self._namespaces if ns.split("/")[0] == tenant)

    async def create_namespace(self, namespace: str, policies: Mapping[str, Any]) -> None:
        """Create a namespace with its Policies; without ``bundles`` (Pulsar's BundlesData, checked
        by ``policies.validate_policies``) it gets ``default_bundles`` equal bundles, as in Pulsar."""
        self._tenant_must_exist(namespace.split("/")[0])
        if namespace in self._namespaces:
            raise AlreadyExistsError("Namespace already exists")
        doc = self._new_namespace_policies(namespace, policies)
        await self._create(L.NAMESPACES, namespace, doc, "Namespace already exists")

    def _new_namespace_policies(self, namespace: str, policies: Mapping[str, Any]) -> JsonDoc:
        """A new namespace's Policies as Pulsar's validatePolicies completes them: the local cluster as its
        replication cluster when none is named, and default_bundles equal bundles when none are given."""
        doc: JsonDoc = copy.deepcopy(dict(policies))
        if not doc.get("replication_clusters"):
            doc["replication_clusters"] = [self.cluster]
        if doc.get("bundles") is None:
            doc["bundles"] = NamespaceBundles.equal(namespace, self.default_bundles).to_bundles_data()
        return doc

    async def delete_namespace(self, namespace: str) -> None:
        """Refused while a partitioned topic of the namespace is still recorded (delete those first)."""
        self._namespace_must_exist(namespace)
        if self.partitioned_topics_of(namespace):
            raise InUseError("Cannot delete non empty namespace")
        await self.cache.delete(L.NAMESPACES, namespace)
        await self.cache.delete(L.LOCAL_POLICIES, namespace)

    def namespace_policies(self, namespace: str) -> JsonDoc:
        """A copy of the namespace's stored Policies document (Pulsar's getPolicies)."""
        self._namespace_must_exist(namespace)
        policies: JsonDoc = copy.deepcopy(self._namespaces[namespace])
        return policies

    def policy(self, namespace: str, key: str) -> Any:
        """A namespace's policy value, or None when it is not set (or the namespace is gone)."""
        return self._namespaces.get(namespace, {}).get(key)

    async def modify_policies(self, namespace: str, change: Callable[[JsonDoc], None]) -> None:
        """Read-modify-write of a namespace's Policies (Pulsar's setPolicies with a function):
        ``change`` edits a copy of the stored document (it may run more than once, when another
        writer got in between); when it raises, nothing is changed."""
        self._namespace_must_exist(namespace)

        def modify(current: JsonDoc | None) -> JsonDoc:
            policies: JsonDoc = copy.deepcopy(_must_exist(current, "Namespace does not exist"))
            change(policies)
            return policies
        await self._modify(L.NAMESPACES, namespace, modify)

    async def set_policy(self, namespace: str, key: str, value: Any) -> None:
        """Set (or, with None, remove) one policy of an existing namespace, persisted at once."""
        await self.update_policy(namespace, key, lambda _: value)

    async def update_policy(self, namespace: str, key: str, change: Callable[[Any], Any]) -> None:
        """Read-modify-write of one policy: ``change(stored value or None)`` returns the new value
        (None removes it); it gets a copy, and runs again when another writer got in between."""
        def modify(policies: JsonDoc) -> None:
            value = change(copy.deepcopy(policies.get(key)))
            if value is None:
                policies.pop(key, None)
            else:
                policies[key] = copy.deepcopy(value)
        await self.modify_policies(namespace, modify)

    def _namespace_must_exist(self, namespace: str) -> None:
        if namespace not in self._namespaces:
            raise NotFoundError("Namespace does not exist")

    async def read_namespace(self, namespace: str) -> None:
        """Read the namespace's Policies from the store now (another broker may have just changed them, its
        notification not here yet)."""
        await self.cache.read_through(L.NAMESPACES, namespace)

    # -- bundles (Pulsar's NamespaceBundleFactory and NamespaceService.updateNamespaceBundles) -------
    def namespace_bundles(self, namespace: str) -> NamespaceBundles:
        """The namespace's bundles, as Pulsar's NamespaceBundleFactory loads them: the LocalPolicies'
        ``bundles`` when stored, else the Policies' ``bundles`` (Pulsar copies those into new
        LocalPolicies on first load; we read them in place and write LocalPolicies on the first
        split), else ``default_bundles`` equal bundles. ``NotFoundError`` for an unknown namespace."""
        if self._bundles_generation != self.cache.generation:
            self._bundles.clear()
            self._bundles_generation = self.cache.generation
        found = self._bundles.get(namespace)
        if found is None:
            if namespace in self._namespaces:
                local = self._local_policies.get(namespace)
                found = self._stored_bundles(namespace, local, self._namespaces[namespace])
            elif self.implicit_namespace(namespace):
                found = NamespaceBundles.equal(namespace, 1)
            else:
                raise NotFoundError("Namespace does not exist")
            self._bundles[namespace] = found
        return found

    async def stored_namespace_bundles(self, namespace: str) -> NamespaceBundles | None:
        """``namespace_bundles`` as the metadata store has them now, not as the cache last heard: another broker's
        split is in the store before its notification is here. Its LocalPolicies and Policies are read (the cache
        keeps them); None when the namespace is gone. ``MetadataStoreError`` (the store's) when they cannot be read."""
        local, policies = await asyncio.gather(self.cache.read_through(L.LOCAL_POLICIES, namespace),
                                               self.cache.read_through(L.NAMESPACES, namespace))
        if policies is None:
            return NamespaceBundles.equal(namespace, 1) if self.implicit_namespace(namespace) else None
        return self._stored_bundles(namespace, local, policies)

    def _stored_bundles(self, namespace: str, local: Mapping[str, Any] | None,
                        policies: Mapping[str, Any] | None) -> NamespaceBundles:
        for where, doc in (("LocalPolicies", local), ("Policies", policies)):
            data = (doc or {}).get("bundles")
            if data is None:
                continue
            try:
                return NamespaceBundles.from_bundles_data(namespace, data)
            except BundleError as exc:
                log.warning("namespace %s: ignoring the bundles of its %s: %s", namespace, where, exc)
        return NamespaceBundles.equal(namespace, self.default_bundles)

    async def split_bundle(self, namespace: str, bundle: NamespaceBundle,
                           split_points: Sequence[int]) -> NamespaceBundles:
        """Cut ``bundle`` at ``split_points`` (each strictly inside it) and store the namespace's new
        bundles as Pulsar does: LocalPolicies by compare-and-set (refused when ``bundle`` is no
        longer one of the stored bundles: another split got there first), then Policies.bundles.
        ``BundleError`` for a bad split, ``NotFoundError`` for an unknown namespace or bundle."""
        self._namespace_must_exist(namespace)
        result: list[NamespaceBundles] = []

        def change(current: JsonDoc | None) -> JsonDoc:
            bundles = self._stored_bundles(namespace, current, self._namespaces.get(namespace))
            if bundle not in bundles.bundles:
                raise NotFoundError(f"Bundle {bundle} not found under namespace {namespace}")
            new, _children = bundles.split(bundle, split_points)
            result[:] = [new]
            doc: JsonDoc = copy.deepcopy(dict(current or {}))
            doc["bundles"] = new.to_bundles_data()
            doc.setdefault("migrated", False)
            return doc
        await self._modify(L.LOCAL_POLICIES, namespace, change)

        def latest(_: Any) -> JsonDoc:
            # (From the LocalPolicies as they are when this write happens: a split by another broker
            # that landed after ours is not undone in Policies.bundles.)
            return self._stored_bundles(namespace, self._local_policies.get(namespace), None).to_bundles_data()
        await self.update_policy(namespace, "bundles", latest)
        return result[0]

    # -- namespace isolation policies: /admin/clusters/<cluster>/namespaceIsolationPolicies ---------------------
    def isolation_policies(self, cluster: str) -> JsonDoc | None:
        """policy name -> NamespaceIsolationData, or None when the cluster has none stored."""
        found = self._isolation.get(cluster)
        return copy.deepcopy(found) if found is not None else None

    def isolation_policy(self, cluster: str, name: str) -> JsonDoc | None:
        """One NamespaceIsolationData, or None when the cluster has no policy of that name."""
        found = (self._isolation.get(cluster) or {}).get(name)
        return copy.deepcopy(found) if found is not None else None

    async def set_isolation_policy(self, cluster: str, name: str, data: JsonDoc | None) -> None:
        """Set (None: remove) one policy; NotFoundError when removing from a cluster with none stored."""
        self._cluster_must_exist(cluster)

        def change(current: JsonDoc | None) -> JsonDoc:
            if current is None and data is None:
                raise NotFoundError(f"NamespaceIsolationPolicies for cluster {cluster} does not exist")
            doc: JsonDoc = copy.deepcopy(dict(current or {}))
            if data is None:
                doc.pop(name, None)
            else:
                doc[name] = copy.deepcopy(data)
            return doc
        await self._modify(L.ISOLATION_POLICIES, cluster, change)

    # -- failure domains: /admin/clusters/<cluster>/failureDomain/<domain> (Pulsar's FailureDomainResources) ------
    def failure_domains(self, cluster: str) -> dict[str, JsonDoc]:
        """domain name -> FailureDomainImpl document, of ``cluster`` (none: empty)."""
        prefix = cluster + "/"
        return {key[len(prefix):]: copy.deepcopy(doc) for key, doc in sorted(self._failure_domains.items())
                if key.startswith(prefix)}

    def failure_domain(self, cluster: str, domain: str) -> JsonDoc | None:
        found = self._failure_domains.get(f"{cluster}/{domain}")
        return copy.deepcopy(found) if found is not None else None

    def broker_failure_domains(self, cluster: str) -> dict[str, str]:
        """broker id -> the name of its failure domain in ``cluster`` (LoadManagerShared.
        refreshBrokerToFailureDomainMap; a broker listed by two domains: the last by name)."""
        return {broker: domain for domain, doc in self.failure_domains(cluster).items()
                for broker in doc.get("brokers") or []}

    async def set_failure_domain(self, cluster: str, domain: str, brokers: Sequence[str]) -> None:
        """Create or replace a domain (ClustersBase.setFailureDomain). NotFoundError: no such cluster;
        InUseError: a broker is in another domain of the cluster (validateBrokerExistsInOtherDomain)."""
        self._cluster_must_exist(cluster)
        wanted = list(dict.fromkeys(brokers))
        for other, doc in self.failure_domains(cluster).items():
            if other == domain:
                continue
            taken = [b for b in doc.get("brokers") or [] if b in wanted]
            if taken:
                raise InUseError(f"[{', '.join(taken)}] already exists in {other}")
        await self._modify(L.FAILURE_DOMAINS, f"{cluster}/{domain}", lambda _: {"brokers": wanted})

    async def delete_failure_domain(self, cluster: str, domain: str) -> None:
        """NotFoundError when the cluster has no such domain (ClustersBase.deleteFailureDomain)."""
        def change(current: JsonDoc | None) -> None:
            if current is None:
                raise NotFoundError(f"Domain-name {domain} or cluster {cluster} does not exist")
        await self._modify(L.FAILURE_DOMAINS, f"{cluster}/{domain}", change)

    # -- resource quotas: /loadbalance/resource-quota (Pulsar's LoadBalanceResources.QuotaResources, read as its
    # BundlesQuotas reads them) ----------------------------------------------------------------------------------
    def default_resource_quota(self) -> ResourceQuota:
        """The stored default quota, or Pulsar's hard-coded one (BundlesQuotas.getDefaultResourceQuota)."""
        stored = self._default_resource_quota.get(L.DEFAULT_RESOURCE_QUOTA_NODE)
        return stored if stored is not None else INITIAL_RESOURCE_QUOTA

    def stored_resource_quota(self, bundle: NamespaceBundle) -> ResourceQuota | None:
        """The bundle's own quota, None when it has none (what Pulsar's ModularLoadManagerImpl.getBundleDataOrDefault
        reads)."""
        found: ResourceQuota | None = self._resource_quotas.get(str(bundle))
        return found

    def resource_quota(self, bundle: NamespaceBundle) -> ResourceQuota:
        """The bundle's quota, else the default one (BundlesQuotas.getResourceQuota)."""
        stored = self.stored_resource_quota(bundle)
        return stored if stored is not None else self.default_resource_quota()

    async def set_default_resource_quota(self, quota: ResourceQuota) -> None:
        await self._modify(L.DEFAULT_RESOURCE_QUOTA, L.DEFAULT_RESOURCE_QUOTA_NODE, lambda _: quota)

    async def set_resource_quota(self, bundle: NamespaceBundle, quota: ResourceQuota) -> None:
        """Create or replace the bundle's quota (whether or not its namespace and bundle exist: the caller checks)."""
        await self._modify(L.RESOURCE_QUOTAS, str(bundle), lambda _: quota)

    async def delete_resource_quota(self, bundle: NamespaceBundle) -> None:
        """Remove the bundle's quota, so that the default one applies (BundlesQuotas.resetResourceQuota); NotFoundError
        in Pulsar's words (its metadata store's NotFoundException) when there is no node."""
        path = L.RESOURCE_QUOTAS.path(str(bundle))
        if not await self.cache.store.exists(path, watch_missing=False):
            raise NotFoundError(f"path {path} not found.")
        await self.cache.delete(L.RESOURCE_QUOTAS, str(bundle))

    # -- anti-affinity group: LocalPolicies.namespaceAntiAffinityGroup (Pulsar keeps it there, per cluster) -------
    def anti_affinity_group(self, namespace: str) -> str | None:
        group = (self._local_policies.get(namespace) or {}).get(ANTI_AFFINITY_GROUP)
        return group if isinstance(group, str) and group else None

    async def set_anti_affinity_group(self, namespace: str, group: str | None) -> None:
        """Set (None: remove) the group; LocalPolicies are created with the namespace's bundles when missing."""
        self._namespace_must_exist(namespace)
        bundles = self.namespace_bundles(namespace).to_bundles_data()

        def change(current: JsonDoc | None) -> JsonDoc:
            doc: JsonDoc = copy.deepcopy(dict(current or {"bundles": bundles, "migrated": False}))
            if group is None:
                doc.pop(ANTI_AFFINITY_GROUP, None)
            else:
                doc[ANTI_AFFINITY_GROUP] = group
            return doc
        await self._modify(L.LOCAL_POLICIES, namespace, change)

    # -- bookie affinity group: LocalPolicies.bookieAffinityGroup (Pulsar keeps it there, per cluster) -----------
    def bookie_affinity_group(self, namespace: str) -> dict[str, str] | None:
        """The namespace's BookieAffinityGroupData ({"bookkeeperAffinityGroupPrimary", and
        "bookkeeperAffinityGroupSecondary" when set}), None when it has none."""
        group = (self._local_policies.get(namespace) or {}).get(BOOKIE_AFFINITY_GROUP)
        if not isinstance(group, dict):
            return None
        return {k: v for k, v in group.items() if k in BOOKIE_AFFINITY_FIELDS and isinstance(v, str)}

    async def set_bookie_affinity_group(self, namespace: str, group: Mapping[str, str] | None) -> None:
        """Set (None: remove) the group; LocalPolicies are created with the namespace's bundles when missing
        (NamespacesBase.internalSetBookieAffinityGroup: setLocalPoliciesWithCreate)."""
        self._namespace_must_exist(namespace)
        bundles = self.namespace_bundles(namespace).to_bundles_data()

        def change(current: JsonDoc | None) -> JsonDoc:
            doc: JsonDoc = copy.deepcopy(dict(current or {"bundles": bundles, "migrated": False}))
            if group is None:
                doc.pop(BOOKIE_AFFINITY_GROUP, None)
            else:
                doc[BOOKIE_AFFINITY_GROUP] = dict(group)
            return doc
        await self._modify(L.LOCAL_POLICIES, namespace, change)

    # -- permissions: the namespace's AuthPolicies (what Pulsar's authorization provider stores) ------
    async def grant_namespace_permission(self, namespace: str, role: str, actions: Sequence[str]) -> None:
        await self._modify_auth(namespace, lambda auth: auth[P.NAMESPACE_AUTH].__setitem__(role, list(actions)))

    async def revoke_namespace_permission(self, namespace: str, role: str) -> None:
        await self._modify_auth(namespace, lambda auth: auth[P.NAMESPACE_AUTH].pop(role, None))

    async def grant_subscription_permission(self, namespace: str, subscription: str, roles: Sequence[str]) -> None:
        await self._modify_auth(namespace, lambda auth: auth[P.SUBSCRIPTION_AUTH_ROLES].__setitem__(
            subscription, list(roles)))

    async def revoke_subscription_permission(self, namespace: str, subscription: str, role: str) -> None:
        def change(auth: JsonDoc) -> None:
            roles = auth[P.SUBSCRIPTION_AUTH_ROLES].get(subscription)
            if roles is None:
                raise NotFoundError("couldn't find subscription")
            auth[P.SUBSCRIPTION_AUTH_ROLES][subscription] = [r for r in roles if r != role]
        await self._modify_auth(namespace, change)

    async def grant_topic_permission(self, namespace: str, topic: str, role: str, actions: Sequence[str]) -> None:
        await self.grant_topic_permissions(namespace, [TopicGrant(topic, role, tuple(actions))])

    async def grant_topic_permissions(self, namespace: str, grants: Iterable[TopicGrant]) -> None:
        """Give each role its actions on its topic (replacing what it had there), in order (the last grant of a role
        on a topic wins), in one write of the namespace's policies: all or nothing, as Pulsar's
        PulsarAuthorizationProvider.grantPermissionAsync(List) (one setPoliciesAsync)."""
        given = tuple(grants)  # (the change may run again, on a concurrent modification)

        def change(auth: JsonDoc) -> None:
            for grant in given:
                auth[P.DESTINATION_AUTH].setdefault(grant.topic, {})[grant.role] = list(grant.actions)
        await self._modify_auth(namespace, change)

    async def revoke_topic_permission(self, namespace: str, topics: Iterable[str], role: str) -> None:
        """Remove the role's grant on each of ``topics`` (a partitioned topic's partitions and itself)."""
        await self.revoke_topic_permissions(namespace, [TopicRole(topic, role) for topic in topics])

    async def revoke_topic_permissions(self, namespace: str, revokes: Iterable[TopicRole]) -> None:
        """Remove each role's grant on its topic, in one write of the namespace's policies; a topic without one is
        passed over, as Pulsar's PulsarAuthorizationProvider.revokePermissionAsync does (no error: a revoke of what
        was never granted succeeds)."""
        taken = tuple(revokes)  # (the change may run again, on a concurrent modification)

        def change(auth: JsonDoc) -> None:
            for revoke in taken:
                auth[P.DESTINATION_AUTH].get(revoke.topic, {}).pop(revoke.role, None)
        await self._modify_auth(namespace, change)

    async def remove_topic_permissions(self, namespace: str, topics: Iterable[str]) -> None:
        """Drop every grant on each of ``topics`` (of ``namespace``), as Pulsar's PulsarAuthorizationProvider.
        removePermissionsAsync when a topic is deleted: nothing written when they have none; a namespace gone
        meanwhile took them along."""
        granted = (self.policy(namespace, P.AUTH_POLICIES) or {}).get(P.DESTINATION_AUTH, {})
        names = [topic for topic in topics if topic in granted]
        if not names:
            return

        def change(auth: JsonDoc) -> None:
            for topic in names:
                auth[P.DESTINATION_AUTH].pop(topic, None)
        try:
            await self._modify_auth(namespace, change)
        except NotFoundError:
            pass

    async def _modify_auth(self, namespace: str, change: Callable[[JsonDoc], object]) -> None:
        """Edit the namespace's auth_policies with every part present; a topic left without
        grants is dropped."""
        def modify(policies: JsonDoc) -> None:
            auth = policies.get(P.AUTH_POLICIES) or {}
            for part in _AUTH_PARTS:
                auth.setdefault(part, {})
            change(auth)
            auth[P.DESTINATION_AUTH] = {t: grants for t, grants in auth[P.DESTINATION_AUTH].items() if grants}
            policies[P.AUTH_POLICIES] = auth
        await self.modify_policies(namespace, modify)

    # -- partitioned topics (Pulsar's NamespaceResources.PartitionedTopicResources) -------------------
    def partitioned_metadata(self, base_topic: str) -> Mapping[str, Any] | None:
        """A partitioned topic's stored PartitionedTopicMetadata document, or None."""
        doc = self._partitioned.get(base_topic)
        return MappingProxyType(doc) if doc is not None else None

    def partitions_of(self, base_topic: str) -> int:
        doc = self._partitioned.get(base_topic)
        return 0 if doc is None else int(doc["partitions"])

    async def partitions_of_fresh(self, base_topic: str) -> int:
        """``partitions_of``, reading the store when the cache has no such partitioned topic: another broker may have
        just created it, its notification not here yet (as Pulsar's metadata cache loads a key it does not hold)."""
        if base_topic not in self._partitioned:
            try:
                await self.cache.read_through(L.PARTITIONED_TOPICS, base_topic)
            except store_api.MetadataStoreError as exc:
                log.warning("partitioned topic %s not read from the metadata store: %s", base_topic, exc)
        return self.partitions_of(base_topic)

    def partitioned_topics_of(self, namespace: str) -> list[str]:
        """The partitioned topics of the namespace (both domains)."""
        return [base for base in self._partitioned if TopicName.parse(base).namespace == namespace]

    async def create_partitioned_topic(self, base_topic: str, partitions: int,
                                       properties: Mapping[str, str] | None = None) -> None:
        """Record a partitioned topic with its properties (one PartitionedTopicMetadata; None: none given, kept apart
        from an empty map, as Pulsar's metadata keeps them apart)."""
        if base_topic in self._partitioned:
            raise AlreadyExistsError("This topic already exists")
        doc = L.partitioned_topic_metadata(partitions, dict(properties) if properties is not None else None)
        await self._create(L.PARTITIONED_TOPICS, base_topic, doc, "This topic already exists")

    async def set_partitions(self, base_topic: str, partitions: int) -> None:
        def change(current: JsonDoc | None) -> JsonDoc:
            if current is None:
                return L.partitioned_topic_metadata(partitions, None)
            return {**current, "partitions": partitions}
        await self._modify(L.PARTITIONED_TOPICS, base_topic, change)

    async def delete_partitioned(self, base_topic: str) -> None:
        """Forget a partitioned topic: its partition count, properties and topic-level policies."""
        if base_topic in self._partitioned:
            await self.cache.delete(L.PARTITIONED_TOPICS, base_topic)
        for kind, table in ((L.TOPIC_PROPERTIES, self._topic_properties), (L.TOPIC_POLICIES, self._topic_policies),
                            (L.GLOBAL_TOPIC_POLICIES, self._global_topic_policies)):
            if base_topic in table:
                await self.cache.delete(kind, base_topic)

    # -- topics ---------------------------------------------------------------------------------------
    async def read_topic_records(self, topic: str) -> None:
        """Read the topic's compaction record and terminated mark from the store now (another broker may have
        written them, its notification not here yet)."""
        await asyncio.gather(self.cache.read_through(L.COMPACTIONS, topic),
                             self.cache.read_through(L.TERMINATED, topic))

    async def forget_topic(self, topic: str) -> Mapping[str, Any] | None:
        """A topic was deleted: drop its terminated mark, compaction record (returned, so its
        compacted ledger can be deleted) and topic-level policies, so a topic created again under
        the name starts afresh."""
        compaction = self._compactions.get(topic)
        for kind, table in ((L.COMPACTIONS, self._compactions), (L.TERMINATED, self._terminated),
                            (L.TOPIC_POLICIES, self._topic_policies),
                            (L.GLOBAL_TOPIC_POLICIES, self._global_topic_policies),
                            (L.TOPIC_PROPERTIES, self._topic_properties)):
            if topic in table:
                await self.cache.delete(kind, topic)
        return compaction

    async def forget_topic_policies(self, topic: str) -> None:
        """Drop a topic's topic-level policies, local and global (a partitioned topic's, once its partitions are
        gone; Pulsar's ``DELETE .../policies``)."""
        for kind, table in ((L.TOPIC_POLICIES, self._topic_policies),
                            (L.GLOBAL_TOPIC_POLICIES, self._global_topic_policies)):
            if topic in table:
                await self.cache.delete(kind, topic)

    async def mark_terminated(self, topic: str, ledger_id: int, entry_id: int) -> None:
        """The topic was terminated after the message at (ledger_id, entry_id)."""
        await self._modify(L.TERMINATED, topic, lambda _: [ledger_id, entry_id])

    async def set_compaction(self, topic: str, ledger: str, horizon: tuple[int, int], generation: int) -> None:
        """The topic's compacted view now lives in ``ledger``, covering up to ``horizon``."""
        record = {"ledger": ledger, "horizon": list(horizon), "generation": generation}
        await self._modify(L.COMPACTIONS, topic, lambda _: record)

    async def set_topic_properties(self, topic: str, properties: Mapping[str, str]) -> None:
        """Replace a topic's properties (a partitioned topic's live in its metadata document)."""
        await self.update_topic_properties(topic, lambda _: dict(properties))

    async def update_topic_properties(self, topic: str,
                                      change: Callable[[dict[str, str]], Mapping[str, str] | None]) -> None:
        """Read-modify-write of a topic's properties: ``change(stored properties, {} when none)``
        returns the new ones (empty or None: none); it runs again when another writer got in between. A partitioned
        topic's metadata that has a properties map keeps it when it becomes empty (Pulsar's PartitionedTopicMetadata
        then shows ``"properties": {}``); one that has none gets none from an empty change."""
        def new_properties(stored: Any) -> dict[str, str] | None:
            new = change(dict(stored or {}))
            return dict(new) if new else None

        if topic in self._partitioned:
            def modify(current: JsonDoc | None) -> Any:
                if current is None:
                    return KEEP
                stored = current.get("properties")
                new = change(dict(stored or {}))
                doc = {k: v for k, v in current.items() if k != "properties"}
                if not new and stored is None:
                    return doc
                return {**doc, "properties": dict(new or {})}
            await self._modify(L.PARTITIONED_TOPICS, topic, modify)
        else:
            await self._modify(L.TOPIC_PROPERTIES, topic, new_properties)

    def topic_policy(self, topic: str, key: str, is_global: bool = False) -> Any:
        """A topic-level policy value (topic: the full name, a partitioned topic's base name for
        its partitions), or None when it is not set; ``is_global``: its global value (set with isGlobal=true)."""
        table = self._global_topic_policies if is_global else self._topic_policies
        return table.get(topic, {}).get(key)

    async def set_topic_policy(self, topic: str, key: str, value: Any, is_global: bool = False) -> None:
        """Set (or, with None, remove) one topic-level policy, local or global, persisted at once."""
        table = self._global_topic_policies if is_global else self._topic_policies
        if value is None and topic in table and table[topic].get(key) is None:
            return
        await self.update_topic_policy(topic, key, lambda _: value, is_global)

    async def update_topic_policy(self, topic: str, key: str, change: Callable[[Any], Any],
                                  is_global: bool = False) -> None:
        """Read-modify-write of one topic-level policy (local, or ``is_global``), as ``update_policy``. The topic's
        document stays when its last policy goes, and a removal makes an empty one, as Pulsar's TopicPolicies object
        is made by any change and stays until the topic's policies are deleted (a GET of subscriptionTypesEnabled
        tells: [] with one, no content without)."""
        def modify(current: JsonDoc | None) -> Any:
            policies = dict(current or {})
            value = change(copy.deepcopy(policies.get(key)))
            if value is None:
                if policies.pop(key, None) is None and current is not None:
                    return KEEP
            else:
                policies[key] = copy.deepcopy(value)
            return policies
        await self._modify(L.GLOBAL_TOPIC_POLICIES if is_global else L.TOPIC_POLICIES, topic, modify)

    # -- global topic policy changes waiting for other clusters (broker.metadata.policy_copies) ---------------------
    @property
    def global_policy_copies(self) -> Mapping[str, Mapping[str, Any]]:
        """The changes waiting: "<tenant>/<ns>/<cluster>" -> the document of the namespace's for that cluster."""
        return MappingProxyType(self._policy_copies)

    async def queue_global_policy_copies(self, namespace: str, cluster: str, topic: str,
                                         calls: Sequence[C.PolicyCall]) -> None:
        """``calls`` (changes of ``topic``'s global policies) to be sent to ``cluster``, each replacing the waiting
        change of its policy."""
        await self._modify(L.GLOBAL_POLICY_COPIES, C.queue_key(namespace, cluster),
                           lambda doc: C.queued(doc, topic, calls))

    async def global_policy_copy_taken(self, namespace: str, cluster: str, sent: C.WaitingChange) -> None:
        """``cluster`` took (or refused) ``sent``: it waits no more, unless a newer change replaced it meanwhile."""
        def change(doc: JsonDoc | None) -> Any:
            return C.taken(doc, sent) if sent in C.changes(doc) else KEEP
        await self._modify(L.GLOBAL_POLICY_COPIES, C.queue_key(namespace, cluster), change)

    async def drop_global_policy_copies(self, namespace: str, cluster: str) -> None:
        """Drop the namespace's changes waiting for ``cluster`` (the namespace is gone, or no longer replicated
        there)."""
        await self.cache.delete(L.GLOBAL_POLICY_COPIES, C.queue_key(namespace, cluster))

    # -- schemas (Pulsar's schema storage) ------------------------------------------------------------
    def schema_versions(self, base_topic: str) -> Sequence[Mapping[str, Any]]:
        """The topic's schema records; the index is the version."""
        versions: Sequence[Mapping[str, Any]] = self._schemas.get(base_topic, ())
        return versions

    async def add_schema_version(self, base_topic: str, record: Mapping[str, Any]) -> int:
        """Append a schema version; returns its number."""
        try:
            return await self.cache.add_version(L.SCHEMAS, base_topic, dict(record))
        except ConcurrentChangeError as exc:
            raise ConflictError(f"Concurrent modification: {exc}") from None

    async def delete_schemas(self, base_topic: str) -> None:
        if base_topic in self._schemas:
            await self.cache.delete(L.SCHEMAS, base_topic)


def broker_metadata_store_url(url: str, data_dir: Path | None) -> str:
    """The store ``metadataStoreUrl`` names, as a URL: empty = the local durable store under ``<data_dir>/metadata``
    (``local:<that directory>``), ``memory:`` when there is no data dir."""
    if url.strip():
        return url.strip()
    if data_dir is None:
        return "memory:"
    return f"{LOCAL_SCHEME}{local_directory(LOCAL_SCHEME, data_dir).resolve()}"


async def open_broker_metadata_store(url: str, data_dir: Path | None, *, session_timeout_s: float,
                                     operation_timeout_s: float) -> MetadataStore:
    """The store ``metadataStoreUrl`` names (``metadata_store.open_metadata_store``, ``broker_metadata_store_url``)."""
    return await open_metadata_store(broker_metadata_store_url(url, data_dir), data_dir=data_dir,
                                     session_timeout_s=session_timeout_s, operation_timeout_s=operation_timeout_s)


def _must_exist(current: Any, message: str) -> Any:
    """``current`` when there is one, else NotFoundError (another broker deleted it)."""
    if current is None:
        raise NotFoundError(message)
    return current


def _replace(current: Any, new: Any, message: str) -> Any:
    _must_exist(current, message)
    return new


class Derived(Generic[T]):
    """A value derived from the metadata (a policy in force), recomputed only after the metadata
    changed: cheap enough to ask per message."""

    __slots__ = ("_cache", "_compute", "_generation", "_value")

    def __init__(self, store: BrokerMetadata, compute: Callable[[], T]) -> None:
        self._cache = store.cache  # (its generation is a plain attribute: no property call per message)
        self._compute = compute
        self._generation = -1
        self._value: T

    def get(self) -> T:
        generation = self._cache.generation
        if self._generation != generation:
            self._value = self._compute()
            self._generation = generation
        return self._value
