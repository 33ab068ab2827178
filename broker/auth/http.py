"""Authentication and authorization of every HTTP request (Pulsar's AuthenticationFilter plus the
checks its admin resources make), as one aiohttp middleware and one table.

Each route's path pattern maps to the access it needs (``ACCESS_RULES``), following Pulsar: broker
and tenant management for super users; namespaces, policies, permissions and topic management
for the tenant's admins; stats, partitions and lookup for roles that may produce or consume;
subscription operations and peeking for roles that may consume. A route the table does not name
is for super users only, so a new endpoint is never open by accident.

A browser's state-changing request from another origin is refused first (``check_origin``:
CSRF, 403). Missing or refused credentials are 401 "Authentication required", whatever the reason
(Pulsar's AuthenticationFilter answers so; the reason goes to the log), also on a path no route serves, or with a
method the route has not, under /admin, /lookup and /topics (``AUTHENTICATED_CONTEXTS``: the filter comes before
Pulsar's routing; the router's 404 / 405 answer those who are authenticated). A role that may not make the
call gets what the Pulsar check guarding that route answers (each rule names it: ``Check`` in
``broker.auth.refusals``): 401 from the super-user, tenant and topic-operation checks, 403 from the
namespace-operation and policy checks, in Pulsar's words; 404 "Tenant does not exist" instead from a
check that reads the tenant when there is none (``Check.reads_tenant``). ``broker.admin.common`` turns
them into ``{"reason": ...}`` JSON.

Where the check sits in Pulsar's handler matters when something before it answers first: each rule says
(``Order``). Most checks come first; a few handlers read the namespace first (a missing one is 404 before
any refusal); a few check later, after steps that answer on their own (503, 500, 307), or only on one of
their branches: those rules leave the check to the handler, which makes it with ``check_deferred`` where
Pulsar's does (or says with ``skip_deferred`` that its branch makes none). A few make another check first, the
topic's LOOKUP (``Order.AFTER_LOOKUP``), then leave theirs to the handler the same way. A handler that makes
none of the checks left to it is a 500, never a route open by accident.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from aiohttp import web

from broker.auth import Security
from broker.auth.authorization import NAMESPACE_CONSUME, NAMESPACE_LOOKUP, TopicOperation
from broker.auth.refusals import (
    INVALID_PRINCIPALS,
    NAMESPACE_NOT_FOUND,
    TENANT_NOT_FOUND,
    Check,
    Refused,
    RefusedError,
    policy_name,
    policy_operation,
    topic_operation,
)
from broker.auth.service import METHOD_HEADER
from broker.config import BrokerConfig
from broker.errors import AuthenticationError, AuthorizationError
from broker.topic_name import TopicName
from broker.transactions.model import ASSIGN_TOPIC

log = logging.getLogger(__name__)

# Pulsar's AuthenticationFilter answers every refused or missing credential with this (a 401).
AUTHENTICATION_REQUIRED = "Authentication required"
# The servlet contexts Pulsar 4.0.7's PulsarService registers with authentication required (admin v1, v2 and v3 under
# /admin, lookups, the REST producer); the others (/metrics, /status.html, static files) are answered without it.
AUTHENTICATED_CONTEXTS = ("/admin", "/lookup", "/topics")


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


class Order(enum.Enum):
    """Where Pulsar's handler makes its check, so what answers before a refusal."""

    FIRST = "before anything else"
    # validateGlobalNamespaceOwnership first (creating a topic, the HTTP lookup): a namespace that does not exist
    # is 404 NAMESPACE_NOT_FOUND, and one this cluster does not serve gets the peer cluster's answer (the
    # middleware's ``cluster_first``), before the check. (Here for the roles the check refuses; the handler and the
    # ownership middleware answer the others.)
    AFTER_NAMESPACE = "after reading the namespace"
    # Later, or on one branch only: the handler calls check_deferred (or skip_deferred) where Pulsar's checks.
    IN_HANDLER = "where the handler makes it"
    # Pulsar's handler reads the topic's partitioned metadata first (AdminResource.getPartitionedTopicMetadataAsync:
    # the LOOKUP check of the topic, then the namespace's cluster), its own check later: the LOOKUP check is made
    # first (``lookup_first``), the ownership middleware answers a namespace a peer cluster serves (307), and the
    # rule's check is left to the handler as IN_HANDLER (made before the topic's owner is looked for, too). A
    # partition's name skips the partitioned metadata (internalTruncateTopicAsync): the rule's check first.
    AFTER_LOOKUP = "after the topic's LOOKUP check and the namespace's cluster"


