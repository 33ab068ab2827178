"""Authentication providers: who is this client? (Pulsar's AuthenticationProvider{Tls,Token,Basic}).

A provider turns credentials into a role. Credentials arrive as an ``AuthData``: the ``auth_data``
bytes of CONNECT / AUTH_RESPONSE on the binary protocol, or the HTTP ``Authorization`` header,
plus the client's certificate when the TLS handshake verified one. Checking a JWT or an
htpasswd entry takes microseconds to a millisecond, so providers are plain synchronous objects.

Secrets never reach a log line, an error message or a repr: errors say what was wrong (expired,
bad signature, unknown user or invalid password), never the credential itself. Secrets are
compared in constant time (HMAC signatures by PyJWT, password hashes by passlib).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import logging
import os
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

# PyJWT, cryptography and passlib are imported where they are used: a broker without
# authentication does not pay for them at start (about 20 ms and several MB).
from broker.config import BrokerConfig, ConfigError
from broker.errors import AuthenticationError

log = logging.getLogger(__name__)

# The certificate as Python's ssl module reports a verified peer (SSLSocket.getpeercert()).
PeerCert = dict[str, Any]

# jjwt (Pulsar's JWT library) refuses HMAC keys shorter than the hash and RSA keys under 2048 bits.
MIN_HMAC_KEY_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
MIN_RSA_KEY_BITS = 2048
RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_ALGORITHMS = ("ES256", "ES384", "ES512")
# Upper bounds (minutes) of Pulsar's pulsar_expiring_token_minutes histogram.
EXPIRING_TOKEN_MINUTES_BUCKETS = (5.0, 10.0, 60.0, 240.0)


def _ignore(_seconds: float) -> None:
    pass


@dataclass(frozen=True, slots=True)
class AuthData:
    """What a client presented: binary ``auth_data``, an HTTP Authorization header, a certificate."""

    command_data: bytes | None = None
    http_authorization: str | None = None
    peer_cert: PeerCert | None = None

    def __repr__(self) -> str:  # never print credentials
        return (f"AuthData(command_data={'<set>' if self.command_data is not None else None}, "
                f"http_authorization={'<set>' if self.http_authorization is not None else None}, "
                f"peer_cert={'<set>' if self.peer_cert is not None else None})")


@dataclass(frozen=True, slots=True)
class Identity:
    role: str
    # When the credentials stop being valid (epoch seconds); None = never (tls, basic).
    expires_at: float | None = None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at < now


class AuthenticationProvider(Protocol):
    method: str
    pulsar_name: str  # Pulsar's class name of the provider (metrics label)

    def authenticate(self, data: AuthData) -> Identity:
        """The client's identity, or AuthenticationError saying why not (never quoting the secret)."""
        ...


def read_key_material(value: str, what: str) -> bytes:
    """A key or file given as Pulsar accepts it: ``data:[...][;base64],...``, ``file:`` URL,
    a path, or the content itself in base64."""
    try:
        if value.startswith("data:"):
            header, sep, body = value[len("data:"):].partition(",")
            if not sep:
                raise ValueError("a data: URL needs a ','")
            if header.endswith(";base64"):
                return base64.b64decode(body, validate=True)
            return urllib.parse.unquote_to_bytes(body)
        if value.startswith("file:"):
            parsed = urllib.parse.urlparse(value)
            path = urllib.parse.unquote(parsed.path or parsed.netloc)
            with open(path, "rb") as f:
                return f.read()
        if os.path.exists(value):
            with open(value, "rb") as f:
                return f.read()
        return base64.b64decode(value, validate=True)
    except (OSError, ValueError, binascii.Error) as exc:
        # Name the setting, never its value: it may be the secret itself.
        raise ConfigError(f"{what}: cannot read the key (expected data:, file:, a path or base64): "
                          f"{type(exc).__name__}") from None


# -- tls ---------------------------------------------------------------------------------------------

