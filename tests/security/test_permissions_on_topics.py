"""POST /admin/v2/namespaces/grantPermissionsOnTopics and .../revokePermissionsOnTopics with token authentication
and authorization on (the session's secure broker), as Apache Pulsar 4.0.7 answers them (javap of NamespacesBase.
internalGrantPermissionOnTopicsAsync / internalRevokePermissionOnTopicsAsync, and a standalone's answers with the same
settings): the grants stored where a single topic's are, in one write, and read by authorization; who may call (the
first topic's tenant's admins and super users); each refusal in Pulsar's order; bad input a 400 with a JSON reason,
before any check. Without authentication, the parts: tests/admin/test_permissions_on_topics.py."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from typing import Any

import pulsar
import pytest

from broker.admin.permissions import GRANT_ON_TOPICS, NOT_ONE_NAMESPACE, REVOKE_ON_TOPICS
from broker.auth.refusals import INVALID_PRINCIPALS, TENANT_NOT_FOUND
from broker.embedded import BrokerThread
from tests.admin.conftest import Reply
from tests.security.conftest import SUPER_USER, SecureAdmin, token
from tests.security.pki import Pki

TENANT_ADMIN = "tenant-admin"
STRANGER = "stranger"
NOT_TENANT_ADMIN = "Don't have permission to administrate resources on this tenant"


def as_role(broker: BrokerThread, pki: Pki, role: str) -> SecureAdmin:
    return SecureAdmin.bearer(broker.web_url, pki, role)


@pytest.fixture
def topics_ns(root_admin: SecureAdmin) -> str:
    """A fresh tenant (its admin ``TENANT_ADMIN``) and namespace, with topics t1, t2 and a partitioned p (2)."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    root_admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": [TENANT_ADMIN],
                                                         "allowedClusters": ["standalone"]})
    root_admin.ok("PUT", f"/admin/v2/namespaces/{tenant}/ns")
    for t in ("t1", "t2"):
        root_admin.ok("PUT", f"/admin/v2/persistent/{tenant}/ns/{t}")
    root_admin.ok("PUT", f"/admin/v2/persistent/{tenant}/ns/p/partitions", 2)
    return f"{tenant}/ns"


def permissions(admin: SecureAdmin, topic: str) -> Any:
    domain, _, rest = topic.partition("://")
    return admin.ok("GET", f"/admin/v2/{domain}/{rest}/permissions")


def destination_auth(admin: SecureAdmin, namespace: str) -> Any:
    return admin.ok("GET", f"/admin/v2/namespaces/{namespace}")["auth_policies"]["destination_auth"]


def grant(topic: str, role: str, *actions: str) -> dict[str, Any]:
    return {"topic": topic, "role": role, "actions": list(actions)}


def revoke(topic: str, role: str) -> dict[str, str]:
    return {"topic": topic, "role": role}


def refused(reply: Reply, status: int, reason: str) -> None:
    assert (reply.status, reply.headers.get("Content-Type", "").split(";")[0]) == (status, "application/json"), reply
    assert reply.reason == reason, reply.reason


