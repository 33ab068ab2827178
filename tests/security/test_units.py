"""broker.auth without sockets: configuration, each provider, the connection auth state machine,
authorization rules, the HTTP access table, TLS settings."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from broker.admin.common import json_errors
from broker.auth import Security
from broker.auth.authorization import NAMESPACE_CONSUME, NAMESPACE_LOOKUP, AuthorizationService, TopicOperation
from broker.auth.http import ACCESS_RULES, Access, Order, access_for, check_deferred, security_middleware, skip_deferred
from broker.auth.providers import AuthData, BasicProvider, TlsProvider, TokenProvider, common_name, read_key_material
from broker.auth.service import AuthenticationService, ConnectionAuth, PrincipalChanged, RefreshAction
from broker.auth.tls import iana_name, server_context
from broker.config import BrokerConfig, ConfigError
from broker.errors import AuthenticationError, AuthorizationError
from broker.metadata.store import BrokerMetadata, TenantInfo
from broker.protocol import pulsar_api_pb2 as pb
from broker.server import BrokerServer
from broker.topic_name import TopicName
from metadata_store.memory import MemoryMetadataStore
from tests.security.conftest import secure_settings, token
from tests.security.pki import CLIENT_ROLE, HS256_SECRET, USERS, Pki

PULSAR = "org.apache.pulsar.broker.authentication."


def cfg(**kw: Any) -> BrokerConfig:
    c = BrokerConfig(managedLedgerStorage="memory", dataDir="")
    for key, value in kw.items():
        c.set(key, value)
    return c


def cmd_data(value: str | bytes) -> AuthData:
    return AuthData(command_data=value.encode() if isinstance(value, str) else value)


# -- configuration ------------------------------------------------------------------------------------

def test_config_reads_pulsar_values(tmp_path: Path) -> None:
    conf = tmp_path / "standalone.conf"
    conf.write_text("brokerServicePort=\nbrokerServicePortTls=6651\nwebServicePortTls=\n"
                    f"authenticationProviders={PULSAR}AuthenticationProviderToken, basic\n"
                    "superUserRoles=admin,ops\ntokenSecretKey=data:;base64,c2VjcmV0\n"
                    "tlsProtocols=TLSv1.3,TLSv1.2\n")
    c = BrokerConfig.load(conf)
    assert c.brokerServicePort is None and c.brokerServicePortTls == 6651 and c.webServicePortTls is None
    assert c.authenticationProviders == [f"{PULSAR}AuthenticationProviderToken", "basic"]
    assert c.superUserRoles == ["admin", "ops"] and c.tlsProtocols == ["TLSv1.3", "TLSv1.2"]
    assert "c2VjcmV0" not in repr(c)  # secrets stay out of reprs (and so out of logs)


def test_read_key_material_forms(tmp_path: Path) -> None:
    (tmp_path / "k").write_bytes(b"raw-key")
    assert read_key_material(f"file://{tmp_path}/k", "k") == b"raw-key"
    assert read_key_material(str(tmp_path / "k"), "k") == b"raw-key"
    assert read_key_material("data:;base64," + base64.b64encode(b"\x00\x01").decode(), "k") == b"\x00\x01"
    assert read_key_material("data:,plain%20text", "k") == b"plain text"
    assert read_key_material(base64.b64encode(b"inline").decode(), "k") == b"inline"
    with pytest.raises(ConfigError) as err:
        read_key_material("not base64 and not a file!", "tokenSecretKey")
    assert "tokenSecretKey" in str(err.value) and "not base64" not in str(err.value)


def test_security_refuses_unusable_settings(pki: Pki) -> None:
    store = BrokerMetadata("standalone")  # (not started: Security reads it only when asked)
    with pytest.raises(ConfigError, match="Athenz"):
        Security(cfg(authenticationEnabled=True, authenticationProviders=f"{PULSAR}AuthenticationProviderAthenz"),
                 store)
    with pytest.raises(ConfigError, match="needs authenticationEnabled"):
        Security(cfg(authorizationEnabled=True), store)
    with pytest.raises(ConfigError, match="tlsCertificateFilePath"):
        Security(cfg(brokerServicePortTls=0), store)
    with pytest.raises(ConfigError, match="cannot load"):
        Security(cfg(brokerServicePortTls=0, tlsCertificateFilePath="/nonexistent", tlsKeyFilePath="/nonexistent"),
                 store)
    with pytest.raises(ConfigError, match="256"):
        TokenProvider(cfg(tokenSecretKey="data:,short"))
    with pytest.raises(ConfigError, match="tokenSecretKey or tokenPublicKey"):
        TokenProvider(cfg())
    with pytest.raises(ConfigError, match="does not match"):
        TokenProvider(cfg(tokenPublicKey=str(pki.ec_public_pem), tokenPublicAlg="RS256"))
    with pytest.raises(ConfigError, match="tokenAudience"):
        TokenProvider(cfg(tokenSecretKey=f"file://{pki.secret_key}", tokenAudienceClaim="aud"))
    with pytest.raises(ConfigError, match="basicAuthConf"):
        BasicProvider(cfg())
    with pytest.raises(ConfigError, match="authenticationRefreshCheckSeconds"):
        Security(cfg(authenticationEnabled=True, authenticationProviders="token", tokenSecretKey=str(pki.secret_key),
                     authenticationRefreshCheckSeconds=0), store)


async def test_broker_with_only_tls_listeners(pki: Pki) -> None:
    c = cfg(**secure_settings(pki, brokerServicePort=None, webServicePort=None, bindAddress="127.0.0.1"))
    server = BrokerServer(c)
    await server.start()
    try:
        assert server.port == 0 and server.web_port == 0
        assert server.service_url == server.service_url_tls.replace("127.0.0.1", server.advertised_host)
        assert server.service_url.startswith("pulsar+ssl://") and server.web_url.startswith("https://")
    finally:
        await server.stop()


# -- providers ---------------------------------------------------------------------------------------------

@pytest.fixture
def token_provider(pki: Pki) -> TokenProvider:
    return TokenProvider(cfg(tokenSecretKey=f"file://{pki.secret_key}"))


def test_token_provider(token_provider: TokenProvider) -> None:
    assert token_provider.algorithms == ["HS256", "HS384"]  # the 50-byte test secret is too short for HS512
    identity = token_provider.authenticate(cmd_data(token("app", exp=int(time.time()) + 60)))
    assert identity.role == "app" and identity.expires_at is not None and not identity.expired(time.time())
    assert token_provider.authenticate(cmd_data(token("app", algorithm="HS384"))).expires_at is None
    assert token_provider.authenticate(AuthData(http_authorization=f"Bearer {token('web')}")).role == "web"
    # jjwt ignores "aud" unless tokenAudienceClaim is set; PyJWT's own check must stay off.
    assert token_provider.authenticate(cmd_data(token("app", aud="elsewhere"))).role == "app"


@pytest.mark.parametrize("bad, reason", [
    (token("app", exp=int(time.time()) - 1), "expired"),
    (token("app", nbf=int(time.time()) + 3600), "not yet valid"),
    (token("app", key=b"k" * 32), "Signature verification failed"),
    (jwt.encode({"sub": "app"}, "", algorithm="none"), "alg"),  # ("" is the typed spelling of no key)
    ("garbage", "Not enough segments"),
    (token(None), "no role"),
    ("   ", "Blank token"),
])
def test_token_provider_refuses(token_provider: TokenProvider, bad: str, reason: str) -> None:
    with pytest.raises(AuthenticationError, match=reason):
        token_provider.authenticate(cmd_data(bad))


def test_token_claim_and_audience(pki: Pki) -> None:
    p = TokenProvider(cfg(tokenSecretKey=base64.b64encode(HS256_SECRET).decode(), tokenAuthClaim="roles",
                          tokenAudienceClaim="brokers", tokenAudience="eu-1"))
    assert p.authenticate(cmd_data(token(None, roles=["first", "second"], brokers="eu-1"))).role == "first"
    assert p.authenticate(cmd_data(token(None, roles="only", brokers=["us-1", "eu-1"]))).role == "only"
    for claims in ({"brokers": "us-1"}, {"brokers": ["us-1"]}, {}):
        with pytest.raises(AuthenticationError, match="audience"):
            p.authenticate(cmd_data(token(None, roles="r", **claims)))
    # tokenAudience alone checks the standard "aud" claim (Pulsar would silently check nothing).
    aud = TokenProvider(cfg(tokenSecretKey=f"file://{pki.secret_key}", tokenAudience="eu-1"))
    assert aud.audience_claim == "aud"
    with pytest.raises(AuthenticationError):
        aud.authenticate(cmd_data(token("app")))


def test_public_key_tokens(pki: Pki) -> None:
    rsa = TokenProvider(cfg(tokenPublicKey=f"file://{pki.rsa_public_der}"))  # DER, tokenPublicAlg RS256
    assert rsa.authenticate(cmd_data(token("r", pki.rsa_private, "RS256"))).role == "r"
    assert rsa.authenticate(cmd_data(token("r", pki.rsa_private, "PS512"))).role == "r"
    # Algorithm confusion: an HMAC token "signed" with the public key's bytes must not pass.
    def b64(raw: bytes) -> bytes:
        return base64.urlsafe_b64encode(raw).rstrip(b"=")
    signing_input = b64(b'{"alg":"HS256","typ":"JWT"}') + b"." + b64(b'{"sub":"r"}')
    mac = hmac.new(pki.rsa_public_der.read_bytes(), signing_input, hashlib.sha256).digest()
    forged = (signing_input + b"." + b64(mac)).decode()
    with pytest.raises(AuthenticationError):
        rsa.authenticate(cmd_data(forged))
    pem = "data:;base64," + base64.b64encode(pki.ec_public_pem.read_bytes()).decode()
    es = TokenProvider(cfg(tokenPublicKey=pem, tokenPublicAlg="ES256"))
    assert es.authenticate(cmd_data(token("e", pki.ec_private, "ES256"))).role == "e"
    with pytest.raises(AuthenticationError):
        es.authenticate(cmd_data(token("e", pki.rsa_private, "RS256")))


def test_basic_provider(pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    p = BasicProvider(cfg(basicAuthConf=str(pki.htpasswd)))
    for user, password in USERS.items():
        assert p.authenticate(cmd_data(f"{user}:{password}")).role == user
        header = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        assert p.authenticate(AuthData(http_authorization=header)).role == user
    for bad in ("alice:wrong", "nobody:alice-password", "alice", "bob:"):
        with pytest.raises(AuthenticationError):
            p.authenticate(cmd_data(bad))
    with pytest.raises(AuthenticationError, match="Basic"):
        p.authenticate(AuthData(http_authorization="Bearer x"))
    with pytest.raises(AuthenticationError, match="Base64"):
        p.authenticate(AuthData(http_authorization="Basic !!!"))
    # From base64 content, with comments, and a hash format Pulsar does not accept (reported, skipped).
    bcrypt_line = "carol:$2y$05$abcdefghijklmnopqrstuuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZa\n"
    content = pki.htpasswd.read_text() + "# comment\n\n" + bcrypt_line
    with caplog.at_level(logging.WARNING):
        p2 = BasicProvider(cfg(basicAuthConf=base64.b64encode(content.encode()).decode()))
    assert sorted(p2.users) == ["alice", "bob"] and "carol" in caplog.text and "$2y$" not in caplog.text
    with pytest.raises(ConfigError, match="line 1"):
        BasicProvider(cfg(basicAuthConf="data:,no-colon-here"))


def test_tls_provider(pki: Pki) -> None:
    p = TlsProvider(cfg(tlsTrustCertsFilePath=str(pki.ca_cert)))
    cert = {"subject": ((("organizationName", "x"),), (("commonName", "outer"),), (("commonName", "inner"),))}
    assert common_name(cert) == "inner"
    assert p.authenticate(AuthData(peer_cert=cert)).role == "inner"
    for missing in (None, {}, {"subject": ((("organizationName", "x"),),)}):
        with pytest.raises(AuthenticationError, match="TLS certificate"):
            p.authenticate(AuthData(peer_cert=missing))


def test_auth_data_repr_hides_credentials() -> None:
    assert "s3cret" not in repr(AuthData(command_data=b"s3cret", http_authorization="Bearer s3cret"))


# -- authentication service and connection state ------------------------------------------------------

@pytest.fixture
def service(pki: Pki) -> AuthenticationService:
    return AuthenticationService(cfg(**secure_settings(pki, anonymousUserRole="anon")))


def test_http_authentication(service: AuthenticationService, pki: Pki) -> None:
    assert list(service.providers) == ["tls", "token", "basic"]  # class names and short names
    assert service.authenticate_http(f"Bearer {token('t')}", None, None) == "t"
    assert service.authenticate_http(None, {"subject": ((("commonName", CLIENT_ROLE),),)}, None) == CLIENT_ROLE
    assert service.authenticate_http("Bearer bad", None, None) == "anon"  # as Pulsar: anonymous if set
    with pytest.raises(AuthenticationError, match="Unsupported"):
        service.authenticate_http(f"Bearer {token('t')}", None, "sasl")
    with pytest.raises(AuthenticationError):
        service.authenticate_http(f"Bearer {token('t')}", None, "basic")
    strict = AuthenticationService(cfg(**secure_settings(pki)))
    with pytest.raises(AuthenticationError, match="Authentication required"):
        strict.authenticate_http(None, None, None)
    assert strict.failures == 1 and service.failures == 2  # "Bearer bad" fell back to anonymous: no failure


def connect(method: str | None = None, data: bytes | None = None, refresh: bool = True,
            legacy: int | None = None) -> pb.CommandConnect:
    c = pb.CommandConnect(client_version="unit", protocol_version=20)
    c.feature_flags.supports_auth_refresh = refresh
    if method is not None:
        c.auth_method_name = method
    if data is not None:
        c.auth_data = data
    if legacy is not None:
        c.auth_method = legacy  # type: ignore[assignment]
    return c


def test_connection_auth_methods(service: AuthenticationService) -> None:
    for cmd in (connect(), connect("unknown", b"x"), connect(legacy=pb.AuthMethodAthens)):
        auth = ConnectionAuth(service)
        auth.connect(cmd, None)
        assert auth.role == "anon"
    auth = ConnectionAuth(service)
    with pytest.raises(AuthenticationError):
        auth.connect(connect("token", b"bad"), None)  # a known method must succeed: no anonymous fallback
    disabled = ConnectionAuth(AuthenticationService(cfg()))
    disabled.connect(connect("token", b"ignored"), None)
    assert disabled.role is None
    disabled.answer(pb.CommandAuthResponse())  # ignored when authentication is off


def test_connection_refresh_state_machine(service: AuthenticationService) -> None:
    now = time.time()
    auth = ConnectionAuth(service)
    auth.connect(connect("token", token("app", exp=int(now) + 10).encode()), None)
    assert auth.refresh_action(now) is RefreshAction.NOTHING
    assert auth.refresh_action(now + 11) is RefreshAction.CHALLENGE
    assert auth.refresh_action(now + 12) is RefreshAction.CLOSE  # the challenge was not answered
    auth = ConnectionAuth(service)
    auth.connect(connect("token", token("app", exp=int(now) + 10).encode()), None)
    assert auth.refresh_action(now + 11) is RefreshAction.CHALLENGE
    answer = pb.CommandAuthResponse()
    answer.response.auth_data = token("app", exp=int(now) + 100).encode()
    auth.answer(answer)
    assert auth.refreshes == 1 and auth.refresh_action(now + 11) is RefreshAction.NOTHING
    answer.response.auth_data = token("other").encode()
    with pytest.raises(PrincipalChanged, match="Principal cannot change"):
        auth.answer(answer)
    old_client = ConnectionAuth(service)
    old_client.connect(connect("token", token("app", exp=int(now) + 10).encode(), refresh=False), None)
    assert old_client.refresh_action(now + 11) is RefreshAction.CLOSE
    anonymous = ConnectionAuth(service)
    anonymous.connect(connect(), None)
    with pytest.raises(AuthenticationError, match="no credentials"):
        anonymous.answer(answer)


def test_proxied_connection_refreshes_the_relayed_credentials(pki: Pki) -> None:
    """authenticateOriginalAuthData: the client's relayed token is the one watched and refreshed, not the
    proxy's; a proxy that only names its client is closed when its own token expires."""
    now = time.time()
    relaying = AuthenticationService(cfg(**secure_settings(pki, authenticateOriginalAuthData=True)))
    auth = ConnectionAuth(relaying)
    cmd = connect("token", token("proxy").encode())  # (the proxy's token never expires)
    cmd.original_auth_method, cmd.original_auth_data = "token", token("alice", exp=int(now) + 10)
    auth.connect(cmd, None)
    assert (auth.role, auth.original_principal) == ("proxy", "alice")
    assert auth.refresh_action(now) is RefreshAction.NOTHING
    assert auth.refresh_action(now + 11) is RefreshAction.CHALLENGE
    answer = pb.CommandAuthResponse()
    answer.response.auth_data = token("alice", exp=int(now) + 100).encode()
    auth.answer(answer)
    assert auth.refreshes == 1 and auth.refresh_action(now + 11) is RefreshAction.NOTHING
    assert auth.refresh_action(now + 101) is RefreshAction.CHALLENGE
    answer.response.auth_data = token("proxy").encode()  # the proxy's own credentials are not alice's
    with pytest.raises(PrincipalChanged, match="Principal cannot change"):
        auth.answer(answer)
    naming = ConnectionAuth(AuthenticationService(cfg(**secure_settings(pki))))
    cmd = connect("token", token("proxy", exp=int(now) + 10).encode())
    cmd.original_principal = "alice"
    naming.connect(cmd, None)
    assert naming.refresh_action(now + 11) is RefreshAction.CLOSE


