"""Bad input to the admin API answers what Apache Pulsar 4.0.7 answers, in Pulsar's order of checks.

Found by sending malformed, mistyped and missing bodies and bad names to every route and comparing the answers
with a live Pulsar standalone's."""

from __future__ import annotations

import uuid

import pytest

from broker.errors import InvalidTopicNameError
from broker.topic_name import TopicName
from tests.admin.conftest import Admin

TENANTS = "/admin/v2/tenants"
CLUSTERS = "/admin/v2/clusters"


@pytest.mark.parametrize(("method", "path", "raw", "status", "reason"), [
    # TenantsBase.validateClustersAsync: a missing body or clusters list is a 412 (it was a tenant on the local
    # cluster, or a 409 / 404 before the body was looked at).
    ("PUT", f"{TENANTS}/public", None, 412, "TenantInfo is null"),
    ("PUT", f"{TENANTS}/public", b"null", 412, "TenantInfo is null"),
    ("PUT", f"{TENANTS}/public", b"{}", 412, "Clusters cannot be null"),
    ("PUT", f"{TENANTS}/public", b'{"adminRoles": ["r"], "allowedClusters": null}', 412, "Clusters cannot be null"),
    ("PUT", f"{TENANTS}/fresh", b"{}", 412, "Clusters cannot be null"),
    ("POST", f"{TENANTS}/public", None, 412, "TenantInfo is null"),
    ("POST", f"{TENANTS}/public", b'{"a": 1}', 412, "Clusters cannot be null"),
    ("POST", f"{TENANTS}/no-such-tenant", None, 412, "TenantInfo is null"),  # (before the tenant's 404)
    # TenantsBase.createTenant: the name is checked before the body's clusters; a malformed body before both.
    ("PUT", f"{TENANTS}/a%20b", None, 412, "Tenant name is not valid"),
    ("PUT", f"{TENANTS}/a%20b", b"[]", 400, None),
    # ClustersBase.createCluster: the name before a missing body's 400.
    ("PUT", f"{CLUSTERS}/a%20b", None, 412, "Cluster name is not valid"),
    ("PUT", f"{CLUSTERS}/%C3%BC", None, 412, "Cluster name is not valid"),
    ("PUT", f"{CLUSTERS}/a%20b", b"[]", 400, None),
])
def test_answer_as_pulsar(admin: Admin, method: str, path: str, raw: bytes | None, status: int,
                          reason: str | None) -> None:
    path = path.replace("/fresh", f"/t-{uuid.uuid4().hex[:8]}")
    reply = admin.call(method, path, raw=raw)
    assert reply.status == status, (method, path, raw, reply.status, reply.body)
    if reason is not None:
        assert reply.reason == reason
    assert admin.ok("GET", f"{TENANTS}/public")["allowedClusters"] == ["standalone"]  # (nothing changed)


def test_tenant_created_and_updated_with_clusters(admin: Admin) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    assert admin.put(f"{TENANTS}/{tenant}", {"allowedClusters": ["standalone"]}).status == 204
    assert admin.post(f"{TENANTS}/{tenant}", {"adminRoles": ["r"], "allowedClusters": ["standalone"]}).status == 204
    assert admin.ok("GET", f"{TENANTS}/{tenant}") == {"adminRoles": ["r"], "allowedClusters": ["standalone"]}
    assert admin.delete(f"{TENANTS}/{tenant}").status == 204


@pytest.mark.parametrize("local", ["%20", "%20%20", "%09", "%E3%80%80"])
@pytest.mark.parametrize(("method", "suffix"), [
    ("PUT", ""), ("GET", "/stats"), ("GET", "/messageTTL"), ("POST", "/retention"), ("GET", "/permissions"),
])
@pytest.mark.parametrize("domain", ["persistent", "non-persistent"])
def test_blank_topic_name(admin: Admin, domain: str, method: str, suffix: str, local: str) -> None:
    """Pulsar's TopicName refuses a blank local name (StringUtils.isBlank: Java whitespace only), which its admin
    API answers 412 "Topic name is not valid"; it was a 404, or a topic named " " created."""
    reply = admin.call(method, f"/admin/v2/{domain}/public/default/{local}{suffix}")
    assert (reply.status, reply.reason) == (412, "Topic name is not valid")


def test_blank_topic_name_lookup(admin: Admin) -> None:
    reply = admin.get("/lookup/v2/topic/persistent/public/default/%20")
    assert (reply.status, reply.reason) == (412, "Topic name is not valid")
    # (nothing created; other tests on this broker may have left topics in public/default)
    assert not [t for t in admin.ok("GET", "/admin/v2/persistent/public/default") if not t.rsplit("/", 1)[1].strip()]


def test_blank_topic_name_parse() -> None:
    for name in ("persistent://public/default/ ", "non-persistent://public/default/\t\u3000"):
        with pytest.raises(InvalidTopicNameError):
            TopicName.parse(name)
    assert TopicName.parse("persistent://public/default/a ").local_name == "a "
    assert TopicName.parse("persistent://public/default/\u00a0").local_name == "\u00a0"  # (not Java whitespace)


@pytest.mark.parametrize("policy", ["retention", "dispatchRate", "deduplicationEnabled", "maxProducers"])
@pytest.mark.parametrize("domain", ["persistent", "non-persistent"])
def test_malformed_topic_policy_body_first(admin: Admin, domain: str, policy: str) -> None:
    """Jersey reads the body before PersistentTopics' method runs: malformed JSON is a 400 even for a topic that
    does not exist (it was the topic's 404)."""
    topic = f"/admin/v2/{domain}/public/default/no-such-{uuid.uuid4().hex[:6]}"
    reply = admin.call("POST", f"{topic}/{policy}", raw=b'"a"*')
    assert reply.status == 400, reply.body


@pytest.mark.parametrize(("method", "path"), [
    ("PUT", "/admin/v2/persistent/public/default/a%00b"), ("GET", "/lookup/v2/topic/persistent/public/default/a%00b"),
    ("PUT", "/admin/v2/tenants/a%00b"), ("GET", "/admin/v2/namespaces/public/a%00b"),
])
def test_a_nul_in_the_path_is_refused_before_any_route(admin: Admin, method: str, path: str) -> None:
    """Pulsar's web server (Jetty) answers 400 to a path holding %00, before its routes; ours created a topic whose
    name holds a NUL (PUT) and looked one up."""
    reply = admin.call(method, path)
    assert (reply.status, reply.reason) == (400, "Bad request: the path holds a NUL character (%00)")
    assert not any("\x00" in t for t in admin.ok("GET", "/admin/v2/persistent/public/default"))
