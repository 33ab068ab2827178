"""The metadata store's named operations: each checks its preconditions, then changes memory and
disk together or not at all; the document on disk keeps its format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.metadata.store import (
    AlreadyExistsError,
    InUseError,
    InvalidError,
    MetadataStore,
    NotFoundError,
    TenantInfo,
)


def disk(path: Path) -> dict[str, object]:
    doc = json.loads(path.read_text())
    doc.pop("saved_at")
    return doc  # type: ignore[no-any-return]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "metadata.json"


def test_bootstrap_document_format(path: Path) -> None:
    MetadataStore(path, "standalone")
    assert disk(path) == {
        "clusters": {"standalone": {}},
        "tenants": {"public": {"adminRoles": [], "allowedClusters": ["standalone"]},
                    "pulsar": {"adminRoles": [], "allowedClusters": ["standalone"]}},
        "namespaces": {"public/default": {}, "pulsar/system": {}},
        "partitioned_topics": {}, "schemas": {}, "compactions": {}, "terminated": {},
        "topic_policies": {}, "topic_properties": {},
    }


def test_every_operation_persists_and_reloads(path: Path) -> None:
    store = MetadataStore(path, "standalone")
    store.create_cluster("east", {"serviceUrl": "http://east:8080"})
    store.create_tenant("acme", TenantInfo(("admin",), ("standalone", "east")))
    store.create_namespace("acme/ns", {"message_ttl_in_seconds": 60})
    store.set_policy("acme/ns", "deduplicationEnabled", True)
    store.grant_namespace_permission("acme/ns", "app", ["produce"])
    store.grant_topic_permission("acme/ns", "persistent://acme/ns/t", "reader", ["consume"])
    store.grant_subscription_permission("acme/ns", "sub", ["app"])
    store.create_partitioned_topic("persistent://acme/ns/p", 3, {"owner": "me"})
    store.set_topic_policy("persistent://acme/ns/t", "maxProducers", 2)
    store.mark_terminated("persistent://acme/ns/t", 4, 5)
    store.set_compaction("persistent://acme/ns/t", "ledger-x", (4, 2), 1)
    assert store.add_schema_version("persistent://acme/ns/t", {"type": 1}) == 0
    assert store.add_schema_version("persistent://acme/ns/t", {"type": 2}) == 1

    doc = disk(path)
    assert doc["tenants"]["acme"] == {"adminRoles": ["admin"], "allowedClusters": ["standalone", "east"]}  # type: ignore[index]
    assert doc["namespaces"]["acme/ns"] == {  # type: ignore[index]
        "message_ttl_in_seconds": 60, "deduplicationEnabled": True,
        "auth_policies": {"namespace_auth": {"app": ["produce"]},
                          "destination_auth": {"persistent://acme/ns/t": {"reader": ["consume"]}},
                          "subscription_auth_roles": {"sub": ["app"]}}}
    assert doc["partitioned_topics"] == {"persistent://acme/ns/p": 3}
    assert doc["topic_properties"] == {"persistent://acme/ns/p": {"owner": "me"}}
    assert doc["terminated"] == {"persistent://acme/ns/t": [4, 5]}
    assert doc["compactions"] == {"persistent://acme/ns/t": {"ledger": "ledger-x", "horizon": [4, 2], "generation": 1}}

    again = MetadataStore(path, "standalone")
    for view in ("clusters", "tenants", "namespaces", "partitioned_topics", "compactions", "terminated",
                 "topic_policies", "topic_properties"):
        assert dict(getattr(again, view)) == dict(getattr(store, view)), view
    assert list(again.schema_versions("persistent://acme/ns/t")) == [{"type": 1}, {"type": 2}]
    assert again.tenant("acme") == TenantInfo(("admin",), ("standalone", "east"))


def test_refusals_change_nothing(path: Path) -> None:
    store = MetadataStore(path, "standalone")
    store.create_tenant("acme", TenantInfo((), ("standalone",)))
    store.create_namespace("acme/ns", {})
    before, generation = disk(path), store.generation
    with pytest.raises(AlreadyExistsError, match="Cluster already exists"):
        store.create_cluster("standalone", {})
    with pytest.raises(NotFoundError, match="Cluster does not exist"):
        store.update_cluster("nowhere", {})
    with pytest.raises(InUseError, match="Cluster not empty"):
        store.delete_cluster("standalone")
    with pytest.raises(InvalidError, match="Clusters do not exist"):
        store.create_tenant("other", TenantInfo((), ("nowhere",)))
    with pytest.raises(AlreadyExistsError, match="Tenant already exists"):
        store.create_tenant("acme", TenantInfo())
    with pytest.raises(InUseError, match="still has active namespaces"):
        store.delete_tenant("acme")
    with pytest.raises(NotFoundError, match="Tenant does not exist"):
        store.create_namespace("ghost/ns", {})
    with pytest.raises(AlreadyExistsError, match="Namespace already exists"):
        store.create_namespace("acme/ns", {})
    with pytest.raises(NotFoundError, match="Namespace does not exist"):
        store.set_policy("acme/none", "x", 1)
    with pytest.raises(NotFoundError, match="couldn't find subscription"):
        store.revoke_subscription_permission("acme/ns", "sub", "role")
    with pytest.raises(NotFoundError, match="not set at the topic level"):
        store.revoke_topic_permission("acme/ns", "persistent://acme/ns/t", "role")
    store.create_partitioned_topic("persistent://acme/ns/p", 2)
    before, generation = disk(path), store.generation
    with pytest.raises(AlreadyExistsError, match="Partitioned topic already exists"):
        store.create_partitioned_topic("persistent://acme/ns/p", 4)
    with pytest.raises(InUseError, match="Cannot delete non empty namespace"):
        store.delete_namespace("acme/ns")
    assert disk(path) == before and store.generation == generation


def test_a_failed_write_leaves_memory_as_it_was(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = MetadataStore(path, "standalone")
    store.create_partitioned_topic("persistent://public/default/p", 2)
    before, generation = disk(path), store.generation
    seen: list[int] = []
    store.listeners.append(lambda: seen.append(store.generation))

    def full_disk(p: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "_write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        store.create_partitioned_topic("persistent://public/default/q", 3, {"k": "v"})
    with pytest.raises(OSError):
        store.delete_partitioned("persistent://public/default/p")
    with pytest.raises(OSError):
        store.set_policy("public/default", "message_ttl_in_seconds", 5)
    assert dict(store.partitioned_topics) == {"persistent://public/default/p": 2}
    assert dict(store.topic_properties) == {}
    assert store.policy("public/default", "message_ttl_in_seconds") is None
    assert store.generation == generation and not seen
    assert disk(path) == before


def test_views_are_read_only() -> None:
    store = MetadataStore(None, "standalone")
    with pytest.raises(TypeError):
        store.tenants["x"] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        del store.namespaces["public/default"]  # type: ignore[attr-defined]
    policies = store.namespace_policies("public/default")
    policies["message_ttl_in_seconds"] = 1  # a copy: the store is not changed
    assert store.policy("public/default", "message_ttl_in_seconds") is None


def test_modify_policies_is_all_or_nothing() -> None:
    store = MetadataStore(None, "standalone")

    def half_done(policies: dict[str, object]) -> None:
        policies["message_ttl_in_seconds"] = 10
        raise ValueError("refused half-way")

    with pytest.raises(ValueError):
        store.modify_policies("public/default", half_done)
    assert store.policy("public/default", "message_ttl_in_seconds") is None