# -- authorization ------------------------------------------------------------------------------------------

@pytest.fixture
async def authz() -> AuthorizationService:
    store = BrokerMetadata("standalone")
    await store.start(MemoryMetadataStore())
    await store.create_tenant("acme", TenantInfo(("acme-admin",), ("standalone",)))
    await store.create_namespace("acme/ns", {"auth_policies": {
        "namespace_auth": {"ns-writer": ["produce"], "ns-reader": ["consume"], "app-*": ["consume"]},
        "destination_auth": {"persistent://acme/ns/orders": {"topic-writer": ["produce"], "ops-*": ["produce"]},
                             "persistent://acme/ns/orders-partition-1": {"part-reader": ["consume"]}},
        "subscription_auth_roles": {"billing": ["ns-reader"]},
    }})
    return AuthorizationService(cfg(authenticationEnabled=True, authorizationEnabled=True, superUserRoles="root",
                                    authorizationAllowWildcardsMatching=True), store)


@pytest.mark.parametrize("role, topic, op, sub, allowed", [
    ("root", "persistent://acme/ns/x", TopicOperation.PRODUCE, "", True),
    ("acme-admin", "persistent://acme/ns/x", TopicOperation.CONSUME, "any", True),
    ("acme-admin", "persistent://public/default/x", TopicOperation.LOOKUP, "", False),
    ("ns-writer", "persistent://acme/ns/x", TopicOperation.PRODUCE, "", True),
    ("ns-writer", "persistent://acme/ns/x", TopicOperation.CONSUME, "s", False),
    ("ns-writer", "persistent://acme/ns/x", TopicOperation.LOOKUP, "", True),
    ("ns-reader", "persistent://acme/ns/x", TopicOperation.PRODUCE, "", False),
    ("ns-reader", "persistent://acme/ns/x", TopicOperation.CONSUME, "billing", True),
    ("ns-reader", "persistent://acme/ns/x", TopicOperation.LOOKUP, "", True),
    ("topic-writer", "persistent://acme/ns/orders", TopicOperation.PRODUCE, "", True),
    ("topic-writer", "persistent://acme/ns/orders-partition-3", TopicOperation.PRODUCE, "", True),
    ("topic-writer", "persistent://acme/ns/other", TopicOperation.PRODUCE, "", False),
    # A partition inherits its partitioned topic's grant to the role itself, not a wildcard's (Pulsar's
    # PulsarAuthorizationProvider.checkPermission); a partition's own grant covers that partition alone.
    ("ops-1", "persistent://acme/ns/orders", TopicOperation.PRODUCE, "", True),
    ("ops-1", "persistent://acme/ns/orders-partition-0", TopicOperation.PRODUCE, "", False),
    ("part-reader", "persistent://acme/ns/orders-partition-1", TopicOperation.CONSUME, "s", True),
    ("part-reader", "persistent://acme/ns/orders-partition-0", TopicOperation.CONSUME, "s", False),
    ("part-reader", "persistent://acme/ns/orders", TopicOperation.LOOKUP, "", False),
    ("app-billing", "persistent://acme/ns/x", TopicOperation.CONSUME, "s", True),  # wildcard grant
    ("app-billing", "persistent://acme/ns/x", TopicOperation.CONSUME, "billing", False),  # subscription roles
    ("stranger", "persistent://acme/ns/x", TopicOperation.LOOKUP, "", False),
    ("stranger", "persistent://nosuch/ns/x", TopicOperation.LOOKUP, "", False),
])
def test_authorization_rules(authz: AuthorizationService, role: str, topic: str, op: TopicOperation,
                             sub: str, allowed: bool) -> None:
    assert authz.allows(TopicName.parse(topic), op, role, sub) is allowed


