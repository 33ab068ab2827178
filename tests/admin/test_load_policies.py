"""Admin REST: anti-affinity groups (LocalPolicies.namespaceAntiAffinityGroup) on a single broker."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from broker.embedded import BrokerThread
from tests.admin.conftest import Admin


@pytest.fixture(scope="module")
def pulsar_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with BrokerThread(data_dir=tmp_path_factory.mktemp("load-policies")) as b:
        yield b


def test_anti_affinity_group_set_read_removed(admin: Admin) -> None:
    ns = admin.new_namespace()
    path = f"/admin/v2/namespaces/{ns}/antiAffinity"
    assert admin.get(path).status == 204  # none yet
    # Pulsar's admin client sends the bare text; a JSON string is taken too.
    assert admin.call("POST", path, raw=b"group-1").status == 204
    reply = admin.get(path)
    assert reply.status == 200 and reply.body == b"group-1"
    other = admin.new_namespace()
    assert admin.post(f"/admin/v2/namespaces/{other}/antiAffinity", "GROUP-1").status == 204
    # (Kept in LocalPolicies, created with the namespace's bundles: they stay as they were.)
    assert admin.ok("GET", f"/admin/v2/namespaces/{ns}/bundles")["numBundles"] == 4
    assert admin.delete(path).status == 204
    assert admin.get(path).status == 204
    assert admin.get(f"/admin/v2/namespaces/{other}/antiAffinity").body == b"GROUP-1"


def test_anti_affinity_bad_input(admin: Admin) -> None:
    ns = admin.new_namespace()
    path = f"/admin/v2/namespaces/{ns}/antiAffinity"
    blank = admin.call("POST", path, raw=b"  ")
    assert blank.status == 412 and "can't be empty" in blank.reason
    assert admin.call("POST", path, raw=b'"unterminated').status == 400
    assert admin.get("/admin/v2/namespaces/public/no-such-ns/antiAffinity").status == 404
    assert admin.call("POST", "/admin/v2/namespaces/no-tenant/x/antiAffinity", raw=b"g").status == 404


def test_the_namespaces_of_an_anti_affinity_group_are_listed(admin: Admin) -> None:
    """Pulsar's GET /admin/v2/namespaces/{cluster}/antiAffinity/{group}?tenant= (NamespacesBase.
    internalGetAntiAffinityNamespaces): the tenant's namespaces whose group is that one, ignoring case; another
    tenant's, another group's and a namespace with none are not; a tenant that does not exist has none."""
    tenant = f"aa-{uuid.uuid4().hex[:8]}"
    assert admin.put(f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["standalone"]}).status == 204
    group = f"grp-{uuid.uuid4().hex[:8]}"
    members = sorted(admin.new_namespace(tenant) for _ in range(2))
    other_group, no_group, elsewhere = admin.new_namespace(tenant), admin.new_namespace(tenant), admin.new_namespace()
    admin.call("POST", f"/admin/v2/namespaces/{members[0]}/antiAffinity", raw=group.encode())
    admin.call("POST", f"/admin/v2/namespaces/{members[1]}/antiAffinity", raw=group.upper().encode())
    admin.call("POST", f"/admin/v2/namespaces/{other_group}/antiAffinity", raw=b"another")
    admin.call("POST", f"/admin/v2/namespaces/{elsewhere}/antiAffinity", raw=group.encode())
    listing = f"/admin/v2/namespaces/standalone/antiAffinity/{group}"
    assert sorted(admin.ok("GET", f"{listing}?tenant={tenant}")) == members
    upper = f"/admin/v2/namespaces/standalone/antiAffinity/{group.upper()}?tenant={tenant}"
    assert sorted(admin.ok("GET", upper)) == members
    assert admin.ok("GET", f"{listing}?tenant=public") == [elsewhere]
    assert admin.ok("GET", f"{listing}?tenant=no-such-tenant") == []
    assert admin.ok("GET", f"/admin/v2/namespaces/standalone/antiAffinity/no-such-group?tenant={tenant}") == []
    assert no_group not in admin.ok("GET", f"/admin/v2/namespaces/standalone/antiAffinity/another?tenant={tenant}")
    # (the namespace's own group still answers on its path, which has as many parts)
    assert admin.get(f"/admin/v2/namespaces/{members[1]}/antiAffinity").body == group.upper().encode()


def test_the_anti_affinity_listing_refuses_as_pulsar_does(admin: Admin) -> None:
    """In Pulsar's order: no tenant parameter 400 "Tenant should not be null", a blank group 412, then an unknown
    cluster 412 "Cluster ... does not exist."."""
    no_tenant = admin.get("/admin/v2/namespaces/standalone/antiAffinity/g")
    assert (no_tenant.status, no_tenant.reason) == (400, "Tenant should not be null")
    blank = admin.get("/admin/v2/namespaces/no-such-cluster/antiAffinity/%20?tenant=public")
    assert (blank.status, blank.reason) == (412, "anti-affinity group can't be empty.")
    unknown = admin.get("/admin/v2/namespaces/no-such-cluster/antiAffinity/g?tenant=public")
    assert (unknown.status, unknown.reason) == (412, "Cluster no-such-cluster does not exist.")
    assert admin.get("/admin/v2/namespaces/no-such-cluster/antiAffinity/g").status == 400  # (the tenant first)


def policy_doc(**overrides: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "namespaces": ["public/iso.*"], "primary": ["127\\.0\\.0\\.1"], "secondary": [],
        "auto_failover_policy": {"policy_type": "min_available",
                                 "parameters": {"min_limit": "1", "usage_threshold": "80"}}}
    doc.update(overrides)
    return doc


def test_isolation_policies_set_read_delete(admin: Admin) -> None:
    base = "/admin/v2/clusters/standalone/namespaceIsolationPolicies"
    if admin.get(base).status == 200:  # (module-scoped broker: start from none)
        for name in admin.ok("GET", base):
            admin.delete(f"{base}/{name}")
    missing = admin.get(f"{base}/p1")
    assert missing.status == 404 and "Cannot find NamespaceIsolationPolicy p1" in missing.reason
    assert admin.post(f"{base}/p1", policy_doc()).status == 204
    assert admin.ok("GET", f"{base}/p1") == policy_doc()
    assert admin.ok("GET", base) == {"p1": policy_doc()}
    assert admin.post(f"{base}/p1", policy_doc(secondary=["127\\.0\\.0\\.2"])).status == 204  # (an update)
    assert admin.ok("GET", f"{base}/p1")["secondary"] == ["127\\.0\\.0\\.2"]
    assert admin.delete(f"{base}/p1").status == 204
    assert admin.get(f"{base}/p1").status == 404
    assert admin.ok("GET", base) == {}


def test_isolation_policies_bad_input(admin: Admin) -> None:
    base = "/admin/v2/clusters/standalone/namespaceIsolationPolicies"
    for bad in (policy_doc(namespaces=[]), policy_doc(primary=[]), policy_doc(primary=["("]),
                policy_doc(secondary=None), policy_doc(auto_failover_policy=None),
                policy_doc(auto_failover_policy={"policy_type": "other", "parameters": {}}),
                policy_doc(auto_failover_policy={"policy_type": "min_available",
                                                 "parameters": {"min_limit": "x", "usage_threshold": "80"}}),
                ["not", "an", "object"]):
        reply = admin.post(f"{base}/bad", bad)
        assert reply.status == 400 and "Invalid format of input policy data" in reply.reason, (bad, reply.body)
    assert admin.get(f"{base}/bad").status == 404
    assert admin.post("/admin/v2/clusters/nowhere/namespaceIsolationPolicies/p", policy_doc()).status == 412
    assert admin.get("/admin/v2/clusters/nowhere/namespaceIsolationPolicies").status == 412


def test_failure_domains_set_read_delete(admin: Admin) -> None:
    """ClustersBase's failure domains: set (POST, 204), read one or all, delete (200); stored as Pulsar's
    FailureDomainImpl under /admin/clusters/{cluster}/failureDomain/{domain}."""
    base = "/admin/v2/clusters/standalone/failureDomains"
    for name in admin.ok("GET", base):  # (module-scoped broker: start from none)
        admin.delete(f"{base}/{name}")
    assert admin.ok("GET", base) == {}
    missing = admin.get(f"{base}/d1")
    assert missing.status == 404 and missing.reason == "Domain d1 for cluster standalone does not exist"
    assert admin.post(f"{base}/d1", {"brokers": ["h1:8080", "h2:8080"]}).status == 204
    assert admin.post(f"{base}/d2", {"brokers": ["h3:8080"]}).status == 204
    assert admin.ok("GET", f"{base}/d1") == {"brokers": ["h1:8080", "h2:8080"]}
    assert admin.ok("GET", base) == {"d1": {"brokers": ["h1:8080", "h2:8080"]}, "d2": {"brokers": ["h3:8080"]}}
    # A domain may be replaced with its own brokers; a broker of another domain is a conflict (409).
    assert admin.post(f"{base}/d1", {"brokers": ["h1:8080"]}).status == 204
    taken = admin.post(f"{base}/d1", {"brokers": ["h1:8080", "h3:8080"]})
    assert taken.status == 409 and taken.reason == "[h3:8080] already exists in d2"
    assert admin.ok("GET", f"{base}/d1") == {"brokers": ["h1:8080"]}
    # Delete: 200 (Response.ok()), then 404.
    assert admin.delete(f"{base}/d2").status == 200
    gone = admin.delete(f"{base}/d2")
    assert gone.status == 404 and gone.reason == "Domain-name d2 or cluster standalone does not exist"
    assert admin.post(f"{base}/d1", {"brokers": ["h1:8080", "h3:8080"]}).status == 204  # (h3 is free now)
    assert admin.ok("GET", base) == {"d1": {"brokers": ["h1:8080", "h3:8080"]}}
    assert admin.delete(f"{base}/d1").status == 200


def test_failure_domains_bad_input(admin: Admin) -> None:
    base = "/admin/v2/clusters/standalone/failureDomains"
    for bad in (["h1:8080"], {"brokers": "h1:8080"}, {"brokers": [1]}):
        reply = admin.post(f"{base}/bad", bad)
        assert reply.status == 400, (bad, reply.body)
    assert admin.call("POST", f"{base}/bad", raw=b"{not json").status == 400
    assert admin.get(f"{base}/bad").status == 404
    # An unknown cluster: 412 (validateClusterExistAsync), except the listing, which Pulsar does not check.
    for method, path in (("GET", "/d"), ("POST", "/d"), ("DELETE", "/d")):
        reply = admin.call(method, f"/admin/v2/clusters/nowhere/failureDomains{path}", {"brokers": []})
        assert reply.status == 412 and reply.reason == "Cluster nowhere does not exist.", (method, reply.body)
    assert admin.ok("GET", "/admin/v2/clusters/nowhere/failureDomains") == {}


def test_a_clusters_deletion_deletes_its_failure_domains(admin: Admin) -> None:
    """ClustersBase.internalDeleteClusterAsync deletes the cluster's failure domains with it: a cluster made again
    under that name has none."""
    assert admin.call("PUT", "/admin/v2/clusters/fd-gone", {"serviceUrl": "http://fd-gone:8080"}).status == 204
    assert admin.post("/admin/v2/clusters/fd-gone/failureDomains/d", {"brokers": ["h1:8080"]}).status == 204
    assert admin.delete("/admin/v2/clusters/fd-gone").status == 204
    assert admin.ok("GET", "/admin/v2/clusters/fd-gone/failureDomains") == {}
    assert admin.call("PUT", "/admin/v2/clusters/fd-gone", {"serviceUrl": "http://fd-gone:8080"}).status == 204
    assert admin.ok("GET", "/admin/v2/clusters/fd-gone/failureDomains") == {}
    assert admin.delete("/admin/v2/clusters/fd-gone").status == 204
