"""Our admin answers and /metrics against Apache Pulsar 4.0.7's own, key by key.

A Pulsar standalone (the jars of `make pulsar-deps`, cluster/apache_pulsar.py) and our broker get the same small
workload (a Shared, a Key_Shared, a non-persistent and a partitioned topic, an Avro schema, some acknowledgements),
then the same GETs. For each answer the status must be the same and the JSON the same shape: the same key paths
(names of topics, subscriptions, brokers and bundles made generic), each holding the same kind of value (number,
string, bool, list, object, null). Then ~70 calls that fail (status and reason) and ~400 that succeed (status and,
for values set and read back, the very answer). Where ours differs on purpose, ``DIFFERENCES`` and
``FAILING_DIFFERENCES`` say so and why; anything else found here is a difference a dashboard or a Java admin client
would see. Then /metrics: every family both expose
must carry the same label keys (a dashboard selects by them), the managed-ledger families the same ``namespace``
values (Pulsar's is the ledger name's ``tenant/ns/persistent``), and every family Pulsar writes that ours does not
must have its row in docs/metrics.md saying why.

Cost: one Pulsar standalone start (20-60 s) and a few seconds of calls.
"""

from __future__ import annotations

from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, Record, String

from broker.admin.namespaces import CLUSTER_RATES, PLAIN_POLICIES
from broker.admin.topic_policies import SPECS
from broker.cluster.bundles import DEFAULT_NUMBER_OF_BUNDLES, NamespaceBundles
from broker.topic_name import is_per_broker_namespace
from tests.admin.metric_table import documented
from tests.admin.pulsar_answers import Answers, ask_both, assert_same_shape, get, json_or, request, samples, shape
from tests.waiting import wait_for

pytestmark = [pytest.mark.apache_pulsar, pytest.mark.timeout(600)]

NS = "public/shapes"
T = f"persistent://{NS}"
BASE = f"/admin/v2/persistent/{NS}"

GETS = [  # (in one list, but for the dedup below: some policies are in two of the groups)
    # topics: stats, internal stats, lists, positions, policies as applied
    f"{BASE}/t/stats", f"{BASE}/t/internalStats", f"{BASE}/t/subscriptions", f"{BASE}/t/lastMessageId",
    f"{BASE}/t/partitions", f"{BASE}/t/backlogQuotaMap", f"{BASE}/t/retention?applied=true",
    f"{BASE}/t/maxUnackedMessagesOnConsumer?applied=true", f"{BASE}/t/subscription/s/position?messagePosition=1",
    f"{BASE}/ks/stats", f"/admin/v2/non-persistent/{NS}/np/stats",
    f"{BASE}/part/partitioned-stats", f"{BASE}/part/partitioned-internalStats", f"{BASE}/part/partitions",
    f"{BASE}/t/internal-info", f"{BASE}/part/internal-info", f"{BASE}/nosuch/internal-info",
    f"{BASE}", f"{BASE}/partitioned", f"/lookup/v2/topic/persistent/{NS}/t",
    # schemas
    f"/admin/v2/schemas/{NS}/avro/schema", f"/admin/v2/schemas/{NS}/avro/versions",
    # namespaces, tenants, clusters
    f"/admin/v2/namespaces/{NS}", f"/admin/v2/namespaces/{NS}/topics", f"/admin/v2/namespaces/{NS}/bundles",
    f"/admin/v2/namespaces/{NS}/permissions", f"/admin/v2/namespaces/{NS}/backlogQuotaMap",
    f"/admin/v2/namespaces/{NS}/retention", f"/admin/v2/namespaces/{NS}/messageTTL",
    f"/admin/v2/namespaces/{NS}/deduplication", f"/admin/v2/namespaces/{NS}/persistence",
    f"/admin/v2/namespaces/{NS}/maxProducersPerTopic", f"/admin/v2/namespaces/{NS}/dispatchRate",
    "/admin/v2/namespaces/public", "/admin/v2/tenants", "/admin/v2/tenants/public", "/admin/v2/clusters",
    "/admin/v2/clusters/standalone",
    # brokers
    "/admin/v2/brokers/leaderBroker", "/admin/v2/brokers/internal-configuration", "/admin/v2/bookies/racks-info",
    "/admin/v2/broker-stats/load-report", "/admin/v2/broker-stats/topics", "/admin/v2/broker-stats/metrics",
    "/admin/v2/brokers/standalone", "/admin/v2/brokers/health", "/admin/v2/brokers/ready", "/admin/v2/brokers/version",
    "/admin/v2/brokers/configuration", "/admin/v2/brokers/configuration/values",
    "/admin/v2/brokers/configuration/runtime", "/admin/v2/clusters/standalone/failureDomains",
    "/admin/v2/clusters/standalone/namespaceIsolationPolicies",
    "/admin/v2/clusters/standalone/namespaceIsolationPolicies/brokers",
    "/admin/v2/brokers/standalone/127.0.0.1:0/ownedNamespaces",
    f"/admin/v2/namespaces/{NS}/maxTopicsPerNamespace", f"/admin/v2/namespaces/{NS}/offloadPolicies",
    f"/admin/v2/namespaces/{NS}/entryFilters", f"/admin/v2/namespaces/{NS}/resourcegroup",
    f"/admin/v2/namespaces/{NS}/scanOffloadedLedgers", f"{BASE}/t/offloadPolicies", f"{BASE}/t/entryFilters",
    f"{BASE}/t/subscription/s/replicatedSubscriptionStatus",
    f"{BASE}/t/shadowTopics", f"{BASE}/t/autoSubscriptionCreation", "/admin/v2/resourcegroups",
    "/admin/v2/brokers/leaderBroker", "/admin/v2/worker/cluster",
    # errors
    f"{BASE}/missing/stats", f"/admin/v2/namespaces/{NS}/policies/x", f"{BASE}/t/subscription/s/analyzeBacklog",
    # values never set: 200 with no body where Pulsar's method is asynchronous, 204 where it is not, or a default
    *(f"/admin/v2/namespaces/{NS}/{p.path}" for p in (*PLAIN_POLICIES, *CLUSTER_RATES)),
    *(f"/admin/v2/namespaces/{NS}/{name}" for name in (
        "deduplication", "schemaCompatibilityStrategy", "antiAffinity", "persistence/bookieAffinity",
        "property/nothing")),
    *(f"{BASE}/t/{spec.path}" for spec in SPECS), f"{BASE}/t/s/dispatchRate",
    "/admin/v2/clusters/standalone/peers", "/admin/v2/brokers/backlog-quota-check",
    # a one-segment namespace path of no route (it fits only DELETE .../{bundle})
    f"/admin/v2/namespaces/{NS}/nosuchpolicy",
]

GETS = list(dict.fromkeys(GETS))


def heartbeat_namespaces(found: list[dict[str, str]]) -> set[str | None]:
    """The heartbeat namespaces in the ledger namespaces of a family: Pulsar's health check writes to
    ``pulsar/<cluster>/<broker id>`` (topicVersion V1, its default), ours to ``pulsar/<broker id>`` (the label: the
    namespace, "/persistent")."""
    return {s.get("namespace") for s in found
            if is_per_broker_namespace(str(s.get("namespace", "")).removesuffix("/persistent"))}