class Rule(NamedTuple):
    """Who may call the routes ``pattern`` matches with ``methods``, and how Pulsar refuses the others: the
    ``check`` guarding them there and the operation it names (None: from the route, see ``broker.auth.refusals``;
    the PUBLIC and AUTHENTICATED rules refuse no authenticated role), where the check is made (``order``), and the
    topic it is about when the route names none (``topic``)."""

    methods: frozenset[str]
    pattern: re.Pattern[str]
    access: Access
    check: Check = Check.SUPER_USER
    operation: str | None = None
    order: Order = Order.FIRST
    topic: str | None = None


_TOPIC_OPS = {
    Access.TOPIC_LOOKUP: TopicOperation.LOOKUP,
    Access.TOPIC_PRODUCE: TopicOperation.PRODUCE,
    Access.TOPIC_CONSUME: TopicOperation.CONSUME,
}
ORIGINAL_PRINCIPAL_HEADER = "X-Original-Principal"
_GET = frozenset({"GET", "HEAD"})
_PUT = frozenset({"PUT"})
_POST = frozenset({"POST"})
_DELETE = frozenset({"DELETE"})
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_ANY = frozenset({"GET", "HEAD", "PUT", "POST", "DELETE"})
_NS = r"/\{tenant\}/\{ns\}"
_NAMESPACE = r"/admin/v2/namespaces" + _NS
_TOPIC = r"/admin/v2/(non-)?persistent" + _NS + r"/\{topic\}"
_SCHEMA = r"/admin/v2/schemas" + _NS + r"/\{topic\}/schema(s|/\{version\})?"
# A topic's policies (Pulsar's validateTopicPolicyOperation; a partitioned topic's partition count is one too).
_TOPIC_POLICIES = (r"(autoSubscriptionCreation|backlogQuota|backlogQuotaMap|compactionThreshold|deduplicationEnabled"
                   r"|deduplicationSnapshotInterval|delayedDelivery|dispatchRate|dispatcherPauseOnAckStatePersistent"
                   r"|entryFilters|inactiveTopicPolicies|maxConsumers|maxConsumersPerSubscription|maxProducers"
                   r"|maxSubscriptionsPerTopic|maxUnackedMessagesOnConsumer|maxUnackedMessagesOnSubscription"
                   r"|messageTTL|offloadPolicies|persistence|policies|publishRate|replication|replicatorDispatchRate|retention"
                   r"|schemaCompatibilityStrategy|schemaValidationEnforced|shadowTopics|subscribeRate"
                   r"|subscriptionDispatchRate|subscriptionTypesEnabled|\{sub\}/dispatchRate)")

