"""Authorization as Pulsar's PulsarAuthorizationProvider does it: may this role do that?

Who may do what:
- super users (``superUserRoles``) may do everything;
- a tenant's admins (its ``adminRoles``) may do everything inside the tenant, including
  creating namespaces and granting permissions;
- other roles need a grant: ``produce`` / ``consume`` on the namespace (``namespace_auth``) or
  on the topic (``destination_auth``; a partition also inherits its partitioned topic's grant to
  the role itself, not a wildcard's).
  A lookup needs either. Consuming also respects ``subscription_auth_roles`` (a subscription
  restricted to some roles) and ``subscription_auth_mode=Prefix`` (the subscription name must
  start with the role).

Grants live in each namespace's ``auth_policies`` (Pulsar's field names), so they survive
restarts with the other policies. Checks read the in-memory metadata: a dict lookup or two,
cheap enough for every LOOKUP, PRODUCER and SUBSCRIBE.
"""

from __future__ import annotations

import enum
import logging
from typing import Any

from broker.config import BrokerConfig
from broker.errors import AuthorizationError
from broker.metadata import policies as P
from broker.metadata.store import BrokerMetadata
from broker.topic_name import TopicName

log = logging.getLogger(__name__)


class TopicOperation(enum.Enum):
    LOOKUP = "lookup"
    PRODUCE = "produce"
    CONSUME = "consume"


