"""Authentication as Pulsar's broker does it (AuthenticationService + ServerCnx's auth state).

``AuthenticationService`` owns the configured providers, keyed by method name ("tls", "token",
"basic"; token and openid share "token" and are tried in turn), counts what each accepts and
refuses, and authenticates HTTP requests. ``ConnectionAuth`` is the authentication state of one
binary connection (and, behind a proxy, the client it speaks for); ServerCnx calls it at CONNECT,
on AUTH_RESPONSE and from the refresh check.

Pulsar's rules, followed here:
- CONNECT names a method. An unknown method (or "none") gets ``anonymousUserRole``; without one
  the connection is refused. A known method's provider must accept the credentials.
- HTTP: the ``X-Pulsar-Auth-Method-Name`` header picks the provider; without it every provider
  is tried in turn. When all fail, the anonymous role applies if set, else 401.
- Credentials that expire (tokens) are re-checked every ``authenticationRefreshCheckSeconds``:
  an expired connection gets AUTH_CHALLENGE; a client that does not support refresh, that has not
  answered the previous challenge, or that answers with another role or bad credentials is closed (bad
  credentials with an ERROR first, the others without, as Pulsar's ServerCnx).
- Behind a proxy that relays its client's credentials (``authenticateOriginalAuthData``), the
  credentials watched and refreshed are the client's: the proxy answers the challenge with its
  client's fresh credentials, which must keep the original principal (Pulsar's ServerCnx uses its
  originalAuthState for both the expiry check and the AUTH_RESPONSE). A proxy that names its client
  without relaying credentials cannot have them re-checked: when its own expire, it is closed.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter

from broker.auth.providers import AuthData, AuthenticationProvider, Identity, PeerCert, make_provider
from broker.config import BrokerConfig
from broker.errors import AuthenticationError
from broker.protocol import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)

# Sent as the challenge's data when asking a client for fresh credentials (Pulsar's
# AuthData.REFRESH_AUTH_DATA); clients answer with their current credentials whatever it says.
REFRESH_AUTH_DATA = b"PulsarAuthRefresh"
METHOD_HEADER = "X-Pulsar-Auth-Method-Name"
# Legacy clients send the deprecated AuthMethod enum instead of auth_method_name.
_LEGACY_METHODS = {pb.AuthMethodNone: "none", pb.AuthMethodYcaV1: "ycav1", pb.AuthMethodAthens: "athens"}


class AuthenticationService:
    def __init__(self, cfg: BrokerConfig) -> None:
        self.enabled = cfg.authenticationEnabled
        self.anonymous_role = cfg.anonymousUserRole.strip() or None
        self.authenticate_original = cfg.authenticateOriginalAuthData
        # Providers by method; a method may have several (token and openid), tried in turn as
        # Pulsar's AuthenticationProviderList does.
        self.providers: dict[str, list[AuthenticationProvider]] = {}
        # Refused requests, binary and HTTP; and per provider, what each accepted and refused (with
        # the refusal's reason): Pulsar's pulsar_authentication_{success,failures}_total.
        self.failures = 0
        self.successes_by: Counter[tuple[str, str]] = Counter()  # (provider_name, auth_method)
        self.failures_by: Counter[tuple[str, str, str]] = Counter()  # (provider_name, auth_method, reason)
        if not self.enabled:
            return
        for name in cfg.authenticationProviders:
            provider = make_provider(name, cfg)
            same_method = self.providers.setdefault(provider.method, [])
            if type(provider) not in (type(p) for p in same_method):  # (else listed twice, by short and class name)
                same_method.append(provider)
        if not self.providers:
            log.warning("authenticationEnabled=true but no authenticationProviders: every client gets "
                        "the anonymous role%s", "" if self.anonymous_role else " (none is set: all are refused)")
        log.info("authentication enabled: providers %s, anonymous role %s",
                 ", ".join(self.providers) or "none", self.anonymous_role or "(none)")

    def start(self) -> None:
        """On the event loop, once: providers that fetch keys in the background start now."""
        for same_method in self.providers.values():
            for provider in same_method:
                start = getattr(provider, "start", None)
                if start is not None:
                    start()

    async def stop(self) -> None:
        for same_method in self.providers.values():
            for provider in same_method:
                stop = getattr(provider, "stop", None)
                if stop is not None:
                    await stop()

    @property
    def refreshes(self) -> bool:
        """Whether any provider issues credentials that expire (then live connections are re-checked)."""
        return self.enabled and "token" in self.providers

    def authenticate_http(self, authorization: str | None, peer_cert: PeerCert | None,
                          method: str | None) -> str:
        """The role of an HTTP request, or AuthenticationError (answered with 401)."""
        data = AuthData(http_authorization=authorization, peer_cert=peer_cert)
        if method is not None:
            providers = self.providers.get(method)
            if providers is None:
                self.failures += 1
                raise AuthenticationError(f"Unsupported authentication method: [{method}].")
            return self.authenticate(providers, data).role
        refusals: dict[str, AuthenticationError] = {}
        for method, providers in self.providers.items():
            try:
                return self._attempt(providers, data, count_refusals=False).role
            except AuthenticationError as exc:
                refusals[method] = exc  # the method the client meant is not known: try the next
        if self.anonymous_role is not None:
            return self.anonymous_role
        # Counted once, against the provider the credentials were for (Pulsar counts a refusal from
        # every provider tried, so each token request without a client certificate would show as a
        # tls failure).
        scheme = (authorization or "").partition(" ")[0].lower()
        meant = {"bearer": "token", "basic": "basic"}.get(scheme, "tls" if peer_cert else "")
        if meant in refusals:
            for provider in self.providers[meant]:
                self.failures_by[(provider.pulsar_name, provider.method, refusals[meant].reason)] += 1
        self.failures += 1
        raise AuthenticationError("Authentication required")

    def authenticate(self, providers: list[AuthenticationProvider], data: AuthData) -> Identity:
        """The identity the first of a method's providers accepts, or the last one's refusal."""
        try:
            return self._attempt(providers, data)
        except AuthenticationError:
            self.failures += 1
            raise

    def _attempt(self, providers: list[AuthenticationProvider], data: AuthData,
                 count_refusals: bool = True) -> Identity:
        """Each provider in turn (usually one); acceptances counted, and refusals unless the
        caller counts them."""
        error: AuthenticationError | None = None
        for provider in providers:
            try:
                identity = provider.authenticate(data)
            except AuthenticationError as exc:
                if count_refusals:
                    self.failures_by[(provider.pulsar_name, provider.method, exc.reason)] += 1
                error = exc
                continue
            self.successes_by[(provider.pulsar_name, provider.method)] += 1
            return identity
        assert error is not None
        raise error


class PrincipalChanged(AuthenticationError):
    """Fresh credentials of another role than the connection's. Pulsar's ServerCnx closes the connection without
    the ERROR other refused credentials get (its authChallengeSuccessCallback), so ServerCnx does the same."""


class AuthState(enum.Enum):
    NEW = "new"
    AUTHENTICATED = "authenticated"
    # AUTH_CHALLENGE sent for expired credentials; the answer is awaited.
    CHALLENGED = "challenged"


_MOVES = {
    AuthState.NEW: {AuthState.AUTHENTICATED},
    AuthState.AUTHENTICATED: {AuthState.CHALLENGED, AuthState.AUTHENTICATED},
    AuthState.CHALLENGED: {AuthState.AUTHENTICATED},
}


class RefreshAction(enum.Enum):
    NOTHING = "nothing"
    CHALLENGE = "challenge"
    CLOSE = "close"


class ConnectionAuth:
    """Who is on one binary connection, and whether their credentials are still good."""

    def __init__(self, service: AuthenticationService) -> None:
        self.service = service
        self.peer_cert: PeerCert | None = None
        self.state = AuthState.NEW
        self.method = "none"
        self.role: str | None = None
        self.identity: Identity | None = None
        self.supports_refresh = False
        self.refreshes = 0  # credentials refreshed on this connection (for stats and tests)
        self._providers: list[AuthenticationProvider] | None = None  # those of the method it authenticated with
        # The client a proxy connects for (CONNECT's original_principal, or the role of its relayed
        # credentials with authenticateOriginalAuthData); None on a direct connection.
        self.original_principal: str | None = None
        # With authenticateOriginalAuthData: the relayed credentials' identity and the providers of their
        # method (None when the client is anonymous): then these are the ones re-checked on expiry.
        self.original_identity: Identity | None = None
        self._original_providers: list[AuthenticationProvider] | None = None

    def _move(self, new: AuthState) -> None:
        if new not in _MOVES[self.state]:
            raise RuntimeError(f"illegal authentication state move {self.state} -> {new}")
        self.state = new

    def connect(self, cmd: pb.CommandConnect, peer_cert: PeerCert | None) -> None:
        """Authenticate a CONNECT (``peer_cert``: the verified TLS client certificate, if any);
        raises AuthenticationError to refuse it."""
        self.peer_cert = peer_cert or None
        if not self.service.enabled:
            self._move(AuthState.AUTHENTICATED)
            return
        self.supports_refresh = cmd.feature_flags.supports_auth_refresh
        if cmd.HasField("auth_method_name"):
            self.method = cmd.auth_method_name
        elif cmd.HasField("auth_method"):
            self.method = _LEGACY_METHODS.get(cmd.auth_method, "none")
        providers = self.service.providers.get(self.method)
        if providers is None:
            # Pulsar: a method with no provider (including "none") gets the anonymous role.
            if self.service.anonymous_role is None:
                self.service.failures += 1
                raise AuthenticationError(f"No anonymous role, and no authentication provider for "
                                          f"method [{self.method}]")
            self.role = self.service.anonymous_role
        else:
            data = AuthData(cmd.auth_data if cmd.HasField("auth_data") else b"", peer_cert=self.peer_cert)
            self.identity = self.service.authenticate(providers, data)
            self.role = self.identity.role
            self._providers = providers
        if cmd.HasField("original_principal") or cmd.HasField("original_auth_data"):
            self.original_principal = self._original_role(cmd) or None
        self._move(AuthState.AUTHENTICATED)

    def _original_role(self, cmd: pb.CommandConnect) -> str:
        """The client behind a proxy: the principal the proxy names, or, with
        authenticateOriginalAuthData, the role its relayed credentials authenticate as."""
        if not self.service.authenticate_original:
            return cmd.original_principal
        method = cmd.original_auth_method if cmd.HasField("original_auth_method") else "none"
        providers = self.service.providers.get(method)
        if providers is None:
            if self.service.anonymous_role is None:
                self.service.failures += 1
                raise AuthenticationError(f"No anonymous role, and no authentication provider for the original "
                                          f"method [{method}]")
            return self.service.anonymous_role
        self.original_identity = self.service.authenticate(providers, AuthData(cmd.original_auth_data.encode()))
        self._original_providers = providers
        return self.original_identity.role

    @property
    def _refreshes_original(self) -> bool:
        """Whether the credentials to re-check are the relayed client's, not the connection's own."""
        return self._original_providers is not None

    @property
    def refreshed_role(self) -> str | None:
        """The role whose credentials the refresh check watches (for the log)."""
        return self.original_principal if self._refreshes_original else self.role

    def refresh_action(self, now: float) -> RefreshAction:
        """What the periodic check must do for this connection now."""
        identity = self.original_identity if self._refreshes_original else self.identity
        if identity is None or not identity.expired(now):
            return RefreshAction.NOTHING
        if self.original_principal is not None and not self._refreshes_original:
            return RefreshAction.CLOSE  # a proxy that does not relay its client's credentials: no way to re-check
        if not self.supports_refresh or self.state is AuthState.CHALLENGED:
            return RefreshAction.CLOSE  # cannot refresh, or did not answer the last challenge
        self._move(AuthState.CHALLENGED)
        return RefreshAction.CHALLENGE

    def answer(self, cmd: pb.CommandAuthResponse) -> None:
        """Check the credentials of an AUTH_RESPONSE; raises AuthenticationError to close.

        Normally the answer to our challenge; an unsolicited one is checked the same way, as Pulsar does.
        """
        if not self.service.enabled:
            return
        if self._original_providers is not None:  # (a proxy answering with its client's fresh credentials)
            identity = self.service.authenticate(self._original_providers, AuthData(cmd.response.auth_data))
            self._check_same_role(identity, self.original_principal)
            self.original_identity = identity
        else:
            if self._providers is None:
                raise AuthenticationError("Unexpected AuthResponse: this connection has no credentials to refresh")
            identity = self.service.authenticate(self._providers, AuthData(cmd.response.auth_data,
                                                                           peer_cert=self.peer_cert))
            self._check_same_role(identity, self.role)
            self.identity = identity
        self.refreshes += 1
        self._move(AuthState.AUTHENTICATED)

    def _check_same_role(self, identity: Identity, role: str | None) -> None:
        if identity.role != role:
            self.service.failures += 1
            raise PrincipalChanged("Principal cannot change during an authentication refresh")
