"""Ours and Apache Pulsar 4.0.7, each behind Apache Pulsar's own proxy, answer its clients alike.

A real Pulsar standalone and our broker get the same settings: the token provider with an HS256 secret, authorization
with ``admin`` the super user, ``proxy`` the proxy role (``proxyRoles``; not a super user: it is granted the namespace
``acme/ns`` only), ``authenticateOriginalAuthData=true`` and a refresh check every second. Each in turn gets the same
tenant, namespaces, topics and grants, then a real Pulsar proxy in front of it (org.apache.pulsar.proxy.server.
ProxyServiceStarter from `make pulsar-deps`, cluster/apache_pulsar.py ``start_proxy``) with the same proxy.conf: the
same token provider, ``forwardAuthorizationCredentials=true`` (the client's token goes to the broker as CONNECT's
original_auth_data), the proxy's own token as its broker client credentials. Then the same questions, all through the
proxy:

1. the official Python client: producing and consuming on a granted topic, a partitioned topic's partitions (a
   PARTITIONED_METADATA the proxy relays) and producing to it, a topic in a tenant the client has no grant on, a topic
   the client may use but the proxy may not, a bad token, no token: what each call returns or raises;
2. the binary protocol, raw: LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE, GET_SCHEMA on a lookup connection
   (the proxy asks the broker on its own connection, naming the client as original principal) and PRODUCER,
   SUBSCRIBE, GET_OR_CREATE_SCHEMA on a connection the proxy splices to the broker (proxy_to_broker_url), by roles
   with and without grants, the tenant's admin, the super user, and the proxy role itself; bytes that are no frame on
   a spliced connection;
3. admin REST through the proxy's HTTP port (it passes the client's own Authorization header on and adds
   X-Original-Principal, the role it authenticated): a few calls guarded by each of Pulsar's checks, by the super
   user, the tenant's admin, roles with and without grants, the proxy role, a bad token and none: the status, the
   kind of body and the JSON reason; then the same GETs straight to the broker as a proxy that authenticates with
   its own credentials sends them (its role, the client's in X-Original-Principal), for each client, for nobody,
   for another proxy, and from ``super-proxy`` (a proxy role that is a super user); ``proxy`` is the admin of tenant
   ``proxied``;
4. expiring client tokens (5 s): the broker challenges the connection, the proxy asks its client for fresh
   credentials and relays them: answered with a fresh token, an expired one, another role's, never; a client that
   declared no refresh support; the same on a lookup connection (where the proxy challenges on its own); the official
   client with a token supplier keeps producing on one connection across two expiries, and with a stale token its
   connection goes.

Everything in 4 with ``authenticateOriginalAuthData=false`` too, on a second pair: there a spliced connection is never
challenged (the broker watches the proxy's credentials, which do not expire).

``DIFFERENCES`` lists where ours answers otherwise on purpose, with the reason (each must still differ). Messages of
refusals are not compared (Pulsar's often carry a Java exception's text); they show in a failure's explanation.

The proxy is pulsar-proxy 4.0.6's jar on Pulsar 4.0.7's modules (4.0.7's is not served by the registry this project
reaches: bench/pulsar/pom.xml says why 4.0.7's can differ from it only in how two classes make the frame decoder).

Cost: two Pulsar standalone starts (each while ours answers), four proxy starts (5-60 s each), two rounds of token
expiries (~15 s each): about two minutes.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pytest

from broker.embedded import BrokerThread
from broker.protocol import pulsar_api_pb2 as pb
from cluster import apache_pulsar
from tests.admin.pulsar_answers import shape
from tests.needs import unavailable
from tests.security.conftest import SUPER_USER, expiring_token, token
from tests.security.pki import Pki
from tests.security.test_pulsar_auth_answers import _SCHEMA_UNCHECKED
from tests.security.test_pulsar_refresh_answers import (
    Session,
    across_expiries,
    answers_racing_the_close_left_out,
    auth_response,
    connect,
)
from tests.transactions.client import T
from tests.waiting import wait_for

pytestmark = [pytest.mark.apache_pulsar, pytest.mark.timeout(600)]

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
TOKEN_AUTH_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
PROXY_ROLE = "proxy"  # the proxy's own credentials; in proxyRoles, granted NS only
SUPER_PROXY = "super-proxy"  # another proxy role, a super user (straight to the broker only)
TENANT = "acme"
NS = f"{TENANT}/ns"  # granted to APP and to the proxy
CLOSED_NS = f"{TENANT}/closed"  # granted to APP, not to the proxy
TOPIC = f"persistent://{NS}/t"  # made with a STRING schema
PARTITIONED = f"persistent://{NS}/p"  # 3 partitions
TENANT_ADMIN = "acme-admin"
PROXIED_TOPIC = "persistent://proxied/ns/t"  # in a tenant whose admin is the proxy role
APP = "app"  # produce and consume on NS and CLOSED_NS
STRANGER = "stranger"  # authenticated, no grant anywhere
ROLES = (APP, STRANGER, TENANT_ADMIN, SUPER_USER)
REFRESH_CHECK_S = 1  # authenticationRefreshCheckSeconds on the brokers and the proxy
EXPIRES_S = 5.0  # an expiring token's life: CONNECT and the first requests are done well before it ends
WAIT_S = 10.0  # an answer that should come
CLOSE_WAIT_S = 8.0  # how long a connection is watched for more frames or a close (several refresh checks)
CHALLENGE_WAIT_S = 25.0  # after the expiry: a refresh check or a few on a busy machine (for a challenge that comes)
QUIET_WAIT_S = 8.0  # after the expiry, where none is to come (authenticateOriginalAuthData=false): several checks
OPERATION_TIMEOUT_S = 3  # the official client's, where it retries a refused CONNECT until then
Answers = dict[str, Any]


@dataclass(frozen=True)
class Behind:
    """A broker and the proxy in front of it: the ports the questions use."""

    broker_port: int
    broker_web_url: str
    proxy_port: int
    proxy_web_url: str

    @property
    def proxy_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.proxy_port}"

    @property
    def broker_address(self) -> str:
        """The broker as a spliced connection names it (CONNECT's proxy_to_broker_url, from a lookup's answer)."""
        return f"127.0.0.1:{self.broker_port}"

    def ports(self) -> list[int]:
        return [self.broker_port, self.proxy_port, *(int(u.rsplit(":", 1)[1])
                                                     for u in (self.broker_web_url, self.proxy_web_url))]


# -- setting both up -------------------------------------------------------------------------------------------------
def broker_settings(pki: Pki, authenticate_original: bool) -> dict[str, str]:
    """Pulsar's keys, the same for both brokers."""
    return {
        "authenticationEnabled": "true", "authenticationProviders": TOKEN_PROVIDER,
        "tokenSecretKey": f"file://{pki.secret_key}",
        "authorizationEnabled": "true", "superUserRoles": f"{SUPER_USER},{SUPER_PROXY}",
        "proxyRoles": f"{PROXY_ROLE},{SUPER_PROXY}",
        "authenticateOriginalAuthData": str(authenticate_original).lower(),
        "authenticationRefreshCheckSeconds": str(REFRESH_CHECK_S),
    }