class TlsProvider:
    """Role = the Common Name of the client certificate the TLS handshake verified."""

    method = "tls"
    pulsar_name = "AuthenticationProviderTls"  # (the provider_name label of the authentication metrics)

    def __init__(self, cfg: BrokerConfig) -> None:
        if not cfg.tlsTrustCertsFilePath:
            log.warning("authentication provider tls: tlsTrustCertsFilePath is not set, so no client "
                        "certificate can be verified and no client can authenticate with tls")

    def authenticate(self, data: AuthData) -> Identity:
        cn = common_name(data.peer_cert) if data.peer_cert else None
        if not cn:
            raise AuthenticationError("Client unable to authenticate with TLS certificate: "
                                      "no trusted client certificate with a CN", "INVALID_CERTS")
        return Identity(cn)


def common_name(cert: PeerCert) -> str | None:
    """The subject's CN. Pulsar reads the RFC 2253 form, most specific RDN first: the last CN here."""
    found = None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                found = value
    return found


# -- token (JWT) -----------------------------------------------------------------------------------

class TokenProvider:
    """JWT signed with ``tokenSecretKey`` (HMAC) or checked with ``tokenPublicKey`` (RSA / EC)."""

    method = "token"
    pulsar_name = "AuthenticationProviderToken"  # (the provider_name label of the authentication metrics)

    def __init__(self, cfg: BrokerConfig) -> None:
        self.key: Any
        if cfg.tokenSecretKey:
            secret = read_key_material(cfg.tokenSecretKey, "tokenSecretKey")
            self.algorithms = [alg for alg, n in MIN_HMAC_KEY_BYTES.items() if len(secret) >= n]
            if not self.algorithms:
                raise ConfigError(f"tokenSecretKey: the key has {len(secret) * 8} bits; HS256 needs at "
                                  f"least 256 (as Pulsar)")
            self.key = secret
        elif cfg.tokenPublicKey:
            self.key, self.algorithms = _public_key(cfg.tokenPublicKey, cfg.tokenPublicAlg)
        else:
            raise ConfigError("authentication provider token: set tokenSecretKey or tokenPublicKey")
        self.role_claim = cfg.tokenAuthClaim or "sub"
        self.audience = cfg.tokenAudience or None
        # Pulsar checks nothing when only tokenAudience is set; we read it as the "aud" claim
        # rather than silently accept every audience.
        self.audience_claim = cfg.tokenAudienceClaim or ("aud" if self.audience else None)
        if self.audience_claim and not self.audience:
            raise ConfigError(f"tokenAudienceClaim={self.audience_claim} is set but tokenAudience "
                              "(this broker's audience) is not")
        self.leeway = cfg.tokenAllowedClockSkewSeconds
        # Pulsar's AuthenticationMetricsToken: tokens refused as expired, and the minutes left on
        # the accepted tokens that expire (pulsar_expiring_token_minutes, per bucket, not cumulative).
        self.expired_tokens = 0
        self.expiring_minutes = [0] * (len(EXPIRING_TOKEN_MINUTES_BUCKETS) + 1)
        self.expiring_minutes_sum = 0.0
        # Where else the seconds left go: OpenTelemetry's pulsar.authentication.token.expiry.duration, once bound.
        self.record_expiry: Callable[[float], object] = _ignore

    def authenticate(self, data: AuthData) -> Identity:
        claims = self.verify(bearer_token(data))
        identity = Identity(self.role_of(claims), expiry(claims))
        if identity.expires_at is not None:
            minutes = (identity.expires_at - time.time()) / 60.0
            self.expiring_minutes[bisect.bisect_left(EXPIRING_TOKEN_MINUTES_BUCKETS, minutes)] += 1
            self.expiring_minutes_sum += minutes
            self.record_expiry(minutes * 60.0)
        return identity

    def verify(self, token: str) -> dict[str, Any]:
        import jwt

        try:
            claims: dict[str, Any] = jwt.decode(
                token, self.key, algorithms=self.algorithms, leeway=self.leeway,
                # jjwt checks exp and nbf only; "aud" is checked below against tokenAudienceClaim.
                options={"verify_aud": False, "verify_iat": False, "enforce_minimum_key_length": True},
            )
        except jwt.PyJWTError as exc:  # the message names the problem, never the token
            if isinstance(exc, jwt.ExpiredSignatureError):
                self.expired_tokens += 1
            raise AuthenticationError(f"Failed to authenticate token: {exc}", "INVALID_TOKEN") from None
        if self.audience_claim:
            audience = claims.get(self.audience_claim)
            audiences = audience if isinstance(audience, list) else [audience]
            if self.audience not in audiences:
                raise AuthenticationError(f"Failed to authenticate token: audience claim "
                                          f"'{self.audience_claim}' does not contain this broker's audience",
                                          "INVALID_AUDIENCES")
        return claims

    def role_of(self, claims: dict[str, Any]) -> str:
        value = claims.get(self.role_claim)
        if isinstance(value, list) and value:
            value = value[0]  # Pulsar takes the first element of a list claim
        if not isinstance(value, str) or not value:
            raise AuthenticationError(f"Failed to authenticate token: no role in claim '{self.role_claim}'",
                                      "INVALID_TOKEN")
        return value


