"""TLS for the binary (pulsar+ssl://) and HTTPS listeners, from Pulsar's tls* keys.

Client certificates, as Pulsar's broker treats them:
- ``tlsRequireTrustedClientCertOnConnect=true``: the handshake fails without a certificate that
  chains to ``tlsTrustCertsFilePath``;
- false (default): a certificate is asked for but not required; one that is sent must be trusted;
- ``tlsAllowInsecureConnection=true``: no certificate is verified, so none authenticates anyone
  (the tls provider then refuses every client; token and basic still work); with
  ``tlsRequireTrustedClientCertOnConnect=true`` too, no certificate is asked for either (a warning says so: Pulsar
  requires one, any, unverified, which Python's ssl cannot do).

``tlsProtocols`` takes Java's names (TLSv1.3, TLSv1.2, ...); ``tlsCiphers`` takes IANA names as
Pulsar's (Java) configuration does, or OpenSSL names. Python cannot restrict TLS 1.3 suites, so
those always stay enabled when TLS 1.3 is.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Mapping

from broker.config import BrokerConfig, ConfigError

log = logging.getLogger(__name__)

PROTOCOLS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
# A TLS handshake that has not finished by then is dropped (Netty's default in Pulsar is 10 s).
HANDSHAKE_TIMEOUT_S = 10.0


def server_context(cfg: BrokerConfig) -> ssl.SSLContext:
    """The SSLContext both TLS listeners use; ConfigError when a file or value is unusable."""
    if not cfg.tlsCertificateFilePath or not cfg.tlsKeyFilePath:
        raise ConfigError("a TLS port is set but tlsCertificateFilePath / tlsKeyFilePath are not")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cfg.tlsCertificateFilePath, cfg.tlsKeyFilePath)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"tlsCertificateFilePath / tlsKeyFilePath: cannot load the broker certificate "
                          f"and key: {exc}") from None
    if cfg.tlsAllowInsecureConnection:
        ctx.verify_mode = ssl.CERT_NONE
        if cfg.tlsRequireTrustedClientCertOnConnect:
            # (Pulsar then requires a certificate, any, unverified; Python's ssl cannot ask for one it does not verify)
            log.warning("tlsRequireTrustedClientCertOnConnect=true is not enforced with "
                        "tlsAllowInsecureConnection=true: no client certificate is asked for (none would be "
                        "verified); clients authenticate with their credentials (token, basic) only")
    elif cfg.tlsTrustCertsFilePath:
        try:
            ctx.load_verify_locations(cafile=cfg.tlsTrustCertsFilePath)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"tlsTrustCertsFilePath: cannot load the trusted certificates: {exc}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED if cfg.tlsRequireTrustedClientCertOnConnect else ssl.CERT_OPTIONAL
    elif cfg.tlsRequireTrustedClientCertOnConnect:
        raise ConfigError("tlsRequireTrustedClientCertOnConnect=true needs tlsTrustCertsFilePath")
    _set_protocols(ctx, cfg.tlsProtocols)
    if cfg.tlsCiphers:
        _set_ciphers(ctx, cfg.tlsCiphers)
    return ctx


def client_context(cafile: str | None = None, *, check_hostname: bool = True, insecure: bool = False,
                   cert: tuple[str, str] | None = None) -> ssl.SSLContext:
    """The SSLContext of a connection the broker opens (to a peer cluster's brokers, another broker of its
    cluster, an OpenID issuer): the system's trusted CAs, or ``cafile``'s; ``insecure`` verifies nothing
    (Pulsar's tlsAllowInsecureConnection); ``cert`` is the broker's own certificate and key files. Raises
    OSError / ssl.SSLError for a file that cannot be used.

    The same certificates are accepted on every Python: from 3.13 on, ``ssl.create_default_context`` also
    sets VERIFY_X509_STRICT, which refuses certificates Java's PKIX validation (so Apache Pulsar, and every
    other broker and client of the cluster) accepts, e.g. a CA-signed certificate with no Authority Key
    Identifier, as self-made PKIs often issue. The chain must still end at a trusted CA, and host names are
    still checked where ``check_hostname`` says so."""
    ctx = ssl.create_default_context(cafile=cafile or None)
    ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    ctx.check_hostname = check_hostname
    if insecure:
        ctx.verify_mode = ssl.CERT_NONE
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return ctx


def _set_protocols(ctx: ssl.SSLContext, names: list[str]) -> None:
    if not names:
        return
    unknown = [n for n in names if n not in PROTOCOLS]
    if unknown:
        raise ConfigError(f"tlsProtocols: unknown {unknown}; use {', '.join(PROTOCOLS)}")
    versions = sorted(PROTOCOLS[n] for n in names)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]


def _set_ciphers(ctx: ssl.SSLContext, names: list[str]) -> None:
    available = ctx.get_ciphers()
    by_name = {c["name"]: c["name"] for c in available}
    by_name.update({iana_name(c): c["name"] for c in available if c["protocol"] != "TLSv1.3"})
    tls13 = {c["name"] for c in available if c["protocol"] == "TLSv1.3"}
    chosen, unknown = [], []
    for name in names:
        if name in tls13:
            continue  # always on with TLS 1.3; see the module docstring
        if name in by_name:
            chosen.append(by_name[name])
        else:
            unknown.append(name)
    if unknown:
        raise ConfigError(f"tlsCiphers: not available here: {', '.join(unknown)}")
    if chosen:
        ctx.set_ciphers(":".join(chosen))
    if len(chosen) < len(names):
        log.warning("tlsCiphers: TLS 1.3 suites cannot be restricted here; all of them stay enabled")


_KEY_EXCHANGE = {"kx-ecdhe": "ECDHE", "kx-dhe": "DHE", "kx-rsa": "RSA"}
_AUTH = {"auth-rsa": "RSA", "auth-ecdsa": "ECDSA", "auth-dss": "DSS"}


def iana_name(cipher: Mapping[str, object]) -> str:
    """The IANA (Java) name of a TLS 1.2 suite OpenSSL describes, e.g. ECDHE-RSA-AES256-GCM-SHA384
    -> TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384."""
    kx = _KEY_EXCHANGE.get(str(cipher.get("kea")), "")
    auth = _AUTH.get(str(cipher.get("auth")), "")
    exchange = kx if kx == "RSA" else f"{kx}_{auth}"
    symmetric = str(cipher.get("symmetric", "")).upper()
    enc = re.sub(r"^(AES|CAMELLIA|ARIA)-(\d+)-", r"\1_\2_", symmetric).replace("-", "_")
    digest = cipher.get("digest")
    if digest:
        mac = "SHA" if digest == "sha1" else str(digest).upper()
    else:  # AEAD: the PRF hash is the last part of the OpenSSL name (ChaCha20 uses SHA-256)
        m = re.search(r"(SHA\d+)$", str(cipher.get("name", "")))
        mac = m.group(1) if m else "SHA256"
    return f"TLS_{exchange}_WITH_{enc}_{mac}"