# The first match wins. (Pulsar's checks: BrokersBase, ClustersBase and TenantsBase ask for a super user or the
# operation; NamespacesBase, PersistentTopicsBase, SchemasResourceBase and TopicLookupBase as each rule says.)
ACCESS_RULES: tuple[Rule, ...] = tuple(
    Rule(methods, re.compile(pattern), access, *how) for methods, pattern, access, *how in (
        (_GET, r"/status\.html|/metrics/?", Access.PUBLIC),
        # The console's static files (no data in them: every call they make is authorized here).
        (_GET, r"/|/console/?|/console/\{file\}", Access.PUBLIC),
        # The WebSocket API authenticates and authorizes in its handler, as Pulsar's (broker/websocket/service.py:
        # the token may come as a query parameter, and a refusal has its own words).
        (_GET, r"/ws/(v2/(producer|consumer|reader)|v3/consumer)/\{tail\}", Access.PUBLIC),
        # (Pulsar checks neither: any authenticated role)
        (_GET, r"/admin/v2/brokers/(ready|version)", Access.AUTHENTICATED),
        (_GET, r"/admin/v2/brokers/health", Access.SUPER_USER, Check.BROKER, "HEALTH_CHECK"),
        (_GET, r"/admin/v2/brokers/leaderBroker", Access.SUPER_USER, Check.BROKER, "GET_LEADER_BROKER"),
        (_GET, r"/admin/v2/brokers/configuration(/values)?", Access.SUPER_USER, Check.BROKER,
         "LIST_DYNAMIC_CONFIGURATIONS"),
        (_GET, r"/admin/v2/brokers/configuration/runtime", Access.SUPER_USER, Check.BROKER,
         "LIST_RUNTIME_CONFIGURATIONS"),
        (_POST, r"/admin/v2/brokers/configuration/\{configName\}/\{configValue\}", Access.SUPER_USER, Check.BROKER,
         "UPDATE_DYNAMIC_CONFIGURATION"),
        (_DELETE, r"/admin/v2/brokers/configuration/\{configName\}", Access.SUPER_USER, Check.BROKER,
         "DELETE_DYNAMIC_CONFIGURATION"),
        (_GET, r"/admin/v2/brokers/backlog-quota-check", Access.SUPER_USER, Check.BROKER, "CHECK_BACKLOG_QUOTA"),
        (_GET, r"/admin/v2/brokers(/\{cluster\})?", Access.SUPER_USER, Check.BROKER, "LIST_BROKERS"),
        (_POST, r"/admin/v2/brokers/shutdown", Access.SUPER_USER, Check.BROKER, "SHUTDOWN"),
        (_GET, r"/admin/v2/brokers/\{cluster\}/\{broker\}/ownedNamespaces", Access.SUPER_USER, Check.BROKER,
         "LIST_OWNED_NAMESPACES"),
        (_ANY, r"/admin/v2/brokers/.*", Access.SUPER_USER),
        (_ANY, r"/admin/v2/broker-stats/.*", Access.SUPER_USER),
        # The bookies and their racks (admin.v2.Bookies: validateSuperUserAccess first in every handler).
        (_ANY, r"/admin/v2/bookies/.*", Access.SUPER_USER),
        # Resource quotas (ResourceQuotasBase: validateSuperUserAccessAsync in every handler, after Jersey has read
        # the body, 400 before, and after the v2 resource's validateNamespaceName, 412 before): broker/admin/
        # resource_quotas.py checks where Pulsar's does.
        (_ANY, r"/admin/v2/resource-quotas(/\{tenant\}/\{ns\}/\{bundle\})?", Access.SUPER_USER, Check.SUPER_USER, None,
         Order.IN_HANDLER),
        # A namespace's bookie affinity group (NamespacesBase.internal{Set,Get}BookieAffinityGroup:
        # validateSuperUserAccess first).
        (_ANY, _NAMESPACE + r"/persistence/bookieAffinity", Access.SUPER_USER),
        (_GET, r"/admin/v2/clusters", Access.AUTHENTICATED),
        (_GET, r"/admin/v2/clusters/\{cluster\}", Access.SUPER_USER, Check.CLUSTER, "GET_CLUSTER"),
        (_PUT, r"/admin/v2/clusters/\{cluster\}", Access.SUPER_USER, Check.CLUSTER, "CREATE_CLUSTER"),
        (_POST, r"/admin/v2/clusters/\{cluster\}", Access.SUPER_USER, Check.CLUSTER, "UPDATE_CLUSTER"),
        (_DELETE, r"/admin/v2/clusters/\{cluster\}", Access.SUPER_USER, Check.CLUSTER, "DELETE_CLUSTER"),
        (_GET, r"/admin/v2/clusters/\{cluster\}/peers", Access.SUPER_USER, Check.CLUSTER, "GET_PEER_CLUSTER"),
        (_POST, r"/admin/v2/clusters/\{cluster\}/peers", Access.SUPER_USER, Check.CLUSTER, "UPDATE_PEER_CLUSTER"),
        (_ANY, r"/admin/v2/clusters/\{cluster\}/namespaceIsolationPolicies.*", Access.SUPER_USER,
         Check.CLUSTER_POLICY),
        (_GET, r"/admin/v2/clusters/\{cluster\}/failureDomains(/\{domainName\})?", Access.SUPER_USER, Check.CLUSTER,
         "GET_FAILURE_DOMAIN"),
        (_POST, r"/admin/v2/clusters/\{cluster\}/failureDomains/\{domainName\}", Access.SUPER_USER, Check.CLUSTER,
         "UPDATE_FAILURE_DOMAIN"),
        (_DELETE, r"/admin/v2/clusters/\{cluster\}/failureDomains/\{domainName\}", Access.SUPER_USER, Check.CLUSTER,
         "DELETE_FAILURE_DOMAIN"),
        (_ANY, r"/admin/v2/clusters.*", Access.SUPER_USER),
        (_GET, r"/admin/v2/tenants", Access.SUPER_USER, Check.TENANTS, "LIST_TENANTS"),
        # A tenant itself: TenantsBase's check is "a super user, or the tenant operation allowed", and Pulsar's
        # authorization provider allows every tenant operation to the tenant's admins: they read, update (their
        # admin roles and clusters included) and delete their own tenant; creating one that exists is their 409.
        (_GET, r"/admin/v2/tenants/\{tenant\}", Access.TENANT_ADMIN, Check.TENANTS, "GET_TENANT"),
        (_PUT, r"/admin/v2/tenants/\{tenant\}", Access.TENANT_ADMIN, Check.TENANTS, "CREATE_TENANT"),
        (_POST, r"/admin/v2/tenants/\{tenant\}", Access.TENANT_ADMIN, Check.TENANTS, "UPDATE_TENANT"),
        (_DELETE, r"/admin/v2/tenants/\{tenant\}", Access.TENANT_ADMIN, Check.TENANTS, "DELETE_TENANT"),
        (_ANY, r"/admin/v2/tenants.*", Access.SUPER_USER),
        # The namespaces of an anti-affinity group (NamespacesBase.internalGetAntiAffinityNamespaces): Pulsar 4.0.7
        # checks the policy operation ANTI_AFFINITY/READ of a namespace it never sets (null), which its
        # authorization provider cannot check (any role fails there); the tenant is in the query: super users only.
        (_GET, r"/admin/v2/namespaces/\{cluster\}/antiAffinity/\{group\}", Access.SUPER_USER),
        # A tenant's namespaces: listed, created and deleted by its admins (validateTenantOperation).
        (_GET, r"/admin/v2/namespaces/\{tenant\}", Access.TENANT_ADMIN, Check.TENANT_OPERATION, "LIST_NAMESPACES"),
        (_PUT, _NAMESPACE, Access.TENANT_ADMIN, Check.TENANT_OPERATION, "CREATE_NAMESPACE"),
        (_DELETE, _NAMESPACE, Access.TENANT_ADMIN, Check.TENANT_OPERATION, "DELETE_NAMESPACE"),
        # (Pulsar's namespace operations GET_TOPICS and GET_BUNDLE: consume or produce; CLEAR_BACKLOG and
        # UNSUBSCRIBE: consume)
        (_GET, _NAMESPACE + r"/topics(Page)?", Access.NAMESPACE_LOOKUP, Check.NAMESPACE_OPERATION, "GET_TOPICS"),
        (_GET, _NAMESPACE + r"/bundles", Access.NAMESPACE_LOOKUP, Check.NAMESPACE_OPERATION, "GET_BUNDLE"),
        (_POST, _NAMESPACE + r"(/\{bundle\})?/clearBacklog(/\{sub\})?", Access.NAMESPACE_CONSUME,
         Check.NAMESPACE_OPERATION, "CLEAR_BACKLOG"),
        (_POST, _NAMESPACE + r"(/\{bundle\})?/unsubscribe/\{sub\}", Access.NAMESPACE_CONSUME,
         Check.NAMESPACE_OPERATION, "UNSUBSCRIBE"),
        # Super users only, as Pulsar's NamespacesBase checks them (validateSuperUserAccess): unloading a namespace
        # or a bundle and splitting a bundle (they move load between brokers), and setting or removing a
        # namespace's delayed delivery policy (internalSetDelayedDelivery; its other policies are the tenant
        # admins').
        (_PUT, _NAMESPACE + r"(/\{bundle\})?/unload|" + _NAMESPACE + r"/\{bundle\}/split", Access.SUPER_USER),
        # (Pulsar's namespace operation DELETE_BUNDLE: its tenant's admins)
        (_DELETE, _NAMESPACE + r"/\{bundle\}", Access.TENANT_ADMIN, Check.NAMESPACE_OPERATION, "DELETE_BUNDLE"),
        # (any other method there: no route, answered as one once authenticated, as Pulsar's Jersey answers)
        (_ANY - _DELETE, _NAMESPACE + r"/\{bundle\}", Access.AUTHENTICATED),
        (frozenset({"POST", "DELETE"}), _NAMESPACE + r"/delayedDelivery", Access.SUPER_USER),
        # Grants on the namespace and its subscriptions (validateNamespaceOperation)
        (_GET, _NAMESPACE + r"/permissions(/subscription)?", Access.TENANT_ADMIN, Check.NAMESPACE_OPERATION,
         "GET_PERMISSION"),
        (_POST, _NAMESPACE + r"/permissions/.*", Access.TENANT_ADMIN, Check.NAMESPACE_OPERATION, "GRANT_PERMISSION"),
        (_DELETE, _NAMESPACE + r"/permissions/.*", Access.TENANT_ADMIN, Check.NAMESPACE_OPERATION,
         "REVOKE_PERMISSION"),
        # Grants and revokes on several topics, named in the body (NamespacesBase.internalGrantPermissionOnTopicsAsync
        # and internalRevokePermissionOnTopicsAsync): validateAdminAccessForTenant of the first topic's tenant, once
        # the body is read and its topics found to be of one namespace (400 before); the handler names the tenant.
        (_POST, r"/admin/v2/namespaces/(grant|revoke)PermissionsOnTopics", Access.TENANT_ADMIN, Check.TENANT_ADMIN,
         None, Order.IN_HANDLER),
        (_ANY, _NAMESPACE + r"/propert(ies|y/.*)", Access.TENANT_ADMIN, Check.TENANT_ADMIN),
        # Every other namespace route reads or sets a policy (GET of the namespace: all of them)
        (_ANY, r"/admin/v2/namespaces/\{tenant\}(/.*)?", Access.TENANT_ADMIN, Check.NAMESPACE_POLICY),
        (_GET, r"/admin/v2/(non-)?persistent" + _NS + r"(/partitioned)?", Access.NAMESPACE_LOOKUP,
         Check.NAMESPACE_OPERATION, "GET_TOPICS"),
        # (Pulsar's getListFromBundle: the non-persistent topics of one bundle, what getList asks each owner)
        (_GET, r"/admin/v2/non-persistent" + _NS + r"/\{bundle\}", Access.NAMESPACE_LOOKUP,
         Check.NAMESPACE_OPERATION, "GET_BUNDLE"),
        # (properties: Pulsar's topic operation GET_METADATA, which lookup rights allow)
        (_GET, _TOPIC + r"/(partitions|stats|partitioned-stats|internalStats|partitioned-internalStats|internal-info"
                  r"|properties)",
         Access.TOPIC_LOOKUP, Check.TOPIC_OPERATION),
        # (backlogSize: Pulsar's topic operation GET_BACKLOG_SIZE, which consume rights allow)
        (_ANY, _TOPIC + r"/(subscriptions|subscription/.*|all_subscription/.*|lastMessageId|ledger/.*"
                        r"|examinemessage|messageid/.*|backlogSize)",
         Access.TOPIC_CONSUME, Check.TOPIC_OPERATION),
        # Creating and deleting a topic are namespace operations in Pulsar; a persistent partitioned topic's
        # partition count is a topic policy (checked first when it is created, then when it is changed).
        # (Pulsar reads the namespace before either check: validateGlobalNamespaceOwnership.)
        (_PUT, r"/admin/v2/persistent" + _NS + r"/\{topic\}/partitions", Access.TENANT_ADMIN, Check.TOPIC_POLICY,
         None, Order.AFTER_NAMESPACE),
        (_PUT, _TOPIC + r"(/partitions)?", Access.TENANT_ADMIN, Check.NAMESPACE_OPERATION, "CREATE_TOPIC",
         Order.AFTER_NAMESPACE),
        (_DELETE, _TOPIC + r"(/partitions)?", Access.TENANT_ADMIN, Check.NAMESPACE_OPERATION, "DELETE_TOPIC"),
        (_POST, _TOPIC + r"/partitions", Access.TENANT_ADMIN, Check.TOPIC_POLICY),
        # (Pulsar's NonPersistentTopics.truncateTopic answers 412 "unsupport truncate" before any check)
        (_DELETE, r"/admin/v2/non-persistent" + _NS + r"/\{topic\}/truncate", Access.AUTHENTICATED),
        # Truncating a topic and creating a partitioned topic's missing partitions read the partitioned metadata
        # first (the LOOKUP check, then the namespace's cluster): PersistentTopicsBase.internalTruncateTopicAsync
        # checks the tenant's admin after (internalTruncateNonPartitionedTopicAsync), internalCreateMissedPartitions
        # the namespace operation CREATE_TOPIC once the topic is found to be partitioned (404 before, if not).
        (_DELETE, r"/admin/v2/persistent" + _NS + r"/\{topic\}/truncate", Access.TENANT_ADMIN, Check.TENANT_ADMIN,
         None, Order.AFTER_LOOKUP),
        (_POST, _TOPIC + r"/createMissedPartitions", Access.TENANT_ADMIN, Check.NAMESPACE_OPERATION, "CREATE_TOPIC",
         Order.AFTER_LOOKUP),
        (_ANY, _TOPIC + r"/(permissions(/.*)?|maxMessageSize)", Access.TENANT_ADMIN, Check.TENANT_ADMIN),
        (_ANY, _TOPIC + "/" + _TOPIC_POLICIES, Access.TENANT_ADMIN, Check.TOPIC_POLICY),
        # unload, terminate, compaction, offload, trim, properties...
        (_ANY, _TOPIC + r"(/.*)?", Access.TENANT_ADMIN, Check.TOPIC_OPERATION),
        (_GET, _SCHEMA, Access.TOPIC_LOOKUP, Check.TOPIC_OPERATION),
        (_POST, r"/admin/v2/schemas" + _NS + r"/\{topic\}/version", Access.TOPIC_LOOKUP, Check.TOPIC_OPERATION),
        (_POST, r"/admin/v2/schemas" + _NS + r"/\{topic\}/compatibility", Access.TENANT_ADMIN, Check.TENANT_ADMIN),
        (_POST, _SCHEMA, Access.TOPIC_PRODUCE, Check.TOPIC_OPERATION),
        (_ANY, _SCHEMA, Access.TENANT_ADMIN, Check.TENANT_ADMIN),
        # (TopicLookupBase reads the namespace first: validateGlobalNamespaceOwnership.)
        (_GET, r"/lookup/v2/topic/\{domain\}" + _NS + r"/\{topic\}", Access.TOPIC_LOOKUP, Check.TOPIC_OPERATION,
         None, Order.AFTER_NAMESPACE),
        # (a topic's bundle: Pulsar's namespace operation GET_BUNDLE, TopicLookupBase.internalGetNamespaceBundle)
        (_GET, r"/lookup/v2/topic/\{domain\}" + _NS + r"/\{topic\}/bundle", Access.NAMESPACE_LOOKUP,
         Check.NAMESPACE_OPERATION, "GET_BUNDLE"),
        # Transactions (Pulsar's admin v3 Transactions): reading a coordinator, a transaction, or a topic's transaction
        # buffer and pending acks checks nothing but the credentials. The stats and slow transactions of every
        # coordinator (no coordinatorId) first ask for the assignment topic's partitions, which is a LOOKUP of that
        # topic; aborting a transaction is for super users, once the coordinator's owner is found to be this broker, and
        # adding coordinators once transactions are found to be on.
        (_GET, r"/admin/v3/transactions/(coordinators|transactionMetadata/\{most\}/\{least\}"
               r"|coordinatorInternalStats/\{coordinatorId\}"
               r"|(transactionBufferStats|transactionBufferInternalStats)/\{tenant\}/\{ns\}/\{topic\}"
               r"|transactionInBufferStats/\{tenant\}/\{ns\}/\{topic\}/\{most\}/\{least\}"
               r"|(pendingAckStats|pendingAckInternalStats)/\{tenant\}/\{ns\}/\{topic\}/\{sub\}"
               r"|transactionInPendingAckStats/\{tenant\}/\{ns\}/\{topic\}/\{sub\}/\{most\}/\{least\}"
               r"|positionStatsInPendingAck/\{tenant\}/\{ns\}/\{topic\}/\{sub\}/\{ledger\}/\{entry\})",
         Access.AUTHENTICATED),
        (_GET, r"/admin/v3/transactions/(coordinatorStats|slowTransactions/\{timeout\})", Access.TOPIC_LOOKUP,
         Check.TOPIC_OPERATION, "LOOKUP", Order.IN_HANDLER, ASSIGN_TOPIC),
        (_POST, r"/admin/v3/transactions/(abortTransaction/\{most\}/\{least\}|transactionCoordinator/replicas)",
         Access.SUPER_USER, Check.SUPER_USER, None, Order.IN_HANDLER),
        (_ANY, r"/admin/v3/transactions/.*", Access.SUPER_USER),
    )
)
_UNNAMED = Rule(_ANY, re.compile(".*"), Access.SUPER_USER)