STATS_EVERY_SECOND = "statsUpdateFrequencyInSecs=1\nstatsUpdateInitialDelayInSecs=1\n"
# Offload settings of the broker (no driver: nothing offloads) that a topic's offload policies ?applied=true show
# where neither the topic's nor its namespace's set them (OffloadPoliciesImpl.mergeConfiguration).
BROKER_OFFLOAD = {"managedLedgerOffloadDeletionLagMs": 60000, "managedLedgerOffloadThresholdInSeconds": 7200,
                  "managedLedgerDataReadPriority": "bookkeeper-first", "s3ManagedLedgerOffloadRegion": "eu-west-3",
                  "managedLedgerOffloadMaxBlockSizeInBytes": 1048576}

PAUSE = "dispatcherPauseOnAckStatePersistent"

# Grants and revokes on several topics (POST /admin/v2/namespaces/grantPermissionsOnTopics, .../revoke...) that fail:
# topics of two namespaces, none at all, one that does not exist (the first named), a tenant that does not exist, a
# body that is no list, an option that is no object (Pulsar's reason: Jackson's text, so the status alone). Each path
# has a query parameter of its own (both ignore it), as the answers are kept by path. (Where Pulsar answers 500 or
# takes a bad option - an unknown action stored as null - see tests/admin/test_permissions_on_topics.py.)
_GRANT_ON_TOPICS, _REVOKE_ON_TOPICS = ("/admin/v2/namespaces/grantPermissionsOnTopics",
                                       "/admin/v2/namespaces/revokePermissionsOnTopics")
PERMISSIONS_ON_TOPICS_FAILING: list[tuple[str, str, Any]] = [
    ("POST", f"{_GRANT_ON_TOPICS}?case=two-namespaces", [{"topic": f"{T}/t", "role": "r", "actions": ["produce"]},
                                                         {"topic": "persistent://public/default/t", "role": "r",
                                                          "actions": ["produce"]}]),
    ("POST", f"{_GRANT_ON_TOPICS}?case=empty", []),
    ("POST", f"{_GRANT_ON_TOPICS}?case=missing-topic", [{"topic": f"{T}/t", "role": "r", "actions": ["produce"]},
                                                        {"topic": f"{T}/nosuch", "role": "r", "actions": ["produce"]},
                                                        {"topic": f"{T}/nosuch2", "role": "r", "actions": []}]),
    ("POST", f"{_GRANT_ON_TOPICS}?case=missing-tenant", [{"topic": "persistent://nosuchtenant/ns/t", "role": "r",
                                                          "actions": ["produce"]}]),
    ("POST", f"{_GRANT_ON_TOPICS}?case=object", {"topic": f"{T}/t", "role": "r", "actions": ["produce"]}),
    ("POST", f"{_GRANT_ON_TOPICS}?case=string-option", ["x"]),
    ("POST", f"{_REVOKE_ON_TOPICS}?case=two-namespaces", [{"topic": f"{T}/t", "role": "r"},
                                                          {"topic": "persistent://public/default/t", "role": "r"}]),
    ("POST", f"{_REVOKE_ON_TOPICS}?case=missing-topic", [{"topic": f"{T}/nosuch", "role": "r"}]),
]

# Resource quotas (pulsar-admin resource-quotas) that fail: a range that is none, not one of the namespace's, a bad
# upper boundary; a namespace name Pulsar refuses, one that does not exist, a tenant that does not exist; a reset of a
# bundle that has no quota (Pulsar's metadata store's words); bodies that are no ResourceQuota (Pulsar's reason:
# Jackson's text, so the status alone); a method Pulsar has not; a POST without a body, which Pulsar takes (it writes
# null into the bundle's node: PULSAR_TAKES) and ours refuses. Bundles of public/shapes (Pulsar's default 4, as ours).
RQ = "/admin/v2/resource-quotas"
_RQ_FIRST, _RQ_LAST = "0x00000000_0x40000000", "0xc0000000_0xffffffff"
RESOURCE_QUOTAS_FAILING: list[tuple[str, str, Any]] = [
    ("GET", f"{RQ}/{NS}/bogus", None), ("GET", f"{RQ}/{NS}/0x10000000_0x40000000", None),
    ("GET", f"{RQ}/{NS}/0x00000000_0x30000000", None), ("GET", f"{RQ}/public/bad%20name/{_RQ_FIRST}", None),
    ("POST", f"{RQ}/public/nosuchns/{_RQ_FIRST}", {}), ("DELETE", f"{RQ}/nosuchtenant/ns/{_RQ_FIRST}", None),
    ("DELETE", f"{RQ}/{NS}/{_RQ_FIRST}", None),
    ("POST", f"{RQ}/{NS}/{_RQ_FIRST}", {"msgRateIn": "abc"}), ("POST", RQ, [1]), ("PUT", RQ, {}),
    ("POST", f"{RQ}/{NS}/{_RQ_LAST}", None),
]