async def test_authorization_extras(authz: AuthorizationService) -> None:
    # Pulsar's namespace operations: listing (GET_TOPICS) with consume or produce, clearing a backlog with consume
    assert authz.allows_namespace("acme/ns", "ns-reader", NAMESPACE_LOOKUP)
    assert authz.allows_namespace("acme/ns", "ns-writer", NAMESPACE_LOOKUP)
    assert authz.allows_namespace("acme/ns", "ns-reader", NAMESPACE_CONSUME)
    assert not authz.allows_namespace("acme/ns", "ns-writer", NAMESPACE_CONSUME)
    assert not authz.allows_namespace("acme/ns", "stranger", NAMESPACE_LOOKUP)
    assert not authz.allows(TopicName.parse("acme/ns/x"), TopicOperation.LOOKUP, None)
    with pytest.raises(AuthorizationError, match="'stranger' is not authorized to produce"):
        authz.check(TopicName.parse("acme/ns/x"), TopicOperation.PRODUCE, "stranger")
    await authz.metadata.set_policy("acme/ns", "subscription_auth_mode", "Prefix")
    assert not authz.allows(TopicName.parse("acme/ns/x"), TopicOperation.CONSUME, "ns-reader", "other-sub")
    assert authz.allows(TopicName.parse("acme/ns/x"), TopicOperation.CONSUME, "ns-reader", "ns-reader-1")
    authz.wildcards = False
    assert not authz.allows(TopicName.parse("acme/ns/x"), TopicOperation.CONSUME, "app-billing", "s")


