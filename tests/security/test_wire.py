"""The binary protocol side of authentication and authorization, frame by frame (no pulsar-client):
what a refused CONNECT looks like, AUTH_CHALLENGE / AUTH_RESPONSE on expiry, and the response
type each refused request gets (PROTOCOL.md section 0.3)."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator

import pytest

from broker.embedded import Broker
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.frames import FrameDecoder
from tests.component.wire import WAIT_S, T, WireClient, producer_cmd
from tests.security.conftest import SUPER_USER, expires_in, secure_settings, token
from tests.security.pki import CLIENT_ROLE, Pki
from tests.waiting import eventually

E = pb.ServerError


def connect_cmd(method: str | None = None, data: bytes | None = None, refresh: bool = True) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.CONNECT)
    cmd.connect.client_version = "wire-test"
    cmd.connect.protocol_version = 20
    cmd.connect.feature_flags.supports_auth_refresh = refresh
    if method is not None:
        cmd.connect.auth_method_name = method
    if data is not None:
        cmd.connect.auth_data = data
    return cmd


def auth_response(data: bytes) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.AUTH_RESPONSE)
    cmd.authResponse.client_version = "wire-test"
    cmd.authResponse.response.auth_method_name = "token"
    cmd.authResponse.response.auth_data = data
    return cmd


async def connected(port: int, method: str, data: bytes, refresh: bool = True) -> WireClient:
    c = await WireClient.open(port)
    c.send(connect_cmd(method, data, refresh))
    assert (await c.recv()).type == T.CONNECTED
    return c


async def refused(c: WireClient) -> pb.CommandError:
    """The ERROR the broker sends before closing a connection whose credentials it refused."""
    reply = await c.recv()
    assert reply.type == T.ERROR and reply.error.error == E.AuthenticationError
    assert await c.closed_by_broker()
    return reply.error


@pytest.fixture
async def broker(pki: Pki) -> AsyncIterator[Broker]:
    settings = secure_settings(pki, authenticationRefreshCheckSeconds=0.05, webServicePortTls=None)
    async with Broker(**settings) as b:
        yield b


def port(b: Broker, tls: bool = False) -> int:
    assert b.server is not None
    return b.server.tls_port if tls else b.server.port


async def test_refused_connect_says_why_then_closes(broker: Broker) -> None:
    cases: list[tuple[pb.BaseCommand, str]] = [
        (connect_cmd("token", token(SUPER_USER, b"x" * 32).encode()), "Signature verification failed"),
        (connect_cmd("token", token(SUPER_USER, exp=int(time.time()) - 5).encode()), "expired"),
        (connect_cmd("token", b""), "Blank token"),
        (connect_cmd("basic", b"alice:wrong"), "Unknown user or invalid password"),
        (connect_cmd("basic", b"mallory:whatever"), "Unknown user or invalid password"),
        (connect_cmd("tls"), "TLS certificate"),  # plain port: no certificate
        (connect_cmd(), "No anonymous role"),  # auth_method_name absent = "none"
        (connect_cmd("athenz", b"x"), "No anonymous role"),
    ]
    for cmd, reason in cases:
        c = await WireClient.open(port(broker))
        c.send(cmd)
        error = await refused(c)
        assert error.request_id == (1 << 64) - 1 and reason in error.message, error.message
        c.close()


async def test_secrets_never_reach_the_log(broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    secret_token = token(SUPER_USER, b"y" * 32)
    for cmd in (connect_cmd("token", secret_token.encode()), connect_cmd("basic", b"alice:hunter2-secret")):
        c = await WireClient.open(port(broker))
        c.send(cmd)
        await refused(c)
        c.close()
    assert "authentication failed" in caplog.text
    assert secret_token not in caplog.text and secret_token.split(".")[2] not in caplog.text
    assert "hunter2" not in caplog.text


async def test_expired_credentials_are_challenged_and_refreshed(broker: Broker) -> None:
    c = await connected(port(broker), "token", token(SUPER_USER, exp=expires_in(1)).encode())
    challenge = await c.recv()  # within about a second: at the first check after expiry
    assert challenge.type == T.AUTH_CHALLENGE
    assert challenge.authChallenge.challenge.auth_method_name == "token"
    assert challenge.authChallenge.challenge.auth_data == b"PulsarAuthRefresh"
    c.send(auth_response(token(SUPER_USER, exp=expires_in(1)).encode()))
    # Refreshed: the connection keeps working, and the new token is challenged when it expires.
    c.send(producer_cmd("public/default/refresh"))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    assert (await c.recv()).type == T.AUTH_CHALLENGE
    c.send(auth_response(token("somebody-else").encode()))
    await closed_without_a_word(c)  # (as Pulsar: no ERROR for a role change, unlike refused credentials)


async def closed_without_a_word(c: WireClient) -> None:
    """The broker closes the connection without sending anything first (no ERROR)."""
    with pytest.raises(ConnectionError, match="closed by broker"):
        frame = await c.recv()
        pytest.fail(f"expected the connection to close, got {frame.type}")
    c.close()


def malformed_auth_responses() -> list[pb.BaseCommand]:
    no_method, no_data = auth_response(token(SUPER_USER).encode()), auth_response(b"")
    no_method.authResponse.response.ClearField("auth_method_name")
    no_data.authResponse.response.ClearField("auth_data")
    return [no_method, no_data, pb.BaseCommand(type=T.AUTH_RESPONSE, authResponse=pb.CommandAuthResponse())]


@pytest.mark.parametrize("index", range(3), ids=["no method name", "no auth data", "no response"])
async def test_auth_response_without_credentials_or_method_closes_without_error(broker: Broker, index: int) -> None:
    """Pulsar's handleAuthResponse requires both fields: without one, the connection closes (its precondition fails,
    no ERROR), even with valid credentials; a method's name other than the connection's is not checked."""
    c = await connected(port(broker), "token", token(SUPER_USER, exp=expires_in(1)).encode())
    assert (await c.recv()).type == T.AUTH_CHALLENGE
    c.send(malformed_auth_responses()[index])
    await closed_without_a_word(c)


async def test_auth_response_under_another_method_name_is_taken(broker: Broker) -> None:
    c = await connected(port(broker), "token", token(SUPER_USER, exp=expires_in(1)).encode())
    assert (await c.recv()).type == T.AUTH_CHALLENGE
    answer = auth_response(token(SUPER_USER).encode())
    answer.authResponse.response.auth_method_name = "basic"  # (Pulsar also hands it to the connection's provider)
    c.send(answer)
    c.send(producer_cmd("public/default/another-method"))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    c.close()


async def test_unanswered_challenge_closes(broker: Broker) -> None:
    c = await connected(port(broker), "token", token(SUPER_USER, exp=expires_in(1)).encode())
    assert (await c.recv()).type == T.AUTH_CHALLENGE
    assert await c.closed_by_broker()  # at the next check, still expired and unanswered


async def test_client_without_refresh_support_is_closed_at_expiry(broker: Broker) -> None:
    c = await connected(port(broker), "token", token(SUPER_USER, exp=expires_in(1)).encode(), refresh=False)
    assert await c.closed_by_broker()


async def test_non_expiring_credentials_are_never_challenged(broker: Broker) -> None:
    assert broker.server is not None
    checks = broker.server._auth_refresh
    assert checks is not None
    c = await connected(port(broker), "basic", b"alice:alice-password")
    seen = checks.runs
    # two refresh checks while connected (they run every 50 ms)
    await eventually(lambda: checks.runs >= seen + 2, "two runs of the refresh check", interval=0.01)
    c.send(pb.BaseCommand(type=T.PING, ping=pb.CommandPing()))
    assert (await c.recv()).type == T.PONG  # not a challenge, not closed
    c.close()


async def test_each_refused_request_gets_its_own_response_type(broker: Broker) -> None:
    c = await connected(port(broker), "token", token("stranger").encode())
    topic = "persistent://public/default/private"
    lookup = pb.BaseCommand(type=T.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic=topic, request_id=1))
    c.send(lookup)
    r = (await c.recv()).lookupTopicResponse
    assert r.response == pb.CommandLookupTopicResponse.Failed and r.error == E.AuthorizationError
    meta = pb.BaseCommand(type=T.PARTITIONED_METADATA,
                          partitionMetadata=pb.CommandPartitionedTopicMetadata(topic=topic, request_id=2))
    c.send(meta)
    m = (await c.recv()).partitionMetadataResponse
    assert m.response == pb.CommandPartitionedTopicMetadataResponse.Failed and m.error == E.AuthorizationError
    c.send(producer_cmd(topic, producer_id=1, request_id=3))
    e = (await c.recv()).error
    assert (e.request_id, e.error) == (3, E.AuthorizationError) and "stranger" in e.message
    sub = pb.BaseCommand(type=T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic=topic, subscription="s", subType=pb.CommandSubscribe.Exclusive, consumer_id=1, request_id=4))
    c.send(sub)
    e = (await c.recv()).error
    assert (e.request_id, e.error) == (4, E.AuthorizationError)
    topics = pb.BaseCommand(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=pb.CommandGetTopicsOfNamespace(
        request_id=5, namespace="public/default"))
    c.send(topics)
    e = (await c.recv()).error
    assert (e.request_id, e.error) == (5, E.AuthorizationError)
    c.close()


async def open_tls(b: Broker, pki: Pki, cert: bool) -> WireClient:
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    if cert:
        ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    r, w = await asyncio.wait_for(asyncio.open_connection("localhost", port(b, tls=True), ssl=ctx), WAIT_S)
    return WireClient(r, w)


async def test_tls_method_uses_the_verified_certificate(broker: Broker, pki: Pki) -> None:
    assert broker.server is not None
    broker.server.config.superUserRoles = [CLIENT_ROLE]  # (as a dynamic configuration change sets it)
    c = await open_tls(broker, pki, cert=True)
    c.send(connect_cmd("tls"))
    assert (await c.recv()).type == T.CONNECTED
    assert [conn.cnx.auth.role for conn in broker.server.connections] == [CLIENT_ROLE]
    c.close()
    c = await open_tls(broker, pki, cert=False)  # asked for, not required: the handshake succeeds
    c.send(connect_cmd("tls"))
    await refused(c)
    c.close()


async def test_lookup_answers_both_urls(broker: Broker, pki: Pki) -> None:
    assert broker.server is not None
    c = await open_tls(broker, pki, cert=False)
    c.send(connect_cmd("token", token(SUPER_USER).encode()))
    assert (await c.recv()).type == T.CONNECTED
    c.send(pb.BaseCommand(type=T.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic="public/default/x", request_id=1)))
    r = (await c.recv()).lookupTopicResponse
    assert r.response == pb.CommandLookupTopicResponse.Connect
    assert r.brokerServiceUrl == f"pulsar://127.0.0.1:{broker.server.port}"
    assert r.brokerServiceUrlTls == f"pulsar+ssl://127.0.0.1:{broker.server.tls_port}"
    c.close()


def test_auth_challenge_frame() -> None:
    decoder = FrameDecoder(1 << 20)
    decoder.feed(commands.auth_challenge("token", b"PulsarAuthRefresh", 20))
    decoder.feed(commands.auth_challenge("token", b"PulsarAuthRefresh", 20, server_version="Pulsar Server x"))
    frames = [decoder.next_frame(), decoder.next_frame()]
    assert all(f is not None and f.command.type == T.AUTH_CHALLENGE for f in frames)
    c = [f.command.authChallenge for f in frames if f is not None]
    assert (c[0].challenge.auth_method_name, c[0].challenge.auth_data, c[0].protocol_version) == \
        ("token", b"PulsarAuthRefresh", 20)
    assert not c[0].HasField("server_version")  # (as Pulsar's broker sends it)
    assert c[1].server_version == "Pulsar Server x"


# -- connections from a proxy (proxyRoles, original principal) ----------------------------------------------

def proxied(role: str, original: str | None = None, original_token: str | None = None) -> pb.BaseCommand:
    """CONNECT as a proxy would send it: its own token, and the client it speaks for."""
    cmd = connect_cmd("token", token(role).encode())
    if original is not None:
        cmd.connect.original_principal = original
    if original_token is not None:
        cmd.connect.original_auth_method = "token"
        cmd.connect.original_auth_data = original_token
    return cmd


async def grant(b: Broker, topic_ns: str, role: str, actions: list[str]) -> None:
    assert b.server is not None
    await b.server.service.metadata.grant_namespace_permission(topic_ns, role, actions)


@pytest.mark.parametrize("authenticate_original", [False, True])
async def test_proxy_roles(pki: Pki, authenticate_original: bool) -> None:
    settings = secure_settings(pki, webServicePortTls=None, proxyRoles="proxy",
                               authenticateOriginalAuthData=authenticate_original)
    async with Broker(**settings) as b:
        await grant(b, "public/default", "proxy", ["produce", "consume"])
        await grant(b, "public/default", "alice", ["produce"])

        async def produce_as(cmd: pb.BaseCommand) -> pb.BaseCommand:
            c = await WireClient.open(port(b))
            c.send(cmd)
            assert (await c.recv()).type == T.CONNECTED
            c.send(producer_cmd("public/default/proxied"))
            reply = await c.recv()
            c.close()
            return reply

        # The proxy speaks for alice: both are allowed to produce.
        alice = proxied("proxy", "alice", token("alice") if authenticate_original else None)
        assert (await produce_as(alice)).type == T.PRODUCER_SUCCESS
        # For mallory, who has no grant: refused, although the proxy may produce.
        mallory = proxied("proxy", "mallory", token("mallory") if authenticate_original else None)
        reply = await produce_as(mallory)
        assert reply.type == T.ERROR and reply.error.error == E.AuthorizationError
        # Listing the namespace's topics for mallory: the refusal names both (the proxy is not the one refused).
        c = await WireClient.open(port(b))
        c.send(mallory)
        assert (await c.recv()).type == T.CONNECTED
        c.send(pb.BaseCommand(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=pb.CommandGetTopicsOfNamespace(
            request_id=9, namespace="public/default")))
        e = (await c.recv()).error
        assert (e.request_id, e.error) == (9, E.AuthorizationError)
        assert e.message.startswith("Role 'proxy' acting for 'mallory' is not authorized"), e.message
        c.close()
        if authenticate_original:
            # The relayed credentials decide, not the name the proxy gives.
            lie = proxied("proxy", SUPER_USER, token("mallory"))
            reply = await produce_as(lie)
            assert reply.type == T.ERROR and reply.error.error == E.AuthorizationError
        # Combinations Pulsar refuses at CONNECT: "Invalid roles.", then the connection closes.
        def relayed(name: str) -> str | None:
            return token(name) if authenticate_original else None

        refused_pairs = (proxied("proxy"), proxied("proxy", "proxy", relayed("proxy")),
                         proxied("alice", "bob", relayed("bob")))
        for cmd in refused_pairs:
            c = await WireClient.open(port(b))
            c.send(cmd)
            reply = await c.recv()
            assert reply.type == T.ERROR and reply.error.error == E.AuthorizationError
            assert reply.error.message == "Invalid roles."
            assert await c.closed_by_broker()
            c.close()


async def test_proxied_client_credentials_are_the_ones_refreshed(pki: Pki) -> None:
    """authenticateOriginalAuthData: the proxy's own token does not expire, its client's does. The client's is
    challenged (as Pulsar's ServerCnx does with its originalAuthState) and the proxy answers with the client's
    fresh token; an answer for another principal, the proxy's own included, closes the connection."""
    settings = secure_settings(pki, webServicePortTls=None, proxyRoles="proxy", authenticateOriginalAuthData=True,
                               authenticationRefreshCheckSeconds=0.05)
    async with Broker(**settings) as b:
        await grant(b, "public/default", "proxy", ["produce"])
        await grant(b, "public/default", "alice", ["produce"])
        c = await WireClient.open(port(b))
        c.send(proxied("proxy", "alice", token("alice", exp=expires_in(1))))
        assert (await c.recv()).type == T.CONNECTED
        assert (await c.recv()).type == T.AUTH_CHALLENGE  # at the first check after alice's token expired
        c.send(auth_response(token("alice", exp=expires_in(1)).encode()))
        c.send(producer_cmd("public/default/proxied-refresh"))
        assert (await c.recv()).type == T.PRODUCER_SUCCESS
        assert (await c.recv()).type == T.AUTH_CHALLENGE  # alice's new token expired too
        c.send(auth_response(token("proxy").encode()))
        await closed_without_a_word(c)


async def test_proxy_without_relayed_credentials_is_closed_when_its_own_expire(pki: Pki) -> None:
    """Without authenticateOriginalAuthData the client behind the proxy cannot be re-checked: Pulsar closes the
    connection when the proxy's credentials expire rather than refresh the proxy's alone."""
    settings = secure_settings(pki, webServicePortTls=None, proxyRoles="proxy", authenticationRefreshCheckSeconds=0.05)
    async with Broker(**settings) as b:
        c = await WireClient.open(port(b))
        cmd = connect_cmd("token", token("proxy", exp=expires_in(1)).encode())
        cmd.connect.original_principal = "alice"
        c.send(cmd)
        assert (await c.recv()).type == T.CONNECTED
        with pytest.raises(ConnectionError, match="closed by broker"):  # with no AUTH_CHALLENGE first
            frame = await c.recv()
            pytest.fail(f"expected the connection to close, got {frame.type}")
        c.close()
