"""The official client (pulsar-client 3.13) against a broker with TLS, authentication and
authorization: each provider, TLS with and without client certificates, HTTPS lookup, refusals.

A refused CONNECT makes the C++ client retry until its operation timeout (as with Apache Pulsar),
so those tests use a 1 s timeout and expect ``pulsar.Timeout``; refusals after CONNECT
(AuthorizationError) fail at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Protocol

import pulsar
import pytest

from broker.embedded import BrokerThread
from tests.security.conftest import SUPER_USER, SecureAdmin, expiring_token, secure_settings, token
from tests.security.pki import CLIENT_ROLE, USERS, Pki
from tests.waiting import wait_for

RECEIVE_MS = 5000
REFUSED_TIMEOUT_S = 1  # operation timeout for clients whose CONNECT is refused


def client(url: str, pki: Pki, auth: pulsar.Authentication | None = None, **kw: object) -> pulsar.Client:
    kw.setdefault("operation_timeout_seconds", 10)
    return pulsar.Client(url, tls_trust_certs_file_path=str(pki.ca_cert), authentication=auth, **kw)


def round_trip(c: pulsar.Client, topic: str) -> None:
    consumer = c.subscribe(topic, "sub")
    producer = c.create_producer(topic)
    producer.send(b"hello")
    msg = consumer.receive(RECEIVE_MS)
    assert msg.data() == b"hello"
    consumer.acknowledge(msg)
    producer.close()
    consumer.close()


@pytest.fixture
def topic(namespace: str) -> str:
    return f"persistent://{namespace}/t-{uuid.uuid4().hex[:8]}"


class Grant(Protocol):
    def __call__(self, role: str, *actions: str) -> None: ...


@pytest.fixture
def grant(root_admin: SecureAdmin, namespace: str) -> Grant:
    def do(role: str, *actions: str) -> None:
        root_admin.ok("POST", f"/admin/v2/namespaces/{namespace}/permissions/{role}", list(actions))
    return do


@pytest.fixture
def clients() -> Iterator[list[pulsar.Client]]:
    made: list[pulsar.Client] = []
    yield made
    for c in made:
        c.close()


# -- each provider, over TLS and plain -----------------------------------------------------------------

def test_token_over_tls_binary_and_https_lookup(secure_broker: BrokerThread, pki: Pki, topic: str,
                                                grant: Grant, clients: list[pulsar.Client]) -> None:
    grant("app", "produce", "consume")
    for url in (secure_broker.service_url_tls, secure_broker.web_url_tls.replace("127.0.0.1", "localhost")):
        c = client(url, pki, pulsar.AuthenticationToken(token("app")), tls_validate_hostname=True)
        clients.append(c)
        round_trip(c, topic)


def test_plain_and_tls_ports_serve_together(secure_broker: BrokerThread, pki: Pki, topic: str, grant: Grant,
                                            clients: list[pulsar.Client]) -> None:
    grant("app", "produce", "consume")
    plain = client(secure_broker.service_url, pki, pulsar.AuthenticationToken(token("app")))
    tls = client(secure_broker.service_url_tls, pki, pulsar.AuthenticationToken(token("app")))
    clients += [plain, tls]
    consumer = tls.subscribe(topic, "sub")
    plain.create_producer(topic).send(b"across")
    assert consumer.receive(RECEIVE_MS).data() == b"across"


def test_tls_client_certificate_role_is_its_cn(secure_broker: BrokerThread, pki: Pki, topic: str, grant: Grant,
                                               clients: list[pulsar.Client]) -> None:
    grant(CLIENT_ROLE, "produce", "consume")
    auth = pulsar.AuthenticationTLS(str(pki.client_cert), str(pki.client_key))
    for url in (secure_broker.service_url_tls, secure_broker.web_url_tls):
        c = client(url, pki, auth)
        clients.append(c)
        round_trip(c, topic)


def test_basic_apr1_and_crypt_users(secure_broker: BrokerThread, pki: Pki, topic: str, grant: Grant,
                                    clients: list[pulsar.Client]) -> None:
    for user, password in USERS.items():
        grant(user, "produce", "consume")
        for url in (secure_broker.service_url, secure_broker.web_url):
            c = client(url, pki, pulsar.AuthenticationBasic(user, password))
            clients.append(c)
            round_trip(c, topic)


def test_public_key_tokens_rs256_and_es256(pki: Pki) -> None:
    for public_key, alg, private in ((f"file://{pki.rsa_public_der}", "RS256", pki.rsa_private),
                                     (str(pki.ec_public_pem), "ES256", pki.ec_private)):
        settings = secure_settings(pki, tokenSecretKey="", tokenPublicKey=public_key, tokenPublicAlg=alg,
                                   brokerServicePortTls=None, webServicePortTls=None)
        with BrokerThread(**settings) as b:
            c = client(b.service_url, pki, pulsar.AuthenticationToken(token(SUPER_USER, private, alg)))
            round_trip(c, f"public/default/{alg}")
            c.close()


def test_require_trusted_client_cert(pki: Pki) -> None:
    settings = secure_settings(pki, tlsRequireTrustedClientCertOnConnect=True, webServicePortTls=None,
                               superUserRoles=f"{SUPER_USER},{CLIENT_ROLE}")
    with BrokerThread(**settings) as b:
        with_cert = client(b.service_url_tls, pki, pulsar.AuthenticationTLS(str(pki.client_cert), str(pki.client_key)))
        round_trip(with_cert, "public/default/mtls")
        with_cert.close()
        # A valid token is not enough: the TLS handshake itself wants a trusted certificate.
        no_cert = client(b.service_url_tls, pki, pulsar.AuthenticationToken(token(SUPER_USER)),
                         operation_timeout_seconds=REFUSED_TIMEOUT_S)
        with pytest.raises(pulsar.Timeout):
            no_cert.create_producer("public/default/mtls")
        no_cert.close()


# -- refusals ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("auth, at_connect", [
    pytest.param(lambda pki: pulsar.AuthenticationToken(token(SUPER_USER, b"another-secret-of-32-bytes-or-more")),
                 True, id="bad-token-signature"),
    pytest.param(lambda pki: pulsar.AuthenticationToken(expiring_token(SUPER_USER, -60)), True, id="expired-token"),
    pytest.param(lambda pki: pulsar.AuthenticationBasic("alice", "wrong"), True, id="wrong-password"),
    # Refused in the TLS handshake: the broker never sees a connection.
    pytest.param(lambda pki: pulsar.AuthenticationTLS(str(pki.rogue_cert), str(pki.rogue_key)), False,
                 id="untrusted-client-cert"),
])
def test_refused_connect(secure_broker: BrokerThread, pki: Pki, auth: Callable[[Pki], pulsar.Authentication],
                        at_connect: bool) -> None:
    authn = secure_broker.server.security.authentication
    failures = authn.failures
    c = client(secure_broker.service_url_tls, pki, auth(pki), operation_timeout_seconds=REFUSED_TIMEOUT_S)
    with pytest.raises(pulsar.Timeout):
        c.create_producer("public/default/refused")
    c.close()
    if at_connect:
        assert authn.failures > failures  # refused by the provider at CONNECT


def test_refused_over_http_lookup(secure_broker: BrokerThread, pki: Pki) -> None:
    # The HTTP lookup answers 401; the C++ client reports any HTTP error as ConnectError.
    c = client(secure_broker.web_url_tls, pki, pulsar.AuthenticationBasic("alice", "wrong"))
    with pytest.raises(pulsar.ConnectError):
        c.create_producer("public/default/refused")
    c.close()


def test_no_grant_is_authorization_error(secure_broker: BrokerThread, pki: Pki, topic: str,
                                         clients: list[pulsar.Client]) -> None:
    c = client(secure_broker.service_url_tls, pki, pulsar.AuthenticationToken(token("stranger")))
    clients.append(c)
    with pytest.raises(pulsar.AuthorizationError):
        c.create_producer(topic)
    with pytest.raises(pulsar.AuthorizationError):
        c.subscribe(topic, "sub")


def test_consume_grant_does_not_allow_produce(secure_broker: BrokerThread, pki: Pki, topic: str, grant: Grant,
                                              root_admin: SecureAdmin, clients: list[pulsar.Client]) -> None:
    grant("reader", "consume")
    root_admin.ok("PUT", f"/admin/v2/{topic.replace('://', '/')}")  # (a topic's grants need the topic, as Pulsar's)
    root_admin.ok("POST", f"/admin/v2/{topic.replace('://', '/')}/permissions/writer", ["produce"])
    reader = client(secure_broker.service_url_tls, pki, pulsar.AuthenticationToken(token("reader")))
    writer = client(secure_broker.service_url_tls, pki, pulsar.AuthenticationToken(token("writer")))
    clients += [reader, writer]
    consumer = reader.subscribe(topic, "sub")
    with pytest.raises(pulsar.AuthorizationError):
        reader.create_producer(topic)
    with pytest.raises(pulsar.AuthorizationError):
        writer.subscribe(topic, "sub")
    writer.create_producer(topic).send(b"by grant")
    assert consumer.receive(RECEIVE_MS).data() == b"by grant"


def test_a_partitioned_topics_grants(secure_broker: BrokerThread, pki: Pki, namespace: str,
                                     root_admin: SecureAdmin, clients: list[pulsar.Client]) -> None:
    """As Apache Pulsar 4.0.7: a grant on a partitioned topic covers its partitions for the role granted
    (PulsarAuthorizationProvider.checkPermission, TopicName.getPartitionedTopicName); one on a partition covers that
    partition alone; a revoke on the partitioned topic takes the role's grants off its partitions too
    (PersistentTopicsBase.internalRevokePermissionsOnTopic)."""
    topic = f"persistent://{namespace}/p-{uuid.uuid4().hex[:8]}"
    admin_path = f"/admin/v2/{topic.replace('://', '/')}"
    root_admin.ok("PUT", f"{admin_path}/partitions", 2)
    root_admin.ok("POST", f"{admin_path}/permissions/writer", ["produce"])
    root_admin.ok("POST", f"{admin_path}-partition-0/permissions/part-writer", ["produce"])
    writer = client(secure_broker.service_url_tls, pki, pulsar.AuthenticationToken(token("writer")))
    part_writer = client(secure_broker.service_url_tls, pki, pulsar.AuthenticationToken(token("part-writer")))
    clients += [writer, part_writer]
    writer.create_producer(topic).send(b"to a partition")
    writer.create_producer(f"{topic}-partition-1").close()
    part_writer.create_producer(f"{topic}-partition-0").close()
    with pytest.raises(pulsar.AuthorizationError):
        part_writer.create_producer(f"{topic}-partition-1")
    assert root_admin.call("DELETE", f"{admin_path}/permissions/part-writer").status == 204
    with pytest.raises(pulsar.AuthorizationError):
        part_writer.create_producer(f"{topic}-partition-0")


def test_subscription_auth_mode_prefix(secure_broker: BrokerThread, pki: Pki, topic: str, grant: Grant,
                                      root_admin: SecureAdmin, namespace: str, clients: list[pulsar.Client]) -> None:
    # Prefix: a role may only use subscriptions named after it (set over REST, as pulsar-admin does).
    grant("team", "consume")
    path = f"/admin/v2/namespaces/{namespace}/subscriptionAuthMode"
    assert root_admin.ok("GET", path) == "None"
    assert root_admin.call("POST", path, "Suffix").status == 400
    root_admin.ok("POST", path, "Prefix")
    assert root_admin.ok("GET", path) == "Prefix"
    c = client(secure_broker.service_url_tls, pki, pulsar.AuthenticationToken(token("team")))
    clients.append(c)
    c.subscribe(topic, "team-orders").close()
    with pytest.raises(pulsar.AuthorizationError):
        c.subscribe(topic, "orders")
    root_admin.ok("POST", path, "None")
    c.subscribe(topic, "orders").close()


def test_unknown_method_gets_the_anonymous_role(pki: Pki) -> None:
    settings = secure_settings(pki, anonymousUserRole="anon", brokerServicePortTls=None, webServicePortTls=None)
    with BrokerThread(**settings) as b:
        admin = SecureAdmin.bearer(b.web_url, pki, SUPER_USER)
        admin.ok("POST", "/admin/v2/namespaces/public/default/permissions/anon", ["consume"])
        c = client(b.service_url, pki, pulsar.AuthenticationBasic("alice", USERS["alice"], "unknown-method"))
        c.subscribe("public/default/anon", "sub")  # anon may consume ...
        with pytest.raises(pulsar.AuthorizationError):
            c.create_producer("public/default/anon")  # ... not produce
        c.close()


# -- expiring credentials on a live connection ---------------------------------------------------------------

def refresh_broker(pki: Pki) -> BrokerThread:
    return BrokerThread(**secure_settings(pki, authenticationRefreshCheckSeconds=0.1, brokerServicePortTls=None,
                                          webServicePortTls=None))


def test_expiring_token_refreshed_by_the_client_keeps_the_connection(pki: Pki) -> None:
    with refresh_broker(pki) as b:
        # A supplier: the client asks it for the token at CONNECT and for every AUTH_CHALLENGE.
        c = client(b.service_url, pki, pulsar.AuthenticationToken(lambda: expiring_token(SUPER_USER, 1)))
        producer = c.create_producer("public/default/refresh")
        server = b.server
        wait_for(lambda: any(conn.cnx.auth.refreshes >= 1 for conn in list(server.connections)),
                 what="a refreshed connection")
        producer.send(b"still here")
        assert server.connections_created == 1 and server.connections_closed == 0
        c.close()


def test_expired_token_not_refreshed_closes_the_connection(pki: Pki) -> None:
    with refresh_broker(pki) as b:
        c = client(b.service_url, pki, pulsar.AuthenticationToken(expiring_token(SUPER_USER, 1)),
                   operation_timeout_seconds=REFUSED_TIMEOUT_S)
        producer = c.create_producer("public/default/expire", send_timeout_millis=1000)
        producer.send(b"before expiry")
        # The client answers the challenge with the same, now expired, token: the broker closes.
        wait_for(lambda: b.server.connections_closed >= 1, what="the expired connection to close")
        with pytest.raises(pulsar.Timeout):
            producer.send(b"after expiry")  # reconnecting with the expired token is refused
        c.close()


def test_refresh_with_another_role_closes_the_connection(pki: Pki) -> None:
    roles = iter([SUPER_USER] + ["intruder"] * 100)
    with refresh_broker(pki) as b:
        c = client(b.service_url, pki, pulsar.AuthenticationToken(lambda: expiring_token(next(roles), 1)),
                   operation_timeout_seconds=REFUSED_TIMEOUT_S)
        c.create_producer("public/default/role-change")
        wait_for(lambda: b.server.connections_closed >= 1, what="the connection to close on a role change")
        c.close()