# -- HTTP access table ------------------------------------------------------------------------------------

def test_every_route_has_a_deliberate_rule(pki: Pki) -> None:
    server = BrokerServer(cfg(**secure_settings(pki)))
    super_only = {"/admin/v2/brokers", "/admin/v2/broker-stats/", "/admin/v2/clusters/", "/admin/v2/tenants",
                  "/admin/v3/transactions/", "/admin/v2/bookies/", "/admin/v2/resource-quotas"}
    ns = "/admin/v2/namespaces/{tenant}/{ns}"  # (and these, as Pulsar's NamespacesBase: validateSuperUserAccess)
    super_only_in_namespaces = {("PUT", f"{ns}/unload"), ("PUT", f"{ns}/{{bundle}}/unload"),
                                ("PUT", f"{ns}/{{bundle}}/split"), ("POST", f"{ns}/delayedDelivery"),
                                ("DELETE", f"{ns}/delayedDelivery"),
                                # (a namespace's bookie affinity group: internal{Set,Get,Delete}BookieAffinityGroup)
                                *((m, f"{ns}/persistence/bookieAffinity") for m in ("GET", "HEAD", "POST", "DELETE")),
                                # (an anti-affinity group's namespaces: Pulsar 4.0.7's check has no namespace; the
                                # tenant is a query parameter)
                                *((m, "/admin/v2/namespaces/{cluster}/antiAffinity/{group}") for m in ("GET", "HEAD"))}
    for route in server.web.app.router.routes():
        canonical = route.resource.canonical if route.resource is not None else ""
        access = access_for(route.method, canonical)
        matched = any(route.method in r.methods and r.pattern.fullmatch(canonical) for r in ACCESS_RULES)
        assert matched, f"{route.method} {canonical} has no rule"
        if access is Access.SUPER_USER:
            assert any(canonical.startswith(prefix) for prefix in super_only) \
                or (route.method, canonical) in super_only_in_namespaces, canonical
        elif (route.method, canonical) in super_only_in_namespaces:
            pytest.fail(f"{route.method} {canonical} is for super users only in Pulsar, here for {access.value}")


