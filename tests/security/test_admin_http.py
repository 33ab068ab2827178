"""Admin REST over HTTP and HTTPS with and without credentials: 401 / 403 with a JSON reason, in the
status and words of Apache Pulsar 4.0.7's checks (javap of AuthenticationFilter, PulsarWebResource,
BrokersBase, TenantsBase), super users, tenant admins, and the permission endpoints (namespace, topic,
subscription)."""

from __future__ import annotations

import json
import time
import types
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import aiohttp
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from broker.embedded import Broker, BrokerThread
from broker.topic_name import TopicName
from tests.security.conftest import SUPER_USER, SecureAdmin, secure_settings, token
from tests.security.pki import CLIENT_ROLE, USERS, Pki


def test_no_credentials_is_401_with_a_reason(secure_broker: BrokerThread, pki: Pki) -> None:
    for url in (secure_broker.web_url, secure_broker.web_url_tls):
        reply = SecureAdmin(url, pki).call("GET", "/admin/v2/tenants")
        assert reply.status == 401
        assert reply.reason == "Authentication required"


@pytest.mark.parametrize("authorization, method", [
    (f"Bearer {token(SUPER_USER, b'not-the-secret-but-long-enough-for-hs256')}", None),
    ("Bearer not-a-jwt", None),
    (f"Bearer {token(SUPER_USER, exp=int(time.time()) - 60)}", None),  # expired
    (f"Bearer {token(SUPER_USER, exp=int(time.time()) - 60)}", "token"),  # (the provider named in a header)
    ("Bearer not-a-jwt", "no-such-method"),
    ("Basic " + "YWxpY2U6d3Jvbmc=", None),  # alice:wrong
    ("Digest something", None),
])
def test_bad_credentials_are_401_authentication_required(secure_broker: BrokerThread, pki: Pki, authorization: str,
                                                         method: str | None) -> None:
    """Pulsar's AuthenticationFilter answers any refused credentials with 401 "Authentication required" (the
    provider's reason goes to the log): on an endpoint for super users, for a topic's readers, and a lookup."""
    headers = {"Authorization": authorization}
    if method is not None:
        headers["X-Pulsar-Auth-Method-Name"] = method
    for path in ("/admin/v2/tenants", "/admin/v2/persistent/public/default/t/stats",
                 "/lookup/v2/topic/persistent/public/default/t"):
        status, reason = raw_call(secure_broker.web_url_tls, pki, path, headers)
        assert (status, reason) == (401, "Authentication required"), (path, status, reason)


def raw_call(url: str, pki: Pki, path: str, headers: dict[str, str]) -> tuple[int, str]:
    """GET with these headers: the status and the JSON reason."""
    admin = SecureAdmin(url, pki)
    req = urllib.request.Request(url + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10, context=admin.context) as r:
            return int(r.status), ""
    except urllib.error.HTTPError as e:
        return int(e.code), str(json.loads(e.read())["reason"])


