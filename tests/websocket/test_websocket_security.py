"""The WebSocket API with token authentication and authorization on: the broker's providers on the upgrade request
(the Authorization header, or the ``token`` query parameter), produce / consume grants checked for the role, and the
service's own client connecting with the broker client's credentials (over TLS when only TLS is served)."""

from __future__ import annotations

import base64
import json
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from broker.embedded import BrokerThread
from tests.security.conftest import SUPER_USER, token
from tests.security.pki import Pki, make_pki
from tests.websocket.conftest import b64, receive_json
from tests.websocket.test_websocket import http_status

pytestmark = pytest.mark.timeout(120)

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
WRITER, READER, STRANGER = "writer", "reader", "stranger"


def secure(pki: Pki, **extra: Any) -> dict[str, Any]:
    return dict(managedLedgerStorage="memory", webSocketServiceEnabled=True, authenticationEnabled=True,
                authenticationProviders=TOKEN_PROVIDER, tokenSecretKey=f"file://{pki.secret_key}",
                authorizationEnabled=True, superUserRoles=SUPER_USER,
                brokerClientAuthenticationPlugin="org.apache.pulsar.client.impl.auth.AuthenticationToken",
                brokerClientAuthenticationParameters=f"token:{token(SUPER_USER)}", **extra)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure_ws_broker(pki: Pki) -> Iterator[BrokerThread]:
    with BrokerThread(**secure(pki)) as broker:
        yield broker


def bearer(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(role)}"}


async def grant(http: aiohttp.ClientSession, broker: BrokerThread, role: str, actions: list[str]) -> None:
    async with http.post(f"{broker.web_url}/admin/v2/namespaces/public/default/permissions/{role}", json=actions,
                         headers=bearer(SUPER_USER)) as r:
        assert r.status < 300, await r.text()


async def test_authentication_and_grants(secure_ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    broker = secure_ws_broker
    await grant(http, broker, WRITER, ["produce"])
    await grant(http, broker, READER, ["consume"])
    topic = f"persistent/public/default/secure-{uuid.uuid4().hex[:8]}"
    producer_path, consumer_path = f"/ws/v2/producer/{topic}", f"/ws/v2/consumer/{topic}/sub"
    assert await http_status(http, broker, producer_path) == (401, "Failed to authenticate")
    assert await http_status(http, broker, producer_path, {"Authorization": "Bearer not-a-jwt"}) == \
        (401, "Failed to authenticate")
    assert await http_status(http, broker, f"{producer_path}?token=not-a-jwt") == (401, "Failed to authenticate")
    assert await http_status(http, broker, producer_path, bearer(STRANGER)) == (403, "Not authorized")
    assert await http_status(http, broker, producer_path, bearer(READER)) == (403, "Not authorized")
    assert await http_status(http, broker, consumer_path, bearer(WRITER)) == (403, "Not authorized")
    assert await http_status(http, broker, f"/ws/v2/reader/{topic}", bearer(STRANGER)) == (403, "Not authorized")
    ws_base = broker.web_url.replace("http://", "ws://")
    # The reader's consumer, and the writer's producer with its token as a query parameter (as a browser sends it).
    async with http.ws_connect(ws_base + consumer_path, headers=bearer(READER)) as consumer, \
            http.ws_connect(f"{ws_base}{producer_path}?token={token(WRITER)}") as producer:
        await producer.send_str(json.dumps({"payload": b64(b"secret")}))
        assert (await receive_json(producer))["result"] == "ok"
        assert base64.b64decode((await receive_json(consumer))["payload"]) == b"secret"
    async with http.ws_connect(f"{ws_base}/ws/v2/reader/{topic}?messageId=earliest&token=Bearer%20{token(READER)}") \
            as reader:
        assert base64.b64decode((await receive_json(reader))["payload"]) == b"secret"


async def test_the_service_client_needs_the_broker_client_credentials(pki: Pki, http: aiohttp.ClientSession) -> None:
    """Without broker client credentials the service's client is refused by the broker: the session is refused
    with 401 and the broker's words (Pulsar's handler maps its client's AuthenticationException so)."""
    settings = secure(pki)
    settings.update(brokerClientAuthenticationPlugin="", brokerClientAuthenticationParameters="")
    with BrokerThread(**settings) as broker:
        status, reason = await http_status(http, broker, "/ws/v2/producer/persistent/public/default/t",
                                           bearer(SUPER_USER))
        assert status == 401 and reason is not None and reason.startswith("Failed to create producer/consumer: ")


async def test_over_tls_only(pki: Pki, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    """Only TLS served: the clients come over wss://, the service's client over pulsar+ssl:// (trusting the
    broker's CA: tlsTrustCertsFilePath)."""
    settings = secure(pki, brokerServicePort=None, webServicePort=None, brokerServicePortTls=0, webServicePortTls=0,
                      tlsCertificateFilePath=str(pki.server_cert), tlsKeyFilePath=str(pki.server_key),
                      tlsTrustCertsFilePath=str(pki.ca_cert))
    with BrokerThread(**settings) as broker:
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        base = broker.web_url_tls.replace("https://", "wss://")
        topic = "persistent/public/default/tls-only"
        async with http.ws_connect(f"{base}/ws/v2/consumer/{topic}/sub", headers=bearer(SUPER_USER),
                                   ssl=context) as consumer, \
                http.ws_connect(f"{base}/ws/v2/producer/{topic}", headers=bearer(SUPER_USER), ssl=context) as producer:
            await producer.send_str(json.dumps({"payload": b64(b"tls")}))
            assert (await receive_json(producer))["result"] == "ok"
            assert base64.b64decode((await receive_json(consumer))["payload"]) == b"tls"