@pytest.mark.parametrize("method, path, access", [
    ("GET", "/admin/v2/persistent/{tenant}/{ns}/{topic}/stats", Access.TOPIC_LOOKUP),
    ("GET", "/admin/v2/broker-stats/topics", Access.SUPER_USER),
    ("GET", "/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", Access.SUPER_USER),
    ("PUT", "/admin/v2/persistent/{tenant}/{ns}/{topic}", Access.TENANT_ADMIN),
    ("GET", "/admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}/position/{n}", Access.TOPIC_CONSUME),
    ("GET", "/admin/v2/persistent/{tenant}/{ns}/{topic}/examinemessage", Access.TOPIC_CONSUME),
    ("GET", "/admin/v2/persistent/{tenant}/{ns}/{topic}/messageid/{timestamp}", Access.TOPIC_CONSUME),
    # expire up to a message id (EXPIRE_MESSAGES) and analyze a backlog (CONSUME): consume rights, with the
    # subscription's name checked; truncate: the tenant's admins (validateAdminAccessForTenant)
    ("POST", "/admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}/expireMessages", Access.TOPIC_CONSUME),
    ("POST", "/admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}/analyzeBacklog", Access.TOPIC_CONSUME),
    ("DELETE", "/admin/v2/persistent/{tenant}/{ns}/{topic}/truncate", Access.TENANT_ADMIN),
    ("DELETE", "/admin/v2/non-persistent/{tenant}/{ns}/{topic}/truncate", Access.AUTHENTICATED),
    # Pulsar's namespace operations CLEAR_BACKLOG / UNSUBSCRIBE (consume) and GET_TOPICS / GET_BUNDLE (consume or
    # produce); a topic's properties are its GET_METADATA (lookup)
    ("POST", "/admin/v2/namespaces/{tenant}/{ns}/clearBacklog", Access.NAMESPACE_CONSUME),
    ("POST", "/admin/v2/namespaces/{tenant}/{ns}/{bundle}/clearBacklog/{sub}", Access.NAMESPACE_CONSUME),
    ("POST", "/admin/v2/namespaces/{tenant}/{ns}/unsubscribe/{sub}", Access.NAMESPACE_CONSUME),
    ("GET", "/admin/v2/namespaces/{tenant}/{ns}/topics", Access.NAMESPACE_LOOKUP),
    ("GET", "/admin/v2/namespaces/{tenant}/{ns}/bundles", Access.NAMESPACE_LOOKUP),
    ("GET", "/admin/v2/non-persistent/{tenant}/{ns}/{bundle}", Access.NAMESPACE_LOOKUP),
    ("GET", "/admin/v2/persistent/{tenant}/{ns}/{topic}/properties", Access.TOPIC_LOOKUP),
    ("PUT", "/admin/v2/persistent/{tenant}/{ns}/{topic}/properties", Access.TENANT_ADMIN),
    ("POST", "/admin/v2/namespaces/{tenant}/{ns}/retention", Access.TENANT_ADMIN),
    ("GET", "/admin/v2/brokers/configuration/runtime", Access.SUPER_USER),
    ("POST", "/admin/v2/brokers/configuration/{configName}/{configValue}", Access.SUPER_USER),
    ("DELETE", "/admin/v2/brokers/configuration/{configName}", Access.SUPER_USER),
    ("POST", "/admin/v2/persistent/{tenant}/{ns}/{topic}/permissions/{role}", Access.TENANT_ADMIN),
    ("POST", "/admin/v2/schemas/{tenant}/{ns}/{topic}/schema", Access.TOPIC_PRODUCE),
    ("GET", "/lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}", Access.TOPIC_LOOKUP),
    ("GET", "/metrics", Access.PUBLIC),
    # Pulsar's admin v3 Transactions: reads check nothing (the stats and slow transactions of every coordinator
    # look the assignment topic up); abort, the scale and a route we do not serve for super users
    ("GET", "/admin/v3/transactions/coordinators", Access.AUTHENTICATED),
    ("GET", "/admin/v3/transactions/transactionMetadata/{most}/{least}", Access.AUTHENTICATED),
    ("GET", "/admin/v3/transactions/pendingAckStats/{tenant}/{ns}/{topic}/{sub}", Access.AUTHENTICATED),
    ("GET", "/admin/v3/transactions/transactionInBufferStats/{tenant}/{ns}/{topic}/{most}/{least}",
     Access.AUTHENTICATED),
    ("GET", "/admin/v3/transactions/coordinatorStats", Access.TOPIC_LOOKUP),
    ("GET", "/admin/v3/transactions/slowTransactions/{timeout}", Access.TOPIC_LOOKUP),
    ("POST", "/admin/v3/transactions/abortTransaction/{most}/{least}", Access.SUPER_USER),
    ("POST", "/admin/v3/transactions/transactionCoordinator/replicas", Access.SUPER_USER),
    ("POST", "/admin/v3/transactions/someNewCall", Access.SUPER_USER),
    ("GET", "/admin/v3/transactions/positionStatsInPendingAck/{tenant}/{ns}/{topic}/{sub}/{ledger}/{entry}",
     Access.AUTHENTICATED),
    ("DELETE", "/admin/v2/some/new/endpoint", Access.SUPER_USER),
    # ClustersBase's peer clusters, read or set: validateBothSuperuserAndClusterOperation
    ("GET", "/admin/v2/clusters/{cluster}/peers", Access.SUPER_USER),
    ("POST", "/admin/v2/clusters/{cluster}/peers", Access.SUPER_USER),
    ("GET", "/admin/v2/clusters/{cluster}/failureDomains/{domainName}", Access.SUPER_USER),
    # NamespacesBase.internalGetAntiAffinityNamespaces (a namespace's own group: its tenant's admins)
    ("GET", "/admin/v2/namespaces/{cluster}/antiAffinity/{group}", Access.SUPER_USER),
    ("GET", "/admin/v2/namespaces/{tenant}/{ns}/antiAffinity", Access.TENANT_ADMIN),
    # a bundle's topic hash positions (the namespace policy PERSISTENCE, read); a one-segment path of no route but
    # the bundle's DELETE (answered as no route, once authenticated)
    ("GET", "/admin/v2/namespaces/{tenant}/{ns}/{bundle}/topicHashPositions", Access.TENANT_ADMIN),
    ("GET", "/admin/v2/namespaces/{tenant}/{ns}/{bundle}", Access.AUTHENTICATED),
    ("DELETE", "/admin/v2/namespaces/{tenant}/{ns}/{bundle}", Access.TENANT_ADMIN),
])
def test_access_rules(method: str, path: str, access: Access) -> None:
    assert access_for(method, path) is access