def test_a_refused_role_gets_the_status_and_words_of_pulsars_check(secure_broker: BrokerThread, pki: Pki,
                                                                    root_admin: SecureAdmin) -> None:
    """An authenticated role without permission: 401 from Pulsar's super-user, tenant and topic-operation checks,
    403 from its namespace-operation and policy checks, each in its own words (PulsarWebResource 4.0.7)."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    root_admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
    root_admin.ok("PUT", f"/admin/v2/namespaces/{tenant}/ns")
    topic = f"persistent://{tenant}/ns/t"
    t = f"/admin/v2/persistent/{tenant}/ns/t"
    root_admin.ok("PUT", t)
    web = urlsplit(secure_broker.web_url)
    broker_id = f"{web.hostname}:{web.port}"
    about = "originalPrincipal [null] and clientAppId [stranger] about operation"
    cases = [
        ("GET", "/admin/v2/tenants", 401,
         f"Unauthorized to validateBothTenantOperationAndSuperUser for {about} [LIST_TENANTS] "),
        ("GET", "/admin/v2/broker-stats/topics", 401, "This operation requires super-user access"),
        ("GET", "/admin/v2/brokers/health", 401,
         f"Unauthorized to validateBothSuperuserAndBrokerOperation for {about} [HEALTH_CHECK] on broker [{broker_id}]"),
        ("GET", "/admin/v2/clusters/standalone", 401,
         f"Unauthorized to validateBothSuperuserAndClusterOperation for {about} [GET_CLUSTER] on cluster [standalone]"),
        # (ClustersBase's failure domains: validateBothSuperuserAndClusterOperation, as the cluster itself)
        ("GET", "/admin/v2/clusters/standalone/failureDomains", 401,
         f"Unauthorized to validateBothSuperuserAndClusterOperation for {about} [GET_FAILURE_DOMAIN] on cluster "
         "[standalone]"),
        ("POST", "/admin/v2/clusters/standalone/failureDomains/d", 401,
         f"Unauthorized to validateBothSuperuserAndClusterOperation for {about} [UPDATE_FAILURE_DOMAIN] on cluster "
         "[standalone]"),
        ("DELETE", "/admin/v2/clusters/standalone/failureDomains/d", 401,
         f"Unauthorized to validateBothSuperuserAndClusterOperation for {about} [DELETE_FAILURE_DOMAIN] on cluster "
         "[standalone]"),
        ("GET", f"/admin/v2/namespaces/{tenant}", 401,
         f"Unauthorized to validateTenantOperation for {about} [LIST_NAMESPACES] on tenant [{tenant}]"),
        ("PUT", f"/admin/v2/namespaces/{tenant}/other", 401,
         f"Unauthorized to validateTenantOperation for {about} [CREATE_NAMESPACE] on tenant [{tenant}]"),
        ("GET", f"/admin/v2/namespaces/{tenant}/ns", 403,
         f"Unauthorized to validateNamespacePolicyOperation for operation [READ] on namespace [{tenant}/ns] "
         "on policy [ALL]"),
        ("POST", f"/admin/v2/namespaces/{tenant}/ns/retention", 403,
         f"Unauthorized to validateNamespacePolicyOperation for operation [WRITE] on namespace [{tenant}/ns] "
         "on policy [RETENTION]"),
        ("GET", f"/admin/v2/namespaces/{tenant}/ns/topics", 403,
         f"Unauthorized to validateNamespaceOperation for operation [GET_TOPICS] on namespace [{tenant}/ns]"),
        ("POST", f"/admin/v2/namespaces/{tenant}/ns/permissions/stranger", 403,
         f"Unauthorized to validateNamespaceOperation for operation [GRANT_PERMISSION] on namespace [{tenant}/ns]"),
        ("GET", f"/admin/v2/namespaces/{tenant}/ns/properties", 401,
         "Don't have permission to administrate resources on this tenant"),
        ("PUT", f"/admin/v2/persistent/{tenant}/ns/other", 403,
         f"Unauthorized to validateNamespaceOperation for operation [CREATE_TOPIC] on namespace [{tenant}/ns]"),
        ("DELETE", t, 403,
         f"Unauthorized to validateNamespaceOperation for operation [DELETE_TOPIC] on namespace [{tenant}/ns]"),
        ("GET", f"{t}/stats", 401,
         f"Unauthorized to validateTopicOperation for operation [GET_STATS] on topic [{topic}]"),
        ("PUT", f"{t}/unload", 401,
         f"Unauthorized to validateTopicOperation for operation [UNLOAD] on topic [{topic}]"),
        ("GET", f"{t}/subscriptions", 401,
         f"Unauthorized to validateTopicOperation for operation [GET_SUBSCRIPTIONS] on topic [{topic}]"),
        ("GET", f"{t}/permissions", 401, "Don't have permission to administrate resources on this tenant"),
        # (the topic's LOOKUP first: AdminResource.getPartitionedTopicMetadataAsync; a partition's name goes straight
        # to the tenant's admin check)
        ("DELETE", f"{t}/truncate", 401,
         f"Unauthorized to validateTopicOperation for operation [LOOKUP] on topic [{topic}]"),
        ("DELETE", f"{t}-partition-0/truncate", 401, "Don't have permission to administrate resources on this tenant"),
        # (Pulsar's NonPersistentTopics answers truncate before any check)
        ("DELETE", f"/admin/v2/non-persistent/{tenant}/ns/t/truncate", 412, "unsupport truncate"),
        ("POST", f"{t}/subscription/s/analyzeBacklog", 401,
         f"Unauthorized to validateTopicOperation for operation [CONSUME] on topic [{topic}]"),
        ("POST", f"{t}/subscription/s/expireMessages", 401,
         f"Unauthorized to validateTopicOperation for operation [EXPIRE_MESSAGES] on topic [{topic}]"),
        ("POST", f"{t}/messageTTL", 403,
         f"Unauthorized to validateTopicPolicyOperation for operation [WRITE] on topic [{topic}] on policy [TTL]"),
        ("GET", f"/lookup/v2/topic/persistent/{tenant}/ns/t", 401,
         f"Unauthorized to validateTopicOperation for operation [LOOKUP] on topic [{topic}]"),
    ]
    stranger = SecureAdmin.bearer(secure_broker.web_url, pki, "stranger")
    for method, path, status, reason in cases:
        reply = stranger.call(method, path, 60 if method == "POST" and "permissions" not in path else None)
        assert (reply.status, reply.reason) == (status, reason), (method, path)
    # A tenant admin: everything in its tenant, nothing of the super users'.
    ops = SecureAdmin.bearer(secure_broker.web_url, pki, "ops")
    assert ops.call("GET", f"{t}/stats").status == 200
    assert ops.call("GET", f"/lookup/v2/topic/persistent/{tenant}/ns/t").status == 200
    reply = ops.call("PUT", f"/admin/v2/namespaces/{tenant}/ns/unload")
    assert (reply.status, reply.reason) == (401, "This operation requires super-user access")
    reply = ops.call("PUT", f"/admin/v2/tenants/{tenant}-2", {})
    assert (reply.status, reply.reason) == (401, "Unauthorized to validateBothTenantOperationAndSuperUser for "
                                                 "originalPrincipal [null] and clientAppId [ops] about operation "
                                                 "[CREATE_TENANT] ")


def test_every_provider_over_https(secure_broker: BrokerThread, pki: Pki) -> None:
    """Super users by token, by basic password and by client certificate (CN)."""
    url = secure_broker.web_url_tls
    admins = [
        SecureAdmin.bearer(url, pki, SUPER_USER),
        SecureAdmin.basic(url, pki, "alice", USERS["alice"]),
        SecureAdmin(url, pki, client_cert=(pki.client_cert, pki.client_key)),
    ]
    with BrokerThread(**secure_settings(pki, superUserRoles=f"{SUPER_USER},alice,{CLIENT_ROLE}")) as b:
        for admin in admins:
            admin.web_url = b.web_url_tls
            assert "public" in admin.ok("GET", "/admin/v2/tenants")


def test_public_endpoints_and_metrics(secure_broker: BrokerThread, pki: Pki) -> None:
    anonymous = SecureAdmin(secure_broker.web_url, pki)
    assert anonymous.call("GET", "/status.html").status == 200
    assert anonymous.call("GET", "/metrics").status == 200
    assert anonymous.call("GET", "/admin/v2/brokers/health").status == 401
    with BrokerThread(**secure_settings(pki, authenticateMetricsEndpoint=True, brokerServicePortTls=None,
                                        webServicePortTls=None)) as b:
        assert SecureAdmin(b.web_url, pki).call("GET", "/metrics").status == 401
        assert SecureAdmin.bearer(b.web_url, pki, "anyone").call("GET", "/metrics").status == 200


def test_no_route_is_authenticated_first_in_pulsars_rest_contexts(secure_broker: BrokerThread, pki: Pki) -> None:
    """Pulsar authenticates everything under /admin, /lookup and /topics before Jersey matches a route: a path no
    route serves, or a method the route has not, is 401 without credentials, 404 / 405 with them; elsewhere 404."""
    anonymous = SecureAdmin(secure_broker.web_url, pki)
    root = SecureAdmin.bearer(secure_broker.web_url, pki, SUPER_USER)
    topic = "/admin/v2/persistent/public/default/t"
    for method, path, known in (("GET", "/admin/v2/no-such-thing", 404), ("GET", "/admin/no-such-thing", 404),
                                ("GET", "/lookup/no-such-thing", 404), ("GET", "/topics/no-such-thing", 404),
                                ("POST", f"{topic}/unload", 405), ("GET", "/admin", 404)):
        reply = anonymous.call(method, path)
        assert (reply.status, reply.reason) == (401, "Authentication required"), (method, path)
        assert root.call(method, path).status == known, (method, path)
    assert anonymous.call("GET", "/no-such-thing").status == 404
    assert anonymous.call("GET", "/administration").status == 404  # (not under /admin)


def test_tenant_admin_manages_only_its_tenant(secure_broker: BrokerThread, pki: Pki, root_admin: SecureAdmin) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    root_admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
    ops = SecureAdmin.bearer(secure_broker.web_url_tls, pki, "ops")
    ops.ok("PUT", f"/admin/v2/namespaces/{tenant}/orders")
    ops.ok("POST", f"/admin/v2/namespaces/{tenant}/orders/messageTTL", 60)
    ops.ok("PUT", f"/admin/v2/persistent/{tenant}/orders/eu/partitions", 2)
    assert ops.ok("GET", f"/admin/v2/namespaces/{tenant}") == [f"{tenant}/orders"]
    # (Pulsar: 401 from validateTenantOperation, the tenants' and the topic operations' checks)
    assert ops.call("PUT", "/admin/v2/namespaces/public/ops-was-here").status == 401
    assert ops.call("PUT", f"/admin/v2/tenants/{tenant}-2", {}).status == 401  # a new tenant: super users only
    assert ops.call("GET", "/admin/v2/persistent/public/default/x/stats").status == 401
    # Its own tenant (as Pulsar 4.0.7: TenantsBase allows the tenant operations to the tenant's admins): read,
    # updated, "created" again (409), deleted once empty; another's, or the list, refused.
    assert ops.ok("GET", f"/admin/v2/tenants/{tenant}")["adminRoles"] == ["ops"]
    ops.ok("POST", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["ops", "ops2"], "allowedClusters": ["standalone"]})
    assert root_admin.ok("GET", f"/admin/v2/tenants/{tenant}")["adminRoles"] == ["ops", "ops2"]
    assert ops.call("PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["standalone"]}).status == 409
    assert ops.call("DELETE", f"/admin/v2/tenants/{tenant}").status == 409  # (it has a namespace)
    for method in ("GET", "POST", "DELETE"):
        assert ops.call(method, "/admin/v2/tenants/public", {} if method == "POST" else None).status == 401
    assert ops.call("GET", "/admin/v2/tenants").status == 401
    ops.ok("DELETE", f"/admin/v2/persistent/{tenant}/orders/eu/partitions")
    ops.ok("DELETE", f"/admin/v2/namespaces/{tenant}/orders")
    ops.ok("DELETE", f"/admin/v2/tenants/{tenant}")
    assert root_admin.call("GET", f"/admin/v2/tenants/{tenant}").status == 404


def test_namespace_permissions_round_trip(secure_broker: BrokerThread, pki: Pki, root_admin: SecureAdmin,
                                          namespace: str) -> None:
    base = f"/admin/v2/namespaces/{namespace}/permissions"
    assert root_admin.ok("GET", base) == {}
    root_admin.ok("POST", f"{base}/app", ["produce", "consume"])
    root_admin.ok("POST", f"{base}/reader", ["consume"])
    assert root_admin.ok("GET", base) == {"app": ["consume", "produce"], "reader": ["consume"]}
    assert root_admin.ok("GET", f"/admin/v2/namespaces/{namespace}")["auth_policies"]["namespace_auth"]["reader"] \
        == ["consume"]
    # A consumer may list topics and read stats; a stranger may not.
    reader = SecureAdmin.bearer(secure_broker.web_url_tls, pki, "reader")
    assert reader.call("GET", f"/admin/v2/namespaces/{namespace}/topics").status == 200
    root_admin.ok("PUT", f"/admin/v2/persistent/{namespace}/there")  # (the metadata of a topic that is not: a 404)
    assert reader.call("GET", f"/admin/v2/persistent/{namespace}/there/partitions").status == 200
    assert reader.call("PUT", f"/admin/v2/persistent/{namespace}/t").status == 403  # creating: admins only
    stranger = SecureAdmin.bearer(secure_broker.web_url_tls, pki, "stranger")
    assert stranger.call("GET", f"/admin/v2/namespaces/{namespace}/topics").status == 403
    root_admin.ok("DELETE", f"{base}/reader")
    assert root_admin.ok("GET", base) == {"app": ["consume", "produce"]}
    assert reader.call("GET", f"/admin/v2/namespaces/{namespace}/topics").status == 403


def test_namespace_operations_open_to_grants(secure_broker: BrokerThread, pki: Pki, root_admin: SecureAdmin,
                                            namespace: str) -> None:
    """Pulsar's allowNamespaceOperation: listing a namespace's topics or bundles takes consume or produce on it,
    clearing its backlog or unsubscribing takes consume; a topic's properties take lookup rights."""
    base = f"/admin/v2/namespaces/{namespace}"
    root_admin.ok("POST", f"{base}/permissions/writer", ["produce"])
    root_admin.ok("POST", f"{base}/permissions/reader", ["consume"])
    root_admin.ok("PUT", f"/admin/v2/persistent/{namespace}/orders")
    writer = SecureAdmin.bearer(secure_broker.web_url_tls, pki, "writer")
    reader = SecureAdmin.bearer(secure_broker.web_url_tls, pki, "reader")
    stranger = SecureAdmin.bearer(secure_broker.web_url_tls, pki, "stranger")
    # (Pulsar: 403 from validateNamespaceOperation, 401 from validateTopicOperation)
    listing = [(f"{base}/topics", 403), (f"{base}/bundles", 403), (f"/admin/v2/persistent/{namespace}", 403),
               (f"/admin/v2/persistent/{namespace}/orders/properties", 401)]
    for path, refused in listing:
        assert writer.call("GET", path).status == 200, path
        assert reader.call("GET", path).status == 200, path
        assert stranger.call("GET", path).status == refused, path
    for path in (f"{base}/clearBacklog", f"{base}/clearBacklog/s", f"{base}/unsubscribe/s"):
        assert reader.call("POST", path).status < 400, path
        assert writer.call("POST", path).status == 403, path
    assert reader.call("PUT", f"/admin/v2/persistent/{namespace}/orders/properties", {"k": "v"}).status == 401


