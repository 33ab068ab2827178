"""The TLS contexts of the connections the broker opens (broker.auth.tls.client_context): the same certificates are
accepted on every Python. From 3.13 on ``ssl.create_default_context`` sets VERIFY_X509_STRICT, which refuses a
CA-signed certificate without an Authority Key Identifier (as ``make_pki(key_ids=False)`` issues them, and as Java,
so Apache Pulsar, accepts them). The tests make the default context strict on any Python, as 3.13 builds it."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from broker.admin.peers import PeerAdmin
from broker.auth.tls import client_context
from broker.config import BrokerConfig
from tests.security.pki import Pki, make_pki, serve_https_hello


@pytest.fixture
def strict_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """ssl.create_default_context as Python 3.13 builds it (VERIFY_X509_STRICT on), whatever Python runs the test."""
    create = ssl.create_default_context

    def strict(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        ctx = create(*args, **kwargs)
        ctx.verify_flags |= ssl.VERIFY_X509_STRICT
        return ctx

    monkeypatch.setattr(ssl, "create_default_context", strict)


@pytest.fixture
async def https_server(tmp_path: Path) -> AsyncIterator[tuple[Pki, int]]:
    """An HTTPS server on loopback presenting a server certificate without an Authority Key Identifier."""
    pki = make_pki(tmp_path, key_ids=False)
    runner, port = await serve_https_hello(pki)
    try:
        yield pki, port
    finally:
        await runner.cleanup()


async def handshake(ctx: ssl.SSLContext, port: int) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
    writer.close()
    await writer.wait_closed()


def test_a_pki_without_key_ids_has_no_authority_key_identifier(tmp_path: Path) -> None:
    """(What the other tests rely on: the server certificate is one a strict context refuses.)"""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(make_pki(tmp_path, key_ids=False).server_cert.read_bytes())
    with pytest.raises(x509.ExtensionNotFound):
        cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier)


@pytest.mark.usefixtures("strict_default")
async def test_a_certificate_without_authority_key_identifier_is_accepted(https_server: tuple[Pki, int]) -> None:
    pki, port = https_server
    strict = ssl.create_default_context(cafile=str(pki.ca_cert))
    with pytest.raises(ssl.SSLCertVerificationError, match="Authority Key Identifier"):
        await handshake(strict, port)  # (the emulated 3.13 default refuses it)
    await handshake(client_context(str(pki.ca_cert)), port)


@pytest.mark.usefixtures("strict_default")
async def test_the_chain_and_the_host_name_are_still_checked(https_server: tuple[Pki, int], tmp_path: Path) -> None:
    pki, port = https_server
    (tmp_path / "other").mkdir()
    other = make_pki(tmp_path / "other", key_ids=False)
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        await handshake(client_context(str(other.ca_cert)), port)
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        await asyncio.open_connection("127.0.0.1", port, ssl=client_context(str(pki.ca_cert)),
                                      server_hostname="not-the-server.example")


@pytest.mark.usefixtures("strict_default")
async def test_the_peer_admin_client_reaches_a_broker_with_such_a_certificate(https_server: tuple[Pki, int]) -> None:
    """The broker-to-broker admin calls (fan-outs, redirects followed over https) on Python 3.13."""
    pki, port = https_server
    admin = PeerAdmin(BrokerConfig(brokerClientTrustCertsFilePath=str(pki.ca_cert)))
    try:
        assert await admin.call("GET", f"https://127.0.0.1:{port}/hello") == {"ok": True}
    finally:
        await admin.close()
