"""Security: TLS, authentication and authorization, with Apache Pulsar's configuration keys.

- ``tls``: the SSLContext of the pulsar+ssl:// and HTTPS listeners (tlsCertificateFilePath, ...).
- ``providers``: the tls, token (JWT), basic (htpasswd) and openid (OpenID Connect) authentication providers.
- ``service``: which provider serves a CONNECT or an HTTP request; one connection's auth state
  (refresh of expiring credentials with AUTH_CHALLENGE).
- ``authorization``: super users, tenant admins, produce / consume grants.
- ``http``: the aiohttp middleware that authenticates and authorizes every admin call.

The binary side hooks in at ServerCnx (CONNECT, AUTH_RESPONSE, LOOKUP, PARTITIONED_METADATA,
PRODUCER, SUBSCRIBE, ...); nothing here does I/O except reading key files at start.
"""

from __future__ import annotations

import logging
import ssl

from broker.auth.authorization import AuthorizationService, TopicOperation
from broker.auth.service import AuthenticationService, ConnectionAuth
from broker.auth.tls import server_context
from broker.config import BrokerConfig, ConfigError
from broker.metadata.store import BrokerMetadata

__all__ = ["AuthenticationService", "AuthorizationService", "ConnectionAuth", "Security", "TopicOperation"]

log = logging.getLogger(__name__)


class Security:
    """A broker's security settings, checked and loaded once at start (ConfigError if unusable)."""

    def __init__(self, cfg: BrokerConfig, metadata: BrokerMetadata) -> None:
        tls_wanted = cfg.brokerServicePortTls is not None or cfg.webServicePortTls is not None
        if cfg.tlsEnabled and not tls_wanted:
            log.warning("tlsEnabled=true has no effect (deprecated in Pulsar too): set brokerServicePortTls "
                        "and/or webServicePortTls to open TLS listeners")
        self.tls_context: ssl.SSLContext | None = server_context(cfg) if tls_wanted else None
        if cfg.authorizationEnabled and not cfg.authenticationEnabled:
            raise ConfigError("authorizationEnabled=true needs authenticationEnabled=true: without "
                              "authentication no client has a role to authorize")
        self.authentication = AuthenticationService(cfg)
        if self.authentication.refreshes and cfg.authenticationRefreshCheckSeconds <= 0:
            raise ConfigError("authenticationRefreshCheckSeconds must be > 0")
        self.authorization = AuthorizationService(cfg, metadata)