def test_permission_body_is_validated(root_admin: SecureAdmin, namespace: str) -> None:
    base = f"/admin/v2/namespaces/{namespace}/permissions"
    assert root_admin.call("POST", f"{base}/app", ["produce", "fly"]).status == 400
    assert root_admin.call("POST", f"{base}/app", {"produce": True}).status == 400
    assert root_admin.call("POST", "/admin/v2/namespaces/public/missing-ns/permissions/app", ["produce"]).status == 404


def test_topic_permissions_merge_with_the_namespace(root_admin: SecureAdmin, namespace: str) -> None:
    root_admin.ok("POST", f"/admin/v2/namespaces/{namespace}/permissions/app", ["consume"])
    root_admin.ok("PUT", f"/admin/v2/persistent/{namespace}/orders")
    topic = f"/admin/v2/persistent/{namespace}/orders/permissions"
    root_admin.ok("POST", f"{topic}/app", ["produce"])
    root_admin.ok("POST", f"{topic}/writer", ["produce"])
    assert root_admin.ok("GET", topic) == {"app": ["consume", "produce"], "writer": ["produce"]}
    root_admin.ok("DELETE", f"{topic}/writer")
    # Nothing granted: no error (Pulsar 4.0.7's PulsarAuthorizationProvider.revokePermissionAsync passes it over)
    assert root_admin.call("DELETE", f"{topic}/writer").status == 204
    assert root_admin.ok("GET", topic) == {"app": ["consume", "produce"]}


def test_a_partitioned_topics_permissions(root_admin: SecureAdmin, namespace: str) -> None:
    """Apache Pulsar 4.0.7: a grant on a partitioned topic is stored under its name only (PersistentTopicsBase.
    internalGrantPermissionsOnTopic), a GET shows the grants of the name asked (PulsarAuthorizationProvider.
    getPermissionsAsync), a revoke on the partitioned topic takes the role off each partition, then off the name
    (internalRevokePermissionsOnTopic), one on a partition off that partition alone; none is refused."""
    root_admin.ok("PUT", f"/admin/v2/persistent/{namespace}/p/partitions", 2)
    base, part0, part1 = (f"/admin/v2/persistent/{namespace}/{t}/permissions"
                          for t in ("p", "p-partition-0", "p-partition-1"))
    root_admin.ok("POST", f"{base}/app", ["produce"])
    assert root_admin.ok("GET", base) == {"app": ["produce"]}
    assert root_admin.ok("GET", part0) == {}
    for part in (part0, part1):
        root_admin.ok("POST", f"{part}/app", ["consume"])
    root_admin.ok("POST", f"{part1}/other", ["consume"])
    root_admin.ok("DELETE", f"{part0}/app")
    assert (root_admin.ok("GET", part0), root_admin.ok("GET", base)) == ({}, {"app": ["produce"]})
    root_admin.ok("POST", f"{part0}/app", ["consume"])
    assert root_admin.call("DELETE", f"{base}/app").status == 204
    assert [root_admin.ok("GET", t) for t in (base, part0, part1)] == [{}, {}, {"other": ["consume"]}]
    assert root_admin.call("DELETE", f"{base}/app").status == 204


def test_deleting_a_topic_drops_its_grants(root_admin: SecureAdmin, namespace: str) -> None:
    """Apache Pulsar 4.0.7 removes a persistent topic's grants when it is deleted (PersistentTopic.delete and
    BrokerService.deleteTopicInternal: deleteTopicAuthenticationWithRetry), a partitioned topic's own before its
    partitions (PersistentTopicsBase.internalDeletePartitionedTopic): the topic created again starts with none."""
    topic = f"/admin/v2/persistent/{namespace}"
    root_admin.ok("PUT", f"{topic}/t")
    root_admin.ok("POST", f"{topic}/t/permissions/app", ["consume"])
    root_admin.ok("PUT", f"{topic}/p/partitions", 2)
    root_admin.ok("POST", f"{topic}/p/permissions/app", ["produce"])
    root_admin.ok("POST", f"{topic}/p-partition-0/permissions/app", ["consume"])
    root_admin.ok("DELETE", f"{topic}/t")
    root_admin.ok("DELETE", f"{topic}/p/partitions")
    root_admin.ok("PUT", f"{topic}/t")
    root_admin.ok("PUT", f"{topic}/p/partitions", 2)
    assert [root_admin.ok("GET", f"{topic}/{t}/permissions") for t in ("t", "p", "p-partition-0")] == [{}, {}, {}]


def test_subscription_permissions(root_admin: SecureAdmin, namespace: str) -> None:
    base = f"/admin/v2/namespaces/{namespace}/permissions"
    root_admin.ok("POST", f"{base}/subscription/billing", ["app", "auditor"])
    assert root_admin.ok("GET", f"{base}/subscription") == {"billing": ["app", "auditor"]}
    root_admin.ok("DELETE", f"{base}/billing/auditor")
    assert root_admin.ok("GET", f"{base}/subscription") == {"billing": ["app"]}
    assert root_admin.call("DELETE", f"{base}/nosuch/app").status == 412