# -- what is stored ----------------------------------------------------------------------------------------------------
def test_a_grant_shows_on_each_topic_and_a_revoke_takes_it_off(root_admin: SecureAdmin, topics_ns: str) -> None:
    t1, t2, p = (f"persistent://{topics_ns}/{t}" for t in ("t1", "t2", "p"))
    body = [grant(t1, "writer", "produce"), grant(t2, "reader", "consume"), grant(t2, "writer", "produce", "consume"),
            grant(p, "writer", "produce")]
    reply = root_admin.call("POST", GRANT_ON_TOPICS, body)
    assert (reply.status, reply.body) == (204, b"")
    assert permissions(root_admin, t1) == {"writer": ["produce"]}
    assert permissions(root_admin, t2) == {"reader": ["consume"], "writer": ["consume", "produce"]}
    # Stored as a single topic's grant is: in the namespace's auth_policies, under the name given (a partitioned
    # topic's partitions are not written).
    assert permissions(root_admin, p) == {"writer": ["produce"]}
    assert permissions(root_admin, f"{p}-partition-0") == {}
    assert destination_auth(root_admin, topics_ns) == {t1: {"writer": ["produce"]}, p: {"writer": ["produce"]},
                                                       t2: {"reader": ["consume"], "writer": ["consume", "produce"]}}
    # The single-topic endpoint sees it, and a grant there shows in the batch's place too.
    root_admin.ok("POST", f"/admin/v2/persistent/{topics_ns}/t1/permissions/other", ["consume"])
    reply = root_admin.call("POST", REVOKE_ON_TOPICS, [revoke(t1, "writer"), revoke(t2, "writer"), revoke(p, "writer")])
    assert (reply.status, reply.body) == (204, b"")
    assert permissions(root_admin, t1) == {"other": ["consume"]}
    assert permissions(root_admin, t2) == {"reader": ["consume"]}
    assert destination_auth(root_admin, topics_ns) == {t1: {"other": ["consume"]}, t2: {"reader": ["consume"]}}
    # Nothing granted: no error, nothing changed.
    assert root_admin.call("POST", REVOKE_ON_TOPICS, [revoke(t1, "never")]).status == 204
    assert permissions(root_admin, t1) == {"other": ["consume"]}


def test_grants_on_one_topic_replace_in_order(root_admin: SecureAdmin, topics_ns: str) -> None:
    """Each option puts the role's actions on its topic (Map.put): a later one for the same role and topic wins, a
    later call replaces the actions; an empty list of actions is stored as one; a short name is the full name's;
    fields Pulsar's options have not are ignored."""
    t1 = f"persistent://{topics_ns}/t1"
    root_admin.ok("POST", GRANT_ON_TOPICS, [grant(t1, "app", "produce"), grant(f"{topics_ns}/t1", "app", "consume"),
                                            {**grant(t1, "none"), "unknown": 1}])
    assert permissions(root_admin, t1) == {"app": ["consume"], "none": []}
    root_admin.ok("POST", GRANT_ON_TOPICS, [grant(t1, "app", "produce", "produce")])
    assert permissions(root_admin, t1) == {"app": ["produce"], "none": []}


def test_a_partition_is_a_topic_of_its_own(root_admin: SecureAdmin, topics_ns: str) -> None:
    """A partition within its count exists (granted under its own name); revoking on its partitioned topic leaves
    its grant (unlike a single topic's revoke, which takes the role off every partition); past the count: 404."""
    p = f"persistent://{topics_ns}/p"
    root_admin.ok("POST", GRANT_ON_TOPICS, [grant(f"{p}-partition-1", "app", "consume"), grant(p, "app", "produce")])
    root_admin.ok("POST", REVOKE_ON_TOPICS, [revoke(p, "app")])
    assert permissions(root_admin, f"{p}-partition-1") == {"app": ["consume"]}
    assert permissions(root_admin, p) == {}
    refused(root_admin.call("POST", GRANT_ON_TOPICS, [grant(f"{p}-partition-2", "app", "consume")]), 404,
            f"Topic {p}-partition-2 not found")


def test_the_grants_are_what_authorization_reads(secure_broker: BrokerThread, root_admin: SecureAdmin,
                                                 topics_ns: str) -> None:
    """A role granted produce on a topic through the batch may produce there; revoked, it may not."""
    topic = f"persistent://{topics_ns}/t1"
    root_admin.ok("POST", GRANT_ON_TOPICS, [grant(topic, "writer", "produce")])
    client = pulsar.Client(secure_broker.service_url, authentication=pulsar.AuthenticationToken(token("writer")),
                           operation_timeout_seconds=10)
    try:
        client.create_producer(topic).send(b"granted")
        root_admin.ok("POST", REVOKE_ON_TOPICS, [revoke(topic, "writer")])
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
    finally:
        client.close()