def rule_for(method: str, canonical: str) -> Rule:
    for rule in ACCESS_RULES:
        if method in rule.methods and rule.pattern.fullmatch(canonical):
            return rule
    return _UNNAMED


def access_for(method: str, canonical: str) -> Access:
    return rule_for(method, canonical).access


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# What a route of Order.AFTER_NAMESPACE answers, for a namespace that exists, before its check (raises it, if any).
ClusterFirst = Callable[[web.Request], Awaitable[None]]


async def _nothing_first(request: web.Request) -> None:
    return None


def security_middleware(security: Security, cfg: BrokerConfig, broker_id: Callable[[], str],
                        cluster_first: ClusterFirst = _nothing_first) -> Any:
    """``broker_id``: this broker's id, which Pulsar's brokers' checks name when they refuse. ``cluster_first``:
    Pulsar's check of the namespace's cluster, made before refusing a role on a route of Order.AFTER_NAMESPACE
    (``broker.admin.cluster.validate_cluster_first``)."""
    authn, authz = security.authentication, security.authorization
    metrics_need_credentials = cfg.authenticateMetricsEndpoint

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        check_origin(request)
        if not authn.enabled:
            return await handler(request)
        resource = request.match_info.route.resource
        if resource is None:  # no route: the router answers 404 / 405, in Pulsar's REST contexts once authenticated
            if in_authenticated_context(request.path):
                authenticate(request)
            return await handler(request)
        canonical = resource.canonical
        rule = rule_for(request.method, canonical)
        if rule.access is Access.PUBLIC and not (metrics_need_credentials and canonical.startswith("/metrics")):
            return await handler(request)
        role = authenticate(request)
        if authz.enabled and rule.access is not Access.PUBLIC:
            who = principals(security, role, request)
            check = AccessCheck(security, rule, request, broker_id, who, cluster_first)
            deferred = rule.order is Order.IN_HANDLER
            if rule.order is Order.AFTER_LOOKUP and _topic_name(rule, request).partition_index < 0:
                await AccessCheck(security, lookup_first(rule), request, broker_id, who)()
                deferred = True
            if deferred:
                request[_DEFERRED] = check
                response = await handler(request)
                if not check.decided:  # (a handler that forgot its check: refused, never open by accident)
                    raise RuntimeError(f"{request.method} {canonical}: the handler made no access check")
                return response
            await check()
        return await handler(request)

    def authenticate(request: web.Request) -> str:
        """The request's role, or 401 "Authentication required" (the reason goes to the log)."""
        transport = request.transport
        peer_cert = transport.get_extra_info("peercert") if transport is not None else None
        try:
            return authn.authenticate_http(request.headers.get("Authorization"), peer_cert or None,
                                           request.headers.get(METHOD_HEADER))
        except AuthenticationError as exc:
            log.info("%s %s from %s: authentication failed: %s", request.method, request.path, request.remote, exc)
            raise AuthenticationError(AUTHENTICATION_REQUIRED, exc.reason) from None

    return middleware


