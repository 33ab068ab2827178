"""Authentication and authorization of every HTTP request (Pulsar's AuthenticationFilter plus the
checks its admin resources make), as one aiohttp middleware and one table.

Each route's path pattern maps to the access it needs (``ACCESS_RULES``), following Pulsar: broker
and tenant management for super users; namespaces, policies, permissions and topic management
for the tenant's admins; stats, partitions and lookup for roles that may produce or consume;
subscription operations and peeking for roles that may consume. A route the table does not name
is for super users only, so a new endpoint is never open by accident.

A browser's state-changing request from another origin is refused first (``check_origin``:
CSRF). Refusals are AuthenticationError (401: no or bad credentials) and AuthorizationError (403: this
role may not); ``broker.admin.common`` turns them into ``{"reason": ...}`` JSON. Pulsar itself
answers 401 for both.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from broker.auth import Security
from broker.auth.authorization import NAMESPACE_CONSUME, NAMESPACE_LOOKUP, TopicOperation
from broker.auth.service import METHOD_HEADER
from broker.config import BrokerConfig
from broker.errors import AuthenticationError, AuthorizationError
from broker.topic_name import TopicName


class Access(enum.Enum):
    PUBLIC = "no credentials"
    AUTHENTICATED = "any authenticated role"
    SUPER_USER = "a super user"
    TENANT_ADMIN = "an admin of the tenant"
    NAMESPACE_LOOKUP = "produce or consume permission on the namespace"
    NAMESPACE_CONSUME = "consume permission on the namespace"
    TOPIC_LOOKUP = "produce or consume permission on the topic"
    TOPIC_PRODUCE = "produce permission on the topic"
    TOPIC_CONSUME = "consume permission on the topic"


_TOPIC_OPS = {
    Access.TOPIC_LOOKUP: TopicOperation.LOOKUP,
    Access.TOPIC_PRODUCE: TopicOperation.PRODUCE,
    Access.TOPIC_CONSUME: TopicOperation.CONSUME,
}
ORIGINAL_PRINCIPAL_HEADER = "X-Original-Principal"
_GET = frozenset({"GET", "HEAD"})
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_ANY = frozenset({"GET", "HEAD", "PUT", "POST", "DELETE"})
_NS = r"/\{tenant\}/\{ns\}"
_TOPIC = r"/admin/v2/(non-)?persistent" + _NS + r"/\{topic\}"
_SCHEMA = r"/admin/v2/schemas" + _NS + r"/\{topic\}/schema(s|/\{version\})?"

# (methods, canonical route pattern, access): the first match wins.
ACCESS_RULES: tuple[tuple[frozenset[str], re.Pattern[str], Access], ...] = tuple(
    (methods, re.compile(pattern), access) for methods, pattern, access in (
        (_GET, r"/status\.html|/metrics/?", Access.PUBLIC),
        # The console's static files (no data in them: every call they make is authorized here).
        (_GET, r"/|/console/?|/console/\{file\}", Access.PUBLIC),
        (_GET, r"/admin/v2/brokers/ready", Access.AUTHENTICATED),
        (_ANY, r"/admin/v2/brokers/.*", Access.SUPER_USER),
        (_ANY, r"/admin/v2/broker-stats/.*", Access.SUPER_USER),
        (_GET, r"/admin/v2/clusters(/\{cluster\})?", Access.AUTHENTICATED),
        (_ANY, r"/admin/v2/clusters.*", Access.SUPER_USER),
        (_GET, r"/admin/v2/tenants/\{tenant\}", Access.TENANT_ADMIN),
        (_ANY, r"/admin/v2/tenants.*", Access.SUPER_USER),
        # (Pulsar's namespace operations GET_TOPICS and GET_BUNDLE: consume or produce; CLEAR_BACKLOG and
        # UNSUBSCRIBE: consume)
        (_GET, r"/admin/v2/namespaces" + _NS + r"/(topics(Page)?|bundles)", Access.NAMESPACE_LOOKUP),
        (frozenset({"POST"}),
         r"/admin/v2/namespaces" + _NS + r"(/\{bundle\})?/(clearBacklog(/\{sub\})?|unsubscribe/\{sub\})",
         Access.NAMESPACE_CONSUME),
        # Super users only, as Pulsar's NamespacesBase checks them (validateSuperUserAccess): unloading a namespace
        # or a bundle and splitting a bundle (they move load between brokers), and setting or removing a
        # namespace's delayed delivery policy (internalSetDelayedDelivery; its other policies are the tenant
        # admins').
        (frozenset({"PUT"}), r"/admin/v2/namespaces" + _NS + r"(/\{bundle\})?/unload"
                             r"|/admin/v2/namespaces" + _NS + r"/\{bundle\}/split", Access.SUPER_USER),
        (frozenset({"POST", "DELETE"}), r"/admin/v2/namespaces" + _NS + r"/delayedDelivery", Access.SUPER_USER),
        (_ANY, r"/admin/v2/namespaces/\{tenant\}(/.*)?", Access.TENANT_ADMIN),
        (_GET, r"/admin/v2/(non-)?persistent" + _NS + r"(/partitioned)?", Access.NAMESPACE_LOOKUP),
        # (Pulsar's getListFromBundle: the non-persistent topics of one bundle, what getList asks each owner)
        (_GET, r"/admin/v2/non-persistent" + _NS + r"/\{bundle\}", Access.NAMESPACE_LOOKUP),
        # (properties: Pulsar's topic operation GET_METADATA, which lookup rights allow)
        (_GET, _TOPIC + r"/(partitions|stats|partitioned-stats|internalStats|partitioned-internalStats|properties)",
         Access.TOPIC_LOOKUP),
        (_ANY, _TOPIC + r"/(subscriptions|subscription/.*|all_subscription/.*|lastMessageId|ledger/.*"
                        r"|examinemessage|messageid/.*)",
         Access.TOPIC_CONSUME),
        # create / delete, partition changes, unload, terminate, permissions
        (_ANY, _TOPIC + r"(/.*)?", Access.TENANT_ADMIN),
        (_GET, _SCHEMA, Access.TOPIC_LOOKUP),
        (frozenset({"POST"}), r"/admin/v2/schemas" + _NS + r"/\{topic\}/version", Access.TOPIC_LOOKUP),
        (frozenset({"POST"}), r"/admin/v2/schemas" + _NS + r"/\{topic\}/compatibility", Access.TENANT_ADMIN),
        (frozenset({"POST"}), _SCHEMA, Access.TOPIC_PRODUCE),
        (_ANY, _SCHEMA, Access.TENANT_ADMIN),
        (_GET, r"/lookup/v2/topic/\{domain\}" + _NS + r"/\{topic\}", Access.TOPIC_LOOKUP),
        # Transactions: coordinators and transactions span tenants (Pulsar: super user)
        (_ANY, r"/admin/v3/transactions/.*", Access.SUPER_USER),
    )
)


def access_for(method: str, canonical: str) -> Access:
    for methods, pattern, access in ACCESS_RULES:
        if method in methods and pattern.fullmatch(canonical):
            return access
    return Access.SUPER_USER


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def security_middleware(security: Security, cfg: BrokerConfig) -> Any:
    authn, authz = security.authentication, security.authorization
    metrics_need_credentials = cfg.authenticateMetricsEndpoint

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        check_origin(request)
        resource = request.match_info.route.resource
        if not authn.enabled or resource is None:  # no resource: the router answers 404 / 405
            return await handler(request)
        canonical = resource.canonical
        access = access_for(request.method, canonical)
        if access is Access.PUBLIC and not (metrics_need_credentials and canonical.startswith("/metrics")):
            return await handler(request)
        transport = request.transport
        peer_cert = transport.get_extra_info("peercert") if transport is not None else None
        role = authn.authenticate_http(request.headers.get("Authorization"), peer_cert or None,
                                       request.headers.get(METHOD_HEADER))
        if authz.enabled and access is not Access.PUBLIC:
            # A proxy relays the client's role in X-Original-Principal: both must be allowed.
            original = request.headers.get(ORIGINAL_PRINCIPAL_HEADER, "").strip() or None
            if authz.original_principal_problem(role, original, allow_equal=True) is not None:
                raise AuthenticationError("Invalid combination of Original principal cannot be empty if the "
                                          "request is via proxy.")
            _authorize(security, access, role, request)
            if original is not None and original != role:
                _authorize(security, access, original, request)
        return await handler(request)

    return middleware


def check_origin(request: web.Request) -> None:
    """Refuse a state-changing request that a browser sent from another origin (CSRF).

    Browsers send ``Origin`` with every POST, PUT and DELETE; a page of another site that makes
    the user's browser call the admin REST is refused, whether or not authentication is on.
    Clients that are not browsers (pulsar-admin, curl, the console itself, which is served from
    this origin) send no Origin or this one. The console authenticates with an Authorization
    header, never a cookie, so a cross-site page could not borrow its credentials anyway.
    """
    if request.method in _SAFE_METHODS:
        return
    origin = request.headers.get("Origin")
    if origin is None:
        return
    # Behind a reverse proxy the browser's host may be in X-Forwarded-Host (a cross-site page cannot
    # set that header: it is not one a browser sends without a CORS preflight, which is refused).
    hosts = {request.host.lower(), request.headers.get("X-Forwarded-Host", "").split(",")[0].strip().lower()}
    if urlsplit(origin).netloc.lower() not in hosts - {""}:
        raise AuthorizationError(f"Cross-origin {request.method} from {origin} refused: the admin API takes "
                                 "state-changing requests from its own origin only")


def _authorize(security: Security, access: Access, role: str, request: web.Request) -> None:
    authz = security.authorization
    m = request.match_info
    op = _TOPIC_OPS.get(access)
    if op is not None:
        authz.check(_topic_name(request), op, role, m.get("sub", ""))
        return
    if access is Access.AUTHENTICATED:
        allowed = True
    elif access is Access.TENANT_ADMIN:
        allowed = authz.is_tenant_admin(m["tenant"], role)
    elif access is Access.NAMESPACE_LOOKUP:
        allowed = authz.allows_namespace(f"{m['tenant']}/{m['ns']}", role, NAMESPACE_LOOKUP)
    elif access is Access.NAMESPACE_CONSUME:
        allowed = authz.allows_namespace(f"{m['tenant']}/{m['ns']}", role, NAMESPACE_CONSUME)
    else:
        allowed = authz.is_super_user(role)
    if not allowed:
        raise AuthorizationError(f"Role {role!r} is not authorized to {request.method} {request.path}: "
                                 f"this needs {access.value}")


def _topic_name(request: web.Request) -> TopicName:
    m = request.match_info
    domain = m.get("domain") or request.path.split("/")[3]
    if domain not in ("persistent", "non-persistent"):
        domain = "persistent"  # /admin/v2/schemas/...: schemas belong to the persistent name
    return TopicName.parse(f"{domain}://{m['tenant']}/{m['ns']}/{m['topic']}")
