"""Certificates and keys for the security tests, made on the fly with ``cryptography``.

``make_pki(dir)`` writes a CA, a broker certificate for localhost / 127.0.0.1, client certificates
whose CN is the role, one from an unknown CA, token signing keys and an htpasswd file. EC P-256
keys: quick to generate, accepted by OpenSSL on both sides.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from passlib.hash import apr_md5_crypt, des_crypt

CLIENT_ROLE = "tls-client"
HS256_SECRET = b"0123456789abcdef0123456789abcdef-a-test-secret-xyz"  # 50 bytes: HS256 and HS384
USERS = {"alice": "alice-password", "bob": "bob-password"}  # alice: apr1 (htpasswd -m), bob: crypt (-d)


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path  # client certificate signed by a CA the broker does not trust
    rogue_key: Path
    ca_key: ec.EllipticCurvePrivateKey  # (for more certificates: client_certificate)
    secret_key: Path  # raw HS256 secret, as `pulsar tokens create-secret-key` writes it
    rsa_private: rsa.RSAPrivateKey
    rsa_public_der: Path  # X.509 DER, as `pulsar tokens create-key-pair` writes it
    ec_private: ec.EllipticCurvePrivateKey
    ec_public_pem: Path
    htpasswd: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pulsar-py-broker tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str | x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False, server: bool = False, key_ids: bool = True,
          expired: bool = False) -> x509.Certificate:
    """subject: a CN, or the whole name; key_ids: with Subject and Authority Key Identifiers, which Python 3.13's
    default (strict) TLS context requires of a CA-signed certificate (without: as self-made PKIs may issue them, see
    tests/security/test_client_tls.py); expired: valid until an hour ago."""
    now = datetime.datetime.now(datetime.UTC)
    start, end = (now - datetime.timedelta(days=2), now - datetime.timedelta(hours=1)) if expired else \
        (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=2))
    b = (x509.CertificateBuilder().subject_name(_name(subject) if isinstance(subject, str) else subject)
         .issuer_name(issuer).public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(start).not_valid_after(end)
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if key_ids:
        b = (b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                            critical=False))
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                          content_commitment=False, key_encipherment=False, data_encipherment=False,
                                          key_agreement=False, encipher_only=False, decipher_only=False),
                            critical=True)
    elif server:
        b = b.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    else:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def make_pki(d: Path, *, key_ids: bool = True) -> Pki:
    """key_ids=False: certificates without Key Identifiers (see ``_cert``)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("test CA")
    ca = _cert("test CA", ca_key, ca_name, ca_key, ca=True, key_ids=key_ids)
    rogue_ca_key = ec.generate_private_key(ec.SECP256R1())
    server_key, client_key, rogue_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    rsa_private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_private = ec.generate_private_key(ec.SECP256R1())
    (d / "public-rsa.der").write_bytes(rsa_private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))
    (d / "public-ec.pem").write_bytes(ec_private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    (d / "secret.key").write_bytes(HS256_SECRET)
    (d / "htpasswd").write_text(f"alice:{apr_md5_crypt.hash(USERS['alice'])}\n"
                                f"bob:{des_crypt.hash(USERS['bob'])}\n")
    return Pki(
        dir=d,
        ca_cert=_write_cert(d / "ca.pem", ca),
        server_cert=_write_cert(d / "broker-cert.pem", _cert("localhost", server_key, ca_name, ca_key, server=True,
                                                                     key_ids=key_ids)),
        server_key=_write_key(d / "broker-key.pem", server_key),
        client_cert=_write_cert(d / "client-cert.pem", _cert(CLIENT_ROLE, client_key, ca_name, ca_key,
                                                                     key_ids=key_ids)),
        client_key=_write_key(d / "client-key.pem", client_key),
        rogue_cert=_write_cert(d / "rogue-cert.pem", _cert(CLIENT_ROLE, rogue_key, _name("rogue CA"), rogue_ca_key,
                                                                  key_ids=key_ids)),
        rogue_key=_write_key(d / "rogue-key.pem", rogue_key),
        ca_key=ca_key,
        secret_key=d / "secret.key",
        rsa_private=rsa_private,
        rsa_public_der=d / "public-rsa.der",
        ec_private=ec_private,
        ec_public_pem=d / "public-ec.pem",
        htpasswd=d / "htpasswd",
    )


def client_certificate(pki: Pki, name: str, cn: str | tuple[str, ...] | None, *,
                       expired: bool = False) -> tuple[Path, Path]:
    """Another client certificate from the test CA and its key, as ``<name>-cert.pem`` / ``<name>-key.pem``: CN
    ``cn`` (several: one CN attribute each, in that order; None: a subject with no CN); ``expired``: its validity
    ended an hour ago."""
    key = ec.generate_private_key(ec.SECP256R1())
    cns = (cn,) if isinstance(cn, str) else cn or ()
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pulsar-py-broker tests"),
                         *(x509.NameAttribute(NameOID.COMMON_NAME, c) for c in cns)])
    cert = _cert(subject, key, _name("test CA"), pki.ca_key, expired=expired)
    return _write_cert(pki.dir / f"{name}-cert.pem", cert), _write_key(pki.dir / f"{name}-key.pem", key)


async def serve_https_hello(pki: Pki) -> tuple[web.AppRunner, int]:
    """An HTTPS server on loopback presenting the PKI's server certificate, answering GET /hello with {"ok": true}:
    the runner (``cleanup()`` it) and the port."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(pki.server_cert, pki.server_key)

    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/hello", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