def proxy_settings(pki: Pki, broker_port: int, broker_web_url: str) -> dict[str, str]:
    """The proxy.conf, the same in front of both (but for the broker it names). Authorization stays off at the proxy
    (it would need the brokers' metadata store): the brokers authorize."""
    return {
        "brokerServiceURL": f"pulsar://127.0.0.1:{broker_port}", "brokerWebServiceURL": broker_web_url,
        "authenticationEnabled": "true", "authenticationProviders": TOKEN_PROVIDER,
        "tokenSecretKey": f"file://{pki.secret_key}",
        "authenticationRefreshCheckSeconds": str(REFRESH_CHECK_S),
        "forwardAuthorizationCredentials": "true",
        "brokerClientAuthenticationPlugin": TOKEN_AUTH_PLUGIN,
        "brokerClientAuthenticationParameters": f"token:{token(PROXY_ROLE)}",
    }


@contextmanager
def proxy_in_front(workdir: Path, pki: Pki, broker_port: int, broker_web_url: str) -> Iterator[Behind]:
    proxy = apache_pulsar.start_proxy(workdir, proxy_settings(pki, broker_port, broker_web_url))
    try:
        yield Behind(broker_port, broker_web_url, proxy.port, proxy.web_url)
    finally:
        proxy.stop()


