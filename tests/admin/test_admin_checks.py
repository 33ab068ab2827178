"""Admin REST v2: what Pulsar refuses (and accepts) that a broker could easily get wrong: Java int / long ranges of
policy values, cluster bodies, partition names and counts, partitioned-only routes, and the admin's own
subscription create. Each case names the Pulsar class whose check it follows."""

from __future__ import annotations

import uuid

import pulsar
import pytest

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