def in_authenticated_context(path: str) -> bool:
    """Whether ``path`` is under one of the REST contexts Pulsar's web service puts its AuthenticationFilter on
    (``AUTHENTICATED_CONTEXTS``): there a request is authenticated before any route is matched, so a path no route
    serves, or a method it does not, is 401 without credentials and 404 / 405 with them."""
    return any(path == c or path.startswith(c + "/") for c in AUTHENTICATED_CONTEXTS)


class Principals(NamedTuple):
    """Who makes an admin call: the authenticated ``role``; the client a proxy speaks for (``original``: None when
    the call names none, names the role itself, or names one Pulsar does not accept); the X-Original-Principal
    header as sent (``header``, which Pulsar's refusals quote: Pulsar's proxy sends it with every call it relays, the
    role it authenticated, and with a token passes the client's own Authorization header on, so that the two are
    the same); and whether Pulsar accepts the pair (``valid``: AuthorizationService.isValidOriginalPrincipal, a
    proxy role must name a client that is no proxy role, another role none or itself)."""

    role: str
    original: str | None
    header: str | None
    valid: bool


def principals(security: Security, role: str, request: web.Request) -> Principals:
    header = request.headers.get(ORIGINAL_PRINCIPAL_HEADER, "").strip() or None
    valid = security.authorization.original_principal_problem(role, header, allow_equal=True) is None
    return Principals(role, header if valid and header != role else None, header, valid)