def ask_both(workdir: Path, pki: Pki, ask: Callable[[Behind], Answers],
             authenticate_original: bool) -> dict[str, Answers]:
    """``ask`` of our broker behind a proxy, then of a Pulsar 4.0.7 standalone behind one (started meanwhile: its JVM
    takes seconds): {"ours": ..., "pulsar": ...}. Skips (fails under CI=true) without Pulsar's jars."""
    why = apache_pulsar.missing_dependencies(proxy=True)
    if why is not None:
        unavailable(f"Apache Pulsar or its proxy unavailable: {why}")
    settings = broker_settings(pki, authenticate_original)
    pulsar_settings = "".join(f"{k}={v}\n" for k, v in settings.items()) + (
        f"brokerClientAuthenticationPlugin={TOKEN_AUTH_PLUGIN}\n"
        f"brokerClientAuthenticationParameters=token:{token(SUPER_USER)}\n")  # (its own admin client)
    out: dict[str, Answers] = {}
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(apache_pulsar.start_standalone, workdir / "pulsar", settings=pulsar_settings,
                               ready_headers=bearer(SUPER_USER))
        try:
            overrides: dict[str, Any] = {"managedLedgerStorage": "memory", **settings}
            with BrokerThread(data_dir=workdir / "ours", **overrides) as ours:
                setup(ours.web_url)
                with proxy_in_front(workdir / "ours-proxy", pki, ours.server.port, ours.web_url) as behind:
                    out["ours"] = ask(behind)
        except BaseException:
            with suppress(Exception):
                starting.result().stop()
            raise
    theirs = starting.result()
    try:
        setup(theirs.web_url)
        with proxy_in_front(workdir / "pulsar-proxy", pki, theirs.port, theirs.web_url) as behind:
            out["pulsar"] = ask(behind)
    finally:
        theirs.stop()
    return out


# -- HTTP --------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    text: str


def call(url: str, method: str, path: str, headers: dict[str, str] | None = None, body: Any = None) -> Reply:
    headers = dict(headers or {})
    if body is not None:
        headers["Content-Type"] = "application/json"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return Reply(r.status, r.headers.get("Content-Type", ""), r.read().decode(errors="replace"))
    except urllib.error.HTTPError as e:
        return Reply(e.code, e.headers.get("Content-Type", ""), e.read().decode(errors="replace"))


def bearer(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(role)}"}


def admin(web_url: str, method: str, path: str, body: Any = None) -> None:
    reply = call(web_url, method, path, bearer(SUPER_USER), body)
    assert reply.status < 300, (method, path, reply)


def setup(web_url: str) -> None:
    """Straight to the broker, as the super user."""
    admin(web_url, "PUT", f"/admin/v2/tenants/{TENANT}", {"adminRoles": [TENANT_ADMIN],
                                                          "allowedClusters": ["standalone"]})
    for ns in (NS, CLOSED_NS):
        admin(web_url, "PUT", f"/admin/v2/namespaces/{ns}")
        admin(web_url, "POST", f"/admin/v2/namespaces/{ns}/permissions/{APP}", ["produce", "consume"])
    admin(web_url, "POST", f"/admin/v2/namespaces/{NS}/permissions/{PROXY_ROLE}", ["produce", "consume"])
    admin(web_url, "PUT", f"/admin/v2/{TOPIC.replace('://', '/')}")
    admin(web_url, "POST", f"/admin/v2/schemas/{NS}/t/schema", {"type": "STRING", "schema": "", "properties": {}})
    admin(web_url, "PUT", f"/admin/v2/{PARTITIONED.replace('://', '/')}/partitions", 3)
    admin(web_url, "PUT", "/admin/v2/tenants/proxied", {"adminRoles": [PROXY_ROLE], "allowedClusters": ["standalone"]})
    admin(web_url, "PUT", "/admin/v2/namespaces/proxied/ns")
    admin(web_url, "PUT", f"/admin/v2/{PROXIED_TOPIC.replace('://', '/')}")


def summary(reply: Reply, behind: Behind) -> tuple[int, str, str | None]:
    """(status, the kind of body, the JSON reason with this run's ports made generic)."""
    if not reply.text.strip():
        return reply.status, "empty", None
    if reply.content_type.startswith("application/json"):
        try:
            value = json.loads(reply.text)
        except json.JSONDecodeError:
            return reply.status, "text said to be JSON", None
        if isinstance(value, dict) and reply.status >= 400:
            reason = value.get("reason")
            for port in behind.ports():
                reason = reason.replace(f":{port}", ":<port>") if isinstance(reason, str) else reason
            return reply.status, f"json {sorted(shape(value))}", reason
        return reply.status, f"json {type(value).__name__}", None
    if reply.content_type.startswith("text/html"):
        return reply.status, "html", None
    return reply.status, "text", None


T_ADMIN = f"/admin/v2/{TOPIC.replace('://', '/')}"