class AuthorizationService:
    def __init__(self, cfg: BrokerConfig, metadata: BrokerMetadata) -> None:
        self.enabled = cfg.authorizationEnabled
        self._cfg = cfg
        self._super_users_of: list[str] = cfg.superUserRoles
        self._super_users = frozenset(cfg.superUserRoles)
        self.proxy_roles = frozenset(cfg.proxyRoles)
        self.wildcards = cfg.authorizationAllowWildcardsMatching
        self.metadata = metadata
        if self.enabled:
            log.info("authorization enabled: super users %s", ", ".join(sorted(self.super_users)) or "(none)")

    @property
    def super_users(self) -> frozenset[str]:
        """``superUserRoles``, followed when the dynamic configuration replaces it."""
        if self._cfg.superUserRoles is not self._super_users_of:
            self._super_users_of = self._cfg.superUserRoles
            self._super_users = frozenset(self._super_users_of)
        return self._super_users

    # -- roles -----------------------------------------------------------------------------------------
    def is_super_user(self, role: str | None) -> bool:
        return role is not None and role in self.super_users

    def is_tenant_admin(self, tenant: str, role: str | None) -> bool:
        """A super user, or one of the tenant's adminRoles."""
        if self.is_super_user(role):
            return True
        info = self.metadata.tenants.get(tenant)
        return role is not None and info is not None and role in info.get("adminRoles", ())

    def administers_tenant_through(self, tenant: str, proxy: str, original: str) -> bool:
        """Pulsar's validateAdminAccessForTenant for a call a proxy relays for ``original``: allowed when the proxy's
        role is one of the tenant's adminRoles (whoever it speaks for), else only when the proxy and its client are
        both super users. (So a tenant admin's call through a proxy that is a super user but not the tenant's admin
        is refused, unlike the other checks, which ask each of the two for itself.)"""
        info = self.metadata.tenants.get(tenant)
        if info is not None and proxy in info.get("adminRoles", ()):
            return True
        return self.is_super_user(proxy) and self.is_super_user(original)

    def original_principal_problem(self, role: str | None, original: str | None,
                                   allow_equal: bool = False) -> str | None:
        """Why a (role, original principal) pair is refused, or None (Pulsar's rule): a proxy role
        must name an original principal that is not itself a proxy role; any other role must not
        name one (``allow_equal``: unless it names itself, which REST tolerates)."""
        if role is not None and role in self.proxy_roles:
            if not original:
                return "originalPrincipal must be provided when connecting with a proxy role."
            if original in self.proxy_roles:
                return "originalPrincipal cannot be a proxy role."
        elif original and not (allow_equal and original == role):
            return "cannot specify originalPrincipal when connecting without valid proxy role."
        return None

    def check_proxied(self, name: TopicName, op: TopicOperation, role: str | None, original: str | None,
                      subscription: str = "") -> None:
        """``check`` for a connection, which a proxy may hold on behalf of a client: then the proxy's
        role and the client's (the original principal) must both be allowed."""
        self.check(name, op, role, subscription)
        if original is not None:
            self.check(name, op, original, subscription)

    def allows_namespace_proxied(self, namespace: str, role: str | None, original: str | None,
                                 actions: tuple[str, ...]) -> bool:
        """``allows_namespace`` for a connection a proxy may hold: both roles must be allowed."""
        return self.allows_namespace(namespace, role, actions) and (
            original is None or self.allows_namespace(namespace, original, actions))

    # -- topics ------------------------------------------------------------------------------------------
    def allows(self, name: TopicName, op: TopicOperation, role: str | None, subscription: str = "") -> bool:
        if not self.enabled:
            return True
        if role is None:
            return False
        if self.is_tenant_admin(name.tenant, role):
            return True
        if op is TopicOperation.PRODUCE:
            return self._granted(name, role, "produce")
        if op is TopicOperation.CONSUME:
            return self._may_consume(name, role, subscription)
        return self._granted(name, role, "produce") or self._may_consume(name, role, "")

    def check(self, name: TopicName, op: TopicOperation, role: str | None, subscription: str = "") -> None:
        """Raises AuthorizationError unless ``role`` may do ``op`` on ``name``."""
        if not self.allows(name, op, role, subscription):
            what = f"subscription {subscription} of " if subscription else ""
            raise AuthorizationError(f"Role {role!r} is not authorized to {op.value} on {what}topic {name}")

    def allows_namespace(self, namespace: str, role: str | None, actions: tuple[str, ...]) -> bool:
        """A namespace operation that Pulsar's PulsarAuthorizationProvider.allowNamespaceOperation lets a role
        do with one of ``actions`` granted on the namespace (topic grants do not count), besides tenant admins:
        listing its topics or bundles with consume or produce (``NAMESPACE_LOOKUP``), clearing its backlog or
        unsubscribing with consume (``NAMESPACE_CONSUME``)."""
        if not self.enabled:
            return True
        if role is None:
            return False
        tenant = namespace.split("/", 1)[0]
        grants = self._auth(namespace)[P.NAMESPACE_AUTH]
        return self.is_tenant_admin(tenant, role) or any(self._match(grants, role, a) for a in actions)

    # -- grants ------------------------------------------------------------------------------------------
    def _auth(self, namespace: str) -> dict[str, Any]:
        stored = self.metadata.policy(namespace, P.AUTH_POLICIES) or {}
        return {P.NAMESPACE_AUTH: stored.get(P.NAMESPACE_AUTH, {}),
                P.DESTINATION_AUTH: stored.get(P.DESTINATION_AUTH, {}),
                P.SUBSCRIPTION_AUTH_ROLES: stored.get(P.SUBSCRIPTION_AUTH_ROLES, {})}

    def _granted(self, name: TopicName, role: str, action: str) -> bool:
        auth = self._auth(name.namespace)
        if self._match(auth[P.NAMESPACE_AUTH], role, action):
            return True
        topics = auth[P.DESTINATION_AUTH]
        if self._match(topics.get(name.full, {}), role, action):
            return True
        # A partition also takes its partitioned topic's grants, the role's own only: Pulsar's
        # PulsarAuthorizationProvider.checkPermission looks the role up in the grants of
        # TopicName.getPartitionedTopicName after the wildcards, which it matches on the namespace's and the
        # topic's own grants alone.
        return name.partition_index >= 0 and action in topics.get(name.base.full, {}).get(role, ())

    def _may_consume(self, name: TopicName, role: str, subscription: str) -> bool:
        if subscription:
            roles = self._auth(name.namespace)[P.SUBSCRIPTION_AUTH_ROLES].get(subscription)
            if roles and role not in roles:
                return False
            if self.metadata.policy(name.namespace, P.SUBSCRIPTION_AUTH_MODE) == "Prefix" \
                    and not subscription.startswith(role):
                return False
        return self._granted(name, role, "consume")

    def _match(self, grants: dict[str, list[str]], role: str, action: str) -> bool:
        if action in grants.get(role, ()):
            return True
        if not self.wildcards:
            return False
        # authorizationAllowWildcardsMatching: "app-*" grants to every role starting with "app-",
        # "*.ops" to every role ending with ".ops".
        for granted, actions in grants.items():
            if action not in actions or not granted:
                continue
            if granted.endswith("*") and role.startswith(granted[:-1]):
                return True
            if granted.startswith("*") and role.endswith(granted[1:]):
                return True
        return False


# Pulsar's namespace operations open to roles with grants (PulsarAuthorizationProvider.allowNamespaceOperation):
# GET_TOPIC(S) and GET_BUNDLE with consume or produce; UNSUBSCRIBE and CLEAR_BACKLOG with consume.
NAMESPACE_LOOKUP = ("consume", "produce")
NAMESPACE_CONSUME = ("consume",)