def bearer_token(data: AuthData) -> str:
    """The token of a CONNECT's auth data or of an HTTP ``Authorization: Bearer`` header."""
    if data.command_data is not None:
        token = data.command_data.decode("utf-8", "replace")
    elif data.http_authorization is not None:
        scheme, _, token = data.http_authorization.partition(" ")
        if scheme.lower() != "bearer":
            raise AuthenticationError("Invalid HTTP Authorization header: expected 'Bearer <token>'",
                                      "INVALID_AUTH_DATA")
    else:
        raise AuthenticationError("No token credentials passed", "INVALID_AUTH_DATA")
    token = token.strip()
    if not token:
        raise AuthenticationError("Blank token found", "INVALID_AUTH_DATA")
    return token


def expiry(claims: dict[str, Any]) -> float | None:
    exp = claims.get("exp")
    return float(exp) if isinstance(exp, int | float) else None


def _public_key(value: str, alg: str) -> tuple[Any, list[str]]:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.serialization import load_der_public_key, load_pem_public_key

    raw = read_key_material(value, "tokenPublicKey")
    try:
        key = load_pem_public_key(raw) if raw.lstrip().startswith(b"-----") else load_der_public_key(raw)
    except ValueError:
        raise ConfigError("tokenPublicKey: not a DER or PEM public key") from None
    if isinstance(key, rsa.RSAPublicKey):
        family: tuple[str, ...] = RSA_ALGORITHMS
        if key.key_size < MIN_RSA_KEY_BITS:
            raise ConfigError(f"tokenPublicKey: RSA keys need at least {MIN_RSA_KEY_BITS} bits")
    elif isinstance(key, ec.EllipticCurvePublicKey):
        family = EC_ALGORITHMS
    else:
        raise ConfigError("tokenPublicKey: only RSA and EC public keys are supported")
    if alg not in family:
        raise ConfigError(f"tokenPublicAlg={alg} does not match the {type(key).__name__.removesuffix('PublicKey')} "
                          f"key in tokenPublicKey (one of {', '.join(family)})")
    return key, list(family)


# -- basic (htpasswd) ------------------------------------------------------------------------------

# The formats Pulsar's AuthenticationProviderBasic verifies: Apache MD5 (htpasswd -m, the default)
# and crypt (htpasswd -d). Others ($2y$ bcrypt, {SHA}, plain) are reported at start.
@functools.cache
def _dummy_apr1() -> str:
    from passlib.hash import apr_md5_crypt

    return str(apr_md5_crypt.hash("pulsar-py-broker-dummy"))


