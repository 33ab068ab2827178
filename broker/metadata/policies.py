"""Namespace documents: permissions (AuthPolicies), bundles, a Policies body and Pulsar's Policies view.

Policies are stored per namespace in the metadata store under Apache Pulsar's own field names
(``retention_policies``, ``message_ttl_in_seconds``, ``backlog_quota_map``...), so
``GET /admin/v2/namespaces/{tenant}/{ns}`` returns the document pulsar-admin expects. The policies
a topic obeys are the rows of ``broker.metadata.policy_table`` (their values in
``broker.metadata.policy_values``); this module keeps what is the namespace's alone.

Validation follows Pulsar's admin resources: a body of the wrong shape is a 400 (Pulsar's JSON
binding rejects it), a well-formed value out of range is a 412 (Pulsar's PRECONDITION_FAILED).
Pure functions: no I/O, unit-testable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from broker.metadata import offload_policies
from broker.metadata import policy_table as T
from broker.metadata.bundles import (
    FULL_LOWER,
    FULL_UPPER,
    BundleError,
    NamespaceBundles,
    format_boundary,
    parse_boundary,
)
from broker.metadata.policy_values import JAVA_LONG, check_java_int, check_java_long, check_object

# (The scalar parsers and the error the admin API shares with the policy values.)
from broker.metadata.policy_values import PolicyError as PolicyError
from broker.metadata.policy_values import parse_backlog_quota_type as parse_backlog_quota_type
from broker.metadata.policy_values import parse_bool as parse_bool
from broker.metadata.policy_values import parse_limit as parse_limit
from broker.metadata.policy_values import parse_schema_auto_update_strategy as parse_schema_auto_update_strategy
from broker.metadata.policy_values import parse_schema_strategy as parse_schema_strategy
from broker.metadata.policy_values import parse_subscription_types as parse_subscription_types

# Namespace-only fields of Pulsar's Policies that are no policy of a topic (the topic policies,
# with their field names, are the rows of broker.metadata.policy_table).
AUTH_POLICIES = "auth_policies"


# -- scalars whose admin messages are the namespace API's own ------------------------------------

def parse_message_ttl(body: Any) -> int:
    return parse_limit(body, "Message TTL", "Invalid value for message TTL, message TTL must >= 0")


def parse_compaction_threshold(body: Any) -> int:
    return parse_limit(body, "Compaction threshold", "compactionThreshold must be 0 or more", JAVA_LONG)


def parse_dedup_snapshot_interval(body: Any) -> int | None:
    """Seconds after which the deduplication state is snapshotted if entries came (0 = by entries
    only); None (Pulsar's admin client POSTs null) removes the policy."""
    if body is None:
        return None
    return parse_limit(body, "deduplicationSnapshotInterval", "interval must be greater than or equal to 0")


def parse_subscription_expiration(body: Any) -> int:
    return parse_limit(body, "Subscription expiration time",
                       "subscriptionExpirationTime must be 0 (never) or more minutes")


# -- permissions (AuthPolicies) ------------------------------------------------------------------

# Pulsar's AuthAction values; produce and consume are the ones the broker checks.
AUTH_ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")
NAMESPACE_AUTH = "namespace_auth"
DESTINATION_AUTH = "destination_auth"
SUBSCRIPTION_AUTH_ROLES = "subscription_auth_roles"
SUBSCRIPTION_AUTH_MODE = "subscription_auth_mode"
SUBSCRIPTION_AUTH_MODES = ("None", "Prefix")
# PIP-321: the clusters that may serve a namespace besides its replication clusters (a set in Pulsar's Policies).
ALLOWED_CLUSTERS = "allowed_clusters"


def allowed_clusters_of(policies: object) -> tuple[str, ...] | None:
    """A namespace's allowed clusters as stored in its Policies document: none when unset; None when the document
    is missing or no mapping, or the stored value no list of names (not ours to read)."""
    if not isinstance(policies, Mapping):
        return None
    allowed = policies.get(ALLOWED_CLUSTERS)
    if allowed is None:
        return ()
    if not isinstance(allowed, list) or not all(isinstance(c, str) for c in allowed):
        return None
    return tuple(allowed)


def parse_subscription_auth_mode(body: Any) -> str:
    """Pulsar's SubscriptionAuthMode: None, or Prefix (a consumer's subscription name must start
    with its role; enforced when authorization is on)."""
    if body not in SUBSCRIPTION_AUTH_MODES:
        raise PolicyError(400, f"Invalid subscription auth mode {body!r}: expected one of "
                               f"{', '.join(SUBSCRIPTION_AUTH_MODES)}")
    return str(body)


def parse_actions(body: Any) -> list[str]:
    """A set of AuthAction names, e.g. ["produce", "consume"]."""
    if not isinstance(body, list) or not all(isinstance(a, str) for a in body):
        raise PolicyError(400, "Permissions must be a JSON array of actions, e.g. [\"produce\", \"consume\"]")
    unknown = [a for a in body if a not in AUTH_ACTIONS]
    if unknown:
        raise PolicyError(400, f"Unknown actions {unknown}; one of {', '.join(AUTH_ACTIONS)}")
    return sorted(set(body))


def parse_roles(body: Any, what: str = "Roles") -> list[str]:
    if not isinstance(body, list) or not all(isinstance(r, str) and r for r in body):
        raise PolicyError(400, f"{what} must be a JSON array of role names")
    return sorted(set(body))


def parse_auth_policies(body: Any) -> dict[str, Any]:
    """AuthPolicies {namespace_auth: {role: [actions]}, destination_auth: {topic: {role: [actions]}},
    subscription_auth_roles: {subscription: [roles]}}."""
    doc = check_object(body, "auth_policies")
    namespace_auth = check_object(doc.get(NAMESPACE_AUTH) or {}, NAMESPACE_AUTH)
    destination_auth = check_object(doc.get(DESTINATION_AUTH) or {}, DESTINATION_AUTH)
    subscription_roles = check_object(doc.get(SUBSCRIPTION_AUTH_ROLES) or {}, SUBSCRIPTION_AUTH_ROLES)
    return {
        NAMESPACE_AUTH: {role: parse_actions(actions) for role, actions in namespace_auth.items()},
        DESTINATION_AUTH: {topic: {role: parse_actions(actions)
                                   for role, actions in check_object(grants, DESTINATION_AUTH).items()}
                           for topic, grants in destination_auth.items()},
        SUBSCRIPTION_AUTH_ROLES: {sub: parse_roles(roles, SUBSCRIPTION_AUTH_ROLES)
                                  for sub, roles in subscription_roles.items()},
    }


# -- properties ------------------------------------------------------------------------------------

PROPERTIES = "properties"  # Pulsar's Policies.properties: Map<String, String>


def parse_properties(body: Any) -> dict[str, str]:
    """A namespace's properties: a JSON object of string values (what Pulsar's JSON binding reads into its map; a
    body of another shape is a 400)."""
    if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values()):
        raise PolicyError(400, "Namespace properties must be a JSON object of string values")
    return body