def test_namespace_created_with_auth_policies(root_admin: SecureAdmin, namespace: str) -> None:
    """The official client suite's set-up creates namespaces with their grants in the Policies body."""
    ns = f"{namespace}-2"
    root_admin.ok("PUT", f"/admin/v2/namespaces/{ns}", {
        "auth_policies": {"namespace_auth": {"token-principal": ["produce", "consume"]}},
        "replication_clusters": ["standalone"],
    })
    assert root_admin.ok("GET", f"/admin/v2/namespaces/{ns}/permissions") == {
        "token-principal": ["consume", "produce"]}


def test_authentication_metrics_by_provider_and_reason(pki: Pki) -> None:
    # pulsar_authentication_{success,failures}_total with Pulsar's labels and reason codes.
    with BrokerThread(**secure_settings(pki, brokerServicePortTls=None, webServicePortTls=None)) as b:
        url = b.web_url
        assert SecureAdmin.bearer(url, pki, SUPER_USER).call("GET", "/admin/v2/clusters").status == 200
        forged = token(SUPER_USER, key="another-secret-of-at-least-32-bytes!!")
        assert SecureAdmin(url, pki, f"Bearer {forged}").call("GET", "/admin/v2/clusters").status == 401
        wrong = SecureAdmin.basic(url, pki, "alice", "wrong")
        assert wrong.call("GET", "/admin/v2/clusters").status == 401
        text = SecureAdmin.bearer(url, pki, SUPER_USER).call("GET", "/metrics").body.decode()
    counted = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text)
               for s in f.samples if s.name.startswith("pulsar_authentication_")}
    token_labels = (("auth_method", "token"), ("cluster", "standalone"),
                    ("provider_name", "AuthenticationProviderToken"))
    assert counted == {
        ("pulsar_authentication_success_total", token_labels): 1.0,
        ("pulsar_authentication_failures_total", (*token_labels, ("reason", "INVALID_TOKEN"))): 1.0,
        ("pulsar_authentication_failures_total", (("auth_method", "basic"), ("cluster", "standalone"),
                                                  ("provider_name", "AuthenticationProviderBasic"),
                                                  ("reason", "INVALID_TOKEN"))): 1.0,
    }, counted