# Calls that fail (after the GETs, in this order): each answer's status, and its reason where Pulsar gives one in JSON
# (where Jersey answers with its HTML page, the status alone).
FAILING = [
    ("PUT", f"/admin/v2/namespaces/{NS}", {}), ("PUT", "/admin/v2/namespaces/nosuchtenant/x", {}),
    ("PUT", "/admin/v2/namespaces/public/bad%20name", {}), ("DELETE", f"/admin/v2/namespaces/{NS}", None),
    ("PUT", f"{BASE}/t", {}), ("PUT", f"{BASE}/part/partitions", 2), ("PUT", f"{BASE}/part-partition-0/partitions", 2),
    ("POST", f"{BASE}/part/partitions", 1), ("DELETE", f"{BASE}/t", None), ("DELETE", f"{BASE}/nosuch", None),
    ("GET", f"{BASE}/t/subscription/nosuch/position?messagePosition=1", None),
    ("DELETE", f"{BASE}/t/subscription/s", None), ("DELETE", f"{BASE}/t/subscription/nosuch", None),
    ("POST", f"/admin/v2/namespaces/{NS}/retention", {"retentionTimeInMinutes": -5, "retentionSizeInMB": 1}),
    ("POST", f"/admin/v2/namespaces/{NS}/messageTTL", -1), ("POST", f"/admin/v2/namespaces/{NS}/messageTTL", "abc"),
    ("POST", f"{BASE}/t/messageTTL?messageTTL=-1", None),
    ("POST", f"/admin/v2/namespaces/{NS}/backlogQuota", {"limitSize": 10, "limitTime": 10, "policy": "bogus"}),
    ("PUT", "/admin/v2/tenants/newt", {"allowedClusters": ["nowhere"]}), ("DELETE", "/admin/v2/tenants/public", None),
    ("POST", f"{BASE}/t/subscription/nosuch/skip_all", None),
    ("PUT", f"{BASE}/t/subscription/s", {"ledgerId": -1, "entryId": -1}), ("POST", f"{BASE}/t/compaction", None),
    ("POST", f"{BASE}/t/unload", None), ("GET", f"/admin/v2/namespaces/{NS}/0x00000000_0x10000000/unload", None),
    ("POST", f"/admin/v2/schemas/{NS}/avro/schema", {"type": "AVRO", "schema": "not json", "properties": {}}),
    ("GET", f"{BASE}/t/ledger/999/entry/0", None),
    ("POST", f"/admin/v2/namespaces/{NS}/autoTopicCreation", {"allowAutoTopicCreation": True, "topicType": "bogus"}),
    # a bundle with a topic in it (t's), without force; a name that is no bundle
    ("DELETE", f"/admin/v2/namespaces/{NS}/0x80000000_0xc0000000", None),
    ("DELETE", f"/admin/v2/namespaces/{NS}/bogus", None),
    # settings that are not dynamic (or not settings at all)
    ("POST", "/admin/v2/brokers/configuration/clusterName/other", None),
    ("POST", "/admin/v2/brokers/configuration/noSuchSetting/1", None),
    ("DELETE", "/admin/v2/brokers/configuration/brokerServicePort", None),
    # offloading: no message id, a bad one, an unknown driver, a driver without its bucket, a threshold not a number
    ("PUT", f"{BASE}/t/offload", None), ("PUT", f"{BASE}/t/offload", {"ledgerId": "x"}),
    ("POST", f"/admin/v2/namespaces/{NS}/offloadPolicies", {"managedLedgerOffloadDriver": "nope"}),
    ("POST", f"/admin/v2/namespaces/{NS}/offloadPolicies", {"managedLedgerOffloadDriver": "aws-s3"}),
    ("POST", f"{BASE}/t/offloadPolicies", {"managedLedgerOffloadDriver": "google-cloud-storage"}),
    ("PUT", f"/admin/v2/namespaces/{NS}/offloadThreshold", "abc"), ("GET", f"{BASE}/nosuch/offload", None),
    # a global topic policy's replication clusters, in a namespace that is not replicated
    ("POST", f"{BASE}/t/replication?isGlobal=true", ["standalone"]),
    # the older schema policy: a namespace that does not exist, a name Pulsar does not know, no POST, no DELETE (a
    # bundle's); a bundle's topic hash positions: no bundle, not one of the namespace's, no namespace; a DELETE of a
    # resource Pulsar has only a POST for (a bundle's)
    ("GET", "/admin/v2/namespaces/public/nosuchns/schemaAutoUpdateCompatibilityStrategy", None),
    ("PUT", "/admin/v2/namespaces/public/nosuchns/schemaAutoUpdateCompatibilityStrategy", "Backward"),
    ("PUT", f"/admin/v2/namespaces/{NS}/schemaAutoUpdateCompatibilityStrategy", "Bogus"),
    ("POST", f"/admin/v2/namespaces/{NS}/schemaAutoUpdateCompatibilityStrategy", "Backward"),
    ("DELETE", f"/admin/v2/namespaces/{NS}/schemaAutoUpdateCompatibilityStrategy", None),
    ("GET", f"/admin/v2/namespaces/{NS}/notabundle/topicHashPositions", None),
    ("GET", f"/admin/v2/namespaces/{NS}/0x00000000_0x30000000/topicHashPositions", None),
    ("GET", f"/admin/v2/namespaces/{NS}/0x10000000_0x40000000/topicHashPositions", None),
    ("GET", "/admin/v2/namespaces/public/nosuchns/0x00000000_0x40000000/topicHashPositions", None),
    ("DELETE", f"/admin/v2/namespaces/{NS}/migration", None),
    # the dispatcher pause on ack state: a namespace that does not exist (GET's reason is not the setters'), a topic
    # that does not exist, a partition's name
    *((method, f"/admin/v2/namespaces/public/nosuchns/{PAUSE}", None) for method in ("GET", "POST", "DELETE")),
    ("POST", f"{BASE}/nosuch/{PAUSE}", None), ("GET", f"{BASE}/t-partition-0/{PAUSE}", None),
    # grants and revokes on several topics
    *PERMISSIONS_ON_TOPICS_FAILING,
    # resource quotas
    *RESOURCE_QUOTAS_FAILING,
]
N = f"/admin/v2/namespaces/{NS}"
ISOLATION = "/admin/v2/clusters/standalone/namespaceIsolationPolicies"
_RATE = {"dispatchThrottlingRateInMsg": 10, "dispatchThrottlingRateInByte": 100, "ratePeriodInSecond": 1,
         "relativeToPublishRate": False}
# A value for each namespace policy (set with the method given) that both must read back as given.
NAMESPACE_POLICY_VALUES: dict[str, tuple[str, Any]] = {
    "encryptionRequired": ("POST", True), "schemaValidationEnforced": ("POST", True),
    "isAllowAutoUpdateSchema": ("POST", False),
    "delayedDelivery": ("POST", {"active": True, "tickTime": 1000, "maxDeliveryDelayInMillis": 0}),
    "autoSubscriptionCreation": ("POST", {"allowAutoSubscriptionCreation": True}),
    "subscriptionExpirationTime": ("POST", 60),
    "inactiveTopicPolicies": ("POST", {"inactiveTopicDeleteMode": "delete_when_no_subscriptions",
                                       "maxInactiveDurationSeconds": 60, "deleteWhileInactive": False}),
    "maxConsumersPerTopic": ("POST", 4), "maxConsumersPerSubscription": ("POST", 2),
    "maxSubscriptionsPerTopic": ("POST", 10), "maxTopicsPerNamespace": ("POST", 100),
    "deduplicationSnapshotInterval": ("POST", 100), "subscriptionAuthMode": ("POST", "Prefix"),
    "maxUnackedMessagesPerConsumer": ("POST", 500), "maxUnackedMessagesPerSubscription": ("POST", 1000),
    "subscriptionTypesEnabled": ("POST", ["Shared", "Exclusive"]),
    "publishRate": ("POST", {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 1000}),
    "subscriptionDispatchRate": ("POST", _RATE), "replicatorDispatchRate": ("POST", _RATE),
    "subscribeRate": ("POST", {"subscribeThrottlingRatePerConsumer": 5, "ratePeriodInSecond": 30}),
    PAUSE: ("POST", None),  # (an on/off switch: POST takes no body)
}
# A value for each topic-level policy (set with the method given) that both must read back as given.
TOPIC_POLICY_VALUES: dict[str, tuple[str, Any]] = {
    "deduplicationEnabled": ("POST", True), "deduplicationSnapshotInterval": ("POST", 100),
    "maxProducers": ("POST", 3), "maxConsumers": ("POST", 4), "maxConsumersPerSubscription": ("POST", 2),
    "maxSubscriptionsPerTopic": ("POST", 10), "maxUnackedMessagesOnConsumer": ("POST", 500),
    "maxUnackedMessagesOnSubscription": ("POST", 1000),
    "subscriptionTypesEnabled": ("POST", ["Shared", "Exclusive", "Key_Shared"]),
    "publishRate": ("POST", {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 1000}),
    "dispatchRate": ("POST", _RATE), "subscriptionDispatchRate": ("POST", _RATE),
    "replicatorDispatchRate": ("POST", _RATE),
    "subscribeRate": ("POST", {"subscribeThrottlingRatePerConsumer": 5, "ratePeriodInSecond": 30}),
    "delayedDelivery": ("POST", {"active": True, "tickTime": 1000, "maxDeliveryDelayInMillis": 0}),
    "autoSubscriptionCreation": ("POST", {"allowAutoSubscriptionCreation": True}),
    "schemaCompatibilityStrategy": ("PUT", "FORWARD"), "schemaValidationEnforced": ("POST", True),
    "persistence": ("POST", {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1,
                             "managedLedgerMaxMarkDeleteRate": 0}),
    "maxMessageSize": ("POST", 1000), "compactionThreshold": ("POST", 100000),
    "inactiveTopicPolicies": ("POST", {"inactiveTopicDeleteMode": "delete_when_no_subscriptions",
                                       "maxInactiveDurationSeconds": 60, "deleteWhileInactive": False}),
    PAUSE: ("POST", None),
}