# -- whole documents ------------------------------------------------------------------------------

def validate_policies(doc: Any) -> dict[str, Any]:
    """A Policies body given when a namespace is created: known fields validated, others kept."""
    policies = dict(check_object(doc, "Policies"))

    def check(key: str, parse: Any, store: bool = True) -> None:
        if policies.get(key) is not None:
            value = parse(policies[key])
            if store:
                policies[key] = value

    check(T.RETENTION.namespace_field, T.RETENTION.normalize)
    check(T.PERSISTENCE.namespace_field, T.PERSISTENCE.normalize)
    check(T.MESSAGE_TTL.namespace_field, parse_message_ttl)
    check(T.COMPACTION_THRESHOLD.namespace_field, parse_compaction_threshold)
    for rate in (T.PUBLISH_RATE, T.TOPIC_DISPATCH_RATE, T.SUBSCRIPTION_DISPATCH_RATE, T.REPLICATOR_DISPATCH_RATE,
                 T.SUBSCRIBE_RATE):
        check(rate.namespace_field, lambda v, rate=rate: _per_cluster(v, rate.namespace_field, rate.normalize))
    check(CLUSTER_DISPATCH_RATE, lambda v: _per_cluster(v, CLUSTER_DISPATCH_RATE, T.TOPIC_DISPATCH_RATE.normalize))
    check(LATENCY_STATS_SAMPLE_RATE,
          lambda v: _per_cluster(v, LATENCY_STATS_SAMPLE_RATE, lambda n: check_java_int(n, LATENCY_STATS_SAMPLE_RATE)))
    for key in OFFLOAD_LONGS:
        check(key, lambda v, key=key: check_java_long(v, key), store=False)
    check(OFFLOAD_POLICIES, offload_policies.parse)
    check(T.AUTO_TOPIC_CREATION.namespace_field, T.AUTO_TOPIC_CREATION.normalize)
    check(T.BACKLOG_QUOTAS.namespace_field, T.BACKLOG_QUOTAS.normalize)
    check(AUTH_POLICIES, parse_auth_policies)
    check("bundles", parse_bundles)
    for limit in (T.MAX_PRODUCERS, T.MAX_CONSUMERS, T.MAX_CONSUMERS_PER_SUBSCRIPTION, T.MAX_UNACKED_PER_CONSUMER,
                  T.MAX_UNACKED_PER_SUBSCRIPTION, T.MAX_SUBSCRIPTIONS, T.MAX_TOPICS_PER_NAMESPACE):
        key = limit.namespace_field
        check(key, lambda v, key=key: parse_limit(v, key))
    check(T.SUBSCRIPTION_EXPIRATION.namespace_field, parse_subscription_expiration)
    check(SUBSCRIPTION_AUTH_MODE, parse_subscription_auth_mode)
    check(PROPERTIES, parse_properties)
    check(T.DEDUP_SNAPSHOT_INTERVAL.namespace_field, parse_dedup_snapshot_interval)
    check(T.DELAYED_DELIVERY.namespace_field, T.DELAYED_DELIVERY.normalize)
    check(T.INACTIVE_TOPIC_POLICIES.namespace_field, T.INACTIVE_TOPIC_POLICIES.normalize)
    check(T.DEDUPLICATION.namespace_field, T.DEDUPLICATION.parse, store=False)
    check(T.SCHEMA_AUTO_UPDATE_STRATEGY.key, parse_schema_auto_update_strategy)
    for flag in (T.ENCRYPTION_REQUIRED, T.SCHEMA_VALIDATION_ENFORCED, T.ALLOW_AUTO_UPDATE_SCHEMA,
                 T.DISPATCHER_PAUSE_ON_ACK_STATE_PERSISTENT):
        key = flag.namespace_field
        check(key, lambda v, key=key: parse_bool(v, key), store=False)
    # Null members mean "not set" in Pulsar (its JSON leaves them out): do not store them.
    return {k: v for k, v in policies.items() if v is not None}


