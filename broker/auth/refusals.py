"""How an admin call that its role may not make is refused: the status and words of Apache Pulsar's check.

Pulsar guards each admin endpoint with one of a handful of checks (``PulsarWebResource`` and the resources' own),
and the check, not the endpoint, decides the answer (javap of Pulsar 4.0.7):

- 401 from the super-user check (``validateSuperUserAccess``, "This operation requires super-user access"), the
  brokers', clusters' and tenants' "super user or operation" checks, ``validateTenantOperation`` (creating,
  listing and deleting namespaces), ``validateAdminAccessForTenant`` (namespace properties, topic permissions,
  deleting a schema) and ``validateTopicOperation`` (stats, subscriptions, unload, terminate, lookups...);
- 403 from ``validateNamespaceOperation`` (listing topics, bundles, grants, clearing a backlog, creating and deleting
  topics), ``validateNamespacePolicyOperation`` and ``validateTopicPolicyOperation`` (reading or setting a policy).

A request whose credentials are missing or refused never reaches these: Pulsar's AuthenticationFilter answers 401
"Authentication required" (``broker.auth.http``).

A tenant that does not exist is 404 "Tenant does not exist" rather than a refusal, for a role that is not a super
user, from every check that reads the tenant (``Check.reads_tenant``): ``validateAdminAccessForTenant`` reads it
first of all (for a super user too), the others through ``PulsarAuthorizationProvider.validateTenantAdminAccess``,
which each of the tenant, namespace, topic and policy operation checks asks first (for a super user it reads
nothing).

Every refusal names its operation as Pulsar's enums do (``TopicOperation.GET_STATS``, ``PolicyName.RETENTION``...):
a route's rule names it, or it follows from the route's last literal segment (``TOPIC_OPERATIONS``,
``POLICY_NAMES``) and its method (a policy is READ by GET, WRITE otherwise).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from broker.errors import AuthorizationError


class Check(enum.Enum):
    """Which of Pulsar's checks guards a route (the value: the check's name as its refusal says it)."""

    SUPER_USER = "validateSuperUserAccess"
    BROKER = "validateBothSuperuserAndBrokerOperation"  # (BrokersBase)
    CLUSTER = "validateBothSuperuserAndClusterOperation"  # (ClustersBase)
    CLUSTER_POLICY = "validateBothSuperuserAndClusterPolicyOperation"  # (ClustersBase)
    TENANTS = "validateBothTenantOperationAndSuperUser"  # (TenantsBase.validateBothSuperUserAndTenantOperation)
    TENANT_OPERATION = "validateTenantOperation"
    TENANT_ADMIN = "validateAdminAccessForTenant"
    TOPIC_OPERATION = "validateTopicOperation"
    NAMESPACE_OPERATION = "validateNamespaceOperation"
    NAMESPACE_POLICY = "validateNamespacePolicyOperation"
    TOPIC_POLICY = "validateTopicPolicyOperation"

    @property
    def status(self) -> int:
        """The HTTP status of its refusal: 403 from the namespace and policy checks, 401 from the others."""
        return 403 if self in (Check.NAMESPACE_OPERATION, Check.NAMESPACE_POLICY, Check.TOPIC_POLICY) else 401

    @property
    def refuses_invalid_principals(self) -> bool:
        """Whether the check answers a call whose X-Original-Principal Pulsar does not accept for its role (a proxy
        role naming nobody or another proxy role, another role naming someone else) with ``INVALID_PRINCIPALS``:
        those that start with validateSuperUserAccess (the brokers', clusters' and tenants' checks too) or are
        validateAdminAccessForTenant, which call PulsarWebResource.validateOriginalPrincipal. The others refuse such
        a call as a role they do not allow (AuthorizationService.isValidOriginalPrincipal fails their check)."""
        return self in (Check.SUPER_USER, Check.BROKER, Check.CLUSTER, Check.CLUSTER_POLICY, Check.TENANTS,
                        Check.TENANT_ADMIN)

    @property
    def reads_tenant(self) -> bool:
        """Whether the check reads the tenant before it refuses a role that is not a super user, so that a missing
        tenant is ``TENANT_NOT_FOUND`` (404). Not the super-user, brokers' and clusters' checks (no tenant), nor
        TenantsBase's: it answers its own 401 whatever its tenant operation check failed with."""
        return self in (Check.TENANT_ADMIN, Check.TENANT_OPERATION, Check.TOPIC_OPERATION, Check.NAMESPACE_OPERATION,
                        Check.NAMESPACE_POLICY, Check.TOPIC_POLICY)


# What a check that reads the tenant answers when there is none (404), in the words of Pulsar 4.0.7's
# validateAdminAccessForTenant and PulsarAuthorizationProvider.validateTenantAdminAccess.
TENANT_NOT_FOUND = "Tenant does not exist"
# What PulsarWebResource.validateOriginalPrincipal answers (401) for a pair of principals Pulsar does not accept
# (``Check.refuses_invalid_principals``), in Pulsar 4.0.7's words, whatever is wrong with the pair.
INVALID_PRINCIPALS = "Invalid combination of Original principal cannot be empty if the request is via proxy."
# What validateGlobalNamespaceOwnership answers for a namespace that does not exist (404: checkLocalOrGetPeer-
# ReplicationCluster), where a handler asks it before its check (``Order.AFTER_NAMESPACE`` in broker.auth.http).
NAMESPACE_NOT_FOUND = "Namespace not found"


class RefusedError(AuthorizationError):
    """A role that may not make this admin call, answered with its Pulsar check's status (401 or 403; 404 when the
    check found no such tenant or namespace)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Refused:
    """What a refusal says: the check, the operation it names (TopicOperation, NamespaceOperation,
    TenantOperation, BrokerOperation, ClusterOperation or PolicyOperation), the policy of a policy check
    (PolicyName), and the resource its words name (a tenant, namespace, topic, cluster or broker)."""

    check: Check
    operation: str
    resource: str
    policy: str = ""

    def error(self, role: str, original: str | None = None, refused: str | None = None,
              header: str | None = None) -> RefusedError:
        """The refusal of ``role`` (behind a proxy: ``role`` is the proxy's, ``original`` its client's, and
        ``refused`` the one of the two that is not allowed; ``header``: the call's X-Original-Principal as sent,
        which some of Pulsar's refusals quote, also where it names the role itself; by default ``original``)."""
        return RefusedError(self.message(role, original, refused, header), self.check.status)

    def message(self, role: str, original: str | None = None, refused: str | None = None,
                header: str | None = None) -> str:
        c, op, resource = self.check, self.operation, self.resource
        if c is Check.SUPER_USER:
            if original is not None and refused == role:
                return f"Proxy not authorized for super-user operation (proxy:{role})"
            if original is not None:
                return f"Original principal not authorized for super-user operation (original:{original})"
            return "This operation requires super-user access"
        if c is Check.TENANT_ADMIN:
            if original is not None:
                return f"Proxy not authorized to access resource (proxy:{role},original:{original})"
            return "Don't have permission to administrate resources on this tenant"
        if c is Check.TOPIC_OPERATION:
            return f"Unauthorized to {c.value} for operation [{op}] on topic [{resource}]"
        if c is Check.NAMESPACE_OPERATION:
            return f"Unauthorized to {c.value} for operation [{op}] on namespace [{resource}]"
        if c is Check.NAMESPACE_POLICY:
            return f"Unauthorized to {c.value} for operation [{op}] on namespace [{resource}] on policy [{self.policy}]"
        if c is Check.TOPIC_POLICY:
            return f"Unauthorized to {c.value} for operation [{op}] on topic [{resource}] on policy [{self.policy}]"
        # (Pulsar's originalPrincipal(): the header as sent; Java's String.format writes a missing one as "null")
        quoted = header if header is not None else original
        principal = "null" if quoted is None else quoted
        about = f"Unauthorized to {c.value} for originalPrincipal [{principal}] and clientAppId [{role}] about " \
                f"operation [{op}]"
        if c is Check.TENANTS:
            # (Pulsar 4.0.7's TenantsBase refusal ends with a space: see tests/security/test_pulsar_auth_answers.py)
            return f"{about} "
        if c is Check.TENANT_OPERATION:
            return f"{about} on tenant [{resource}]"
        if c is Check.BROKER:
            return f"{about} on broker [{resource}]"
        return f"{about} on cluster [{resource}]"


def policy_operation(method: str) -> str:
    """A policy check's PolicyOperation: READ by GET, WRITE otherwise."""
    return "READ" if method in ("GET", "HEAD") else "WRITE"


def policy_name(canonical: str) -> str:
    """A policy route's PolicyName, from its last literal segment (``POLICY_NAMES``); ALL for the whole Policies."""
    literal = [s for s in canonical.split("/") if s and not s.startswith("{")]
    return POLICY_NAMES.get(literal[-1] if literal else "", "ALL")


# A policy route's last literal segment -> Pulsar's PolicyName (the namespace's and the topic's routes alike).
POLICY_NAMES: dict[str, str] = {
    "allowedClusters": "ALLOW_CLUSTERS",
    "antiAffinity": "ANTI_AFFINITY",
    "autoSubscriptionCreation": "AUTO_SUBSCRIPTION_CREATION",
    "autoTopicCreation": "AUTO_TOPIC_CREATION",
    "backlogQuota": "BACKLOG",
    "backlogQuotaMap": "BACKLOG",
    "compactionThreshold": "COMPACTION",
    "deduplication": "DEDUPLICATION",
    "deduplicationEnabled": "DEDUPLICATION",
    "deduplicationSnapshotInterval": "DEDUPLICATION_SNAPSHOT",
    "delayedDelivery": "DELAYED_DELIVERY",
    "dispatchRate": "RATE",
    "dispatcherPauseOnAckStatePersistent": "DISPATCHER_PAUSE_ON_ACK_STATE_PERSISTENT",
    "encryptionRequired": "ENCRYPTION",
    "entryFilters": "ENTRY_FILTERS",
    "inactiveTopicPolicies": "INACTIVE_TOPIC",
    "isAllowAutoUpdateSchema": "SCHEMA_COMPATIBILITY_STRATEGY",
    "maxConsumers": "MAX_CONSUMERS",
    "maxConsumersPerSubscription": "MAX_CONSUMERS",
    "maxConsumersPerTopic": "MAX_CONSUMERS",
    "maxProducers": "MAX_PRODUCERS",
    "maxProducersPerTopic": "MAX_PRODUCERS",
    "maxSubscriptionsPerTopic": "MAX_SUBSCRIPTIONS",
    "maxTopicsPerNamespace": "MAX_TOPICS",
    "maxUnackedMessagesOnConsumer": "MAX_UNACKED",
    "maxUnackedMessagesOnSubscription": "MAX_UNACKED",
    "maxUnackedMessagesPerConsumer": "MAX_UNACKED",
    "maxUnackedMessagesPerSubscription": "MAX_UNACKED",
    "messageTTL": "TTL",
    "offloadDeletionLagMs": "OFFLOAD",
    "offloadPolicies": "OFFLOAD",
    "offloadThreshold": "OFFLOAD",
    "offloadThresholdInSeconds": "OFFLOAD",
    "removeOffloadPolicies": "OFFLOAD",
    "scanOffloadedLedgers": "OFFLOAD",
    "partitions": "PARTITION",
    "persistence": "PERSISTENCE",
    "publishRate": "RATE",
    "replication": "REPLICATION",
    "replicatorDispatchRate": "REPLICATION_RATE",
    "resourcegroup": "RESOURCEGROUP",
    "retention": "RETENTION",
    "schemaAutoUpdateCompatibilityStrategy": "SCHEMA_COMPATIBILITY_STRATEGY",
    "schemaCompatibilityStrategy": "SCHEMA_COMPATIBILITY_STRATEGY",
    "schemaValidationEnforced": "SCHEMA_COMPATIBILITY_STRATEGY",
    "shadowTopics": "SHADOW_TOPIC",
    "subscribeRate": "RATE",
    "subscriptionAuthMode": "SUBSCRIPTION_AUTH_MODE",
    "subscriptionDispatchRate": "RATE",
    "subscriptionExpirationTime": "SUBSCRIPTION_EXPIRATION_TIME",
    "subscriptionTypesEnabled": "SUBSCRIPTION_AUTH_MODE",
    "topicHashPositions": "PERSISTENCE",
}

# A topic operation route's last literal segment (and method, where one segment serves several) -> Pulsar's
# TopicOperation; a route not named here is the topic's LOOKUP, as Pulsar's partitions and entry-filter reads.
TOPIC_OPERATIONS: dict[tuple[str, str], str] = {
    ("*", "analyzeBacklog"): "CONSUME",
    ("*", "backlog"): "GET_BACKLOG_SIZE",
    ("*", "backlogSize"): "GET_BACKLOG_SIZE",
    ("*", "compaction"): "COMPACT",
    ("*", "examinemessage"): "PEEK_MESSAGES",
    ("*", "internal-info"): "GET_STATS",
    ("*", "internalStats"): "GET_STATS",
    ("*", "lastMessageId"): "PEEK_MESSAGES",
    ("*", "entry"): "PEEK_MESSAGES",
    ("*", "messageid"): "PEEK_MESSAGES",
    ("*", "offload"): "OFFLOAD",
    ("*", "partitioned-internalStats"): "GET_STATS",
    ("*", "partitioned-stats"): "GET_STATS",
    ("*", "stats"): "GET_STATS",
    ("GET", "properties"): "GET_METADATA",
    ("PUT", "properties"): "UPDATE_METADATA",
    ("DELETE", "properties"): "DELETE_METADATA",
    ("GET", "replicatedSubscriptionStatus"): "GET_REPLICATED_SUBSCRIPTION_STATUS",
    ("POST", "replicatedSubscriptionStatus"): "SET_REPLICATED_SUBSCRIPTION_STATUS",
    ("*", "resetcursor"): "RESET_CURSOR",
    ("*", "skip"): "SKIP",
    ("*", "skip_all"): "SKIP",
    ("*", "expireMessages"): "EXPIRE_MESSAGES",
    ("*", "position"): "PEEK_MESSAGES",
    ("*", "subscriptions"): "GET_SUBSCRIPTIONS",
    ("*", "terminate"): "TERMINATE",
    ("*", "trim"): "TRIM_TOPIC",
    ("*", "unload"): "UNLOAD",
    # a subscription itself: created (Pulsar names its GET_METADATA check first) or deleted
    ("PUT", "subscription"): "GET_METADATA",
    ("DELETE", "subscription"): "UNSUBSCRIBE",
    # a subscription's properties (Pulsar: CONSUME to read them, SUBSCRIBE to set them)
    ("GET", "subscription properties"): "CONSUME",
    ("PUT", "subscription properties"): "SUBSCRIBE",
    # schemas: read with the topic's metadata, posted with produce
    ("GET", "schema"): "GET_METADATA",
    ("POST", "schema"): "PRODUCE",
    ("*", "schemas"): "GET_METADATA",
    ("*", "version"): "GET_METADATA",
    ("*", "metadata"): "GET_METADATA",
}


def topic_operation(method: str, canonical: str) -> str:
    """The TopicOperation a route's topic check names (see ``TOPIC_OPERATIONS``)."""
    literal = [s for s in canonical.split("/") if s and not s.startswith("{")]
    key = literal[-1] if literal else ""
    if key == "properties" and "subscription" in literal:
        key = "subscription properties"
    if key == "partitions" and "terminate" in literal:
        key = "terminate"
    for k in ((method, key), ("*", key)):
        if k in TOPIC_OPERATIONS:
            return TOPIC_OPERATIONS[k]
    if "subscription" in literal:
        return TOPIC_OPERATIONS.get((method, "subscription"), "CONSUME")
    return "LOOKUP"