async def test_a_check_left_to_the_handler(pki: Pki) -> None:
    """Order.IN_HANDLER: the handler makes the rule's check where Pulsar's handler does (``check_deferred``), or
    says that its branch makes none (``skip_deferred``); a handler that answers without either is a 500, never a
    route left open by accident."""
    route = "/admin/v3/transactions/abortTransaction/{most}/{least}"
    assert next(r for r in ACCESS_RULES if r.pattern.fullmatch(route)).order is Order.IN_HANDLER
    store = BrokerMetadata("standalone")
    await store.start(MemoryMetadataStore())
    security = Security(cfg(authenticationEnabled=True, authenticationProviders="token",
                            tokenSecretKey=f"file://{pki.secret_key}", authorizationEnabled=True,
                            superUserRoles="root"), store)

    async def abort(request: web.Request) -> web.Response:
        how = request.query["how"]
        if how == "check":
            await check_deferred(request)
        elif how == "skip":
            skip_deferred(request)
        return web.Response(status=204)

    app = web.Application(middlewares=[json_errors, security_middleware(security, cfg(), lambda: "broker:8080")])
    app.router.add_post(route, abort)
    async with TestClient(TestServer(app)) as client:
        async def status(role: str, how: str) -> int:
            reply = await client.post(f"/admin/v3/transactions/abortTransaction/0/1?how={how}",
                                      headers={"Authorization": f"Bearer {token(role)}"})
            return reply.status

        assert [await status("root", how) for how in ("check", "skip", "forgot")] == [204, 204, 500]
        assert [await status("stranger", how) for how in ("check", "skip", "forgot")] == [401, 204, 500]


