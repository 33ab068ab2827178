"""The embedded metadata store: clusters, tenants, namespaces, partitioned topics, schemas.

One JSON document, rewritten atomically (write temp file, fsync, rename) on every change. Metadata
changes are rare and small, so this is simple and durable. With no path it lives in memory only.

Changes go through named operations only, shaped like Apache Pulsar's metadata resources
(``ClusterResources``, ``TenantResources``, ``NamespaceResources`` with its partitioned-topic part,
the schema storage): each checks its preconditions, then changes memory and disk together or not
at all (a failed write puts memory back). A distributed backend (ZooKeeper, Pulsar's paths and
formats) implements the same operations. Reads are read-only views of the stored documents, in
Pulsar's JSON field names; the documents' format on disk is unchanged.

Refusals are typed by kind (``NotFoundError``, ``AlreadyExistsError``, ``InUseError``,
``InvalidError``) and carry Pulsar's wording; the admin layer turns them into HTTP statuses.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from broker.metadata import policies as P
from broker.topic_name import TopicName

DEFAULT_TENANTS = ("public", "pulsar")
DEFAULT_NAMESPACES = ("public/default", "pulsar/system")

# The Policies fields of a namespace's grants (Pulsar's AuthPolicies), as stored.
_AUTH_PARTS = (P.NAMESPACE_AUTH, P.DESTINATION_AUTH, P.SUBSCRIPTION_AUTH_ROLES)

T = TypeVar("T")
JsonDoc = dict[str, Any]  # a stored document (Pulsar's JSON field names)


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


@dataclass(frozen=True)
class TenantInfo:
    """Pulsar's TenantInfo: who administers the tenant, which clusters its namespaces may use."""

    admin_roles: tuple[str, ...] = ()
    allowed_clusters: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TenantInfo:
        return cls(tuple(doc.get("adminRoles", ())), tuple(doc.get("allowedClusters", ())))

    def to_json(self) -> JsonDoc:
        return {"adminRoles": list(self.admin_roles), "allowedClusters": list(self.allowed_clusters)}


_ABSENT = object()