def http_calls(who: str) -> list[tuple[str, str, Any]]:
    """(method, path, body): a call or two guarded by each of Pulsar's checks (a namespace made by each caller has its
    own name)."""
    return [
        ("GET", "/admin/v2/tenants", None),  # super user or the tenants' operation
        ("GET", f"/admin/v2/tenants/{TENANT}", None),
        ("GET", "/admin/v2/clusters", None),  # no check
        ("GET", "/admin/v2/clusters/standalone", None),  # super user or the clusters' operation
        ("GET", "/admin/v2/clusters/standalone/namespaceIsolationPolicies", None),  # ... the cluster policy one
        ("GET", "/admin/v2/brokers/health", None),  # super user or the brokers' operation
        ("GET", "/admin/v2/broker-stats/topics", None),  # super user
        ("GET", f"/admin/v2/namespaces/{TENANT}", None),  # the tenant operation
        ("GET", "/admin/v2/namespaces/no-such-tenant", None),
        ("PUT", f"/admin/v2/namespaces/{TENANT}/by-{who.replace('_', '-')}", None),
        ("GET", f"/admin/v2/namespaces/{NS}/permissions", None),  # the namespace operation
        ("GET", f"/admin/v2/persistent/{NS}", None),
        ("GET", f"/admin/v2/namespaces/{NS}/retention", None),  # the namespace policy operation
        ("POST", f"/admin/v2/namespaces/{NS}/retention", {"retentionTimeInMinutes": 5, "retentionSizeInMB": 5}),
        ("GET", f"{T_ADMIN}/stats", None),  # the topic operation
        ("GET", f"/admin/v2/{PARTITIONED.replace('://', '/')}/partitions", None),
        ("GET", f"/lookup/v2/topic/{TOPIC.replace('://', '/')}", None),
        ("GET", f"/admin/v2/schemas/{NS}/t/schema", None),
        ("GET", f"{T_ADMIN}/permissions", None),  # the tenant's admins
        ("GET", f"/admin/v2/{PROXIED_TOPIC.replace('://', '/')}/permissions", None),
        ("GET", "/admin/v2/persistent/no-such-tenant/ns/t/permissions", None),
        ("GET", "/admin/v2/namespaces/no-such-tenant/ns/properties", None),
        ("GET", f"{T_ADMIN}/maxProducers", None),  # the topic policy operation
    ]


# Who calls through the proxy: name -> the Authorization header (None: none).
THROUGH_PROXY: dict[str, str | None] = {
    "anonymous": None, "bad_token": "Bearer not-a-jwt", "stranger": bearer(STRANGER)["Authorization"],
    "app": bearer(APP)["Authorization"], "tenant_admin": bearer(TENANT_ADMIN)["Authorization"],
    "super_user": bearer(SUPER_USER)["Authorization"],
    # the proxy role's own token through the proxy: the broker sees the proxy role naming itself
    "proxy_role": bearer(PROXY_ROLE)["Authorization"],
}
# Straight to the broker as a proxy that authenticates with its own credentials sends them (Pulsar's proxy does so
# with TLS to the broker and a client certificate): (role, X-Original-Principal).
AS_A_PROXY: dict[str, tuple[str, str | None]] = {
    "proxy for stranger": (PROXY_ROLE, STRANGER),
    "proxy for app": (PROXY_ROLE, APP),
    "proxy for tenant_admin": (PROXY_ROLE, TENANT_ADMIN),
    "proxy for super_user": (PROXY_ROLE, SUPER_USER),
    "proxy for nobody": (PROXY_ROLE, None),
    "proxy for itself": (PROXY_ROLE, PROXY_ROLE),
    "app for super_user": (APP, SUPER_USER),  # a role that is no proxy naming another
    "super proxy for stranger": (SUPER_PROXY, STRANGER),
    "super proxy for app": (SUPER_PROXY, APP),
    "super proxy for tenant_admin": (SUPER_PROXY, TENANT_ADMIN),
}


def call_key(who: str, method: str, path: str) -> str:
    return f"{who} {method} {path.replace(who.replace('_', '-'), '<who>')}"


def ask_http(behind: Behind) -> Answers:
    out: Answers = {}
    for who, authorization in THROUGH_PROXY.items():
        headers = {} if authorization is None else {"Authorization": authorization}
        for method, path, body in http_calls(who):
            out[call_key(who, method, path)] = summary(call(behind.proxy_web_url, method, path, headers, body), behind)
    for who, (role, original) in AS_A_PROXY.items():
        headers = bearer(role) | ({} if original is None else {"X-Original-Principal": original})
        for method, path, _ in http_calls(who):
            if method == "GET":
                out[f"{who} {method} {path}"] = summary(call(behind.broker_web_url, method, path, headers), behind)
    return out