# Policies fields that are no policy of a topic here but are numbers in Pulsar's Policies: kept as given, checked for
# their Java type as Pulsar's binding does (a body it could not read is a 400).
CLUSTER_DISPATCH_RATE = "clusterDispatchRate"  # {cluster: DispatchRate} (the older name of topicDispatchRate)
LATENCY_STATS_SAMPLE_RATE = "latency_stats_sample_rate"  # {cluster: int}
OFFLOAD_LONGS = ("offload_threshold", "offload_threshold_in_seconds", "offload_deletion_lag_ms")
OFFLOAD_POLICIES = offload_policies.NAMESPACE_FIELD


def _per_cluster(body: Any, what: str, parse: Callable[[Any], Any]) -> dict[str, Any]:
    """A {cluster: value} map of Pulsar's Policies, each value validated."""
    return {cluster: parse(value) for cluster, value in check_object(body, what).items()}


def parse_bundles(body: Any) -> dict[str, Any] | None:
    """The ``bundles`` (BundlesData) of a Policies body at namespace creation, as Pulsar's
    validatePolicies: ``numBundles`` > 0 with boundaries: those (sorted, repeats dropped), which
    must cover the whole hash range; without: that many equal bundles; ``numBundles`` absent or
    <= 0: None (the broker's defaultNumberOfNamespaceBundles). A bad one is a 400."""
    doc = check_object(body, "bundles")
    count = doc.get("numBundles")
    if count is None:
        return None
    count = check_java_int(count, "bundles.numBundles")
    if count <= 0:
        return None
    boundaries = doc.get("boundaries")
    try:
        if not boundaries:
            return NamespaceBundles.equal("", count).to_bundles_data()
        if not isinstance(boundaries, list):
            raise PolicyError(400, "bundles.boundaries must be a JSON array of hex strings")
        points = sorted({parse_boundary(b) for b in boundaries})
        if points[0] != FULL_LOWER or points[-1] != FULL_UPPER:
            raise PolicyError(400, "Input bundles do not cover the whole hash range. "
                                   f"first:{format_boundary(points[0])}, last:{format_boundary(points[-1])}")
        return NamespaceBundles("", tuple(points)).to_bundles_data()
    except BundleError as exc:
        raise PolicyError(400, str(exc)) from None


def policies_view(stored: dict[str, Any], cluster: str, bundles: NamespaceBundles) -> dict[str, Any]:
    """Pulsar's Policies JSON for a namespace: its defaults, overlaid with what is stored; its
    ``bundles`` are the ones in force (``BrokerMetadata.namespace_bundles``)."""
    view: dict[str, Any] = {
        "auth_policies": {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}},
        "replication_clusters": [cluster],
        ALLOWED_CLUSTERS: [],
        T.BACKLOG_QUOTAS.namespace_field: {},
        "clusterDispatchRate": {},
        "topicDispatchRate": {},
        "subscriptionDispatchRate": {},
        "replicatorDispatchRate": {},
        "clusterSubscribeRate": {},
        "publishMaxMessageRate": {},
        "latency_stats_sample_rate": {},
        "deleted": False,
        "encryption_required": False,
        SUBSCRIPTION_AUTH_MODE: "None",
        "offload_threshold": -1,
        "offload_threshold_in_seconds": -1,
        "migrated": False,
        T.SCHEMA_COMPATIBILITY_STRATEGY.namespace_field: "UNDEFINED",
        "is_allow_auto_update_schema": True,
        "schema_validation_enforced": False,
        "subscription_types_enabled": [],
        "properties": {},
    }
    view.update(stored)
    view["bundles"] = bundles.to_bundles_data()
    return view