def _offload_calls() -> list[tuple[str, str, Any, bool]]:
    """Offloading's calls, each read the same path more than once: every call a path of its own (a query parameter
    both ignore), as the answers are kept by path."""
    t, old = f"{BASE}/t", "/admin/v2/namespaces/public/offload-old"
    calls: list[tuple[str, str, Any]] = [
        ("GET", f"{t}/offloadPolicies?applied=true", None),  # (the broker's settings alone)
        *(("GET", f"{N}/{p}", None) for p in (
            "offloadThreshold", "offloadThresholdInSeconds", "offloadDeletionLagMs", "offloadPolicies")),
        ("PUT", f"{N}/offloadThreshold", 1024), ("GET", f"{N}/offloadThreshold", None),
        ("GET", f"{N}/offloadPolicies", None),
        ("PUT", f"{N}/offloadThresholdInSeconds", 3600), ("GET", f"{N}/offloadThresholdInSeconds", None),
        ("PUT", f"{N}/offloadDeletionLagMs", 60000), ("GET", f"{N}/offloadDeletionLagMs", None),
        ("DELETE", f"{N}/offloadDeletionLagMs", None), ("GET", f"{N}/offloadDeletionLagMs", None),
        ("GET", f"{N}/offloadPolicies", None),
        ("GET", f"{t}/offloadPolicies", None), ("GET", f"{t}/offloadPolicies?applied=true", None),
        ("POST", f"{N}/offloadPolicies", {"managedLedgerOffloadDriver": "filesystem", "fileSystemURI": "file:///tmp/o",
                                          "managedLedgerOffloadThresholdInBytes": 10, "offloadersDirectory": None,
                                          "managedLedgerExtraConfigurations": {"a": "b"}, "unknownField": 1}),
        ("GET", f"{N}/offloadPolicies", None), ("GET", f"{N}/offloadThreshold", None),
        ("GET", f"{N}/offloadThresholdInSeconds", None), ("GET", f"{N}/offloadDeletionLagMs", None),
        ("POST", f"{t}/offloadPolicies", {"managedLedgerOffloadDriver": "aws-s3", "s3ManagedLedgerOffloadBucket": "b",
                                          "s3ManagedLedgerOffloadRegion": "r",
                                          "managedLedgerOffloadedReadPriority": "BOOKKEEPER_FIRST"}),
        ("GET", f"{t}/offloadPolicies", None), ("GET", f"{t}/offloadPolicies?applied=true", None),
        ("DELETE", f"{t}/offloadPolicies", None), ("GET", f"{t}/offloadPolicies", None),
        ("DELETE", f"{N}/removeOffloadPolicies", None), ("GET", f"{N}/offloadPolicies", None),
        ("GET", f"{N}/offloadThreshold", None),
        ("GET", f"{t}/offload", None), ("PUT", f"{t}/offload", {"ledgerId": 1, "entryId": 0}),
        ("GET", f"{t}/offload", None),
        # a namespace made with the older fields: read from them, then moved into the policies by a setter
        ("PUT", old, {"offload_threshold": 500, "offload_deletion_lag_ms": 7}),
        ("GET", f"{old}/offloadThreshold", None), ("GET", f"{old}/offloadDeletionLagMs", None),
        ("GET", f"{old}/offloadPolicies", None), ("PUT", f"{old}/offloadThresholdInSeconds", 5),
        ("GET", f"{old}/offloadPolicies", None), ("GET", f"{old}/offloadThreshold", None),
        ("DELETE", old, None),
    ]
    return [(m, f"{p}{'&' if '?' in p else '?'}step={i}", b, True) for i, (m, p, b) in enumerate(calls)]


OFFLOAD_CALLS = _offload_calls()

# The bundle topic t hashes into (public/shapes has Pulsar's default 4 bundles, as ours).
T_BUNDLE = NamespaceBundles.equal(NS, DEFAULT_NUMBER_OF_BUNDLES).find(f"{T}/t").range_name
AUTO_UPDATE = f"{N}/schemaAutoUpdateCompatibilityStrategy"
# The older schema policy set, read back (and in a new namespace's Policies), removed with a PUT of null; the topics'
# hash positions in t's bundle: those asked (a partitioned topic by its partitions there), and all of them (the shape
# alone: Pulsar's list may hold its system topic __change_events, which ours has not).
NAMESPACE_GAP_CALLS: list[tuple[str, str, Any, bool]] = [
    ("PUT", AUTO_UPDATE, "Backward", True), ("GET", f"{AUTO_UPDATE}?step=set", None, True),
    ("PUT", f"{AUTO_UPDATE}?step=remove", None, True), ("GET", f"{AUTO_UPDATE}?step=removed", None, True),
    ("PUT", "/admin/v2/namespaces/public/auto-update", None, True),
    ("PUT", "/admin/v2/namespaces/public/auto-update/schemaAutoUpdateCompatibilityStrategy", "AutoUpdateDisabled",
     True),
    ("GET", "/admin/v2/namespaces/public/auto-update", None, False),
    ("DELETE", "/admin/v2/namespaces/public/auto-update", None, True),
    ("GET", f"{N}/{T_BUNDLE}/topicHashPositions?topics={T}/t&topics={T}/part&topics={T}/nosuch", None, True),
    ("GET", f"{N}/{T_BUNDLE}/topicHashPositions", None, False),
]

# The dispatcher pause on ack state's switch: a topic's GET answers its own value, not its namespace's, ``applied`` or
# not; DELETE stores false (a new namespace's Policies show it); a topic's DELETE where it has no policies makes none
# (its subscriptionTypesEnabled is still no content). After the other calls: t's own policies are gone by then.
PAUSE_NS = "/admin/v2/namespaces/public/pause"
PAUSE_CALLS: list[tuple[str, str, Any, bool]] = [
    ("POST", f"{N}/{PAUSE}?step=on", None, True), ("GET", f"{BASE}/t/{PAUSE}?applied=true&step=ns-on", None, True),
    ("DELETE", f"{N}/{PAUSE}?step=off", None, True), ("GET", f"{N}/{PAUSE}?step=off", None, True),
    ("PUT", PAUSE_NS, None, True), ("POST", f"{PAUSE_NS}/{PAUSE}", None, True),
    ("GET", f"{PAUSE_NS}?step=on", None, False), ("DELETE", f"{PAUSE_NS}/{PAUSE}", None, True),
    ("GET", f"{PAUSE_NS}?step=off", None, False), ("DELETE", PAUSE_NS, None, True),
    ("PUT", f"{BASE}/pause", None, True), ("DELETE", f"{BASE}/pause/{PAUSE}", None, True),
    ("GET", f"{BASE}/pause/subscriptionTypesEnabled", None, True), ("GET", f"{BASE}/pause/{PAUSE}", None, True),
    ("DELETE", f"{BASE}/pause", None, True),
]

