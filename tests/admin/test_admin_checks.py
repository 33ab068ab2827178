"""Admin REST v2: what Pulsar refuses (and accepts) that a broker could easily get wrong: Java int / long ranges of
policy values, cluster bodies, partition names and counts, partitioned-only routes, and the admin's own
subscription create. Each case names the Pulsar class whose check it follows."""

from __future__ import annotations

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
    assert admin.get(path).status == 204  # nothing stored
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