# -- the official client ---------------------------------------------------------------------------------------------
def unique(ns: str, name: str) -> str:
    return f"persistent://{ns}/{name}-{uuid.uuid4().hex[:8]}"


def outcome_of(question: Callable[[], object]) -> tuple[str, ...]:
    """("ok", what it returned) or (the exception's class name,)."""
    try:
        return ("ok", str(question()))
    except Exception as exc:  # (the client's exception is the answer)
        return (type(exc).__name__,)


def produce_and_consume(client: pulsar.Client) -> str:
    name = unique(NS, "pc")
    consumer = client.subscribe(name, "sub")
    client.create_producer(name).send(b"hello")
    message = consumer.receive(int(WAIT_S * 1000))
    consumer.acknowledge(message)
    return str(message.data().decode())


CLIENT_QUESTIONS: dict[str, Callable[[pulsar.Client], object]] = {
    "produce and consume": produce_and_consume,
    "partitions of a partitioned topic": lambda c: len(c.get_topic_partitions(PARTITIONED)),
    "produce to a partitioned topic": lambda c: c.create_producer(PARTITIONED).send(b"x") is not None,
    "a topic in a tenant with no grant": lambda c: c.create_producer(unique("public/default", "x")).topic() != "",
    "a topic the proxy may not use": lambda c: c.create_producer(unique(CLOSED_NS, "x")).topic() != "",
}
# Who asks: name -> the token (None: no authentication). A refused CONNECT is retried until the operation timeout, so
# those two ask one question.
CLIENTS: dict[str, str | None] = {**{role: token(role) for role in ROLES}, "bad token": "not-a-jwt", "no token": None}


def ask_official_client(behind: Behind) -> Answers:
    def ask(who: str) -> Answers:
        credentials = CLIENTS[who]
        auth = None if credentials is None else pulsar.AuthenticationToken(credentials)
        questions = CLIENT_QUESTIONS if who in ROLES else {"produce and consume": produce_and_consume}
        client = pulsar.Client(behind.proxy_url, authentication=auth, operation_timeout_seconds=OPERATION_TIMEOUT_S)
        try:
            return {f"client {who}: {name}": outcome_of(lambda: question(client))  # noqa: B023
                    for name, question in questions.items()}
        finally:
            client.close()

    with ThreadPoolExecutor(len(CLIENTS)) as pool:  # (the refused ones wait for their timeout side by side)
        return {k: v for answers in pool.map(ask, CLIENTS) for k, v in answers.items()}


# -- the binary protocol, raw ----------------------------------------------------------------------------------------
def command(kind: int, field: str, **values: Any) -> tuple[pb.BaseCommand, Any]:
    cmd = pb.BaseCommand(type=kind)  # type: ignore[arg-type]
    body = getattr(cmd, field)
    for name, value in values.items():
        if isinstance(value, pb.Schema):
            getattr(body, name).CopyFrom(value)
        else:
            setattr(body, name, value)
    return cmd, body


Request = Callable[[], tuple[pb.BaseCommand, Any]]
# Asked on a lookup connection: the proxy asks the broker on a connection of its own for the client.
LOOKUP_REQUESTS: dict[str, Request] = {
    "lookup": lambda: command(T.LOOKUP, "lookupTopic", topic=TOPIC),
    "partitioned_metadata": lambda: command(T.PARTITIONED_METADATA, "partitionMetadata", topic=TOPIC),
    "topics_of_namespace": lambda: command(T.GET_TOPICS_OF_NAMESPACE, "getTopicsOfNamespace", namespace=NS),
    "get_schema": lambda: command(T.GET_SCHEMA, "getSchema", topic=TOPIC),
}
# Asked on a connection the proxy splices to the broker.
SPLICED_REQUESTS: dict[str, Request] = {
    "producer": lambda: command(T.PRODUCER, "producer", topic=TOPIC, producer_id=1),
    "subscribe": lambda: command(T.SUBSCRIBE, "subscribe", topic=TOPIC, subscription="sub", consumer_id=1,
                                 subType=pb.CommandSubscribe.Shared),
    "get_or_create_schema": lambda: command(T.GET_OR_CREATE_SCHEMA, "getOrCreateSchema", topic=TOPIC,
                                            schema=pb.Schema(name="s", schema_data=b"", type=pb.Schema.String)),
    "producer on a topic the proxy may not use": lambda: command(T.PRODUCER, "producer",
                                                                 topic=f"persistent://{CLOSED_NS}/t", producer_id=1),
}


