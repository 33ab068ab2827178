"""OpenID Connect authentication (Pulsar's AuthenticationProviderOpenID, PIP-257).

Clients present a JWT from an identity provider (the official clients' OAuth2 plugin, or any
token) with the "token" method. The token's ``iss`` must be one of ``openIDAllowedTokenIssuers``;
the issuer's keys come from its discovery document (``<issuer>/.well-known/openid-configuration``,
whose ``issuer`` must be the same string) and the ``jwks_uri`` it names. The key is the one whose
``kid`` is the token's; RS256/384/512 and ES256/384/512 only, and a key that names an ``alg`` must
name the token's. The token must carry ``iat``, ``exp``, ``nbf`` and ``sub`` (and the role claim,
``openIDRoleClaim``), an ``aud`` among ``openIDAllowedAudiences``, and be valid now, within
``openIDAcceptedTimeLeewaySeconds``. The role is the role claim (a list's first element).

Authentication is synchronous here (at CONNECT and for each HTTP request), so keys are fetched in
the background, on the event loop: for every allowed issuer when the broker starts, again once
they are ``openIDCacheRefreshAfterWriteSeconds`` old (the old ones serve meanwhile), and when a
token names a key id the cache does not have, at most every ``openIDKeyIdCacheMissRefreshSeconds``
(key rotation). A token refused for an unknown key id is accepted once the keys have arrived; the
official clients retry a refused CONNECT until their operation timeout.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Any

import aiohttp
import jwt

from broker.auth.providers import AuthData, Identity, bearer_token, expiry
from broker.auth.tls import client_context
from broker.config import BrokerConfig, ConfigError
from broker.errors import AuthenticationError

log = logging.getLogger(__name__)

SUPPORTED_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "ES256", "ES384", "ES512"})
DISCOVERY_PATH = ".well-known/openid-configuration"


def discovery_url(issuer: str) -> str:
    return issuer + DISCOVERY_PATH if issuer.endswith("/") else f"{issuer}/{DISCOVERY_PATH}"


class OpenIDProvider:
    method = "token"  # (the official clients' OAuth2 plugin sends its tokens as "token")
    pulsar_name = "AuthenticationProviderOpenID"

    def __init__(self, cfg: BrokerConfig) -> None:
        self.audiences = list(cfg.openIDAllowedAudiences)
        self.issuers = set(cfg.openIDAllowedTokenIssuers)
        if not self.audiences:
            raise ConfigError("Missing configured value for: openIDAllowedAudiences")
        if not self.issuers:
            raise ConfigError("Missing configured value for: openIDAllowedTokenIssuers")
        if cfg.openIDFallbackDiscoveryMode != "DISABLED":
            raise ConfigError(f"openIDFallbackDiscoveryMode={cfg.openIDFallbackDiscoveryMode}: only DISABLED is "
                              "supported (the Kubernetes discovery modes are not)")
        for issuer in sorted(self.issuers):
            if not issuer.lower().startswith("https://"):
                if cfg.openIDRequireIssuersUseHttps:
                    raise ConfigError(f"Issuer URL does not use https, but must: {issuer}")
                log.warning("OpenID issuer %s does not use https (openIDRequireIssuersUseHttps=false)", issuer)
        self.role_claim = cfg.openIDRoleClaim or "sub"
        self.required = ["iat", "exp", "nbf", "sub", *([self.role_claim] if self.role_claim != "sub" else [])]
        self.leeway = cfg.openIDAcceptedTimeLeewaySeconds
        self.refresh_after_s = cfg.openIDCacheRefreshAfterWriteSeconds
        self.miss_refresh_s = cfg.openIDKeyIdCacheMissRefreshSeconds
        self.timeout = aiohttp.ClientTimeout(sock_connect=cfg.openIDHttpConnectionTimeoutMillis / 1000,
                                             sock_read=cfg.openIDHttpReadTimeoutMillis / 1000)
        self.ssl: ssl.SSLContext | None = None
        if cfg.openIDTokenIssuerTrustCertsFilePath.strip():
            try:
                self.ssl = client_context(cfg.openIDTokenIssuerTrustCertsFilePath.strip())
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"openIDTokenIssuerTrustCertsFilePath: {exc}") from None
        # issuer -> {key id: key}, when they were fetched (monotonic), and the fetch under way.
        self.keys: dict[str, dict[str, jwt.PyJWK]] = {}
        self._fetched_at: dict[str, float] = {}
        self._fetching: dict[str, asyncio.Task[None]] = {}

    # -- keys ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """On the event loop: fetch every allowed issuer's keys."""
        for issuer in sorted(self.issuers):
            self.refresh(issuer)

    async def stop(self) -> None:
        tasks = list(self._fetching.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def refresh(self, issuer: str) -> None:
        """Fetch the issuer's keys in the background (unless a fetch is under way)."""
        task = self._fetching.get(issuer)
        if task is not None and not task.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # (not on the loop: the next authentication on it will fetch)
        self._fetching[issuer] = loop.create_task(self._fetch(issuer))

    async def _fetch(self, issuer: str) -> None:
        try:
            async with aiohttp.ClientSession(timeout=self.timeout) as session:
                metadata = await self._get_json(session, discovery_url(issuer))
                if metadata.get("issuer") != issuer:
                    raise ValueError(f"Issuer URL mismatch: [{metadata.get('issuer')}] should match [{issuer}]")
                jwks_uri = metadata.get("jwks_uri")
                if not isinstance(jwks_uri, str) or not jwks_uri:
                    raise ValueError("jwksUri must not be null.")
                document = await self._get_json(session, jwks_uri)
            keys: dict[str, jwt.PyJWK] = {}
            for jwk in document.get("keys") or []:
                if isinstance(jwk, dict) and isinstance(jwk.get("kid"), str):
                    try:
                        keys[jwk["kid"]] = jwt.PyJWK(jwk)
                    except jwt.PyJWTError as exc:  # (a key type or curve we cannot use: the others still serve)
                        log.warning("OpenID issuer %s: key %s skipped: %s", issuer, jwk["kid"], exc)
            self.keys[issuer] = keys
            self._fetched_at[issuer] = time.monotonic()
            log.info("OpenID issuer %s: %d signing keys", issuer, len(keys))
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            # Not remembered as a fetch: the next token of this issuer tries again (one fetch at a
            # time), as Pulsar's caches do not keep failed loads.
            log.warning("OpenID issuer %s: keys not retrieved: %s", issuer, exc)

    async def _get_json(self, session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
        async with session.get(url, ssl=self.ssl if self.ssl is not None else True) as reply:
            if reply.status != 200:
                raise ValueError(f"{url} answered HTTP {reply.status}")
            body = await reply.json(content_type=None)
        if not isinstance(body, dict):
            raise ValueError(f"{url} did not answer a JSON object")
        return body

    def _key(self, issuer: str, kid: Any) -> jwt.PyJWK:
        now = time.monotonic()
        fetched = self._fetched_at.get(issuer)
        if fetched is not None and now - fetched > self.refresh_after_s:
            self.refresh(issuer)  # (the keys we have serve until the new ones arrive)
        key = self.keys.get(issuer, {}).get(kid) if isinstance(kid, str) else None
        if key is None:
            if fetched is None or now - fetched > self.miss_refresh_s:
                self.refresh(issuer)  # a rotated key, or keys not fetched yet
            raise AuthenticationError(f"No JWK found for Key ID {kid}", "ERROR_RETRIEVING_PUBLIC_KEY")
        return key

    # -- tokens --------------------------------------------------------------------------------------
    def authenticate(self, data: AuthData) -> Identity:
        token = bearer_token(data)
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise AuthenticationError(f"Unable to decode JWT: {exc}", "ERROR_DECODING_JWT") from None
        issuer = unverified.get("iss")
        if issuer is None:
            raise AuthenticationError("Issuer cannot be null", "UNSUPPORTED_ISSUER")
        if issuer not in self.issuers:
            raise AuthenticationError(f"Issuer not allowed: {issuer}", "UNSUPPORTED_ISSUER")
        key = self._key(issuer, header.get("kid"))
        algorithm = header.get("alg")
        key_algorithm = getattr(key, "_jwk_data", {}).get("alg")
        if key_algorithm is not None and key_algorithm != algorithm:
            raise AuthenticationError(f"JWK's alg [{key_algorithm}] does not match JWT's alg [{algorithm}]",
                                      "ALGORITHM_MISMATCH")
        if algorithm not in SUPPORTED_ALGORITHMS:
            raise AuthenticationError(f"Unsupported algorithm: {algorithm}", "UNSUPPORTED_ALGORITHM")
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key.key, algorithms=[algorithm], audience=self.audiences, leeway=self.leeway,
                options={"require": self.required})
        except jwt.ExpiredSignatureError as exc:
            raise AuthenticationError(f"JWT expired: {exc}", "EXPIRED_JWT") from None
        except jwt.InvalidSignatureError as exc:
            raise AuthenticationError(f"JWT signature verification exception: {exc}",
                                      "ERROR_VERIFYING_JWT_SIGNATURE") from None
        except (jwt.InvalidAudienceError, jwt.MissingRequiredClaimError, jwt.ImmatureSignatureError,
                jwt.InvalidIssuedAtError) as exc:
            raise AuthenticationError(f"JWT contains invalid claim: {exc}", "INVALID_JWT_CLAIM") from None
        except (jwt.PyJWTError, ValueError, TypeError) as exc:  # (e.g. an EC key for an RS256 token)
            raise AuthenticationError(f"JWT verification failed: {exc}", "ERROR_VERIFYING_JWT") from None
        role = claims.get(self.role_claim)
        if isinstance(role, list):
            role = role[0] if role else None
        if not isinstance(role, str) or not role:
            raise AuthenticationError(f"JWT contains invalid claim: no role in '{self.role_claim}'",
                                      "INVALID_JWT_CLAIM")
        return Identity(role, expiry(claims))
