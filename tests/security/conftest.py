"""Fixtures for the security tests: certificates and keys made per session, a TLS + authentication
+ authorization broker shared by the session, tokens, and an HTTP(S) admin client with credentials."""

from __future__ import annotations

import base64
import json
import math
import ssl
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest

from broker.embedded import BrokerThread
from tests.admin.conftest import Reply
from tests.security.pki import CLIENT_ROLE, HS256_SECRET, Pki, make_pki

SUPER_USER = "admin"


def token(sub: str | None, key: Any = HS256_SECRET, algorithm: str = "HS256", **claims: Any) -> str:
    """A JWT for role ``sub`` (HS256 with the test secret unless told otherwise)."""
    payload = {"sub": sub, **claims} if sub is not None else dict(claims)
    return jwt.encode(payload, key, algorithm=algorithm)


def expires_in(seconds: float) -> int:
    """A JWT ``exp`` (whole seconds) at least ``seconds`` from now: rounded down, a token made just before a
    second's end could expire before the broker had checked it once."""
    return math.ceil(time.time() + seconds)


def expiring_token(sub: str, seconds: float) -> str:
    return token(sub, exp=expires_in(seconds))


def secure_settings(pki: Pki, **overrides: Any) -> dict[str, Any]:
    """Pulsar keys for a broker with both TLS ports and the three providers, authorization on."""
    settings: dict[str, Any] = dict(
        managedLedgerStorage="memory",
        brokerServicePortTls=0, webServicePortTls=0,
        tlsCertificateFilePath=str(pki.server_cert), tlsKeyFilePath=str(pki.server_key),
        tlsTrustCertsFilePath=str(pki.ca_cert),
        authenticationEnabled=True,
        authenticationProviders=("org.apache.pulsar.broker.authentication.AuthenticationProviderTls,"
                                 "org.apache.pulsar.broker.authentication.AuthenticationProviderToken,basic"),
        tokenSecretKey=f"file://{pki.secret_key}",
        basicAuthConf=str(pki.htpasswd),
        authorizationEnabled=True,
        superUserRoles=SUPER_USER,
    )
    settings.update(overrides)
    return settings


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def secure_broker(pki: Pki) -> Iterator[BrokerThread]:
    with BrokerThread(**secure_settings(pki)) as broker:
        yield broker


class SecureAdmin:
    """Admin REST over HTTP or HTTPS, with a bearer token, basic credentials or a client certificate."""

    def __init__(self, web_url: str, pki: Pki, authorization: str | None = None,
                 client_cert: tuple[Path, Path] | None = None) -> None:
        self.web_url = web_url
        self.authorization = authorization
        self.context = ssl.create_default_context(cafile=str(pki.ca_cert))
        if client_cert is not None:
            self.context.load_cert_chain(str(client_cert[0]), str(client_cert[1]))

    @classmethod
    def bearer(cls, web_url: str, pki: Pki, role: str) -> SecureAdmin:
        return cls(web_url, pki, f"Bearer {token(role)}")

    @classmethod
    def basic(cls, web_url: str, pki: Pki, user: str, password: str) -> SecureAdmin:
        return cls(web_url, pki, "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())

    def call(self, method: str, path: str, body: Any = None) -> Reply:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self.authorization:
            headers["Authorization"] = self.authorization
        req = urllib.request.Request(self.web_url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.context) as r:
                return Reply(r.status, r.read(), dict(r.headers))
        except urllib.error.HTTPError as e:
            return Reply(e.code, e.read(), dict(e.headers))

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        reply = self.call(method, path, body)
        assert 200 <= reply.status < 300, f"{method} {path}: {reply.status} {reply.body!r}"
        return reply.json if reply.headers.get("Content-Type", "").startswith("application/json") else None


@pytest.fixture(scope="session")
def root_admin(secure_broker: BrokerThread, pki: Pki) -> SecureAdmin:
    return SecureAdmin.bearer(secure_broker.web_url_tls, pki, SUPER_USER)


@pytest.fixture
def namespace(root_admin: SecureAdmin) -> str:
    """A fresh namespace in a fresh tenant with no admins: only grants open it."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    root_admin.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": [], "allowedClusters": ["standalone"]})
    root_admin.ok("PUT", f"/admin/v2/namespaces/{tenant}/ns")
    return f"{tenant}/ns"


__all__ = ["CLIENT_ROLE", "SUPER_USER", "SecureAdmin", "expires_in", "expiring_token", "secure_settings", "token"]