def connect_through(behind: Behind, role: str, spliced: bool, expires: float | None = None,
                    refresh: bool = True) -> pb.BaseCommand:
    """CONNECT to the proxy with ``role``'s token (expiring ``expires`` s from now; None: never), for a spliced
    connection to the broker or a lookup connection."""
    cmd = connect(role, expires, refresh=refresh)
    if spliced:
        cmd.connect.proxy_to_broker_url = behind.broker_address
    return cmd


async def opened(behind: Behind, cmd: pb.BaseCommand) -> tuple[Session, list[str]]:
    """A session that sent ``cmd``; what came back unless it is CONNECTED (then nothing)."""
    session = await Session.open(behind.proxy_port)
    session.send(cmd)
    first = await session.seen()
    return session, [] if first == "CONNECTED" else [first, *await session.until_closed()]


async def ask_wire(behind: Behind, role: str, request: Request, spliced: bool) -> tuple[str, ...]:
    session, refused = await opened(behind, connect_through(behind, role, spliced))
    try:
        if refused:
            return ("at CONNECT", *refused)
        cmd, body = request()
        return (await session.request(cmd, body),)
    finally:
        await session.close()


async def not_a_frame(behind: Behind) -> tuple[str, ...]:
    """Bytes that are no frame (a length far past any limit) on a spliced connection; then a new one still serves."""
    session, refused = await opened(behind, connect_through(behind, APP, True))
    try:
        assert not refused, refused
        session.writer.write(b"\xff" * 16)
        seen = await session.until_closed()
    finally:
        await session.close()
    return (*seen, "then", *await ask_wire(behind, APP, SPLICED_REQUESTS["producer"], True))


async def ask_wire_all(behind: Behind) -> Answers:
    out: Answers = {}
    for role in (*ROLES, PROXY_ROLE):
        for name, request in LOOKUP_REQUESTS.items():
            out[f"wire {role} {name}"] = await ask_wire(behind, role, request, False)
        for name, request in SPLICED_REQUESTS.items():
            out[f"wire {role} {name}"] = await ask_wire(behind, role, request, True)
    out["wire bytes that are no frame on a spliced connection"] = await not_a_frame(behind)
    return out


# -- expiring tokens ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Expiry:
    """One case: the client's answer to a challenge (None: none), on a spliced connection or a lookup one."""

    answer: Callable[[], pb.BaseCommand] | None
    spliced: bool = True
    refresh: bool = True


EXPIRIES: dict[str, Expiry] = {
    "fresh token": Expiry(lambda: auth_response(token(APP).encode())),
    "expired token": Expiry(lambda: auth_response(token(APP, exp=1).encode())),
    "token of another role": Expiry(lambda: auth_response(token(STRANGER).encode())),
    "never answered": Expiry(None),
    "client without refresh support": Expiry(None, refresh=False),
    "lookup connection, fresh token": Expiry(lambda: auth_response(token(APP).encode()), spliced=False),
    "lookup connection, never answered": Expiry(None, spliced=False),
}


async def expire(behind: Behind, case: Expiry, watch_s: float) -> tuple[str, ...]:
    """CONNECT with a token that expires in EXPIRES_S, a PRODUCER (spliced) or a LOOKUP; then what comes within
    ``watch_s``: if a challenge, ``case.answer`` to it and the same request again; then every frame until a close."""
    session, refused = await opened(behind, connect_through(behind, APP, case.spliced, EXPIRES_S, case.refresh))
    ids = iter(range(1, 100))

    async def ask() -> str:
        if case.spliced:
            return await session.request(*command(T.PRODUCER, "producer", topic=TOPIC, producer_id=next(ids)))
        return await session.lookup(TOPIC)

    try:
        if refused:
            return ("at CONNECT", *refused)
        seen = [await ask(), await session.seen(watch_s)]
        if seen[-1].startswith("AUTH_CHALLENGE") and case.answer is not None:
            session.send(case.answer())
            seen.append(await ask())
        if seen[-1] not in ("closed", "nothing"):  # (after "nothing" it has been watched long enough)
            seen += await session.until_closed(CLOSE_WAIT_S)
        return tuple(seen)
    finally:
        await session.close()