async def test_a_check_after_the_topics_lookup(pki: Pki) -> None:
    """Order.AFTER_LOOKUP (Pulsar's handlers that read the partitioned metadata first): the topic's LOOKUP is checked
    first, the rule's own check is left to the handler as Order.IN_HANDLER (a handler that forgets it is a 500, never
    a route left open); a partition's name gets the rule's check first."""
    route = "/admin/v2/persistent/{tenant}/{ns}/{topic}/truncate"
    assert next(r for r in ACCESS_RULES if "DELETE" in r.methods and r.pattern.fullmatch(route)).order \
        is Order.AFTER_LOOKUP
    store = BrokerMetadata("standalone")
    await store.start(MemoryMetadataStore())
    await store.create_tenant("acme", TenantInfo(("ops",), ("standalone",)))
    await store.create_namespace("acme/ns", {})
    await store.grant_namespace_permission("acme/ns", "reader", ["consume"])
    security = Security(cfg(authenticationEnabled=True, authenticationProviders="token",
                            tokenSecretKey=f"file://{pki.secret_key}", authorizationEnabled=True,
                            superUserRoles="root"), store)
    reached: list[str] = []

    async def truncate(request: web.Request) -> web.Response:
        reached.append(request.match_info["topic"])
        if request.query["how"] == "check":
            await check_deferred(request)
        return web.Response(status=204)

    app = web.Application(middlewares=[json_errors, security_middleware(security, cfg(), lambda: "broker:8080")])
    app.router.add_delete(route, truncate)
    async with TestClient(TestServer(app)) as client:
        async def answer(role: str, topic: str, how: str = "check") -> tuple[int, str]:
            reply = await client.delete(f"/admin/v2/persistent/acme/ns/{topic}/truncate?how={how}",
                                        headers={"Authorization": f"Bearer {token(role)}"})
            return reply.status, (await reply.json())["reason"] if reply.status >= 400 else ""

        not_admin = (401, "Don't have permission to administrate resources on this tenant")
        assert await answer("ops", "t") == (204, "")
        assert (await answer("ops", "t", "forgot"))[0] == 500
        assert await answer("reader", "t") == not_admin
        assert reached == ["t", "t", "t"]  # (the reader's refusal: made by the handler)
        assert await answer("stranger", "t") == (
            401, "Unauthorized to validateTopicOperation for operation [LOOKUP] on topic [persistent://acme/ns/t]")
        assert await answer("reader", "t-partition-0") == not_admin
        assert reached == ["t", "t", "t"]  # (neither reached the handler)