class AccessCheck:
    """The check a rule makes of one request's roles (its role, and the client a proxy speaks for), in Pulsar's
    order: what answers before a refusal first, then the refusal of the first role not allowed.

    A pair of principals Pulsar does not accept (``Principals.valid``) is refused by each check as Pulsar's refuses
    it: those that start with PulsarWebResource.validateOriginalPrincipal (``Check.refuses_invalid_principals``) with
    its 401 ``INVALID_PRINCIPALS``, the others as a role they do not allow (their operation's check fails), and a
    route Pulsar checks nothing on (Access.AUTHENTICATED) is served."""

    def __init__(self, security: Security, rule: Rule, request: web.Request, broker_id: Callable[[], str],
                 who: Principals, cluster_first: ClusterFirst = _nothing_first) -> None:
        self.security, self.rule, self.request, self.broker_id = security, rule, request, broker_id
        self.who = who
        self.cluster_first = cluster_first
        self.decided = False  # (made, or skipped by the handler's branch: Order.IN_HANDLER, AFTER_LOOKUP)
        self.passed = False  # (made, and every role allowed: made once)

    async def __call__(self) -> None:
        self.decided = True
        if self.passed:
            return
        rule, request, who = self.rule, self.request, self.who
        if rule.check is Check.TENANT_ADMIN:  # (validateAdminAccessForTenant reads the tenant first, for any role)
            await self._tenant_must_exist()
        if not who.valid and rule.access is not Access.AUTHENTICATED:
            # (AuthorizationService refuses such a pair before its provider reads the tenant; the tenant admins'
            # check reads it first)
            await self._before_refusal(reads_tenant=rule.check is Check.TENANT_ADMIN)
            if rule.check.refuses_invalid_principals:
                raise AuthenticationError(INVALID_PRINCIPALS)
            raise _refusal(rule, request, self.broker_id).error(who.role, who.original, who.role, who.header)
        refused = _refused(self.security, rule, who, request)
        if refused is not None:
            await self._before_refusal()
            raise _refusal(rule, request, self.broker_id).error(who.role, who.original, refused, who.header)
        self.passed = True

    async def _before_refusal(self, reads_tenant: bool = True) -> None:
        """Raise what Pulsar answers a refused role (never a super user) before its refusal: the namespace its
        handler reads first missing (or served by another cluster), or the tenant the check reads missing (unless
        not ``reads_tenant``)."""
        rule, m = self.rule, self.request.match_info
        if rule.order is Order.AFTER_NAMESPACE:
            metadata = self.security.authorization.metadata
            if not await metadata.namespace_exists_fresh(f"{m['tenant']}/{m['ns']}"):
                raise RefusedError(NAMESPACE_NOT_FOUND, 404)
            await self.cluster_first(self.request)
        elif rule.check.reads_tenant and reads_tenant:
            await self._tenant_must_exist()

    async def _tenant_must_exist(self) -> None:
        rule, m = self.rule, self.request.match_info
        tenant = TopicName.parse(rule.topic).tenant if rule.topic is not None else m["tenant"]
        if not await self.security.authorization.metadata.tenant_exists_fresh(tenant):
            raise RefusedError(TENANT_NOT_FOUND, 404)