def test_a_proxy_relays_the_original_principal(pki: Pki) -> None:
    # Apache Pulsar's proxy forwards admin calls with the client's role in X-Original-Principal and, with TLS to the
    # broker, its own client certificate: both must be allowed. (With a token it passes the client's own Authorization
    # header on: the role and the header are then the same, tests/security/test_pulsar_proxy_answers.py.)
    settings = secure_settings(pki, brokerServicePortTls=None, webServicePortTls=None, proxyRoles="proxy")
    with BrokerThread(**settings) as b:
        root = SecureAdmin.bearer(b.web_url, pki, SUPER_USER)
        root.ok("PUT", "/admin/v2/persistent/public/default/relayed")
        for role in ("proxy", "alice"):
            root.ok("POST", f"/admin/v2/namespaces/public/default/permissions/{role}", ["consume"])

        def stats_via_proxy(original: str | None) -> int:
            headers = {"Authorization": f"Bearer {token('proxy')}"}
            if original is not None:
                headers["X-Original-Principal"] = original
            req = urllib.request.Request(b.web_url + "/admin/v2/persistent/public/default/relayed/stats",
                                         headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    return int(r.status)
            except urllib.error.HTTPError as e:
                return int(e.code)

        assert stats_via_proxy("alice") == 200
        assert stats_via_proxy("mallory") == 401  # the proxy may, mallory may not (validateTopicOperation)
        assert stats_via_proxy(None) == 401  # a proxy must say for whom
        assert stats_via_proxy("proxy") == 401  # ... and not for another proxy


SUPER_PROXY = "super-proxy"  # a proxy role that is a super user too
INVALID_PRINCIPALS = "Invalid combination of Original principal cannot be empty if the request is via proxy."


@pytest.fixture(scope="module")
def proxied_broker(pki: Pki) -> Iterator[BrokerThread]:
    """Proxy roles ``proxy`` (the admin of tenant ``proxied``) and ``super-proxy`` (a super user); tenant ``acme``
    (admin ``acme-admin``) with topic acme/ns/t, tenant ``proxied`` with topic proxied/ns/t."""
    settings = secure_settings(pki, brokerServicePortTls=None, webServicePortTls=None,
                               proxyRoles=f"proxy,{SUPER_PROXY}", superUserRoles=f"{SUPER_USER},{SUPER_PROXY}")
    with BrokerThread(**settings) as b:
        root = SecureAdmin.bearer(b.web_url, pki, SUPER_USER)
        for tenant, admins in (("acme", ["acme-admin"]), ("proxied", ["proxy"])):
            root.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": admins, "allowedClusters": ["standalone"]})
            root.ok("PUT", f"/admin/v2/namespaces/{tenant}/ns")
            root.ok("PUT", f"/admin/v2/persistent/{tenant}/ns/t")
        yield b


def relayed(b: BrokerThread, role: str, original: str | None, path: str) -> tuple[int, str | None]:
    """GET ``path`` as ``role`` naming ``original`` in X-Original-Principal: the status and the JSON reason."""
    headers = {"Authorization": f"Bearer {token(role)}"}
    if original is not None:
        headers["X-Original-Principal"] = original
    req = urllib.request.Request(b.web_url + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.status), None
    except urllib.error.HTTPError as e:
        return int(e.code), json.loads(e.read())["reason"]


def test_refusals_quote_the_original_principal_as_sent(proxied_broker: BrokerThread) -> None:
    """Pulsar's proxy names its client in X-Original-Principal also when the client's own token comes along (the
    role and the header are the same): Pulsar's refusals quote the header as sent, "null" only when there is none."""
    about = "Unauthorized to validateTenantOperation for originalPrincipal [{}] and clientAppId [stranger] about " \
            "operation [LIST_NAMESPACES] on tenant [acme]"
    path = "/admin/v2/namespaces/acme"
    assert relayed(proxied_broker, "stranger", "stranger", path) == (401, about.format("stranger"))
    assert relayed(proxied_broker, "stranger", None, path) == (401, about.format("null"))


@pytest.mark.parametrize("role, original", [("proxy", None), ("proxy", SUPER_PROXY), ("app", SUPER_USER)])
def test_principals_pulsar_does_not_accept_are_refused_as_each_check_refuses_them(
        proxied_broker: BrokerThread, role: str, original: str | None) -> None:
    """A proxy naming nobody or another proxy, a role that is no proxy naming someone else: Pulsar's checks that start
    with validateOriginalPrincipal answer 401 "Invalid combination..." (a super user's, the tenants', the tenant
    admins' after reading the tenant); the others refuse the call in their own words and status, whatever the roles
    may do, without reading the tenant; a route with no check (the clusters' list) is served."""
    named = "null" if original is None else original
    cases = {
        "/admin/v2/clusters": (200, None),
        "/admin/v2/broker-stats/topics": (401, INVALID_PRINCIPALS),
        "/admin/v2/tenants/acme": (401, INVALID_PRINCIPALS),
        "/admin/v2/persistent/acme/ns/t/permissions": (401, INVALID_PRINCIPALS),
        "/admin/v2/persistent/no-such-tenant/ns/t/permissions": (404, "Tenant does not exist"),
        "/admin/v2/namespaces/acme": (401, f"Unauthorized to validateTenantOperation for originalPrincipal [{named}] "
                                           f"and clientAppId [{role}] about operation [LIST_NAMESPACES] on tenant "
                                           "[acme]"),
        "/admin/v2/namespaces/no-such-tenant": (401, f"Unauthorized to validateTenantOperation for originalPrincipal "
                                                     f"[{named}] and clientAppId [{role}] about operation "
                                                     "[LIST_NAMESPACES] on tenant [no-such-tenant]"),
        "/admin/v2/namespaces/acme/ns/permissions": (403, "Unauthorized to validateNamespaceOperation for operation "
                                                          "[GET_PERMISSION] on namespace [acme/ns]"),
        "/admin/v2/namespaces/acme/ns/retention": (403, "Unauthorized to validateNamespacePolicyOperation for "
                                                        "operation [READ] on namespace [acme/ns] on policy "
                                                        "[RETENTION]"),
        "/admin/v2/persistent/acme/ns/t/stats": (401, "Unauthorized to validateTopicOperation for operation "
                                                      "[GET_STATS] on topic [persistent://acme/ns/t]"),
    }
    for path, answer in cases.items():
        assert relayed(proxied_broker, role, original, path) == answer, path


def test_admin_access_for_a_tenant_through_a_proxy(proxied_broker: BrokerThread) -> None:
    """Pulsar's validateAdminAccessForTenant (a topic's permissions here) judges a relayed call as a whole: allowed
    when the proxy's role is one of the tenant's admins, whoever it speaks for, else only when the proxy and its
    client are both super users. So the tenant's own admin is refused through a proxy that is only a super user."""
    def refused(proxy: str, client: str) -> tuple[int, str]:
        return 401, f"Proxy not authorized to access resource (proxy:{proxy},original:{client})"

    acme, proxied = "/admin/v2/persistent/acme/ns/t/permissions", "/admin/v2/persistent/proxied/ns/t/permissions"
    assert relayed(proxied_broker, SUPER_PROXY, "acme-admin", acme) == refused(SUPER_PROXY, "acme-admin")
    assert relayed(proxied_broker, SUPER_PROXY, SUPER_USER, acme) == (200, None)
    assert relayed(proxied_broker, "proxy", "stranger", proxied) == (200, None)
    assert relayed(proxied_broker, "proxy", "acme-admin", acme) == refused("proxy", "acme-admin")
    assert relayed(proxied_broker, "acme-admin", None, acme) == (200, None)  # (no proxy: the tenant's admin)


def test_the_tenant_admins_check_reads_the_tenant_first_for_a_super_user_too(proxied_broker: BrokerThread) -> None:
    """Pulsar's validateAdminAccessForTenant reads the tenant before it looks at the role: a tenant that does not
    exist is 404 "Tenant does not exist" for a super user too (not the handler's "Topic ... not found")."""
    for path in ("/admin/v2/persistent/no-such-tenant/ns/t/permissions",
                 "/admin/v2/namespaces/no-such-tenant/ns/properties"):
        assert relayed(proxied_broker, SUPER_USER, None, path) == (404, "Tenant does not exist"), path


def test_namespace_operations_for_super_users_only(secure_broker: BrokerThread, pki: Pki,
                                                   root_admin: SecureAdmin) -> None:
    """Pulsar's NamespacesBase asks for a super user (validateSuperUserAccess), not a tenant admin, to unload a
    namespace or a bundle, split a bundle, and set or remove the namespace's delayed delivery policy."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    root_admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
    ns = f"/admin/v2/namespaces/{tenant}/orders"
    root_admin.ok("PUT", ns)
    bundle = root_admin.ok("GET", f"{ns}/bundles")["boundaries"][:2]
    bundle_range = "_".join(bundle)
    delayed = {"active": True, "tickTime": 1000}
    calls = [("PUT", f"{ns}/unload", None), ("PUT", f"{ns}/{bundle_range}/unload", None),
             ("PUT", f"{ns}/{bundle_range}/split", None), ("POST", f"{ns}/delayedDelivery", delayed),
             ("DELETE", f"{ns}/delayedDelivery", None)]
    ops = SecureAdmin.bearer(secure_broker.web_url_tls, pki, "ops")
    for method, path, body in calls:
        reply = ops.call(method, path, body)
        assert (reply.status, reply.reason) == (401, "This operation requires super-user access"), (method, path)
    # What the tenant admin may still do there: read the policy, set the others.
    assert ops.call("GET", f"{ns}/delayedDelivery").status in (200, 204)
    ops.ok("POST", f"{ns}/messageTTL", 60)
    for method, path, body in calls:
        reply = root_admin.call(method, path, body)
        assert reply.status < 400, (method, path, reply.status, reply.body)


def test_an_anti_affinity_groups_namespaces_are_listed_for_super_users(secure_broker: BrokerThread, pki: Pki,
                                                                         root_admin: SecureAdmin) -> None:
    """GET /admin/v2/namespaces/{cluster}/antiAffinity/{group}?tenant=: Pulsar 4.0.7's handler checks the policy
    operation of a namespace it never names (NamespacesBase.internalGetAntiAffinityNamespaces), which no role
    passes with its authorization provider; here a super user lists the group, the tenant's own admin is refused."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    root_admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
    root_admin.ok("PUT", f"/admin/v2/namespaces/{tenant}/orders")
    ops = SecureAdmin.bearer(secure_broker.web_url_tls, pki, "ops")
    assert ops.call("POST", f"/admin/v2/namespaces/{tenant}/orders/antiAffinity", "g1").status == 204
    listing = f"/admin/v2/namespaces/standalone/antiAffinity/g1?tenant={tenant}"
    assert root_admin.ok("GET", listing) == [f"{tenant}/orders"]
    reply = ops.call("GET", listing)
    assert (reply.status, reply.reason) == (401, "This operation requires super-user access")


def test_bookies_and_racks_are_for_super_users(secure_broker: BrokerThread, pki: Pki,
                                              root_admin: SecureAdmin) -> None:
    """/admin/v2/bookies: Pulsar 4.0.7's admin.v2.Bookies checks validateSuperUserAccess first in every handler."""
    racks = "/admin/v2/bookies/racks-info"
    assert root_admin.call("POST", f"{racks}/10.0.0.7:3181?group=g", {"rack": "r1"}).status == 204
    assert root_admin.ok("GET", f"{racks}/10.0.0.7:3181") == {"rack": "r1"}
    ops = SecureAdmin.bearer(secure_broker.web_url, pki, "ops")
    for method, path, body in (("GET", "/admin/v2/bookies/all", None), ("GET", racks, None),
                               ("GET", f"{racks}/10.0.0.7:3181", None),
                               ("POST", f"{racks}/10.0.0.7:3181?group=g", {"rack": "r2"}),
                               ("DELETE", f"{racks}/10.0.0.7:3181", None)):
        reply = ops.call(method, path, body)
        assert (reply.status, reply.reason) == (401, "This operation requires super-user access"), (method, path)
    assert root_admin.ok("GET", racks) == {"g": {"10.0.0.7:3181": {"rack": "r1"}}}
    assert root_admin.call("DELETE", f"{racks}/10.0.0.7:3181").status == 204


def test_a_namespaces_bookie_affinity_group_is_for_super_users(secure_broker: BrokerThread, pki: Pki,
                                                               root_admin: SecureAdmin) -> None:
    """/persistence/bookieAffinity: NamespacesBase.internal{Set,Get}BookieAffinityGroup check
    validateSuperUserAccess first: even the tenant's own admin is refused."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    root_admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
    root_admin.ok("PUT", f"/admin/v2/namespaces/{tenant}/orders")
    path = f"/admin/v2/namespaces/{tenant}/orders/persistence/bookieAffinity"
    group = {"bookkeeperAffinityGroupPrimary": "g1"}
    ops = SecureAdmin.bearer(secure_broker.web_url_tls, pki, "ops")
    for method, body in (("POST", group), ("GET", None), ("DELETE", None)):
        reply = ops.call(method, path, body)
        assert (reply.status, reply.reason) == (401, "This operation requires super-user access"), method
    assert root_admin.call("POST", path, group).status == 204
    assert root_admin.ok("GET", path) == group
    assert root_admin.call("DELETE", path).status == 204


TXN = "/admin/v3/transactions"
TXN_OFF = "This Broker is not configured with transactionCoordinatorEnabled=true."


def test_transactions_routes_check_what_pulsars_check(pki: Pki) -> None:
    """Pulsar 4.0.7's admin v3 Transactions (javap of Transactions and TransactionsBase; the answers compared with
    Apache Pulsar 4.0.7 standalone): reading a coordinator, a transaction or a topic's transaction buffer and pending
    acks checks nothing but the credentials; the stats and slow transactions of every coordinator first read the
    assignment topic's partitions, a LOOKUP of that topic; aborting a transaction takes a super user, checked after
    the coordinator id's bound. With transactions off every route answers 503 before any check."""
    with BrokerThread(**secure_settings(pki, brokerServicePortTls=None, webServicePortTls=None,
                                        transactionCoordinatorEnabled=True)) as b:
        root = SecureAdmin.bearer(b.web_url, pki, SUPER_USER)
        root.ok("PUT", "/admin/v2/persistent/public/default/t")
        root.ok("PUT", "/admin/v2/persistent/public/default/t/subscription/s")
        stranger = SecureAdmin.bearer(b.web_url, pki, "stranger")
        topic = "public/default/t"
        for path in (f"{TXN}/coordinators", f"{TXN}/coordinatorStats?coordinatorId=0",
                     f"{TXN}/slowTransactions/0?coordinatorId=0", f"{TXN}/transactionMetadata/0/1",
                     f"{TXN}/coordinatorInternalStats/0", f"{TXN}/transactionBufferStats/{topic}",
                     f"{TXN}/transactionInBufferStats/{topic}/0/1", f"{TXN}/transactionBufferInternalStats/{topic}",
                     f"{TXN}/pendingAckStats/{topic}/s", f"{TXN}/transactionInPendingAckStats/{topic}/s/0/1",
                     f"{TXN}/pendingAckInternalStats/{topic}/s"):
            mine, theirs = stranger.call("GET", path), root.call("GET", path)
            # The stranger gets what the super user gets (an answer, or the same 404).
            assert mine.status == theirs.status and mine.status not in (401, 403), (path, mine.status, mine.body)
            assert mine.status < 400 or mine.reason == theirs.reason, path
        lookup = ("Unauthorized to validateTopicOperation for operation [LOOKUP] on topic "
                  "[persistent://pulsar/system/transaction_coordinator_assign]")
        cases = [
            ("GET", f"{TXN}/coordinatorStats", 401, lookup),
            ("GET", f"{TXN}/slowTransactions/1000", 401, lookup),
            ("POST", f"{TXN}/abortTransaction/0/1", 401, "This operation requires super-user access"),
            ("POST", f"{TXN}/abortTransaction/{1 << 31}/1", 500, "mostSigBits out of bounds"),  # (checked first)
        ]
        for method, path, status, reason in cases:
            reply = stranger.call(method, path)
            assert (reply.status, reply.reason) == (status, reason), (method, path)
        # The LOOKUP is of the assignment topic: a role that may consume in pulsar/system passes it.
        root.ok("POST", "/admin/v2/namespaces/pulsar/system/permissions/reader", ["consume"])
        reader = SecureAdmin.bearer(b.web_url, pki, "reader")
        assert reader.ok("GET", f"{TXN}/coordinatorStats").keys() == {"0"}
        assert reader.ok("GET", f"{TXN}/slowTransactions/1000") == {}
        assert reader.call("POST", f"{TXN}/abortTransaction/0/1").status == 401
        reply = root.call("POST", f"{TXN}/abortTransaction/0/1")  # (past the check: the coordinator's answer)
        assert reply.status == 500 and "not found" in reply.reason
    with BrokerThread(**secure_settings(pki, brokerServicePortTls=None, webServicePortTls=None)) as b:
        stranger = SecureAdmin.bearer(b.web_url, pki, "stranger")
        for method, path in (("GET", f"{TXN}/coordinators"), ("GET", f"{TXN}/coordinatorStats"),
                             ("GET", f"{TXN}/slowTransactions/1000"), ("POST", f"{TXN}/abortTransaction/0/1")):
            reply = stranger.call(method, path)
            assert (reply.status, reply.reason) == (503, TXN_OFF), (method, path)