# Grants on several topics (one action each: Pulsar lists a role's actions in its JVM's set order), read back on each
# topic (a partitioned topic's grant under its own name, none on its partitions), then revoked. After the other calls.
PERMISSIONS_ON_TOPICS_CALLS: list[tuple[str, str, Any, bool]] = [
    ("POST", f"{_GRANT_ON_TOPICS}?case=grant", [{"topic": f"{T}/t", "role": "r1", "actions": ["produce"]},
                                                {"topic": f"{T}/part", "role": "r1", "actions": ["consume"]},
                                                {"topic": f"{NS}/t", "role": "r2", "actions": []}], True),
    ("GET", f"{BASE}/t/permissions?step=granted", None, True),
    ("GET", f"{BASE}/part/permissions?step=granted", None, True),
    ("GET", f"{BASE}/part-partition-0/permissions?step=granted", None, True),
    ("POST", f"{_REVOKE_ON_TOPICS}?case=revoke", [{"topic": f"{T}/t", "role": "r1"}, {"topic": f"{T}/t", "role": "r2"},
                                                  {"topic": f"{T}/part", "role": "r1"},
                                                  {"topic": f"{T}/t", "role": "never"}], True),
    ("GET", f"{BASE}/t/permissions?step=revoked", None, True),
    ("GET", f"{BASE}/part/permissions?step=revoked", None, True),
]

# Resource quotas: the default one as Pulsar hard-codes it, then set; a bundle's (t's) answering the default until it
# has its own; a body read as Pulsar's Jackson reads it (numbers as text, null, "FALSE", 0, an unknown field), a range
# spelt as Long.decode reads it, stored under its canonical name; resets; a default set in part (the rest zero).
_RQ_T = f"{RQ}/{NS}/{T_BUNDLE}"
RESOURCE_QUOTAS_CALLS: list[tuple[str, str, Any, bool]] = [
    ("GET", RQ, None, True), ("GET", _RQ_T, None, True),
    ("POST", RQ, {"msgRateIn": 1.5, "msgRateOut": 2, "bandwidthIn": 3, "bandwidthOut": 4, "memory": 5,
                  "dynamic": False}, True),
    ("GET", f"{RQ}?step=set", None, True), ("GET", f"{_RQ_T}?step=default", None, True),
    ("POST", _RQ_T, {"msgRateIn": "7", "msgRateOut": None, "dynamic": "FALSE", "unknown": [1]}, True),
    ("GET", f"{_RQ_T}?step=set", None, True),
    ("POST", f"{RQ}/{NS}/0x0_0x40000000", {"memory": -2.5, "dynamic": 0}, True),
    ("GET", f"{RQ}/{NS}/{_RQ_FIRST}", None, True),
    ("DELETE", _RQ_T, None, True), ("GET", f"{_RQ_T}?step=reset", None, True),
    ("DELETE", f"{RQ}/{NS}/{_RQ_FIRST}", None, True),
    ("POST", f"{RQ}?step=partial", {"memory": 80}, True), ("GET", f"{RQ}?step=partial", None, True),
]