def publisher(behind: Behind, name: str) -> tuple[str, str] | None:
    """The topic's one producer's (address, connectedSince) from the broker's admin stats; None when it has none."""
    reply = call(behind.broker_web_url, "GET", f"/admin/v2/persistent/{name.removeprefix('persistent://')}/stats",
                 bearer(SUPER_USER))
    assert reply.status == 200, reply
    publishers = json.loads(reply.text)["publishers"]
    assert len(publishers) <= 1, publishers
    return (publishers[0]["address"], publishers[0]["connectedSince"]) if publishers else None


def official_client_refreshing(behind: Behind, watch_s: float) -> tuple[str, ...]:
    """``across_expiries`` through the proxy, two expiries."""
    return across_expiries(behind.proxy_url, APP, unique(NS, "refreshing"), 2, watch_s,
                           lambda name: publisher(behind, name))


def official_client_stale(behind: Behind, watch_s: float) -> tuple[str, ...]:
    """pulsar-client whose token expires and is never renewed (the supplier gives the same one): whether its
    producer's connection goes within ``watch_s`` of the expiry, and what a send then gets."""
    stale = expiring_token(APP, EXPIRES_S)
    name = unique(NS, "stale")
    client = pulsar.Client(behind.proxy_url, authentication=pulsar.AuthenticationToken(lambda: stale),
                           operation_timeout_seconds=OPERATION_TIMEOUT_S)
    try:
        producer = client.create_producer(name, send_timeout_millis=OPERATION_TIMEOUT_S * 1000)
        producer.send(b"0")
        since = publisher(behind, name)
        try:
            wait_for(lambda: publisher(behind, name) != since, EXPIRES_S + watch_s, "the producer's connection gone")
            went = "its connection went"
        except AssertionError:
            went = "its connection stayed"
        return (went, f"a send then: {outcome_of(lambda: producer.send(b'1') is not None)[0]}")
    finally:
        client.close()


def ask_expiries(behind: Behind, watch_s: float) -> Answers:
    """Every case at once: one expiry's wait serves them all. ``watch_s``: how long a challenge (or a close) is
    waited for after the expiry."""
    async def run() -> Answers:
        names = list(EXPIRIES)
        results = await asyncio.gather(
            *(expire(behind, EXPIRIES[n], EXPIRES_S + watch_s) for n in names),
            asyncio.to_thread(official_client_refreshing, behind, EXPIRES_S + watch_s),
            asyncio.to_thread(official_client_stale, behind, watch_s), return_exceptions=True)
        keys = [f"expiry {n}" for n in names] + ["expiry official client with a token supplier",
                                                  "expiry official client with a stale token"]
        return {k: (f"failed: {r!r}",) if isinstance(r, BaseException) else r
                for k, r in zip(keys, results, strict=True)}
    return asyncio.run(run())


# -- every question ----------------------------------------------------------------------------------------------------
def ask_everything(behind: Behind) -> Answers:
    out = ask_official_client(behind)
    out.update(asyncio.run(ask_wire_all(behind)))
    out.update(ask_http(behind))
    out.update(ask_expiries(behind, CHALLENGE_WAIT_S))
    return out


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> dict[str, Answers]:
    return ask_both(tmp_path_factory.mktemp("pulsar-proxy"), pki, ask_everything, authenticate_original=True)