def test_a_tenant_that_does_not_exist_is_404_for_a_refused_role(secure_broker: BrokerThread, pki: Pki,
                                                                 root_admin: SecureAdmin) -> None:
    """A role that is not a super user, on a tenant that does not exist, as Apache Pulsar 4.0.7 answers (javap of
    PulsarWebResource and PulsarAuthorizationProvider; compared with its standalone): validateAdminAccessForTenant
    reads the tenant before anything, and the tenant, namespace, topic and policy operation checks read it first
    through validateTenantAdminAccess: 404 "Tenant does not exist". Creating a topic and the HTTP lookup read the
    namespace before their check (validateGlobalNamespaceOwnership): 404 "Namespace not found", also in a tenant that
    exists. The super-user check and the tenants' own check (TenantsBase) refuse as ever."""
    missing = "Tenant does not exist"
    ns, t = "/admin/v2/namespaces/nosuch/ns", "/admin/v2/persistent/nosuch/ns/t"
    cases: list[tuple[str, str, object, int, str]] = [
        ("GET", "/admin/v2/namespaces/nosuch", None, 404, missing),  # validateTenantOperation
        ("PUT", ns, None, 404, missing),
        ("DELETE", ns, None, 404, missing),
        ("GET", ns, None, 404, missing),  # validateNamespacePolicyOperation
        ("POST", f"{ns}/messageTTL", 60, 404, missing),
        ("GET", f"{ns}/topics", None, 404, missing),  # validateNamespaceOperation
        ("GET", f"{ns}/permissions", None, 404, missing),
        ("POST", f"{ns}/permissions/app", ["produce"], 404, missing),
        ("POST", f"{ns}/clearBacklog", None, 404, missing),
        ("GET", f"{ns}/properties", None, 404, missing),  # validateAdminAccessForTenant
        ("GET", "/admin/v2/persistent/nosuch/ns", None, 404, missing),
        ("DELETE", t, None, 404, missing),
        ("GET", f"{t}/stats", None, 404, missing),  # validateTopicOperation
        ("GET", f"{t}/partitions", None, 404, missing),
        ("GET", "/admin/v2/non-persistent/nosuch/ns/t/partitions", None, 404, missing),
        ("PUT", f"{t}/unload", None, 404, missing),
        ("GET", f"{t}/permissions", None, 404, missing),  # validateAdminAccessForTenant
        ("GET", f"{t}/messageTTL", None, 404, missing),  # validateTopicPolicyOperation
        ("GET", "/admin/v2/schemas/nosuch/ns/t/schema", None, 404, missing),
        ("DELETE", "/admin/v2/schemas/nosuch/ns/t/schema", None, 404, missing),
        ("PUT", t, None, 404, "Namespace not found"),
        ("PUT", f"{t}/partitions", 2, 404, "Namespace not found"),
        ("PUT", "/admin/v2/non-persistent/nosuch/ns/t/partitions", 2, 404, "Namespace not found"),
        ("GET", "/lookup/v2/topic/persistent/nosuch/ns/t", None, 404, "Namespace not found"),
        ("PUT", f"{ns}/unload", None, 401, "This operation requires super-user access"),
        ("GET", "/admin/v2/tenants/nosuch", None, 401, "Unauthorized to validateBothTenantOperationAndSuperUser for "
                                                      "originalPrincipal [null] and clientAppId [stranger] about "
                                                      "operation [GET_TENANT] "),
    ]
    # In a tenant that exists, a missing namespace: a refusal, but where the namespace is read first.
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    root_admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
    cases += [
        ("GET", f"/admin/v2/persistent/{tenant}/nons/t/stats", None, 401,
         f"Unauthorized to validateTopicOperation for operation [GET_STATS] on topic [persistent://{tenant}/nons/t]"),
        ("PUT", f"/admin/v2/persistent/{tenant}/nons/t", None, 404, "Namespace not found"),
        ("GET", f"/lookup/v2/topic/persistent/{tenant}/nons/t", None, 404, "Namespace not found"),
    ]
    stranger = SecureAdmin.bearer(secure_broker.web_url, pki, "stranger")
    for method, path, body, status, reason in cases:
        reply = stranger.call(method, path, body)
        assert (reply.status, reply.reason) == (status, reason), (method, path)