def lookup_first(rule: Rule) -> Rule:
    """The check Pulsar makes first on a route of Order.AFTER_LOOKUP: the LOOKUP of the topic
    (AdminResource.getPartitionedTopicMetadataAsync calls validateTopicOperationAsync with TopicOperation.LOOKUP)."""
    return rule._replace(access=Access.TOPIC_LOOKUP, check=Check.TOPIC_OPERATION, operation="LOOKUP",
                         order=Order.FIRST)


# The check a rule leaves to its handler (Order.IN_HANDLER, AFTER_LOOKUP); absent when authorization is off.
_DEFERRED = web.RequestKey("deferred access check", AccessCheck)


async def check_deferred(request: web.Request) -> None:
    """Make the check the route's rule left to its handler, at the point where Pulsar's handler makes it (raises
    its refusal). Nothing when authorization is off."""
    check = request.get(_DEFERRED)
    if check is not None:
        await check()


def skip_deferred(request: web.Request) -> None:
    """Say that this branch of the handler makes no check (Pulsar's makes none there)."""
    check = request.get(_DEFERRED)
    if check is not None:
        check.decided = True


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


def _refused(security: Security, rule: Rule, who: Principals, request: web.Request) -> str | None:
    """The principal the rule does not allow (the proxy's role, or the client it speaks for), or None."""
    if rule.check is Check.TENANT_ADMIN and who.original is not None:
        # validateAdminAccessForTenant judges a relayed call as a whole (see administers_tenant_through)
        tenant = request.match_info["tenant"]
        allowed = security.authorization.administers_tenant_through(tenant, who.role, who.original)
        return None if allowed else who.role
    for principal in (who.role, who.original):
        if principal is not None and not _allowed(security, rule, principal, request):
            return principal
    return None