# -- who may call ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [GRANT_ON_TOPICS, REVOKE_ON_TOPICS])
def test_the_topics_tenant_admins_may_call(secure_broker: BrokerThread, pki: Pki, root_admin: SecureAdmin,
                                          topics_ns: str, path: str) -> None:
    """Pulsar's validateAdminAccessForTenant of the first topic's tenant: its admins and super users; anyone else
    401 in its words; no credentials, 401 "Authentication required" (Pulsar's AuthenticationFilter)."""
    topic = f"persistent://{topics_ns}/t1"
    body = [grant(topic, "app", "produce")] if path == GRANT_ON_TOPICS else [revoke(topic, "app")]
    assert as_role(secure_broker, pki, TENANT_ADMIN).call("POST", path, body).status == 204
    other_tenant = f"o-{uuid.uuid4().hex[:8]}"
    root_admin.ok("PUT", f"/admin/v2/tenants/{other_tenant}", {"adminRoles": ["other-admin"],
                                                                "allowedClusters": ["standalone"]})
    for role in (STRANGER, "other-admin"):
        refused(as_role(secure_broker, pki, role).call("POST", path, body), 401, NOT_TENANT_ADMIN)
    refused(SecureAdmin(secure_broker.web_url, pki).call("POST", path, body), 401, "Authentication required")