def test_a_namespace_another_cluster_serves_answers_before_a_refusal(secure_broker: BrokerThread,
                                                                      root_admin: SecureAdmin) -> None:
    """Creating a topic and the HTTP lookup check the namespace's cluster before the caller's permissions (Apache
    Pulsar 4.0.7: PersistentTopics.createNonPartitionedTopic / createPartitionedTopic call validateGlobalNamespace
    Ownership first, TopicLookupBase.internalLookupTopicAsync before validateTopicOperation): a role they would refuse
    gets the lookup's 307 to the peer cluster, the create's 503, or the 412 when no cluster can serve it."""
    suffix = uuid.uuid4().hex[:8]
    peer, other, tenant = f"peer-{suffix}", f"other-{suffix}", f"t-{suffix}"
    root_admin.ok("PUT", f"/admin/v2/clusters/{peer}", {"serviceUrl": "http://127.0.0.9:8080"})
    root_admin.ok("PUT", f"/admin/v2/clusters/{other}", {"serviceUrl": "http://127.0.0.8:8080"})
    root_admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": [],
                                                         "allowedClusters": ["standalone", peer, other]})
    for ns, clusters in ((f"{tenant}/peer", [peer]), (f"{tenant}/none", [other])):
        root_admin.ok("PUT", f"/admin/v2/namespaces/{ns}")
        root_admin.ok("POST", f"/admin/v2/namespaces/{ns}/replication", clusters)
    root_admin.ok("POST", "/admin/v2/clusters/standalone/peers", [peer])
    headers = {"Authorization": f"Bearer {token('stranger')}", "Content-Type": "application/json"}

    def call(method: str, path: str, body: str | None = None) -> requests.Response:
        return requests.request(method, secure_broker.web_url + path, data=body, headers=headers,
                                allow_redirects=False, timeout=10)

    try:
        lookup = f"/lookup/v2/topic/persistent/{tenant}/peer/t?authoritative=false"
        reply = call("GET", lookup)
        assert (reply.status_code, reply.headers.get("Location")) == (307, "http://127.0.0.9:8080" + lookup)
        for path, body in ((f"/admin/v2/persistent/{tenant}/peer/t", None),
                           (f"/admin/v2/persistent/{tenant}/peer/t/partitions", "2"),
                           (f"/admin/v2/non-persistent/{tenant}/peer/t/partitions", "2")):
            reply = call("PUT", path, body)
            assert (reply.status_code, reply.json()) == (
                503, {"reason": "Failed to validate global cluster configuration"}), path
        for method, path, body in (("GET", f"/lookup/v2/topic/persistent/{tenant}/none/t", None),
                                   ("PUT", f"/admin/v2/persistent/{tenant}/none/t", None),
                                   ("PUT", f"/admin/v2/persistent/{tenant}/none/t/partitions", "2")):
            reply = call(method, path, body)
            assert reply.status_code == 412, (path, reply.text)
            assert reply.json()["reason"].startswith("Namespace missing local cluster name in clusters list"), path
        # This cluster's own namespaces: the refusal, as before.
        reply = call("GET", "/lookup/v2/topic/persistent/public/default/t")
        assert reply.status_code == 401
    finally:
        root_admin.ok("POST", "/admin/v2/clusters/standalone/peers", [])


def test_truncate_and_create_missed_partitions_look_the_topic_up_before_the_peer_redirect(
        secure_broker: BrokerThread, pki: Pki, root_admin: SecureAdmin) -> None:
    """Apache Pulsar 4.0.7's PersistentTopicsBase.internalTruncateTopicAsync and internalCreateMissedPartitions read
    the partitioned metadata first (AdminResource.getPartitionedTopicMetadataAsync: the caller's LOOKUP of the topic,
    then validateGlobalNamespaceOwnershipAsync), and check the tenant's admin (truncate: internalTruncateNonPartitioned
    TopicAsync) or the namespace operation CREATE_TOPIC (once the topic is found partitioned, 404 before) after: a
    role that may only look the topic up gets the 307 to the peer cluster, and the refusal in a namespace served
    here; a role with no permission, the LOOKUP refusal in both. A partition's truncate checks the tenant's admin
    first."""
    suffix = uuid.uuid4().hex[:8]
    peer, tenant = f"peer-{suffix}", f"t-{suffix}"
    root_admin.ok("PUT", f"/admin/v2/clusters/{peer}", {"serviceUrl": "http://127.0.0.9:8080"})
    root_admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["ops"],
                                                         "allowedClusters": ["standalone", peer]})
    root_admin.ok("PUT", f"/admin/v2/namespaces/{tenant}/peer")
    root_admin.ok("POST", f"/admin/v2/namespaces/{tenant}/peer/replication", [peer])
    root_admin.ok("PUT", f"/admin/v2/namespaces/{tenant}/here")
    for ns in ("peer", "here"):
        root_admin.ok("POST", f"/admin/v2/namespaces/{tenant}/{ns}/permissions/reader", ["consume"])
    root_admin.ok("PUT", f"/admin/v2/persistent/{tenant}/here/t")
    root_admin.ok("PUT", f"/admin/v2/persistent/{tenant}/here/p/partitions", 2)
    root_admin.ok("POST", "/admin/v2/clusters/standalone/peers", [peer])

    def call(role: str, method: str, path: str) -> requests.Response:
        return requests.request(method, secure_broker.web_url + path, allow_redirects=False, timeout=10,
                                headers={"Authorization": f"Bearer {token(role)}"})

    def lookup_refused(topic: str) -> tuple[int, str]:
        return 401, f"Unauthorized to validateTopicOperation for operation [LOOKUP] on topic [persistent://{topic}]"

    not_admin = (401, "Don't have permission to administrate resources on this tenant")
    try:
        for method, path in (("DELETE", f"/admin/v2/persistent/{tenant}/peer/t/truncate"),
                             ("POST", f"/admin/v2/persistent/{tenant}/peer/p/createMissedPartitions")):
            reply = call("reader", method, path)
            assert (reply.status_code, reply.headers.get("Location")) == (307, "http://127.0.0.9:8080" + path), path
        cases = [
            ("reader", "DELETE", f"{tenant}/here/t/truncate", not_admin),
            ("reader", "POST", f"{tenant}/here/p/createMissedPartitions",
             (403, f"Unauthorized to validateNamespaceOperation for operation [CREATE_TOPIC] on namespace "
                   f"[{tenant}/here]")),
            ("reader", "POST", f"{tenant}/here/t/createMissedPartitions",
             (404, f"Topic persistent://{tenant}/here/t does not exist")),
            # (a partition's truncate: the tenant's admin first, then the namespace's cluster)
            ("reader", "DELETE", f"{tenant}/peer/t-partition-0/truncate", not_admin),
            ("reader", "DELETE", f"{tenant}/here/p-partition-0/truncate", not_admin),
            ("stranger", "DELETE", f"{tenant}/peer/t/truncate", lookup_refused(f"{tenant}/peer/t")),
            ("stranger", "DELETE", f"{tenant}/here/t/truncate", lookup_refused(f"{tenant}/here/t")),
            ("stranger", "POST", f"{tenant}/peer/p/createMissedPartitions", lookup_refused(f"{tenant}/peer/p")),
            ("stranger", "POST", f"{tenant}/here/p/createMissedPartitions", lookup_refused(f"{tenant}/here/p")),
        ]
        for role, method, path, answer in cases:
            reply = call(role, method, f"/admin/v2/persistent/{path}")
            assert (reply.status_code, reply.json()["reason"]) == answer, (role, method, path)
        # The tenant's admin: done.
        for method, path in (("DELETE", f"{tenant}/here/t/truncate"), ("DELETE", f"{tenant}/here/p/truncate"),
                             ("POST", f"{tenant}/here/p/createMissedPartitions")):
            assert call("ops", method, f"/admin/v2/persistent/{path}").status_code == 204, (method, path)
    finally:
        root_admin.ok("POST", "/admin/v2/clusters/standalone/peers", [])


