"""The embedded metadata store: tenants, namespaces, partitioned topics and schemas.

One JSON document, rewritten atomically (write temp file, fsync, rename) on every change. Metadata
changes are rare and small, so this is simple and durable. With no path it lives in memory only.
A distributed store (ZooKeeper/etcd) would implement the same methods for multi-broker setups.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

DEFAULT_TENANTS = ("public", "pulsar")
DEFAULT_NAMESPACES = ("public/default", "pulsar/system")


T = TypeVar("T")


class MetadataStore:
    def __init__(self, path: Path | None, cluster: str) -> None:
        # Bumped on every change (see save()): a cheap "has anything changed?" for caches.
        self.generation = 0
        # Called after every change (on the loop that made it).
        self.listeners: list[Callable[[], None]] = []
        self.path = path
        self.cluster = cluster
        self.clusters: dict[str, dict[str, Any]] = {}
        self.tenants: dict[str, dict[str, Any]] = {}
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.partitioned_topics: dict[str, int] = {}
        # base topic name (without partition suffix) -> list of versions (index = version)
        self.schemas: dict[str, list[dict[str, Any]]] = {}
        # full topic name -> {"ledger": compacted ledger name, "horizon": [l, e], "generation": n}
        self.compactions: dict[str, dict[str, Any]] = {}
        # full topic name -> [ledgerId, entryId] of its last message when it was terminated
        self.terminated: dict[str, list[int]] = {}
        # Topic-level policies: topic name (a partitioned topic's base name covers its partitions)
        # -> {Pulsar's TopicPolicies field name: value}
        self.topic_policies: dict[str, dict[str, Any]] = {}
        # Topic properties (Pulsar's topic metadata map): topic name (a partitioned topic's base
        # name covers its partitions) -> {key: value}
        self.topic_properties: dict[str, dict[str, str]] = {}
        if path is not None and path.exists():
            self._load(path)
        else:
            self._bootstrap()

    def _bootstrap(self) -> None:
        self.clusters[self.cluster] = {}
        for t in DEFAULT_TENANTS:
            self.tenants[t] = {"adminRoles": [], "allowedClusters": [self.cluster]}
        for ns in DEFAULT_NAMESPACES:
            self.namespaces[ns] = {}
        self.save()

    def _load(self, path: Path) -> None:
        doc = json.loads(path.read_text())
        self.clusters = doc.get("clusters", {self.cluster: {}})
        self.tenants = doc.get("tenants", {})
        self.namespaces = doc.get("namespaces", {})
        self.partitioned_topics = doc.get("partitioned_topics", {})
        self.schemas = doc.get("schemas", {})
        self.compactions = doc.get("compactions", {})
        self.terminated = doc.get("terminated", {})
        self.topic_policies = doc.get("topic_policies", {})
        self.topic_properties = doc.get("topic_properties", {})

    def save(self) -> None:
        self.generation += 1  # lets hot paths cache what they derive from metadata
        if self.path is not None:
            self._write(self.path)
        for listener in self.listeners:
            listener()

    def _write(self, path: Path) -> None:
        doc = {
            "clusters": self.clusters,
            "tenants": self.tenants,
            "namespaces": self.namespaces,
            "partitioned_topics": self.partitioned_topics,
            "schemas": self.schemas,
            "compactions": self.compactions,
            "terminated": self.terminated,
            "topic_policies": self.topic_policies,
            "topic_properties": self.topic_properties,
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

    # -- queries used on the hot-ish path ----------------------------------------------------------
    def namespace_exists(self, namespace: str) -> bool:
        return namespace in self.namespaces

    def partitions_of(self, base_topic: str) -> int:
        return self.partitioned_topics.get(base_topic, 0)

    def set_partitions(self, base_topic: str, partitions: int) -> None:
        self.partitioned_topics[base_topic] = partitions
        self.save()

    def delete_partitioned(self, base_topic: str) -> None:
        """Forget a partitioned topic: its partition count and its topic-level policies."""
        found = self.partitioned_topics.pop(base_topic, None) is not None
        found |= self.topic_properties.pop(base_topic, None) is not None
        if self.topic_policies.pop(base_topic, None) is not None or found:
            self.save()

    # -- namespace policies (Pulsar's Policies field names; see broker.metadata.policies) ------------
    def policy(self, namespace: str, key: str) -> Any:
        """A namespace's policy value, or None when it is not set (or the namespace is gone)."""
        return self.namespaces.get(namespace, {}).get(key)

    def forget_topic(self, topic: str) -> dict[str, Any] | None:
        """A topic was deleted: drop its terminated mark, compaction record (returned, so its
        compacted ledger can be deleted) and topic-level policies, so a topic created again under
        the name starts afresh."""
        compaction = self.compactions.pop(topic, None)
        changed = compaction is not None
        changed |= self.terminated.pop(topic, None) is not None
        changed |= self.topic_policies.pop(topic, None) is not None
        changed |= self.topic_properties.pop(topic, None) is not None
        if changed:
            self.save()
        return compaction

    # -- topic properties ---------------------------------------------------------------------------
    def set_topic_properties(self, topic: str, properties: dict[str, str]) -> None:
        if properties:
            self.topic_properties[topic] = dict(properties)
        else:
            self.topic_properties.pop(topic, None)
        self.save()

    # -- topic policies -----------------------------------------------------------------------------
    def topic_policy(self, topic: str, key: str) -> Any:
        """A topic-level policy value (topic: the full name, a partitioned topic's base name for
        its partitions), or None when it is not set."""
        return self.topic_policies.get(topic, {}).get(key)

    def set_topic_policy(self, topic: str, key: str, value: Any) -> None:
        """Set (or, with None, remove) one topic-level policy, persisted at once."""
        if value is None:
            policies = self.topic_policies.get(topic)
            if policies is None or policies.pop(key, None) is None:
                return
            if not policies:
                del self.topic_policies[topic]
        else:
            self.topic_policies.setdefault(topic, {})[key] = value
        self.save()

    def set_policy(self, namespace: str, key: str, value: Any) -> None:
        """Set (or, with None, remove) one policy of an existing namespace, persisted at once."""
        policies = self.namespaces[namespace]
        if value is None:
            policies.pop(key, None)
        else:
            policies[key] = value
        self.save()


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
