"""OpenID Connect authentication: a local identity provider (HTTPS, discovery document and JWKS)
and the official client presenting its JWTs; the provider's refusals one by one."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pulsar
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from broker.auth.openid import OpenIDProvider
from broker.auth.providers import AuthData
from broker.config import BrokerConfig, ConfigError
from broker.embedded import BrokerThread
from broker.errors import AuthenticationError
from tests.security.conftest import SUPER_USER, SecureAdmin, secure_settings, token
from tests.security.pki import Pki
from tests.waiting import wait_for

AUDIENCE = "pulsar-broker"


class IdentityProvider:
    """Discovery document and JWKS over HTTPS (the test PKI's server certificate), keys added at will."""

    def __init__(self, pki: Pki) -> None:
        self.private: dict[str, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey] = {}
        self.jwks: list[dict[str, Any]] = []
        self.requests = 0
        self.broken = False  # answer 503 to everything
        self.clients = {"app": "app-secret"}  # OAuth 2.0 clients: id -> secret
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                idp.requests += 1
                if idp.broken:
                    self.send_error(503)
                    return
                if self.path == "/.well-known/openid-configuration":
                    body: dict[str, object] = {"issuer": idp.issuer, "jwks_uri": f"{idp.issuer}/keys",
                            "token_endpoint": f"{idp.issuer}/oauth/token"}
                elif self.path == "/keys":
                    body = {"keys": list(idp.jwks)}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                """OAuth 2.0 client credentials grant: an access token for a known client."""
                length = int(self.headers.get("Content-Length", "0"))
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                if self.path != "/oauth/token" or form.get("grant_type") != "client_credentials" \
                        or idp.clients.get(form.get("client_id", "")) != form.get("client_secret"):
                    self.send_error(401)
                    return
                access = idp.token(sub=form["client_id"], aud=form.get("audience", AUDIENCE))
                data = json.dumps({"access_token": access, "token_type": "Bearer", "expires_in": 600}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(pki.server_cert), str(pki.server_key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.issuer = f"https://localhost:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add_key(self, kid: str, kind: str = "RSA", alg: str | None = "RS256") -> None:
        key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
        if kind == "RSA":
            key = rsa.generate_private_key(65537, 2048)
            public = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key())
        else:
            key = ec.generate_private_key(ec.SECP256R1())
            public = jwt.algorithms.ECAlgorithm.to_jwk(key.public_key())
        jwk = json.loads(public)
        jwk["kid"] = kid
        if alg is not None:
            jwk["alg"] = alg
        self.private[kid] = key
        self.jwks.append(jwk)

    def token(self, kid: str = "k1", alg: str = "RS256", **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.issuer, "aud": AUDIENCE, "sub": "app", "iat": now, "nbf": now, "exp": now + 600}
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, self.private[kid], algorithm=alg, headers={"kid": kid})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def idp(pki: Pki) -> Iterator[IdentityProvider]:
    provider = IdentityProvider(pki)
    provider.add_key("k1")
    provider.add_key("e1", kind="EC", alg="ES256")
    yield provider
    provider.close()


def openid_settings(pki: Pki, idp: IdentityProvider, **overrides: Any) -> dict[str, Any]:
    return secure_settings(pki, authenticationProviders="token,openid", openIDAllowedTokenIssuers=idp.issuer,
                           openIDAllowedAudiences=f"other,{AUDIENCE}",
                           openIDTokenIssuerTrustCertsFilePath=str(pki.ca_cert),
                           openIDKeyIdCacheMissRefreshSeconds=0, **overrides)


@pytest.fixture(scope="module")
def oidc_broker(pki: Pki, idp: IdentityProvider) -> Iterator[BrokerThread]:
    with BrokerThread(**openid_settings(pki, idp)) as broker:
        yield broker


def test_official_client_with_identity_provider_tokens(oidc_broker: BrokerThread, idp: IdentityProvider,
                                                       pki: Pki) -> None:
    admin = SecureAdmin.bearer(oidc_broker.web_url, pki, SUPER_USER)  # (a token of the static key)
    admin.ok("POST", "/admin/v2/namespaces/public/default/permissions/app", ["produce", "consume"])
    topic = "persistent://public/default/oidc"
    client = pulsar.Client(oidc_broker.service_url, authentication=pulsar.AuthenticationToken(idp.token()),
                           operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"from an OIDC token")
        assert consumer.receive(5000).data() == b"from an OIDC token"
    finally:
        client.close()
    # The same tokens over HTTP (Bearer), the role from the "sub" claim.
    oidc_admin = SecureAdmin(oidc_broker.web_url, pki, f"Bearer {idp.token()}")
    assert "s" in oidc_admin.ok("GET", "/admin/v2/persistent/public/default/oidc/stats")["subscriptions"]
    stranger = SecureAdmin(oidc_broker.web_url, pki, f"Bearer {idp.token(sub='stranger')}")
    # (Pulsar's validateTopicOperation refuses with 401)
    assert stranger.call("GET", "/admin/v2/persistent/public/default/oidc/stats").status == 401


def test_official_client_oauth2_flow(oidc_broker: BrokerThread, idp: IdentityProvider, pki: Pki) -> None:
    # The client's OAuth2 plugin gets an access token from the identity provider (client
    # credentials grant) and presents it as a token; the broker checks it against the same issuer.
    SecureAdmin.bearer(oidc_broker.web_url, pki, SUPER_USER).ok(
        "POST", "/admin/v2/namespaces/public/default/permissions/app", ["produce", "consume"])
    credentials = base64.b64encode(json.dumps({"client_id": "app", "client_secret": "app-secret"}).encode())
    auth = pulsar.AuthenticationOauth2(json.dumps({
        "issuer_url": idp.issuer, "audience": AUDIENCE,
        "private_key": f"data:application/json;base64,{credentials.decode()}"}))
    client = pulsar.Client(oidc_broker.service_url, authentication=auth, tls_trust_certs_file_path=str(pki.ca_cert),
                           operation_timeout_seconds=10)
    try:
        producer = client.create_producer("persistent://public/default/oauth2")
        producer.send(b"via oauth2")
    finally:
        client.close()
    provider = oidc_broker.server.security.authentication
    assert provider.successes_by[("AuthenticationProviderOpenID", "token")] >= 1


def test_a_rotated_key_is_fetched_when_a_token_names_it(oidc_broker: BrokerThread, idp: IdentityProvider,
                                                        pki: Pki) -> None:
    provider = next(p for p in oidc_broker.server.security.authentication.providers["token"]
                    if isinstance(p, OpenIDProvider))
    wait_for(lambda: "k1" in provider.keys.get(idp.issuer, {}), what="the issuer's keys")
    idp.add_key("k2")  # the identity provider rotates its keys
    client = pulsar.Client(oidc_broker.service_url, authentication=pulsar.AuthenticationToken(idp.token("k2")),
                           operation_timeout_seconds=10)
    try:
        # The first CONNECT finds no key k2 and starts a fetch; the client's retry gets in.
        client.create_producer("persistent://public/default/rotated").close()
    finally:
        client.close()
    assert "k2" in provider.keys[idp.issuer]


def provider_with_keys(idp: IdentityProvider, pki: Pki, **settings: Any) -> OpenIDProvider:
    cfg = BrokerConfig(managedLedgerStorage="memory", dataDir="")
    for key, value in {"openIDAllowedTokenIssuers": idp.issuer, "openIDAllowedAudiences": AUDIENCE,
                       "openIDTokenIssuerTrustCertsFilePath": str(pki.ca_cert), **settings}.items():
        cfg.set(key, value)
    provider = OpenIDProvider(cfg)
    provider.keys[idp.issuer] = {jwk["kid"]: jwt.PyJWK(jwk) for jwk in idp.jwks}
    provider._fetched_at[idp.issuer] = time.monotonic()
    return provider


@pytest.mark.parametrize("make_token, reason", [
    (lambda idp: idp.token(aud="someone-else"), "JWT contains invalid claim"),
    (lambda idp: idp.token(exp=int(time.time()) - 60), "JWT expired"),
    (lambda idp: idp.token(nbf=None), "JWT contains invalid claim"),
    (lambda idp: idp.token(nbf=int(time.time()) + 600), "JWT contains invalid claim"),
    (lambda idp: idp.token(iss="https://elsewhere"), "Issuer not allowed: https://elsewhere"),
    (lambda idp: idp.token(iss=None), "Issuer cannot be null"),
    (lambda idp: idp.token("k1", alg="RS384"), "JWK's alg [RS256] does not match JWT's alg [RS384]"),
    (lambda idp: idp.token("missing"), "No JWK found for Key ID missing"),
    (lambda idp: jwt.encode({"iss": idp.issuer}, "x" * 32, algorithm="HS256", headers={"kid": "k1"}),
     "JWK's alg [RS256] does not match JWT's alg [HS256]"),
    (lambda idp: idp.token()[:-4] + "AAAA", "JWT signature verification exception"),
    (lambda idp: "not a jwt", "Unable to decode JWT"),
])
def test_refusals(idp: IdentityProvider, pki: Pki, make_token: Callable[[IdentityProvider], str],
                  reason: str) -> None:
    if "missing" in reason:
        idp.private.setdefault("missing", idp.private["k1"])
    provider = provider_with_keys(idp, pki)
    with pytest.raises(AuthenticationError) as info:
        provider.authenticate(AuthData(command_data=make_token(idp).encode()))
    assert reason in info.value.message


def test_role_claim_and_ec_keys(idp: IdentityProvider, pki: Pki) -> None:
    provider = provider_with_keys(idp, pki, openIDRoleClaim="groups")
    ec_token = idp.token("e1", alg="ES256", groups=["ops", "dev"])
    identity = provider.authenticate(AuthData(command_data=ec_token.encode()))
    assert identity.role == "ops" and identity.expires_at is not None
    with pytest.raises(AuthenticationError, match="invalid claim"):  # the role claim is required
        provider.authenticate(AuthData(command_data=idp.token("e1", alg="ES256").encode()))


def test_configuration_is_checked_at_start(idp: IdentityProvider, pki: Pki) -> None:
    def make(**settings: Any) -> None:
        cfg = BrokerConfig(managedLedgerStorage="memory", dataDir="")
        for key, value in settings.items():
            cfg.set(key, value)
        OpenIDProvider(cfg)

    with pytest.raises(ConfigError, match="openIDAllowedAudiences"):
        make(openIDAllowedTokenIssuers=idp.issuer)
    with pytest.raises(ConfigError, match="openIDAllowedTokenIssuers"):
        make(openIDAllowedAudiences=AUDIENCE)
    with pytest.raises(ConfigError, match="does not use https"):
        make(openIDAllowedTokenIssuers="http://idp.example", openIDAllowedAudiences=AUDIENCE)
    make(openIDAllowedTokenIssuers="http://idp.example", openIDAllowedAudiences=AUDIENCE,
         openIDRequireIssuersUseHttps=False)
    with pytest.raises(ConfigError, match="DISABLED"):
        make(openIDAllowedTokenIssuers=idp.issuer, openIDAllowedAudiences=AUDIENCE,
             openIDFallbackDiscoveryMode="KUBERNETES_DISCOVER_TRUSTED_ISSUER")


def test_static_tokens_still_work_next_to_openid(oidc_broker: BrokerThread, pki: Pki) -> None:
    client = pulsar.Client(oidc_broker.service_url, authentication=pulsar.AuthenticationToken(token(SUPER_USER)),
                           operation_timeout_seconds=10)
    try:
        client.create_producer("persistent://public/default/static").close()
    finally:
        client.close()


def test_an_issuer_down_at_start_is_tried_again(idp: IdentityProvider, pki: Pki) -> None:
    cfg = BrokerConfig(managedLedgerStorage="memory", dataDir="")
    for key, value in {"openIDAllowedTokenIssuers": idp.issuer, "openIDAllowedAudiences": AUDIENCE,
                       "openIDTokenIssuerTrustCertsFilePath": str(pki.ca_cert)}.items():
        cfg.set(key, value)
    credentials = AuthData(command_data=idp.token().encode())

    async def scenario() -> None:
        provider = OpenIDProvider(cfg)
        idp.broken = True
        try:
            provider.start()
            await provider._fetching[idp.issuer]
            assert idp.issuer not in provider.keys
            with pytest.raises(AuthenticationError, match="No JWK found"):
                provider.authenticate(credentials)  # ... and it fetches again, not in 5 minutes
        finally:
            idp.broken = False
        await provider._fetching[idp.issuer]
        assert provider.authenticate(credentials).role == "app"
        await provider.stop()

    asyncio.run(scenario())