def test_a_topics_permissions_need_the_topic(secure_broker: BrokerThread, pki: Pki, root_admin: SecureAdmin) -> None:
    """Apache Pulsar 4.0.7's PersistentTopicsBase.internalGetPermissionsOnTopic / internalGrantPermissionsOnTopic /
    internalRevokePermissionsOnTopic check the tenant's admin, then that the topic exists (internalCheckTopicExists,
    as allowAclChangesOnNonExistentTopics is false by default): 404 "Topic <name> not found" for a topic that is not
    there, in a namespace served here or by a peer cluster (which stores it, not this one), or that does not
    exist. A partitioned topic is there, and so are its partitions."""
    suffix = uuid.uuid4().hex[:8]
    peer, tenant = f"peer-{suffix}", f"t-{suffix}"
    root_admin.ok("PUT", f"/admin/v2/clusters/{peer}", {"serviceUrl": "http://127.0.0.9:8080"})
    root_admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": [], "allowedClusters": ["standalone", peer]})
    root_admin.ok("PUT", f"/admin/v2/namespaces/{tenant}/peer")
    root_admin.ok("POST", f"/admin/v2/namespaces/{tenant}/peer/replication", [peer])
    root_admin.ok("PUT", f"/admin/v2/namespaces/{tenant}/here")
    root_admin.ok("PUT", f"/admin/v2/persistent/{tenant}/here/t")
    root_admin.ok("PUT", f"/admin/v2/persistent/{tenant}/here/p/partitions", 2)
    root_admin.ok("POST", "/admin/v2/clusters/standalone/peers", [peer])
    stranger = SecureAdmin.bearer(secure_broker.web_url, pki, "stranger")
    try:
        for topic in (f"{tenant}/peer/t", f"{tenant}/here/missing", f"{tenant}/nons/t", f"{tenant}/here/p-partition-5"):
            base = f"/admin/v2/persistent/{topic}/permissions"
            for method, path, body in (("GET", base, None), ("POST", f"{base}/app", ["consume"]),
                                       ("DELETE", f"{base}/app", None)):
                reply = root_admin.call(method, path, body)
                assert (reply.status, reply.reason) == (404, f"Topic persistent://{topic} not found"), (method, path)
                # (the tenant's admin first)
                reply = stranger.call(method, path, body)
                assert (reply.status, reply.reason) == (
                    401, "Don't have permission to administrate resources on this tenant"), (method, path)
        for topic in (f"{tenant}/here/t", f"{tenant}/here/p", f"{tenant}/here/p-partition-1"):
            base = f"/admin/v2/persistent/{topic}/permissions"
            root_admin.ok("POST", f"{base}/app", ["consume"])
            assert root_admin.ok("GET", base) == {"app": ["consume"]}, topic
            root_admin.ok("DELETE", f"{base}/app")
    finally:
        root_admin.ok("POST", "/admin/v2/clusters/standalone/peers", [])


class ElsewhereOwnership:
    """Cluster mode, every bundle owned by another broker of this cluster (at ``OWNER``)."""

    OWNER = "http://127.0.0.7:8080"
    distributed = True
    is_leader = False

    def bundle_of(self, name: TopicName) -> None:
        return None

    def is_owned(self, bundle: object) -> bool:
        return False

    async def lookup(self, name: TopicName, authoritative: bool, listener: str | None) -> object:
        return types.SimpleNamespace(http_url=self.OWNER, http_url_tls=self.OWNER)


async def test_truncate_checks_the_tenants_admin_before_the_owners_redirect(pki: Pki) -> None:
    """Cluster mode: Pulsar 4.0.7's internalTruncateNonPartitionedTopicAsync checks the tenant's admin, then
    validateTopicOwnership (307 to the owner): a role that may look the topic up but is no admin gets the refusal
    here, not a redirect to the owner first."""
    async with Broker(**secure_settings(pki)) as b, aiohttp.ClientSession() as http:
        assert b.server is not None

        async def call(role: str, method: str, path: str, body: object = None) -> tuple[int, str]:
            async with http.request(method, b.web_url + path, json=body, allow_redirects=False,
                                    headers={"Authorization": f"Bearer {token(role)}"}) as reply:
                return reply.status, reply.headers.get("Location") or (await reply.json())["reason"]

        tenant = f"t-{uuid.uuid4().hex[:8]}"
        for method, path, body in (
                ("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}),
                ("PUT", f"/admin/v2/namespaces/{tenant}/ns", None),
                ("POST", f"/admin/v2/namespaces/{tenant}/ns/permissions/reader", ["consume"]),
                ("PUT", f"/admin/v2/persistent/{tenant}/ns/t", None)):
            async with http.request(method, b.web_url + path, json=body,
                                    headers={"Authorization": f"Bearer {token(SUPER_USER)}"}) as reply:
                assert reply.status == 204, (path, await reply.text())
        service = b.server.service
        standalone, service.ownership = service.ownership, ElsewhereOwnership()  # type: ignore[assignment]
        try:
            path = f"/admin/v2/persistent/{tenant}/ns/t/truncate"
            assert await call("reader", "DELETE", path) == (
                401, "Don't have permission to administrate resources on this tenant")
            assert await call("stranger", "DELETE", path) == (
                401, f"Unauthorized to validateTopicOperation for operation [LOOKUP] on topic "
                     f"[persistent://{tenant}/ns/t]")
            assert await call("ops", "DELETE", path) == (307, f"{ElsewhereOwnership.OWNER}{path}?authoritative=false")
        finally:
            service.ownership = standalone


def test_super_users_follow_the_dynamic_configuration(pki: Pki) -> None:
    """superUserRoles changed with update-dynamic-config: a role made super user may do what only super users may
    (and change the dynamic configuration itself), at once; deleted, it is refused again. Only super users may
    read or change the dynamic configuration."""
    with BrokerThread(**secure_settings(pki, brokerServicePortTls=None, webServicePortTls=None)) as b:
        root = SecureAdmin.bearer(b.web_url, pki, SUPER_USER)
        ops = SecureAdmin.bearer(b.web_url, pki, "ops")
        config = "/admin/v2/brokers/configuration"
        limit = f"{config}/maxTopicsPerNamespace"
        for method, path, operation in (("GET", config, "LIST"), ("GET", f"{config}/values", "LIST"),
                                        ("POST", f"{limit}/9", "UPDATE"), ("DELETE", limit, "DELETE")):
            reply = ops.call(method, path)  # (Pulsar's validateBothSuperuserAndBrokerOperation and its words)
            assert reply.status == 401 and reply.reason.startswith(
                "Unauthorized to validateBothSuperuserAndBrokerOperation for originalPrincipal [null] and clientAppId "
                f"[ops] about operation [{operation}_DYNAMIC_CONFIGURATION"), (method, path, reply.body)
        assert ops.call("GET", "/admin/v2/bookies/racks-info").status == 401  # (super users only)
        assert root.call("POST", f"{config}/superUserRoles/{SUPER_USER},ops").status == 200
        assert ops.ok("GET", "/admin/v2/bookies/racks-info") == {}
        assert ops.call("POST", f"{config}/maxTopicsPerNamespace/9").status == 200
        stored = {"superUserRoles": f"{SUPER_USER},ops", "maxTopicsPerNamespace": "9"}
        assert root.ok("GET", f"{config}/values") == stored
        assert root.call("DELETE", f"{config}/superUserRoles").status == 200
        assert ops.call("GET", "/admin/v2/bookies/racks-info").status == 401
        assert root.ok("GET", f"{config}/values") == {"maxTopicsPerNamespace": "9"}