def test_a_relayed_call_pulsar_does_not_accept_is_refused(secure_broker: BrokerThread, topics_ns: str) -> None:
    """A role that is no proxy naming another client (X-Original-Principal): validateAdminAccessForTenant's 401
    (PulsarWebResource.validateOriginalPrincipal), even for a super user."""
    req = urllib.request.Request(secure_broker.web_url + GRANT_ON_TOPICS, method="POST",
                                 data=json.dumps([grant(f"persistent://{topics_ns}/t1", "app", "produce")]).encode(),
                                 headers={"Content-Type": "application/json", "X-Original-Principal": STRANGER,
                                          "Authorization": f"Bearer {token(SUPER_USER)}"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(req, timeout=10)
    assert (caught.value.code, json.loads(caught.value.read())["reason"]) == (401, INVALID_PRINCIPALS)


def test_refusals_come_in_pulsars_order(secure_broker: BrokerThread, pki: Pki, root_admin: SecureAdmin,
                                        topics_ns: str) -> None:
    """The body and its namespace first (400, for any role), then the tenant (404, for any role), then the tenant's
    admin (401), then each topic (404, the first missing one)."""
    stranger = as_role(secure_broker, pki, STRANGER)
    t1 = f"persistent://{topics_ns}/t1"
    elsewhere = f"persistent://{topics_ns}2/t1"
    for admin in (root_admin, stranger):
        refused(admin.call("POST", GRANT_ON_TOPICS, [grant(t1, "a", "produce"), grant(elsewhere, "a", "produce")]),
                400, f"{NOT_ONE_NAMESPACE}: the topics are in {topics_ns}, {topics_ns}2")
        refused(admin.call("POST", REVOKE_ON_TOPICS, []), 400, f"{NOT_ONE_NAMESPACE}: the list names no topic")
        refused(admin.call("POST", GRANT_ON_TOPICS, [grant("persistent://no-such-tenant/ns/t", "a")]), 404,
                TENANT_NOT_FOUND)
    missing = f"persistent://{topics_ns}/missing"
    refused(stranger.call("POST", GRANT_ON_TOPICS, [grant(missing, "a", "produce")]), 401, NOT_TENANT_ADMIN)
    body = [grant(t1, "a", "produce"), grant(missing, "a", "produce"), grant(f"{missing}2", "a", "produce")]
    refused(root_admin.call("POST", GRANT_ON_TOPICS, body), 404, f"Topic {missing} not found")
    refused(root_admin.call("POST", REVOKE_ON_TOPICS, [revoke(missing, "a")]), 404, f"Topic {missing} not found")
    # (a namespace that does not exist: its topics do not)
    refused(root_admin.call("POST", GRANT_ON_TOPICS, [grant(f"{elsewhere}", "a")]), 404, f"Topic {elsewhere} not found")
    # All or nothing: the topic that exists got nothing either.
    assert permissions(root_admin, t1) == {}


BAD_BODIES: list[tuple[str, bytes, str]] = [
    (GRANT_ON_TOPICS, b"not json", "Request body is not valid JSON"),
    (GRANT_ON_TOPICS, b"", 'The body must be a JSON array of options, each an object with "topic", "role" and '
                           '"actions"'),
    (GRANT_ON_TOPICS, b"null", 'The body must be a JSON array of options, each an object with "topic", "role" and '
                               '"actions"'),
    (REVOKE_ON_TOPICS, b'{"topic": "t", "role": "r"}', 'The body must be a JSON array of options, each an object '
                                                       'with "topic" and "role"'),
    (GRANT_ON_TOPICS, b'["x"]', 'Option 0 must be a JSON object with "topic", "role" and "actions"'),
    (REVOKE_ON_TOPICS, b"[null]", 'Option 0 must be a JSON object with "topic" and "role"'),
    (GRANT_ON_TOPICS, b'[{"role": "r", "actions": []}]', 'Option 0 must name its topic ("topic": a topic name)'),
    (REVOKE_ON_TOPICS, b'[{"topic": 5, "role": "r"}]', 'Option 0 must name its topic ("topic": a topic name)'),
    (GRANT_ON_TOPICS, b'[{"topic": "persistent://acme", "role": "r", "actions": []}]',
     "Option 0: Invalid topic name 'persistent://acme'"),
    (GRANT_ON_TOPICS, b'[{"topic": "a/b/c/d/e", "role": "r", "actions": []}]',
     "Option 0: Invalid short topic name 'a/b/c/d/e'"),
    (REVOKE_ON_TOPICS, b'[{"topic": "t"}]', 'Option 0 must name its role ("role": a non-empty string)'),
    (GRANT_ON_TOPICS, b'[{"topic": "t", "role": "", "actions": []}]',
     'Option 0 must name its role ("role": a non-empty string)'),
    (GRANT_ON_TOPICS, b'[{"topic": "t", "role": 5, "actions": []}]',
     'Option 0 must name its role ("role": a non-empty string)'),
    (GRANT_ON_TOPICS, b'[{"topic": "t", "role": "r", "actions": []}, {"topic": "t", "role": "r"}]',
     'Option 1: Permissions must be a JSON array of actions, e.g. ["produce", "consume"]'),
    (GRANT_ON_TOPICS, b'[{"topic": "t", "role": "r", "actions": "produce"}]',
     'Option 0: Permissions must be a JSON array of actions, e.g. ["produce", "consume"]'),
    (GRANT_ON_TOPICS, b'[{"topic": "t", "role": "r", "actions": ["produce", "PRODUCE"]}]',
     "Option 0: Unknown actions ['PRODUCE']; one of produce, consume, functions, sources, sinks, packages"),
]


@pytest.mark.parametrize(("path", "raw", "reason"), BAD_BODIES)
def test_bad_input_is_a_400_with_its_reason(secure_broker: BrokerThread, root_admin: SecureAdmin, path: str, raw: bytes,
                                            reason: str) -> None:
    """Refused before anything else (as Pulsar's JSON binding is), a stranger's too. Pulsar answers some of these
    with a 500 (no body, a null option, no topic or role, a name it cannot parse), takes others (an unknown action,
    stored as null; missing actions, a grant of nothing; an empty role; a number for a role)."""
    for role in (SUPER_USER, STRANGER):
        req = urllib.request.Request(secure_broker.web_url + path, data=raw, method="POST",
                                     headers={"Content-Type": "application/json", "Authorization":
                                              f"Bearer {token(role)}"})
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(req, timeout=10)
        assert caught.value.code == 400
        assert json.loads(caught.value.read()) == {"reason": reason}
    assert "persistent://public/default/t" not in destination_auth(root_admin, "public/default")