class MetadataStore:
    def __init__(self, path: Path | None, cluster: str) -> None:
        # Bumped on every change: a cheap "has anything changed?" for caches (see Derived).
        self.generation = 0
        # Called after every change (on the loop that made it).
        self.listeners: list[Callable[[], None]] = []
        self.path = path
        self.cluster = cluster
        self._clusters: dict[str, JsonDoc] = {}
        self._tenants: dict[str, JsonDoc] = {}
        self._namespaces: dict[str, JsonDoc] = {}  # namespace -> its Policies document
        self._partitioned_topics: dict[str, int] = {}
        # base topic name (without partition suffix) -> list of versions (index = version)
        self._schemas: dict[str, list[JsonDoc]] = {}
        # full topic name -> {"ledger": compacted ledger name, "horizon": [l, e], "generation": n}
        self._compactions: dict[str, JsonDoc] = {}
        # full topic name -> [ledgerId, entryId] of its last message when it was terminated
        self._terminated: dict[str, list[int]] = {}
        # Topic-level policies: topic name (a partitioned topic's base name covers its partitions)
        # -> {Pulsar's TopicPolicies field name: value}
        self._topic_policies: dict[str, JsonDoc] = {}
        # Topic properties (Pulsar's topic metadata map): topic name (a partitioned topic's base
        # name covers its partitions) -> {key: value}
        self._topic_properties: dict[str, dict[str, str]] = {}
        if path is not None and path.exists():
            self._load(path)
        else:
            self._bootstrap()

    def _bootstrap(self) -> None:
        changes: list[tuple[MutableMapping[str, Any], str, object]] = [(self._clusters, self.cluster, {})]
        for t in DEFAULT_TENANTS:
            changes.append((self._tenants, t, TenantInfo((), (self.cluster,)).to_json()))
        for ns in DEFAULT_NAMESPACES:
            changes.append((self._namespaces, ns, {}))
        self._commit(*changes)

    def _load(self, path: Path) -> None:
        doc = json.loads(path.read_text())
        self._clusters = doc.get("clusters", {self.cluster: {}})
        self._tenants = doc.get("tenants", {})
        self._namespaces = doc.get("namespaces", {})
        self._partitioned_topics = doc.get("partitioned_topics", {})
        self._schemas = doc.get("schemas", {})
        self._compactions = doc.get("compactions", {})
        self._terminated = doc.get("terminated", {})
        self._topic_policies = doc.get("topic_policies", {})
        self._topic_properties = doc.get("topic_properties", {})

    # -- the one way a change is made ---------------------------------------------------------------
    def _commit(self, *changes: tuple[MutableMapping[str, Any], str, object]) -> None:
        """Apply ``(table, key, new value or _ABSENT to remove)`` changes and persist them: all of
        them or, when the write fails, none (memory is put back and the error raised)."""
        before = [(table, key, table.get(key, _ABSENT)) for table, key, _ in changes]
        for table, key, value in changes:
            _put(table, key, value)
        try:
            if self.path is not None:
                self._write(self.path)
        except BaseException:
            for table, key, value in reversed(before):
                _put(table, key, value)
            raise
        self.generation += 1  # lets hot paths cache what they derive from metadata
        for listener in self.listeners:
            listener()

    def _write(self, path: Path) -> None:
        doc = {
            "clusters": self._clusters,
            "tenants": self._tenants,
            "namespaces": self._namespaces,
            "partitioned_topics": self._partitioned_topics,
            "schemas": self._schemas,
            "compactions": self._compactions,
            "terminated": self._terminated,
            "topic_policies": self._topic_policies,
            "topic_properties": self._topic_properties,
            "saved_at": time.time(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

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

    @property
    def partitioned_topics(self) -> Mapping[str, int]:
        return MappingProxyType(self._partitioned_topics)

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
    def topic_properties(self) -> Mapping[str, Mapping[str, str]]:
        return MappingProxyType(self._topic_properties)

    # -- clusters (Pulsar's ClusterResources) -------------------------------------------------------
    def create_cluster(self, name: str, data: Mapping[str, Any]) -> None:
        if name in self._clusters:
            raise AlreadyExistsError("Cluster already exists")
        self._commit((self._clusters, name, copy.deepcopy(dict(data))))

    def update_cluster(self, name: str, data: Mapping[str, Any]) -> None:
        self._cluster_must_exist(name)
        self._commit((self._clusters, name, copy.deepcopy(dict(data))))

    def delete_cluster(self, name: str) -> None:
        """Refused while it is this broker's cluster, a tenant may use it or a namespace
        replicates to it."""
        self._cluster_must_exist(name)
        used = any(name in t.get("allowedClusters", []) for t in self._tenants.values()) or any(
            name in (p.get(P.REPLICATION_CLUSTERS) or []) for p in self._namespaces.values())
        if used or name == self.cluster:
            raise InUseError("Cluster not empty")
        self._commit((self._clusters, name, _ABSENT))

    def _cluster_must_exist(self, name: str) -> None:
        if name not in self._clusters:
            raise NotFoundError("Cluster does not exist")

    # -- tenants (Pulsar's TenantResources) ---------------------------------------------------------
    def tenant(self, name: str) -> TenantInfo | None:
        doc = self._tenants.get(name)
        return None if doc is None else TenantInfo.from_json(doc)

    def create_tenant(self, name: str, info: TenantInfo) -> None:
        self._check_clusters_exist(info.allowed_clusters)
        if name in self._tenants:
            raise AlreadyExistsError("Tenant already exists")
        self._commit((self._tenants, name, info.to_json()))

    def update_tenant(self, name: str, info: TenantInfo) -> None:
        self._check_clusters_exist(info.allowed_clusters)
        self._tenant_must_exist(name)
        self._commit((self._tenants, name, info.to_json()))

    def delete_tenant(self, name: str) -> None:
        self._tenant_must_exist(name)
        if self.namespaces_of(name):
            raise InUseError("The tenant still has active namespaces")
        self._commit((self._tenants, name, _ABSENT))

    def _tenant_must_exist(self, name: str) -> None:
        if name not in self._tenants:
            raise NotFoundError("Tenant does not exist")

    def _check_clusters_exist(self, clusters: Iterable[str]) -> None:
        unknown = [c for c in clusters if c not in self._clusters]
        if unknown:
            raise InvalidError(f"Clusters do not exist: {unknown}")

    # -- namespaces (Pulsar's NamespaceResources) ---------------------------------------------------
    def namespace_exists(self, namespace: str) -> bool:
        return namespace in self._namespaces

    def namespaces_of(self, tenant: str) -> list[str]:
        return sorted(ns for ns in self._namespaces if ns.split("/")[0] == tenant)

    def create_namespace(self, namespace: str, policies: Mapping[str, Any]) -> None:
        self._tenant_must_exist(namespace.split("/")[0])
        if namespace in self._namespaces:
            raise AlreadyExistsError("Namespace already exists")
        self._commit((self._namespaces, namespace, copy.deepcopy(dict(policies))))

    def delete_namespace(self, namespace: str) -> None:
        """Refused while a partitioned topic of the namespace is still recorded (delete those first)."""
        self._namespace_must_exist(namespace)
        if self.partitioned_topics_of(namespace):
            raise InUseError("Cannot delete non empty namespace")
        self._commit((self._namespaces, namespace, _ABSENT))

    def namespace_policies(self, namespace: str) -> JsonDoc:
        """A copy of the namespace's stored Policies document (Pulsar's getPolicies)."""
        self._namespace_must_exist(namespace)
        return copy.deepcopy(self._namespaces[namespace])

    def policy(self, namespace: str, key: str) -> Any:
        """A namespace's policy value, or None when it is not set (or the namespace is gone)."""
        return self._namespaces.get(namespace, {}).get(key)

    def modify_policies(self, namespace: str, change: Callable[[JsonDoc], None]) -> None:
        """Read-modify-write of a namespace's Policies (Pulsar's setPolicies with a function):
        ``change`` edits a copy; when it raises, nothing is changed."""
        policies = self.namespace_policies(namespace)
        change(policies)
        self._commit((self._namespaces, namespace, policies))

    def set_policy(self, namespace: str, key: str, value: Any) -> None:
        """Set (or, with None, remove) one policy of an existing namespace, persisted at once."""
        def change(policies: JsonDoc) -> None:
            if value is None:
                policies.pop(key, None)
            else:
                policies[key] = copy.deepcopy(value)
        self.modify_policies(namespace, change)

    def _namespace_must_exist(self, namespace: str) -> None:
        if namespace not in self._namespaces:
            raise NotFoundError("Namespace does not exist")

    # -- permissions: the namespace's AuthPolicies (what Pulsar's authorization provider stores) ------
    def grant_namespace_permission(self, namespace: str, role: str, actions: Sequence[str]) -> None:
        self._modify_auth(namespace, lambda auth: auth[P.NAMESPACE_AUTH].__setitem__(role, list(actions)))

    def revoke_namespace_permission(self, namespace: str, role: str) -> None:
        self._modify_auth(namespace, lambda auth: auth[P.NAMESPACE_AUTH].pop(role, None))

    def grant_subscription_permission(self, namespace: str, subscription: str, roles: Sequence[str]) -> None:
        self._modify_auth(namespace, lambda auth: auth[P.SUBSCRIPTION_AUTH_ROLES].__setitem__(
            subscription, list(roles)))

    def revoke_subscription_permission(self, namespace: str, subscription: str, role: str) -> None:
        def change(auth: JsonDoc) -> None:
            roles = auth[P.SUBSCRIPTION_AUTH_ROLES].get(subscription)
            if roles is None:
                raise NotFoundError("couldn't find subscription")
            auth[P.SUBSCRIPTION_AUTH_ROLES][subscription] = [r for r in roles if r != role]
        self._modify_auth(namespace, change)

    def grant_topic_permission(self, namespace: str, topic: str, role: str, actions: Sequence[str]) -> None:
        self._modify_auth(namespace, lambda auth: auth[P.DESTINATION_AUTH].setdefault(topic, {}).__setitem__(
            role, list(actions)))

    def revoke_topic_permission(self, namespace: str, topic: str, role: str) -> None:
        def change(auth: JsonDoc) -> None:
            grants = auth[P.DESTINATION_AUTH].get(topic, {})
            if role not in grants:
                raise NotFoundError("Permissions are not set at the topic level")
            del grants[role]
        self._modify_auth(namespace, change)

    def _modify_auth(self, namespace: str, change: Callable[[JsonDoc], object]) -> None:
        """Edit the namespace's auth_policies with every part present; a topic left without
        grants is dropped."""
        def modify(policies: JsonDoc) -> None:
            auth = policies.get(P.AUTH_POLICIES) or {}
            for part in _AUTH_PARTS:
                auth.setdefault(part, {})
            change(auth)
            auth[P.DESTINATION_AUTH] = {t: grants for t, grants in auth[P.DESTINATION_AUTH].items() if grants}
            policies[P.AUTH_POLICIES] = auth
        self.modify_policies(namespace, modify)

    # -- partitioned topics (Pulsar's NamespaceResources.PartitionedTopicResources) -------------------
    def partitions_of(self, base_topic: str) -> int:
        return self._partitioned_topics.get(base_topic, 0)

    def partitioned_topics_of(self, namespace: str) -> list[str]:
        """The partitioned topics of the namespace (both domains)."""
        return [base for base in self._partitioned_topics if TopicName.parse(base).namespace == namespace]

    def create_partitioned_topic(self, base_topic: str, partitions: int,
                                 properties: Mapping[str, str] | None = None) -> None:
        """Record a partitioned topic and its properties together."""
        if base_topic in self._partitioned_topics:
            raise AlreadyExistsError("Partitioned topic already exists")
        changes: list[tuple[MutableMapping[str, Any], str, object]] = [
            (self._partitioned_topics, base_topic, partitions)]
        if properties:
            changes.append((self._topic_properties, base_topic, dict(properties)))
        self._commit(*changes)

    def set_partitions(self, base_topic: str, partitions: int) -> None:
        self._commit((self._partitioned_topics, base_topic, partitions))

    def delete_partitioned(self, base_topic: str) -> None:
        """Forget a partitioned topic: its partition count and its topic-level policies."""
        changes = [(table, base_topic, _ABSENT) for table in
                   (self._partitioned_topics, self._topic_properties, self._topic_policies) if base_topic in table]
        if changes:
            self._commit(*changes)

    # -- topics ---------------------------------------------------------------------------------------
    def forget_topic(self, topic: str) -> Mapping[str, Any] | None:
        """A topic was deleted: drop its terminated mark, compaction record (returned, so its
        compacted ledger can be deleted) and topic-level policies, so a topic created again under
        the name starts afresh."""
        compaction = self._compactions.get(topic)
        changes = [(table, topic, _ABSENT) for table in
                   (self._compactions, self._terminated, self._topic_policies, self._topic_properties)
                   if topic in table]
        if changes:
            self._commit(*changes)
        return compaction

    def mark_terminated(self, topic: str, ledger_id: int, entry_id: int) -> None:
        """The topic was terminated after the message at (ledger_id, entry_id)."""
        self._commit((self._terminated, topic, [ledger_id, entry_id]))

    def set_compaction(self, topic: str, ledger: str, horizon: tuple[int, int], generation: int) -> None:
        """The topic's compacted view now lives in ``ledger``, covering up to ``horizon``."""
        self._commit((self._compactions, topic,
                      {"ledger": ledger, "horizon": list(horizon), "generation": generation}))

    def set_topic_properties(self, topic: str, properties: Mapping[str, str]) -> None:
        self._commit((self._topic_properties, topic, dict(properties) if properties else _ABSENT))

    def topic_policy(self, topic: str, key: str) -> Any:
        """A topic-level policy value (topic: the full name, a partitioned topic's base name for
        its partitions), or None when it is not set."""
        return self._topic_policies.get(topic, {}).get(key)

    def set_topic_policy(self, topic: str, key: str, value: Any) -> None:
        """Set (or, with None, remove) one topic-level policy, persisted at once."""
        policies = dict(self._topic_policies.get(topic, {}))
        if value is None:
            if policies.pop(key, None) is None:
                return
        else:
            policies[key] = copy.deepcopy(value)
        self._commit((self._topic_policies, topic, policies or _ABSENT))

    # -- schemas (Pulsar's schema storage) ------------------------------------------------------------
    def schema_versions(self, base_topic: str) -> Sequence[Mapping[str, Any]]:
        """The topic's schema records; the index is the version."""
        return self._schemas.get(base_topic, ())

    def add_schema_version(self, base_topic: str, record: Mapping[str, Any]) -> int:
        """Append a schema version; returns its number."""
        versions = [*self._schemas.get(base_topic, ()), dict(record)]
        self._commit((self._schemas, base_topic, versions))
        return len(versions) - 1

    def delete_schemas(self, base_topic: str) -> None:
        if base_topic in self._schemas:
            self._commit((self._schemas, base_topic, _ABSENT))


def _put(table: MutableMapping[str, Any], key: str, value: object) -> None:
    if value is _ABSENT:
        table.pop(key, None)
    else:
        table[key] = value


class Derived(Generic[T]):
    """A value derived from the metadata (a policy in force), recomputed only after the metadata
    changed: cheap enough to ask per message."""

    __slots__ = ("_compute", "_generation", "_store", "_value")

    def __init__(self, store: MetadataStore, compute: Callable[[], T]) -> None:
        self._store = store
        self._compute = compute
        self._generation = -1
        self._value: T

    def get(self) -> T:
        if self._generation != self._store.generation:
            self._value = self._compute()
            self._generation = self._store.generation
        return self._value
