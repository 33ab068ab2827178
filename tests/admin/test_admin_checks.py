"""Admin REST v2: what Pulsar refuses (and accepts) that a broker could easily get wrong: Java int / long ranges of
policy values, cluster bodies, partition names and counts, partitioned-only routes, and the admin's own
subscription create. Each case names the Pulsar class whose check it follows."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pulsar
import pytest

from broker.embedded import BrokerThread
from tests.admin.conftest import Admin


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- partitioned-only routes ----------------------------------------------------------------------------------

def test_terminate_partitions_is_only_for_a_partitioned_topic(admin: Admin) -> None:
    # PersistentTopicsBase.internalTerminatePartitionedTopic: a name without partitions, or a partition's name, is
    # 405, and nothing is terminated.
    ns = admin.new_namespace()
    plain = f"/admin/v2/persistent/{ns}/{new_name('plain')}"
    admin.ok("PUT", plain)
    reply = admin.post(f"{plain}/terminate/partitions")
    assert reply.status == 405, reply.body
    assert "not allowed using partitioned-terminate" in reply.reason
    assert admin.post(f"/admin/v2/persistent/{ns}/{new_name('missing')}/terminate/partitions").status == 405
    # the topic was not terminated: a producer still gets on
    assert admin.ok("GET", f"{plain}/internalStats")["state"] != "Terminated"
    base = f"/admin/v2/persistent/{ns}/{new_name('parted')}"
    admin.ok("PUT", f"{base}/partitions", 2)
    admin.ok("POST", f"{base}/createMissedPartitions")
    assert admin.post(f"{base}-partition-0/terminate/partitions").status == 405
    answer = admin.ok("POST", f"{base}/terminate/partitions")
    assert sorted(answer) == ["0", "1"]


# -- the admin's subscription create ----------------------------------------------------------------------------

def test_admin_creates_a_subscription_where_clients_may_not(admin: Admin, client: pulsar.Client) -> None:
    # Pulsar checks autoSubscriptionCreation on a client's SUBSCRIBE (ServerCnx) only; the admin's create
    # (PersistentTopicsBase.internalCreateSubscription -> PersistentTopic.createSubscription) is not subject to it.
    ns = admin.new_namespace()
    admin.ok("POST", f"/admin/v2/namespaces/{ns}/autoSubscriptionCreation", {"allowAutoSubscriptionCreation": False})
    topic = f"persistent://{ns}/{new_name('t')}"
    path = f"/admin/v2/persistent/{ns}/{topic.rsplit('/', 1)[1]}"
    admin.ok("PUT", path)
    assert admin.put(f"{path}/subscription/by-admin").status == 204
    assert admin.ok("GET", f"{path}/subscriptions") == ["by-admin"]
    consumer = client.subscribe(topic, "by-admin")  # the subscription exists: the client may use it
    consumer.close()
    with pytest.raises(pulsar.PulsarException):
        client.subscribe(topic, "by-client")
    assert admin.ok("GET", f"{path}/subscriptions") == ["by-admin"]


# -- partition names --------------------------------------------------------------------------------------------

def test_a_partition_name_past_the_partition_count_is_refused(admin: Admin, client: pulsar.Client) -> None:
    # Admin create: PersistentTopicsBase.validateNonPartitionTopicNameAsync (412). Clients:
    # BrokerService.getTopic refuses the name (NotAllowed); a "-partition-" name without a partitioned topic is
    # a topic like any other for them.
    ns = admin.new_namespace()
    base = new_name("p")
    path = f"/admin/v2/persistent/{ns}/{base}"
    admin.ok("PUT", f"{path}/partitions", 3)
    reply = admin.put(f"{path}-partition-7")
    assert reply.status == 412, reply.body
    assert reply.reason == (f'Can\'t create topic {base}-partition-7 with "-partition-" followed by a number smaller '
                            f"than number of partition of partitioned topic {base}")
    assert admin.put(f"{path}-partition-3").status == 412
    # A partition within the count is stored with its partitioned topic (AdminResource.tryCreatePartitionsAsync), so
    # creating it is Pulsar's 409 "This topic already exists"; deleted, its name may be made again.
    reply = admin.put(f"{path}-partition-2")
    assert (reply.status, reply.reason) == (409, "This topic already exists")
    assert admin.delete(f"{path}-partition-2").status == 204
    assert admin.put(f"{path}-partition-2").status == 204
    lone = new_name("lone")
    reply = admin.put(f"/admin/v2/persistent/{ns}/{lone}-partition-1")
    assert reply.status == 412 and "if there isn't a partitioned topic" in reply.reason
    assert admin.put(f"/admin/v2/persistent/{ns}/{lone}-partition-x").status == 204  # (not a partition's name)
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(f"persistent://{ns}/{base}-partition-7")
    client.create_producer(f"persistent://{ns}/{lone}-partition-1").close()
    listed = admin.ok("GET", f"/admin/v2/persistent/{ns}")
    assert f"persistent://{ns}/{base}-partition-7" not in listed
    assert f"persistent://{ns}/{lone}-partition-1" in listed


# -- partition counts: one check (policy_values.check_partition_count) ------------------------------------------

MAX_PARTITIONS = 4


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with BrokerThread(data_dir=tmp_path_factory.mktemp("capped"),
                      maxNumPartitionsPerPartitionedTopic=MAX_PARTITIONS) as b:
        yield b


def test_every_partition_count_meets_max_num_partitions(capped: BrokerThread) -> None:
    admin = Admin(capped.web_url)
    ns = admin.new_namespace()
    p = f"/admin/v2/persistent/{ns}/{new_name('p')}"
    # create (AdminResource.internalCreatePartitionedTopic): 406 both ways
    reply = admin.put(f"{p}/partitions", MAX_PARTITIONS + 1)
    assert (reply.status, reply.reason) == (
        406, f"Number of partitions should be less than or equal to {MAX_PARTITIONS}")
    reply = admin.put(f"{p}/partitions", 0)
    assert (reply.status, reply.reason) == (406, "Number of partitions should be more than 0")
    assert admin.put(f"{p}/partitions", 2147483648).status == 400  # (not a Java int)
    admin.ok("PUT", f"{p}/partitions", 2)
    # update (PersistentTopicsBase.internalUpdatePartitionedTopicAsync): 422
    reply = admin.post(f"{p}/partitions", MAX_PARTITIONS + 1)
    assert (reply.status, reply.reason) == (
        422, f"Desired partitions {MAX_PARTITIONS + 1} can't be greater than the maximum partitions per topic "
             f"{MAX_PARTITIONS}.")
    reply = admin.post(f"{p}/partitions", 1)
    assert (reply.status, reply.reason) == (422, "Desired partitions 1 can't be less than the current partitions 2.")
    admin.ok("POST", f"{p}/partitions", MAX_PARTITIONS)
    # a namespace's override (NamespacesBase.internalSetAutoTopicCreation): 406, allowed or not
    path = f"/admin/v2/namespaces/{ns}/autoTopicCreation"
    for allow in (True, False):
        reply = admin.post(path, {"allowAutoTopicCreation": allow, "topicType": "partitioned",
                                  "defaultNumPartitions": MAX_PARTITIONS + 1})
        assert reply.status == 406, reply.body
    assert admin.get(path).unset  # nothing stored
    admin.ok("POST", path, {"allowAutoTopicCreation": True, "topicType": "partitioned",
                            "defaultNumPartitions": MAX_PARTITIONS})


def test_auto_creation_with_too_many_partitions_is_refused(capped: BrokerThread) -> None:
    # A namespace created with an override above the max (Pulsar does not check a created namespace's policies):
    # the auto-creation then refuses (BrokerService.createDefaultPartitionedTopicAsync), and creates nothing.
    admin = Admin(capped.web_url)
    ns = f"public/{new_name('over')}"
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}", {"autoTopicCreationOverride": {
        "allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": MAX_PARTITIONS + 1}})
    client = pulsar.Client(capped.service_url, operation_timeout_seconds=5)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(f"persistent://{ns}/{new_name('t')}")
    finally:
        client.close()
    assert admin.ok("GET", f"/admin/v2/persistent/{ns}/partitioned") == []


# -- Java int / long ranges of policy values ----------------------------------------------------------------------

INT_PAST, LONG_PAST, LONG_BELOW = 2**31, 2**63, -(2**63) - 1
# (path below the namespace, its method, the field's type in Pulsar)
SCALARS = [("messageTTL", "POST", "int"), ("maxProducersPerTopic", "POST", "int"),
           ("maxConsumersPerTopic", "POST", "int"), ("maxSubscriptionsPerTopic", "POST", "int"),
           ("maxUnackedMessagesPerConsumer", "POST", "int"),
           ("maxUnackedMessagesPerSubscription", "POST", "int"), ("subscriptionExpirationTime", "POST", "int"),
           ("deduplicationSnapshotInterval", "POST", "int"), ("maxTopicsPerNamespace", "POST", "int"),
           ("compactionThreshold", "PUT", "long")]
OBJECTS = [
    ("retention", {"retentionTimeInMinutes": INT_PAST, "retentionSizeInMB": 1}),
    ("retention", {"retentionTimeInMinutes": 1, "retentionSizeInMB": LONG_PAST}),
    ("backlogQuota", {"limitSize": 10, "limitTime": INT_PAST, "policy": "producer_exception"}),
    ("backlogQuota", {"limitSize": LONG_PAST, "policy": "producer_exception"}),
    ("dispatchRate", {"dispatchThrottlingRateInMsg": INT_PAST}),
    ("dispatchRate", {"dispatchThrottlingRateInByte": LONG_PAST}),
    ("subscriptionDispatchRate", {"ratePeriodInSecond": INT_PAST}),
    ("publishRate", {"publishThrottlingRateInMsg": INT_PAST}),
    ("publishRate", {"publishThrottlingRateInByte": LONG_BELOW}),
    ("subscribeRate", {"subscribeThrottlingRatePerConsumer": INT_PAST}),
    ("delayedDelivery", {"active": True, "tickTime": LONG_PAST}),
    ("inactiveTopicPolicies", {"inactiveTopicDeleteMode": "delete_when_no_subscriptions",
                               "maxInactiveDurationSeconds": INT_PAST, "deleteWhileInactive": True}),
    ("persistence", {"bookkeeperEnsemble": INT_PAST}),
]


def test_namespace_policy_numbers_must_fit_their_java_types(admin: Admin) -> None:
    # Pulsar's Policies and policy classes (pulsar-client-admin-api) declare each number an int or a long; its
    # binding refuses one that does not fit (400: "Numeric value (...) out of range of int"), so nothing is stored.
    ns = admin.new_namespace()
    for path, method, java_type in SCALARS:
        past = INT_PAST if java_type == "int" else LONG_PAST
        for value in (past, 10**20, LONG_BELOW):
            reply = admin.call(method, f"/admin/v2/namespaces/{ns}/{path}", value)
            assert reply.status == 400, (path, value, reply.status, reply.body)
            assert "out of range" in reply.reason
        if java_type == "long":
            assert admin.call(method, f"/admin/v2/namespaces/{ns}/{path}", INT_PAST).status == 204
    for path, body in OBJECTS:
        reply = admin.post(f"/admin/v2/namespaces/{ns}/{path}", body)
        assert reply.status == 400, (path, body, reply.status, reply.body)
    policies = admin.ok("GET", f"/admin/v2/namespaces/{ns}")
    assert "message_ttl_in_seconds" not in policies and "retention_policies" not in policies
    assert policies["backlog_quota_map"] == {} and policies["compaction_threshold"] == INT_PAST


def test_topic_policy_numbers_must_fit_their_java_types(admin: Admin) -> None:
    ns = admin.new_namespace()
    topic = f"/admin/v2/persistent/{ns}/{new_name('t')}"
    admin.ok("PUT", topic)
    for path in ("maxProducers", "maxConsumers", "maxConsumersPerSubscription", "maxSubscriptionsPerTopic",
                 "maxUnackedMessagesOnConsumer", "maxUnackedMessagesOnSubscription", "deduplicationSnapshotInterval",
                 "maxMessageSize"):
        reply = admin.post(f"{topic}/{path}", INT_PAST)
        assert reply.status == 400, (path, reply.status, reply.body)
    assert admin.post(f"{topic}/compactionThreshold", LONG_PAST).status == 400
    assert admin.post(f"{topic}/compactionThreshold", INT_PAST).status == 204  # (a Long)
    for path, body in OBJECTS:
        reply = admin.post(f"{topic}/{path}", body)
        assert reply.status == 400, (path, body, reply.status, reply.body)
    # messageTTL is an Integer query parameter: one JAX-RS cannot convert is a 404 (Jersey's QueryParamException)
    for raw in (str(INT_PAST), "99999999999999999999", "1.5", "soon"):
        assert admin.post(f"{topic}/messageTTL?messageTTL={raw}").status == 404, raw
    assert admin.get(f"{topic}/messageTTL").unset  # nothing stored
    admin.ok("POST", f"{topic}/messageTTL?messageTTL={2**31 - 1}")


def test_a_created_namespace_policies_numbers_must_fit_their_java_types(admin: Admin) -> None:
    # NamespacesBase.internalCreateNamespace reads the whole Policies: every number of it is checked.
    for policies in ({"message_ttl_in_seconds": INT_PAST}, {"offload_threshold": LONG_PAST},
                     {"offload_threshold": "abc"}, {"offload_deletion_lag_ms": LONG_BELOW},
                     {"compaction_threshold": LONG_PAST}, {"max_unacked_messages_per_subscription": INT_PAST},
                     {"latency_stats_sample_rate": {"standalone": INT_PAST}},
                     {"offload_policies": {"managedLedgerOffloadMaxThreads": INT_PAST}},
                     {"offload_policies": {"managedLedgerOffloadThresholdInBytes": LONG_PAST}},
                     {"publishMaxMessageRate": {"standalone": {"publishThrottlingRateInMsg": INT_PAST}}},
                     {"clusterDispatchRate": {"standalone": {"dispatchThrottlingRateInByte": LONG_PAST}}},
                     {"persistence": {"bookkeeperEnsemble": INT_PAST}},
                     {"bundles": {"numBundles": INT_PAST}}):
        ns = f"public/{new_name('created')}"
        reply = admin.put(f"/admin/v2/namespaces/{ns}", policies)
        assert reply.status == 400, (policies, reply.status, reply.body)
        assert admin.get(f"/admin/v2/namespaces/{ns}").status == 404
    ns = f"public/{new_name('created')}"
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}", {"offload_threshold": INT_PAST, "compaction_threshold": INT_PAST})


def test_retention_and_persistence_out_of_range_are_400s(admin: Admin) -> None:
    # AdminResource.validateRetentionPolicies / validatePersistencePolicies check with checkArgument: a 400.
    ns = admin.new_namespace()
    for path, body in (("retention", {"retentionTimeInMinutes": -2, "retentionSizeInMB": 1}),
                       ("retention", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 1}),
                       ("persistence", {"bookkeeperEnsemble": 6, "bookkeeperWriteQuorum": 1,
                                        "bookkeeperAckQuorum": 1})):
        reply = admin.post(f"/admin/v2/namespaces/{ns}/{path}", body)
        assert reply.status == 400, (path, body, reply.status, reply.body)


# -- cluster data --------------------------------------------------------------------------------------------------

def test_cluster_data_is_checked_as_pulsar_reads_it(admin: Admin) -> None:
    # ClusterDataImpl: strings, booleans and a set of names (else its binding's 400), each URL with its scheme
    # (checkPropertiesIfPresent's 400s); ClustersBase: no body is a 400.
    name = new_name("c")
    path = f"/admin/v2/clusters/{name}"
    for body, reason in (({"serviceUrl": 5}, "serviceUrl must be a string"),
                         ({"serviceUrl": {"a": 1}}, "serviceUrl must be a string"),
                         ({"serviceUrl": "http://x:8080", "brokerServiceUrl": []}, "brokerServiceUrl must be a string"),
                         ({"peerClusterNames": 5}, "peerClusterNames must be a JSON array"),
                         ({"brokerClientTlsEnabled": "maybe"}, "brokerClientTlsEnabled must be true or false"),
                         ({"serviceUrl": "pulsar://x:6650"}, "Illegal service url"),
                         ({"brokerServiceUrl": "http://x:8080"}, "Illegal broker service url"),
                         ({"serviceUrlTls": "http://x:8080"}, "Illegal service tls url"),
                         ({"brokerServiceUrlTls": "pulsar://x:6650"}, "Illegal broker service tls url"),
                         ({"proxyServiceUrl": "http://x"}, "Illegal proxy service url"),
                         ([], "must be a JSON object")):
        reply = admin.put(path, body)
        assert reply.status == 400 and reason in reply.reason, (body, reply.status, reply.body)
    assert admin.put(path).status == 400  # no body: "cluster data is required"
    assert admin.get(path).status == 404  # none of them was stored
    admin.ok("PUT", path, {"serviceUrl": "http://x:8080", "brokerServiceUrl": "pulsar://x:6650",
                           "peerClusterNames": [], "brokerClientTlsEnabled": False, "serviceUrlTls": ""})
    reply = admin.post(path, {"serviceUrl": 5})
    assert reply.status == 400
    assert admin.ok("GET", path)["serviceUrl"] == "http://x:8080"
    admin.ok("DELETE", path)


# -- request bodies ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [65, 900, 5000])
def test_deeply_nested_body_is_400_not_500(admin: Admin, depth: int) -> None:
    # Pulsar's Jackson refuses a body nested past its limit as a bad request. Here json.loads (past ~1000 levels)
    # or a later walk of the value (copy.deepcopy of a new namespace's policies, from a few hundred) would raise
    # RecursionError: a 500 for what is the client's bad body. Nothing is changed.
    ns = admin.new_namespace()
    nested = b"[" * depth + b"]" * depth
    reply = admin.call("POST", f"/admin/v2/namespaces/{ns}/messageTTL", raw=nested)
    assert reply.status == 400 and "nests deeper" in reply.reason, reply.body[:200]
    created = f"/admin/v2/namespaces/{ns}-deep"
    reply = admin.call("PUT", created, raw=b'{"properties": ' + nested + b"}")
    assert reply.status == 400 and "nests deeper" in reply.reason, reply.body[:200]
    assert admin.get(created).status == 404
    assert admin.get(f"/admin/v2/namespaces/{ns}/messageTTL").unset  # (still unset)


def test_body_nested_within_the_limit_gets_the_handlers_answer(admin: Admin) -> None:
    ns = admin.new_namespace()
    nested = b"[" * 64 + b"]" * 64
    reply = admin.call("POST", f"/admin/v2/namespaces/{ns}/messageTTL", raw=nested)
    assert reply.status == 400 and "must be an integer" in reply.reason, reply.body[:200]
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}-shallow", {"auth_policies": {"namespace_auth": {"app": ["consume"]}}})


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_number_json_cannot_carry_is_400(admin: Admin, number: str) -> None:
    # Python's json reads NaN, Infinity and 1e400 (a float infinity); JSON has none of them and Pulsar's Jackson
    # refuses NaN / Infinity. Stored in a policy (persistence's managedLedgerMaxMarkDeleteRate is a double), they
    # came back as bare NaN / Infinity: the namespace's policies were no longer JSON any client could read.
    ns = admin.new_namespace()
    body = ('{"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1, '
            f'"managedLedgerMaxMarkDeleteRate": {number}}}').encode()
    reply = admin.call("POST", f"/admin/v2/namespaces/{ns}/persistence", raw=body)
    assert reply.status == 400 and "JSON cannot carry" in reply.reason, reply.body
    policies = admin.get(f"/admin/v2/namespaces/{ns}")
    json.loads(policies.body, parse_constant=lambda name: pytest.fail(f"{name} in the namespace's policies"))
    assert admin.get(f"/admin/v2/namespaces/{ns}/persistence").unset  # (still unset)