# -- TLS settings -----------------------------------------------------------------------------------------

def test_iana_cipher_names() -> None:
    assert iana_name({"name": "ECDHE-RSA-AES256-GCM-SHA384", "kea": "kx-ecdhe", "auth": "auth-rsa",
                      "symmetric": "aes-256-gcm", "digest": None}) == "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"
    assert iana_name({"name": "ECDHE-ECDSA-CHACHA20-POLY1305", "kea": "kx-ecdhe", "auth": "auth-ecdsa",
                      "symmetric": "chacha20-poly1305", "digest": None}) \
        == "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
    assert iana_name({"name": "AES128-SHA", "kea": "kx-rsa", "auth": "auth-rsa", "symmetric": "aes-128-cbc",
                      "digest": "sha1"}) == "TLS_RSA_WITH_AES_128_CBC_SHA"


def test_tls_context_settings(pki: Pki) -> None:
    base = {"tlsCertificateFilePath": str(pki.server_cert), "tlsKeyFilePath": str(pki.server_key)}
    ctx = server_context(cfg(**base, tlsProtocols="TLSv1.2", tlsCiphers="TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"))
    assert ctx.maximum_version.name == "TLSv1_2"
    assert [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"] == ["ECDHE-ECDSA-AES128-GCM-SHA256"]
    with pytest.raises(ConfigError, match="tlsProtocols"):
        server_context(cfg(**base, tlsProtocols="SSLv3"))
    with pytest.raises(ConfigError, match="tlsCiphers"):
        server_context(cfg(**base, tlsCiphers="TLS_MADE_UP_CIPHER"))
    with pytest.raises(ConfigError, match="needs tlsTrustCertsFilePath"):
        server_context(cfg(**base, tlsRequireTrustedClientCertOnConnect=True))
    assert server_context(cfg(**base, tlsTrustCertsFilePath=str(pki.ca_cert),
                              tlsAllowInsecureConnection=True)).verify_mode.name == "CERT_NONE"


def test_insecure_tls_with_required_client_certificates_says_it_asks_for_none(
        pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    base = {"tlsCertificateFilePath": str(pki.server_cert), "tlsKeyFilePath": str(pki.server_key),
            "tlsTrustCertsFilePath": str(pki.ca_cert), "tlsAllowInsecureConnection": True}
    with caplog.at_level("WARNING", logger="broker.auth.tls"):
        assert server_context(cfg(**base)).verify_mode.name == "CERT_NONE"
        assert not caplog.records
        assert server_context(cfg(**base, tlsRequireTrustedClientCertOnConnect=True)).verify_mode.name == "CERT_NONE"
    assert "is not enforced with tlsAllowInsecureConnection=true" in caplog.text


async def test_pulsar_standalone_conf_security_section(pki: Pki, tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """The security part of the official client suite's standalone-ssl.conf, unchanged but for paths."""
    conf = tmp_path / "standalone.conf"
    conf.write_text("\n".join([
        "brokerServicePort=0", "brokerServicePortTls=0", "webServicePort=0", "webServicePortTls=0",
        "tlsEnabled=true",
        f"tlsCertificateFilePath={pki.server_cert}", f"tlsKeyFilePath={pki.server_key}",
        f"tlsTrustCertsFilePath={pki.ca_cert}", "tlsAllowInsecureConnection=false",
        "anonymousUserRole=anonymous", "authenticationEnabled=true",
        f"authenticationProviders={PULSAR}AuthenticationProviderTls,{PULSAR}AuthenticationProviderToken,"
        f"{PULSAR}AuthenticationProviderBasic",
        "authorizationEnabled=true", f"tokenSecretKey=file://{pki.secret_key}", f"basicAuthConf={pki.htpasswd}",
        "superUserRoles=localhost,superUser,admin",
        "brokerClientAuthenticationPlugin=", "brokerClientAuthenticationParameters=",
    ]) + "\n")
    server = BrokerServer(BrokerConfig.load(conf, bindAddress="127.0.0.1", managedLedgerStorage="memory", dataDir=""))
    with caplog.at_level(logging.WARNING):
        await server.start()
    try:
        assert server.port and server.tls_port and server.web_port and server.web_tls_port
        # (brokerClientAuthentication* are the geo-replicators' credentials: known, empty here.)
        assert "configuration keys not supported" not in caplog.text
        assert list(server.security.authentication.providers) == ["tls", "token", "basic"]
    finally:
        await server.stop()