def _allowed(security: Security, rule: Rule, role: str, request: web.Request) -> bool:
    authz, access = security.authorization, rule.access
    m = request.match_info
    op = _TOPIC_OPS.get(access)
    if op is not None:
        return authz.allows(_topic_name(rule, request), op, role, m.get("sub", ""))
    if access is Access.AUTHENTICATED:
        return True
    if access is Access.TENANT_ADMIN:
        return authz.is_tenant_admin(m["tenant"], role)
    if access is Access.NAMESPACE_LOOKUP:
        return authz.allows_namespace(f"{m['tenant']}/{m['ns']}", role, NAMESPACE_LOOKUP)
    if access is Access.NAMESPACE_CONSUME:
        return authz.allows_namespace(f"{m['tenant']}/{m['ns']}", role, NAMESPACE_CONSUME)
    return authz.is_super_user(role)


def _refusal(rule: Rule, request: web.Request, broker_id: Callable[[], str]) -> Refused:
    """What the Pulsar check guarding this route says when it refuses."""
    m, check, method = request.match_info, rule.check, request.method
    canonical = request.match_info.route.resource.canonical if request.match_info.route.resource else ""
    if check in (Check.TOPIC_OPERATION, Check.TOPIC_POLICY):
        resource = str(_topic_name(rule, request).full)
    elif check in (Check.NAMESPACE_OPERATION, Check.NAMESPACE_POLICY):
        resource = f"{m['tenant']}/{m['ns']}"
    elif check is Check.TENANT_OPERATION:
        resource = m["tenant"]
    elif check in (Check.CLUSTER, Check.CLUSTER_POLICY):
        resource = m["cluster"]
    elif check is Check.BROKER:
        resource = m.get("broker") or broker_id()
    else:
        resource = ""
    if check in (Check.NAMESPACE_POLICY, Check.TOPIC_POLICY, Check.CLUSTER_POLICY):
        return Refused(check, rule.operation or policy_operation(method), resource, policy_name(canonical))
    if rule.operation is None and check is Check.TOPIC_OPERATION:
        return Refused(check, topic_operation(method, canonical), resource)
    return Refused(check, rule.operation or "", resource)


def _topic_name(rule: Rule, request: web.Request) -> TopicName:
    """The topic of the check: the rule's, or the one the path names."""
    if rule.topic is not None:
        return TopicName.parse(rule.topic)
    m = request.match_info
    domain = m.get("domain") or request.path.split("/")[3]
    if domain not in ("persistent", "non-persistent"):
        domain = "persistent"  # /admin/v2/schemas/...: schemas belong to the persistent name
    return TopicName.parse(f"{domain}://{m['tenant']}/{m['ns']}/{m['topic']}")