@pytest.fixture(scope="module")
def trusting_answers(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> dict[str, Answers]:
    """authenticateOriginalAuthData=false: the brokers take the original principal the proxy names."""
    return ask_both(tmp_path_factory.mktemp("pulsar-proxy-trusting"), pki,
                    lambda behind: ask_expiries(behind, QUIET_WAIT_S), authenticate_original=False)


# Where ours answers otherwise on purpose: key -> why.
DIFFERENCES: dict[str, str] = {
    f"wire {STRANGER} get_schema": _SCHEMA_UNCHECKED,
    f"wire {STRANGER} get_or_create_schema": _SCHEMA_UNCHECKED,
    # Pulsar labels its plain "ok" application/json, which it is not; ours says text/plain (as in
    # tests/security/test_pulsar_auth_answers.py).
    "super_user GET /admin/v2/brokers/health": "Pulsar's content type is not the body's",
}

CLIENT_KEYS = [f"client {who}: {q}" for who in CLIENTS
               for q in (CLIENT_QUESTIONS if who in ROLES else ["produce and consume"])]
WIRE_KEYS = [f"wire {role} {name}" for role in (*ROLES, PROXY_ROLE) for name in (*LOOKUP_REQUESTS, *SPLICED_REQUESTS)]
WIRE_KEYS.append("wire bytes that are no frame on a spliced connection")
HTTP_KEYS = list(dict.fromkeys(
    [call_key(who, m, p) for who in THROUGH_PROXY for m, p, _ in http_calls(who)]
    + [f"{who} {m} {p}" for who in AS_A_PROXY for m, p, _ in http_calls(who) if m == "GET"]))
EXPIRY_KEYS = [f"expiry {n}" for n in EXPIRIES] + ["expiry official client with a token supplier",
                                                    "expiry official client with a stale token"]
# Where Pulsar's answer is a page of its web server (the proxy's 401 for missing or bad credentials, Jetty's HTML),
# ours is compared on the status alone (tests/security/test_pulsar_auth_answers.py's SERVER_PAGES).
SERVER_PAGES = ("html", "empty")


def refusal_before_close_left_out(answer: Any) -> Any:
    """An expiry case's frames without a refusal right before the close: an ERROR AuthenticationError there, and what
    raced with the close after it (answers_racing_the_close_left_out). Both brokers answer a refused refresh so
    (Pulsar's ServerCnx.authenticationFailed: the ERROR, then the close); whether that ERROR reaches the client before
    the proxy closes the client's connection is a race in the proxy (a CI run saw it dropped behind Pulsar and kept
    behind ours, other runs kept it behind both), as is an answer to a request sent after the refused token (a CI run
    saw Pulsar's PRODUCER_SUCCESS after the ERROR). The brokers' own frames, ERROR included, are compared without a
    proxy in tests/security/test_pulsar_refresh_answers.py."""
    if not isinstance(answer, tuple):
        return answer
    frames = answers_racing_the_close_left_out(answer)
    if frames[-2:] == ("ERROR AuthenticationError", "closed"):
        frames = (*frames[:-2], "closed")
    return frames


def compare(ours: Any, theirs: Any, key: str) -> None:
    if key in EXPIRY_KEYS:
        ours, theirs = refusal_before_close_left_out(ours), refusal_before_close_left_out(theirs)
    if key in DIFFERENCES:
        assert ours != theirs, f"ours now answers as Pulsar: {ours}; remove it from DIFFERENCES"
        return
    if isinstance(theirs, tuple) and len(theirs) == 3 and theirs[1] in SERVER_PAGES and theirs[0] >= 400:
        assert ours[0] == theirs[0], f"status: ours {ours}; Pulsar's {theirs}"
        assert ours[1] in (*SERVER_PAGES, "json ['.reason']"), ours
        return
    assert ours == theirs, f"ours {ours}; Pulsar's {theirs}"


@pytest.mark.parametrize("key", CLIENT_KEYS + WIRE_KEYS + HTTP_KEYS + EXPIRY_KEYS)
def test_answer_behind_the_proxy_is_pulsars(answers: dict[str, Answers], key: str) -> None:
    compare(answers["ours"][key], answers["pulsar"][key], key)


@pytest.mark.parametrize("key", EXPIRY_KEYS)
def test_expiry_answer_without_authenticating_the_original_is_pulsars(trusting_answers: dict[str, Answers],
                                                                      key: str) -> None:
    compare(trusting_answers["ours"][key], trusting_answers["pulsar"][key], key)


def test_the_comparison_saw_refusals_successes_and_challenges(answers: dict[str, Answers],
                                                              trusting_answers: dict[str, Answers]) -> None:
    """Pulsar's side was really behind a proxy under authentication and authorization, and its tokens expired (a
    misconfigured run that lets everyone in, or no one, or never challenges, would compare little)."""
    theirs = answers["pulsar"]
    assert theirs[f"client {APP}: produce and consume"] == ("ok", "hello")
    assert theirs[f"client {STRANGER}: produce and consume"] == ("AuthorizationError",)
    assert theirs["client bad token: produce and consume"] == ("Timeout",)
    assert theirs[f"wire {APP} producer"] == ("PRODUCER_SUCCESS",)
    assert theirs[f"wire {APP} producer on a topic the proxy may not use"] == ("ERROR AuthorizationError",)
    assert theirs["super_user GET /admin/v2/tenants"][0] == 200
    assert theirs["stranger GET /admin/v2/tenants"][0] == 401
    assert theirs["expiry never answered"][-2:] == ("AUTH_CHALLENGE method=token data=PulsarAuthRefresh "
                                                   "protocol_version=20 server=(none)", "closed")
    assert trusting_answers["pulsar"]["expiry never answered"][1] == "nothing"