def _verifier(stored: str) -> Callable[[str], bool] | None:
    from passlib.hash import apr_md5_crypt, des_crypt

    if stored.startswith("$apr1$"):
        return lambda password: bool(apr_md5_crypt.verify(password, stored))
    if len(stored) == 13 and des_crypt.identify(stored):
        return lambda password: bool(des_crypt.verify(password, stored))
    return None


class BasicProvider:
    """Users and password hashes from an htpasswd file (``basicAuthConf``)."""

    method = "basic"
    pulsar_name = "AuthenticationProviderBasic"  # (the provider_name label of the authentication metrics)

    def __init__(self, cfg: BrokerConfig) -> None:
        if not cfg.basicAuthConf:
            raise ConfigError("authentication provider basic: basicAuthConf (the htpasswd file) is not set")
        text = read_key_material(cfg.basicAuthConf, "basicAuthConf").decode("utf-8", "replace")
        self.users: dict[str, Callable[[str], bool]] = {}
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, stored = line.partition(":")
            if not sep or not user or not stored or ":" in stored:
                raise ConfigError(f"basicAuthConf line {lineno}: expected user:hash")
            verify = _verifier(stored)
            if verify is None:
                log.warning("basicAuthConf: user %s has a password hash format Pulsar does not accept "
                            "(use htpasswd -m or -d); that user cannot log in", user)
                continue
            self.users[user] = verify

    def authenticate(self, data: AuthData) -> Identity:
        if data.command_data is not None:
            params = data.command_data.decode("utf-8", "replace")
        elif data.http_authorization is not None:
            scheme, _, encoded = data.http_authorization.partition(" ")
            if scheme.lower() != "basic":
                raise AuthenticationError("Authentication token has to be started with \"Basic \"", "INVALID_HEADER")
            try:
                params = base64.b64decode(encoded.strip(), validate=True).decode("utf-8", "replace")
            except (binascii.Error, ValueError):
                raise AuthenticationError("Base64 decoding is failure", "INVALID_AUTH_DATA") from None
        else:
            raise AuthenticationError("Authentication data source does not have data", "EMPTY_AUTH_DATA")
        user, sep, password = params.partition(":")
        if not sep:
            raise AuthenticationError("Base64 decoded params are invalid", "INVALID_AUTH_DATA")
        verify = self.users.get(user)
        if verify is None:
            from passlib.hash import apr_md5_crypt

            apr_md5_crypt.verify(password, _dummy_apr1())  # same work as for a known user: no user probing by timing
            raise AuthenticationError("Unknown user or invalid password", "INVALID_TOKEN")
        if not verify(password):
            raise AuthenticationError("Unknown user or invalid password", "INVALID_TOKEN")
        return Identity(user)


# -- names accepted in authenticationProviders ----------------------------------------------------

_PULSAR_PACKAGE = "org.apache.pulsar.broker.authentication."
PROVIDERS: dict[str, type[TlsProvider] | type[TokenProvider] | type[BasicProvider]] = {
    "tls": TlsProvider,
    "token": TokenProvider,
    "basic": BasicProvider,
    _PULSAR_PACKAGE + "AuthenticationProviderTls": TlsProvider,
    _PULSAR_PACKAGE + "AuthenticationProviderToken": TokenProvider,
    _PULSAR_PACKAGE + "AuthenticationProviderBasic": BasicProvider,
}


OPENID_NAMES = ("openid", _PULSAR_PACKAGE + "oidc.AuthenticationProviderOpenID")


def make_provider(name: str, cfg: BrokerConfig) -> AuthenticationProvider:
    if name.strip() in OPENID_NAMES:
        from broker.auth.openid import OpenIDProvider  # (it builds on this module)

        return OpenIDProvider(cfg)
    cls = PROVIDERS.get(name.strip())
    if cls is None:
        raise ConfigError(f"authentication provider {name!r} is not supported; use tls, token, basic or openid "
                          f"(or Pulsar's {_PULSAR_PACKAGE}AuthenticationProvider{{Tls,Token,Basic}}, "
                          f"{OPENID_NAMES[1]})")
    return cls(cfg)