# Calls that succeed (after the failing ones, in this order): the same status and JSON shape, and where ``exact``, the
# same body (a value set and read back, a version number).
SUCCEEDING: list[tuple[str, str, Any, bool]] = [
    ("POST", f"{N}/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}, True),
    ("GET", f"{N}/retention", None, True),
    ("POST", f"{N}/messageTTL", 60, True), ("GET", f"{N}/messageTTL", None, True),
    ("DELETE", f"{N}/messageTTL", None, True),
    ("POST", f"{N}/backlogQuota", {"limitSize": 10485760, "limitTime": -1, "policy": "producer_request_hold"}, True),
    ("GET", f"{N}/backlogQuotaMap", None, True), ("DELETE", f"{N}/backlogQuota", None, True),
    # a quota without its time, one without its size: what each reads back as
    ("POST", f"{BASE}/t/backlogQuota", {"limitSize": 10485760, "policy": "producer_exception"}, True),
    ("GET", f"{BASE}/t/backlogQuotaMap", None, True), ("DELETE", f"{BASE}/t/backlogQuota", None, True),
    ("PUT", f"{N}/compactionThreshold", 1000, True), ("GET", f"{N}/compactionThreshold", None, True),
    ("POST", f"{N}/autoTopicCreation", {"allowAutoTopicCreation": True, "topicType": "non-partitioned"}, True),
    ("GET", f"{N}/autoTopicCreation", None, True), ("DELETE", f"{N}/autoTopicCreation", None, True),
    ("POST", f"{N}/deduplication", True, True), ("GET", f"{N}/deduplication", None, True),
    ("DELETE", f"{N}/deduplication", None, True),
    ("POST", f"{N}/dispatchRate", {"dispatchThrottlingRateInMsg": 100, "dispatchThrottlingRateInByte": 1000,
                                   "ratePeriodInSecond": 1}, True),
    ("GET", f"{N}/dispatchRate", None, True),
    ("GET", N, None, False),  # (its clusterDispatchRate too, the dispatch rate's older name Pulsar keeps in step)
    ("POST", f"{N}/permissions/role1", ["produce"], True), ("GET", f"{N}/permissions", None, True),
    ("DELETE", f"{N}/permissions/role1", None, True),
    ("POST", f"{N}/persistence", {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1,
                                  "managedLedgerMaxMarkDeleteRate": 0}, True),
    ("GET", f"{N}/persistence", None, True),
    ("POST", f"{N}/maxProducersPerTopic", 5, True), ("GET", f"{N}/maxProducersPerTopic", None, True),
    ("PUT", f"{N}/schemaCompatibilityStrategy", "FULL", True), ("GET", f"{N}/schemaCompatibilityStrategy", None, True),
    ("GET", f"{N}/properties", None, True),
    ("POST", f"{BASE}/t/messageTTL?messageTTL=30", None, True), ("GET", f"{BASE}/t/messageTTL", None, True),
    ("POST", f"{BASE}/t/retention", {"retentionTimeInMinutes": 5, "retentionSizeInMB": 5}, True),
    ("GET", f"{BASE}/t/retention", None, True), ("DELETE", f"{BASE}/t/retention", None, True),
    ("PUT", f"{BASE}/t/subscription/new", {"ledgerId": -1, "entryId": -1}, True),
    ("POST", f"{BASE}/t/subscription/new/skip_all", None, True),
    ("POST", f"{BASE}/t/subscription/new/resetcursor/0", None, True),
    ("POST", f"{BASE}/t/subscription/new/skip/2", None, True),
    ("POST", f"{BASE}/t/subscription/new/expireMessages/10", None, True),
    ("DELETE", f"{BASE}/t/subscription/new", None, True),
    ("PUT", f"{BASE}/t/compaction", None, True),
    ("POST", f"{BASE}/part/partitions", 3, True), ("GET", f"{BASE}/part/partitions", None, True),
    ("PUT", f"{BASE}/fresh", None, True), ("GET", f"{BASE}/fresh/stats", None, False),
    ("DELETE", f"{BASE}/fresh", None, True),
    ("PUT", f"{BASE}/fresh2/partitions", 2, True), ("DELETE", f"{BASE}/fresh2/partitions", None, True),
    ("PUT", "/admin/v2/tenants/newt", {"adminRoles": [], "allowedClusters": ["standalone"]}, True),
    ("GET", "/admin/v2/tenants/newt", None, True),
    ("POST", "/admin/v2/tenants/newt", {"adminRoles": ["x"], "allowedClusters": ["standalone"]}, True),
    ("PUT", "/admin/v2/namespaces/newt/ns", None, True), ("GET", "/admin/v2/namespaces/newt", None, True),
    ("POST", "/admin/v2/namespaces/newt/ns/backlogQuota?backlogQuotaType=message_age",
     {"limitTime": 60, "policy": "producer_exception"}, True),
    ("GET", "/admin/v2/namespaces/newt/ns/backlogQuotaMap", None, True),
    ("PUT", "/admin/v2/tenants/newt2", {"allowedClusters": ["standalone"]}, True),
    ("GET", "/admin/v2/tenants/newt2", None, True), ("DELETE", "/admin/v2/tenants/newt2", None, True),
    ("PUT", "/admin/v2/tenants/newt3", {"adminRoles": None, "allowedClusters": ["standalone"]}, True),
    ("GET", "/admin/v2/tenants/newt3", None, True), ("DELETE", "/admin/v2/tenants/newt3", None, True),
    ("DELETE", "/admin/v2/namespaces/newt/ns", None, True), ("DELETE", "/admin/v2/tenants/newt", None, True),
    ("POST", f"/admin/v2/schemas/{NS}/s2/schema", {"type": "STRING", "schema": "", "properties": {}}, True),
    ("POST", f"/admin/v2/schemas/{NS}/s2/compatibility", {"type": "STRING", "schema": "", "properties": {}}, True),
    ("DELETE", f"/admin/v2/schemas/{NS}/s2/schema", None, True),
    # a name that never had a schema: the tombstone is its version 0, the next schema version 1; forced: -1, nothing
    ("DELETE", f"/admin/v2/schemas/{NS}/never/schema", None, True),
    ("GET", f"/admin/v2/schemas/{NS}/never/schema", None, True),
    ("POST", f"/admin/v2/schemas/{NS}/never/schema", {"type": "STRING", "schema": "", "properties": {}}, True),
    ("DELETE", f"/admin/v2/schemas/{NS}/never2/schema?force=true", None, True),
    ("POST", f"/admin/v2/schemas/{NS}/never2/schema", {"type": "STRING", "schema": "", "properties": {}}, True),
    ("POST", f"{BASE}/t/subscription/s/analyzeBacklog", None, False),
    # every namespace policy set, read back, removed (those above aside)
    *((method, f"{N}/{name}", body, True) for name, (set_method, value) in NAMESPACE_POLICY_VALUES.items()
      for method, body in ((set_method, value), ("GET", None), ("DELETE", None))),
    # every other topic-level policy: set, read back, removed (replication aside: one cluster)
    *((method, f"{BASE}/t/{name}", body, True) for name, (set_method, value) in TOPIC_POLICY_VALUES.items()
      for method, body in ((set_method, value), ("GET", None), ("DELETE", None))),
    # the same as global policies (isGlobal=true): set, read back, the local value still unset, removed
    *((method, f"{BASE}/t/{name}?isGlobal={flag}", body, True)
      for name, (set_method, value) in TOPIC_POLICY_VALUES.items()
      for method, body, flag in ((set_method, value, "true"), ("GET", None, "true"), ("GET", None, "false"),
                                 ("DELETE", None, "true"))),
    # every policy of a topic gone at once, local and global
    ("POST", f"{BASE}/t/maxProducers?isGlobal=true&step=all", 3, True),
    ("POST", f"{BASE}/t/maxConsumers?step=all", 3, True), ("DELETE", f"{BASE}/t/policies", None, True),
    ("GET", f"{BASE}/t/maxProducers?isGlobal=true&step=after", None, True),
    ("GET", f"{BASE}/t/maxConsumers?step=after", None, True),
    # the brokers an isolation policy names (every one here), and a broker it does not name
    ("POST", f"{ISOLATION}/iso", {"namespaces": ["public/iso-.*"], "primary": [".*"], "secondary": [],
                                  "auto_failover_policy": {"policy_type": "min_available",
                                                           "parameters": {"min_limit": "1", "usage_threshold": "80"}}},
     True),
    ("GET", f"{ISOLATION}/brokers", None, False), ("GET", f"{ISOLATION}/brokers/nosuch:1", None, True),
    ("DELETE", f"{ISOLATION}/iso", None, True),
    # the bytes after a message id (-1: all), and where Pulsar refuses it
    ("PUT", f"{BASE}/t/backlogSize", {"ledgerId": -1, "entryId": -1}, False),
    ("PUT", f"{BASE}/part/backlogSize", {"ledgerId": -1, "entryId": -1}, True),
    # topic and subscription properties, terminate, trim, truncate, a reset to a message id
    ("PUT", f"{BASE}/t/properties", {"a": "1"}, True), ("GET", f"{BASE}/t/properties", None, True),
    ("DELETE", f"{BASE}/t/properties?key=a", None, True),
    ("PUT", f"{BASE}/t/subscription/s/properties", {"p": "v"}, True),
    ("GET", f"{BASE}/t/subscription/s/properties", None, True),
    ("POST", f"{BASE}/t/subscription/s/resetcursor", {"ledgerId": -1, "entryId": -1}, True),
    ("POST", f"{BASE}/t/trim", None, True),
    ("PUT", f"{BASE}/term", None, True), ("POST", f"{BASE}/term/terminate", None, False),
    ("POST", f"{BASE}/term/terminate", None, False), ("GET", f"{BASE}/term/lastMessageId", None, False),
    ("DELETE", f"{BASE}/ks/truncate", None, True),
    ("GET", f"{BASE}/t/compaction", None, False),
    ("POST", f"/admin/v2/namespaces/{NS}/clearBacklog/s", None, True),  # (Pulsar: 500, see PULSAR_FAILS)
    ("POST", f"/admin/v2/namespaces/{NS}/unsubscribe/nosuch", None, True),
    ("GET", f"{BASE}/t/examinemessage?initialPosition=earliest&messagePosition=1", None, False),
    # offload policies: a namespace's single values, its policies (defaults filled in, the single values moved in),
    # a topic's own and the ones in force; a topic's offload run without an offloader, and its status
    *OFFLOAD_CALLS,
    # a dynamic setting stored, listed, taken back
    ("POST", "/admin/v2/brokers/configuration/maxTopicsPerNamespace/500", None, True),
    ("GET", "/admin/v2/brokers/configuration/values", None, True),
    ("DELETE", "/admin/v2/brokers/configuration/maxTopicsPerNamespace", None, True),
    # the older schema policy, a bundle's topic hash positions
    *NAMESPACE_GAP_CALLS,
    *PAUSE_CALLS,
    # grants and revokes on several topics
    *PERMISSIONS_ON_TOPICS_CALLS,
    # resource quotas
    *RESOURCE_QUOTAS_CALLS,
]

# Succeeding calls Pulsar 4.0.7 fails (500) where ours succeeds: (method, path) -> why.
PULSAR_FAILS = {
    # NamespacesBase.clearBacklog(subscription) clears it on every topic of the namespace and fails with "Cursor
    # not found" on the first topic without that subscription; ours clears it where it exists.
    ("POST", f"/admin/v2/namespaces/{NS}/clearBacklog/s"): "Pulsar fails on a topic without the subscription",
}

# Failing calls Pulsar 4.0.7 takes (2xx) where ours refuses on purpose: (method, path) -> why.
PULSAR_TAKES = {
    # A resource quota POSTed without a body: Pulsar 4.0.7 writes null into the node (204; a later POST of that quota
    # fails with 500 until the node is deleted). Ours: 400, a ResourceQuota is required.
    ("POST", f"{RQ}/{NS}/{_RQ_LAST}"): "no body is refused",
    # Pulsar's JSON reading takes a name its enum has not as null (READ_UNKNOWN_ENUM_VALUES_AS_NULL): a misspelt
    # strategy removes the policy, 204. Ours: 400, naming the strategies.
    ("PUT", f"/admin/v2/namespaces/{NS}/schemaAutoUpdateCompatibilityStrategy"): "an unknown name is refused",
}

# Where ours answers otherwise on purpose: (method, path) -> why.
FAILING_DIFFERENCES = {
    # Pulsar's reason is Jackson's parse error as plain text; ours, a JSON reason naming the field.
    ("POST", f"/admin/v2/namespaces/{NS}/messageTTL"): "a clearer reason",
    # Pulsar: "... the attribute policy cannot be null" (an unknown name read as null); ours names the three.
    ("POST", f"/admin/v2/namespaces/{NS}/backlogQuota"): "a clearer reason",
    # Pulsar: "Clusters do not exist"; ours names them.
    ("PUT", "/admin/v2/tenants/newt"): "a clearer reason",
    # Pulsar: "Subscription already exists for topic"; ours names both.
    ("PUT", f"{BASE}/t/subscription/s"): "a clearer reason",
}

# The key paths of the dispatcher block ours adds to a subscription's cursor in internal stats.
DISPATCHER_KEYS = ("dispatcher", *(f"dispatcher.{k}" for k in (
    "pausedOnAckStatePersistent", "permitInvariantDriftCount", "permitInvariantHolds", "queuedLaneItems",
    "readOutstanding", "sumOfConsumerPermitsMinusPendingFlow", "totalPermits", "type")))

# GETs of what ours does not have, which Pulsar answers (its unset value, or its own failure): path -> why. Ours
# answers them 404 (no such route; a namespace's saying this broker does not serve it), or 405 where the path is
# another route's.
NOT_HERE = {
    **{f"/admin/v2/namespaces/{NS}/{p}": "no entry filters or resource groups here" for p in (
        "entryFilters", "resourcegroup")},
    **{f"{BASE}/t/{p}": "no entry filters or shadow topics here" for p in ("entryFilters", "shadowTopics")},
    "/admin/v2/resourcegroups": "no resource groups here",
    "/admin/v2/worker/cluster": "no functions worker here (Pulsar's, disabled: 409)",
}

# GETs ours answers with another status on purpose: path -> (ours, Pulsar's, why).
OTHER_STATUS = {
    # Pulsar's scan fails inside its streamed answer without an offloader (NullLedgerOffloader cannot scan): a 500
    # with Jetty's HTML page; ours says why.
    f"/admin/v2/namespaces/{NS}/scanOffloadedLedgers": (412, 500, "no offloader is configured: ours says so"),
    # A one-segment path of no route fits Pulsar's DELETE-only .../{bundle}: Jersey's 405 (an HTML page); ours, 404
    # with a JSON reason.
    f"/admin/v2/namespaces/{NS}/nosuchpolicy": (404, 405, "no such route: a 404 with its reason"),
    # Pulsar answers its metadata store's "not found" as a 500; ours, Topic ... not found (404).
    f"{BASE}/nosuch/internal-info": (404, 500, "a topic that does not exist is a 404"),
}

# path -> (key paths only ours has, key paths only Pulsar's has), each with the reason; None: keys not compared.
DIFFERENCES: dict[str, tuple[set[str], set[str]] | None] = {
    # The file ledger keeps no creation time of a managed ledger or a cursor file (only the last change): left out.
    f"{BASE}/t/internal-info": (set(), {".creationDate", ".cursors.<name>.creationDate"}),
    f"{BASE}/part/internal-info": (set(), {".partitions.<name>.creationDate",
                                           ".partitions.<name>.cursors.<name>.creationDate"}),
    # Ours adds the dispatcher's permit invariant to each cursor (ARCHITECTURE: total == sum of permits - pending).
    f"{BASE}/t/internalStats": ({f".cursors.<name>.{k}" for k in DISPATCHER_KEYS}, set()),
    # Pulsar 4.0.7's NonPersistentSubscription never names its active consumer; ours does.
    f"/admin/v2/non-persistent/{NS}/np/stats": ({".subscriptions.<name>.activeConsumerName"}, set()),
    # Pulsar's aggregate merges the partitions' producers by position into rate-only entries; ours lists each.
    f"{BASE}/part/partitioned-stats": ({f".publishers[].{k}" for k in (
        "accessMode", "address", "clientVersion", "connectedSince", "metadata", "producerName")}, set()),
    # The bundles gained and lost since the previous load report: whether any are listed depends on when that was
    # (Pulsar's load manager also makes one on its own timer), so either list may be empty on either side.
    "/admin/v2/broker-stats/load-report": ({".lastBundleGains[]", ".lastBundleLosses[]"},
                                           {".lastBundleGains[]", ".lastBundleLosses[]"}),
    # Each broker's own settings (Pulsar has hundreds ours has not, and ours a few of its own).
    "/admin/v2/brokers/configuration/runtime": None,
    # Pulsar's JVM and Netty allocator figures (ours has no JVM; its memory is in the Prometheus process metrics).
    "/admin/v2/broker-stats/metrics": (set(), {f"[].metrics.{k}" for k in (
        "brk_default_pool_allocated", "brk_default_pool_used", "brk_ml_cache_pool_active_allocations",
        "brk_ml_cache_pool_active_allocations_huge", "brk_ml_cache_pool_active_allocations_normal",
        "brk_ml_cache_pool_active_allocations_small", "brk_ml_cache_pool_allocated", "brk_ml_cache_pool_used",
        "jvm_direct_memory_used", "jvm_gc_old_count", "jvm_gc_old_pause", "jvm_gc_young_count", "jvm_gc_young_pause",
        "jvm_heap_used", "jvm_max_direct_memory", "jvm_max_memory", "jvm_start_time", "jvm_thread_cnt",
        "jvm_total_memory")}),
}


def call(web_url: str, method: str, path: str, body: Any) -> None:
    status, text = request(web_url, method, path, body)
    assert status < 300, (method, path, status, text)


def calls(web_url: str, sequence: list[tuple[str, str, Any]], kind: str) -> dict[str, tuple[int, Any]]:
    """``sequence`` on one broker: (status, the answer's JSON or None) by "kind METHOD path"."""
    out: dict[str, tuple[int, Any]] = {}
    for method, path, body in sequence:
        status, text = request(web_url, method, path, body)
        # (a call made twice: its first answer; Jersey's HTML error page: None)
        out.setdefault(f"{kind} {method} {path}", (status, json_or(text, None)))
    return out


class Avro(Record):  # type: ignore[misc]  # pulsar.schema.Record is untyped (no stubs)
    a = String()


def workload(service_url: str, web_url: str) -> tuple[pulsar.Client, list[Any]]:
    """The same on both brokers; the client and every producer and consumer stay open until the calls are done
    (they show in the stats; a producer the client drops would close whenever Python collects it)."""
    call(web_url, "PUT", f"/admin/v2/namespaces/{NS}", {})
    call(web_url, "PUT", f"{BASE}/part/partitions", 2)
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    consumer = client.subscribe(f"{T}/t", "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(f"{T}/t", producer_name="p1", batching_enabled=False)
    for _ in range(20):
        producer.send(b"x" * 100)
    for _ in range(10):
        consumer.acknowledge(consumer.receive(10_000))
    live = f"non-persistent://{NS}/np"
    held: list[Any] = [consumer, producer, client.subscribe(live, "n"), client.create_producer(live)]
    held[-1].send(b"y")
    held.append(client.subscribe(f"{T}/ks", "ks", consumer_type=pulsar.ConsumerType.KeyShared))
    keyed = client.create_producer(f"{T}/ks", batching_enabled=False)
    for i in range(10):
        keyed.send(b"k", partition_key=f"key{i}")
    held += [keyed, client.create_producer(f"{T}/avro", schema=AvroSchema(Avro)), client.create_producer(f"{T}/part")]
    held[-2].send(Avro(a="x"))
    held[-1].send(b"p")
    return client, held


def workload_in(topic_stats: Any) -> bool:
    """broker-stats/topics lists the whole workload: each topic with its producer, the 20 messages of ``t``."""
    found = {name: stats for bundles in (topic_stats or {}).values() for kinds in bundles.values()
             for topics in kinds.values() for name, stats in topics.items()}
    producing = {name for name, stats in found.items() if stats.get("producerCount")}
    return ({f"{T}/t", f"{T}/ks", f"{T}/avro", f"non-persistent://{NS}/np"} <= producing
            and any(name.startswith(f"{T}/part-partition-") for name in producing)
            and found[f"{T}/t"].get("msgInCount") == 20)


def ask(service_url: str, web_url: str, metrics_path: str) -> dict[str, tuple[int, Any]]:
    """The workload on one broker, then every GET, its /metrics and the failing calls, with the clients still open."""
    client, _held = workload(service_url, web_url)
    try:
        wait_for(lambda: workload_in(get(web_url, "/admin/v2/broker-stats/topics")[1]), 30, "the workload's stats")
        answers = {p: get(web_url, p) for p in GETS}
        answers["/metrics"] = get(web_url, metrics_path)
        answers.update(calls(web_url, [(m, p, b) for m, p, b in FAILING], "failing"))
        answers.update(calls(web_url, [(m, p, b) for m, p, b, _ in SUCCEEDING], "succeeding"))
        return answers
    finally:
        client.close()


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Answers]:
    # (Pulsar's broker-stats lists are rebuilt once a stats interval: one second here, so the workload shows in them)
    return ask_both(tmp_path_factory.mktemp("pulsar-shapes"), ask,
                    STATS_EVERY_SECOND + "".join(f"{k}={v}\n" for k, v in BROKER_OFFLOAD.items()),
                    statsUpdateFrequencyInSecs=1, **BROKER_OFFLOAD)


@pytest.mark.parametrize("path", GETS)
def test_answer_has_pulsars_status_and_shape(answers: dict[str, dict[str, tuple[int, Any]]], path: str) -> None:
    (our_status, ours), (their_status, theirs) = answers["ours"][path], answers["pulsar"][path]
    if path in NOT_HERE:
        assert our_status in (404, 405), (our_status, ours)
        return
    if path in OTHER_STATUS:
        assert (our_status, their_status) == OTHER_STATUS[path][:2]
        return
    assert our_status == their_status, f"status: ours {our_status}, Pulsar's {their_status}"
    allowed = DIFFERENCES.get(path, (set(), set()))
    if allowed is None:
        return
    assert_same_shape(ours, theirs, *allowed)


def test_metrics_families_have_pulsars_label_keys(answers: dict[str, dict[str, tuple[int, Any]]]) -> None:
    ours, theirs = samples(answers["ours"]["/metrics"][1]), samples(answers["pulsar"]["/metrics"][1])
    both = sorted(set(ours) & set(theirs))
    assert len(both) > 100, "the two lists have too little in common to compare"
    differ = {name: (sorted({tuple(sorted(s)) for s in ours[name]}), sorted({tuple(sorted(s)) for s in theirs[name]}))
              for name in both if {tuple(sorted(s)) for s in ours[name]} != {tuple(sorted(s)) for s in theirs[name]}}
    assert not differ, f"label keys (ours, Pulsar's): {differ}"
    # What Pulsar writes and ours does not: each has its row in docs/metrics.md, with the reason.
    undocumented = [name for name in sorted(set(theirs) - set(ours)) if not documented(name)]
    assert not undocumented, f"families Pulsar writes, not here, and not in docs/metrics.md: {undocumented}"
    ledgers = [name for name in both if name.startswith("pulsar_ml_")]
    assert ledgers
    for name in ledgers:  # (each health check writes to its broker's heartbeat namespace: V1 Pulsar's, V2 ours)
        theirs_ns = {s.get("namespace") for s in theirs[name]} - heartbeat_namespaces(theirs[name])
        assert {s.get("namespace") for s in ours[name]} - heartbeat_namespaces(ours[name]) == theirs_ns, name


@pytest.mark.parametrize("call", list(dict.fromkeys(f"{m} {p}" for m, p, _ in FAILING)))
def test_failing_call_has_pulsars_status_and_reason(answers: dict[str, dict[str, tuple[int, Any]]], call: str) -> None:
    key = f"failing {call}"
    (our_status, ours), (their_status, theirs) = answers["ours"][key], answers["pulsar"][key]
    our_reason = ours.get("reason") if isinstance(ours, dict) else None
    their_reason = theirs.get("reason") if isinstance(theirs, dict) else None
    method, path = call.split(" ", 1)
    if (method, path) in PULSAR_TAKES:
        assert their_status < 300 and our_status >= 400 and our_reason, (our_status, our_reason, their_status)
        return
    assert our_status == their_status, f"status: ours {our_status} ({our_reason}), Pulsar's {their_status}"
    if their_reason is not None and (method, path) not in FAILING_DIFFERENCES:
        # (Pulsar's reason, or ours with Pulsar's as its start and a detail after it)
        assert our_reason == their_reason or str(our_reason).startswith(their_reason + ":"), (our_reason, their_reason)


@pytest.mark.parametrize(("method", "path", "exact"), list(dict.fromkeys((m, p, e) for m, p, _, e in SUCCEEDING)))
def test_succeeding_call_has_pulsars_status_and_answer(answers: dict[str, dict[str, tuple[int, Any]]], method: str,
                                                      path: str, exact: bool) -> None:
    key = f"succeeding {method} {path}"
    (our_status, ours), (their_status, theirs) = answers["ours"][key], answers["pulsar"][key]
    if their_status == 500 and (method, path) in PULSAR_FAILS:
        assert our_status < 300, ours
        return
    assert our_status == their_status, f"status: ours {our_status} ({ours}), Pulsar's {their_status} ({theirs})"
    if their_status >= 400:  # (a call of the generated ones that Pulsar refuses: the status alone, above)
        return
    if exact and "/subscriptionTypesEnabled" in path:
        # (Pulsar reads the body into a Set of enums: its order is the JVM's identity hashes, run to run)
        assert sorted(ours or []) == sorted(theirs or [])
    elif exact:
        assert ours == theirs
    else:
        assert set(shape(ours)) == set(shape(theirs)), (set(shape(ours)) ^ set(shape(theirs)))
