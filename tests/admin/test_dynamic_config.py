"""Dynamic configuration (pulsar-admin brokers list-dynamic-config / update-dynamic-config / delete-dynamic-config /
get-all-dynamic-config): settings changed while the broker runs, stored at Pulsar's /admin/configuration, applied at
once, at the next start, and taken back. (Across brokers: tests/cluster/test_features_across_brokers.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from broker.embedded import BrokerThread
from broker.service.dynamic_config import DYNAMIC
from tests.admin.conftest import Admin
from tests.waiting import wait_for

CONFIG = "/admin/v2/brokers/configuration"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    # (a broker of its own: these tests change broker-wide settings)
    with BrokerThread(data_dir=tmp_path) as b:
        yield b


@pytest.fixture
def own_admin(broker: BrokerThread) -> Admin:
    return Admin(broker.web_url)


@pytest.fixture
def own_client(broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    yield c
    c.close()


def runtime(admin: Admin, key: str) -> str:
    return str(admin.ok("GET", f"{CONFIG}/runtime")[key])


def test_the_dynamic_settings_are_listed_and_none_is_stored_at_first(own_admin: Admin) -> None:
    names = own_admin.ok("GET", CONFIG)
    assert names == sorted(DYNAMIC) and "subscriptionKeySharedEnable" in names and "clusterName" not in names
    assert own_admin.ok("GET", f"{CONFIG}/values") == {}


def test_a_setting_read_where_it_is_used_changes_at_once_and_goes_back_when_deleted(
        own_admin: Admin, own_client: pulsar.Client) -> None:
    reply = own_admin.post(f"{CONFIG}/subscriptionKeySharedEnable/false")
    assert (reply.status, reply.body) == (200, b"")  # (Pulsar's answer)
    assert own_admin.ok("GET", f"{CONFIG}/values") == {"subscriptionKeySharedEnable": "false"}
    assert runtime(own_admin, "subscriptionKeySharedEnable") == "false"
    with pytest.raises(pulsar.NotAllowedError):
        own_client.subscribe("ks", "s", consumer_type=pulsar.ConsumerType.KeyShared)
    reply = own_admin.delete(f"{CONFIG}/subscriptionKeySharedEnable")
    assert (reply.status, reply.body) == (200, b"")
    assert own_admin.ok("GET", f"{CONFIG}/values") == {}
    assert runtime(own_admin, "subscriptionKeySharedEnable") == "true"
    own_client.subscribe("ks", "s", consumer_type=pulsar.ConsumerType.KeyShared).close()


def test_a_policy_default_applies_to_topics_already_loaded(own_admin: Admin, own_client: pulsar.Client) -> None:
    """The broker's level of a policy: a loaded topic resolves it again (as after a namespace policy change)."""
    topic = "persistent://public/default/dyn-policy"
    own_client.subscribe(topic, "first", consumer_type=pulsar.ConsumerType.Shared).close()
    applied = "/admin/v2/persistent/public/default/dyn-policy/dispatchRate?applied=true"
    assert own_admin.ok("GET", applied)["dispatchThrottlingRateInMsg"] == 0
    own_admin.ok("POST", f"{CONFIG}/dispatchThrottlingRatePerTopicInMsg/250")
    assert own_admin.ok("GET", applied)["dispatchThrottlingRateInMsg"] == 250
    own_admin.ok("POST", f"{CONFIG}/subscriptionTypesEnabled/Exclusive,Failover")
    with pytest.raises(pulsar.NotAllowedError):
        own_client.subscribe(topic, "second", consumer_type=pulsar.ConsumerType.Shared)
    own_client.subscribe(topic, "third", consumer_type=pulsar.ConsumerType.Exclusive).close()
    own_admin.ok("POST", f"{CONFIG}/allowAutoTopicCreation/false")
    with pytest.raises(pulsar.TopicNotFound):
        own_client.create_producer("persistent://public/default/dyn-never-made")
    for key in ("dispatchThrottlingRatePerTopicInMsg", "subscriptionTypesEnabled", "allowAutoTopicCreation"):
        own_admin.ok("DELETE", f"{CONFIG}/{key}")
    assert own_admin.ok("GET", applied)["dispatchThrottlingRateInMsg"] == 0
    own_client.subscribe(topic, "second", consumer_type=pulsar.ConsumerType.Shared).close()
    own_client.create_producer("persistent://public/default/dyn-made-now").close()


@pytest.mark.parametrize("method, path, reason", [
    ("POST", f"{CONFIG}/clusterName/other", "Can't update non-dynamic configuration"),
    ("POST", f"{CONFIG}/noSuchSetting/1", "Can't update non-dynamic configuration"),
    ("DELETE", f"{CONFIG}/brokerServicePort", "Can't delete non-dynamic configuration"),
    ("POST", f"{CONFIG}/maxNumPartitionsPerPartitionedTopic/many",
     "Invalid dynamic-config value: maxNumPartitionsPerPartitionedTopic=many: expected"),
    ("POST", f"{CONFIG}/subscriptionTypesEnabled/Exclusive,Broadcast", "Invalid dynamic-config value"),
    ("POST", f"{CONFIG}/subscriptionKeySharedEnable/yes", "Invalid dynamic-config value"),
    ("POST", f"{CONFIG}/brokerClientAuthenticationPlugin/org.example.AuthenticationKerberos",
     "Invalid dynamic-config value: brokerClientAuthenticationPlugin: unsupported authentication plugin"),
])
def test_refusals(own_admin: Admin, method: str, path: str, reason: str) -> None:
    reply = own_admin.call(method, path)
    assert reply.status == 412 and reply.reason.startswith(reason), (reply.status, reply.body)
    assert own_admin.ok("GET", f"{CONFIG}/values") == {}


def test_stored_settings_apply_at_the_next_start_and_a_bad_stored_one_is_ignored(tmp_path: Path) -> None:
    with BrokerThread(data_dir=tmp_path) as b:
        admin = Admin(b.web_url)
        admin.ok("POST", f"{CONFIG}/maxNumPartitionsPerPartitionedTopic/3")
        admin.ok("POST", f"{CONFIG}/defaultNumPartitions/2")
        # Another writer (a Pulsar broker of the cluster, a hand edit) stores what this broker cannot apply.
        store = b.server.service.metadata

        async def write() -> None:
            await store.update_dynamic_configuration(lambda d: d.update(loadBalancerSheddingEnabled="maybe",
                                                                           managedLedgerMaxEntriesPerLedger="5"))
        b.run_coroutine(write())
        assert runtime(admin, "loadBalancerSheddingEnabled") == "true"
    with BrokerThread(data_dir=tmp_path) as b:
        admin = Admin(b.web_url)
        assert runtime(admin, "maxNumPartitionsPerPartitionedTopic") == "3"
        assert runtime(admin, "defaultNumPartitions") == "2"
        assert runtime(admin, "loadBalancerSheddingEnabled") == "true"
        assert admin.put("/admin/v2/persistent/public/default/parted/partitions", 4).status == 406  # (Pulsar: 406)
        admin.ok("DELETE", f"{CONFIG}/maxNumPartitionsPerPartitionedTopic")
        assert runtime(admin, "maxNumPartitionsPerPartitionedTopic") == "0"
        admin.ok("PUT", "/admin/v2/persistent/public/default/parted/partitions", 4)
        stored = json.loads(admin.get(f"{CONFIG}/values").body)
        assert stored == {"defaultNumPartitions": "2", "loadBalancerSheddingEnabled": "maybe",
                          "managedLedgerMaxEntriesPerLedger": "5"}


def test_the_read_cache_takes_its_new_size_at_once(broker: BrokerThread, own_admin: Admin,
                                                   own_client: pulsar.Client) -> None:
    factory = broker.server.service.ledger_factory
    cache = factory.cache  # type: ignore[attr-defined]
    started_with = cache.max_bytes
    topic = "persistent://public/default/dyn-cache"
    own_client.subscribe(topic, "behind", receiver_queue_size=1)  # (a reader behind: what is written is cached)
    producer = own_client.create_producer(topic, batching_enabled=False)
    for _ in range(5):
        producer.send(b"x" * 1000)
    wait_for(lambda: len(cache) >= 3, what="the entries nobody has read yet cached")  # (a read one may leave)
    own_admin.ok("POST", f"{CONFIG}/managedLedgerCacheSizeMB/0")
    assert (cache.max_bytes, cache.size, len(cache)) == (0, 0, 0)
    producer.send(b"y")
    assert len(cache) == 0
    own_admin.ok("DELETE", f"{CONFIG}/managedLedgerCacheSizeMB")
    assert cache.max_bytes == started_with
    producer.send(b"z")
    assert len(cache) == 1


def test_the_inactive_topic_check_starts_when_enabled_while_the_broker_runs(tmp_path: Path) -> None:
    """Off at start, the check does not run (Pulsar's too); turned on with update-dynamic-config it starts, at the
    frequency set the same way, and deletes a topic nobody uses."""
    with BrokerThread(data_dir=tmp_path, brokerDeleteInactiveTopicsEnabled=False,
                      brokerDeleteInactiveTopicsMaxInactiveDurationSeconds=0) as b:
        admin = Admin(b.web_url)
        housekeeping = b.server.service.housekeeping
        assert "inactive-topic-check" not in [t.name for t in housekeeping.tasks]
        admin.ok("PUT", "/admin/v2/persistent/public/default/dyn-idle")
        admin.ok("POST", f"{CONFIG}/brokerDeleteInactiveTopicsFrequencySeconds/0.05")
        admin.ok("POST", f"{CONFIG}/brokerDeleteInactiveTopicsEnabled/true")
        task = housekeeping.task("inactive-topic-check")
        assert task.running and task.interval_s == 0.05
        listed = "/admin/v2/persistent/public/default"
        wait_for(lambda: "persistent://public/default/dyn-idle" not in admin.ok("GET", listed),
                 what="the unused topic deleted")
        admin.ok("POST", f"{CONFIG}/brokerDeleteInactiveTopicsFrequencySeconds/30")
        assert task.interval_s == 30


def test_broker_wide_limits_set_while_the_broker_runs(broker: BrokerThread, own_admin: Admin,
                                                      own_client: pulsar.Client) -> None:
    """dispatchThrottlingRateInMsg and brokerPublisherThrottlingMaxMessageRate set on a broker started without them
    (which has no limiter: nothing is paid per read or publish): the limiters are made and given to the
    subscription and the producer already there, whose reads and publishes they then cut; lifted, the held
    connection is read again at once and every message comes."""
    service = broker.server.service
    assert service.broker_dispatch_rate is None and service.broker_publish_throttle is None
    topic = "persistent://public/default/dyn-limits"
    consumer = own_client.subscribe(topic, "s", receiver_queue_size=1000)
    producer = own_client.create_producer(topic, batching_enabled=False)
    own_admin.ok("POST", f"{CONFIG}/dispatchThrottlingRateInMsg/5")
    own_admin.ok("POST", f"{CONFIG}/brokerPublisherThrottlingMaxMessageRate/5")
    rate, throttle = service.broker_dispatch_rate, service.broker_publish_throttle
    loaded = service.topics[topic]
    sub = loaded.subscriptions["s"]
    assert rate is not None and sub.dispatch_rates[-1] is rate
    assert sub.dispatcher is not None and sub.dispatcher.context.rates[-1] is rate
    assert throttle is not None and [p.broker_throttle for p in loaded.producers.values()] == [throttle]
    for i in range(40):
        producer.send_async(b"%d" % i, None)
    wait_for(lambda: throttle.paused == 1 and sub.dispatcher is not None
             and sub.dispatcher.throttled_msg_events[-1] >= 1, what="both limits cutting")
    own_admin.ok("DELETE", f"{CONFIG}/brokerPublisherThrottlingMaxMessageRate")
    assert throttle.paused == 0  # (read again at once: 35 messages past the limit would have taken 7 s)
    own_admin.ok("DELETE", f"{CONFIG}/dispatchThrottlingRateInMsg")
    producer.flush()
    assert sorted(int(consumer.receive(10_000).data()) for _ in range(40)) == list(range(40))
    assert rate.limits == (0, 0, 1) and throttle.limits == (0, 0, 1)


def test_dispatcher_settings_reach_the_running_dispatchers(broker: BrokerThread, own_admin: Admin,
                                                           own_client: pulsar.Client) -> None:
    service = broker.server.service
    topic = "persistent://public/default/dyn-reads"
    consumer = own_client.subscribe(topic, "s")
    dispatcher = service.topics[topic].subscriptions["s"].dispatcher
    assert dispatcher is not None and dispatcher.max_read_batch == 100
    own_admin.ok("POST", f"{CONFIG}/dispatcherMaxReadBatchSize/7")
    own_admin.ok("POST", f"{CONFIG}/dispatcherMaxReadSizeBytes/4096")
    own_admin.ok("POST", f"{CONFIG}/dispatchThrottlingOnBatchMessageEnabled/true")
    assert (dispatcher.max_read_batch, dispatcher.context.max_read_bytes) == (7, 4096)
    assert dispatcher.context.rate_counts_entries
    assert dispatcher.entries_to_read(50) == 7  # (a read for 50 messages asks for 7 entries now)
    producer = own_client.create_producer(topic, batching_enabled=False)
    for i in range(30):
        producer.send_async(b"%d" % i, None)
    producer.flush()
    assert [int(consumer.receive(10_000).data()) for _ in range(30)] == list(range(30))
    for key in ("dispatcherMaxReadBatchSize", "dispatcherMaxReadSizeBytes", "dispatchThrottlingOnBatchMessageEnabled"):
        own_admin.ok("DELETE", f"{CONFIG}/{key}")
    assert dispatcher.max_read_batch == 100 and not dispatcher.context.rate_counts_entries



def test_a_namespace_created_without_a_bundle_count_gets_the_default_in_force(own_admin: Admin) -> None:
    """defaultNumberOfNamespaceBundles set while the broker runs: the next namespace created without a count gets
    that many bundles; one created before keeps its own."""
    own_admin.ok("PUT", "/admin/v2/namespaces/public/dyn-before")
    own_admin.ok("POST", f"{CONFIG}/defaultNumberOfNamespaceBundles/2")
    own_admin.ok("PUT", "/admin/v2/namespaces/public/dyn-after")

    def bundles(ns: str) -> int:
        return int(own_admin.ok("GET", f"/admin/v2/namespaces/public/{ns}/bundles")["numBundles"])

    assert (bundles("dyn-before"), bundles("dyn-after")) == (4, 2)
    own_admin.ok("DELETE", f"{CONFIG}/defaultNumberOfNamespaceBundles")
    own_admin.ok("PUT", "/admin/v2/namespaces/public/dyn-later")
    assert bundles("dyn-later") == 4


def test_the_broker_client_credentials_change_while_the_broker_runs(own_admin: Admin) -> None:
    """Read for each connection, challenge answer and admin call (tests/unit/test_peer_admin.py,
    tests/transactions/test_buffer_client.py): set here, they are in force at once; Pulsar's default plugin class
    (no credentials) is accepted too."""
    plugins = "brokerClientAuthenticationPlugin/org.apache.pulsar.client.impl.auth.Authentication"
    own_admin.ok("POST", f"{CONFIG}/{plugins}Token")
    own_admin.ok("POST", f"{CONFIG}/brokerClientAuthenticationParameters/token:abc")
    assert runtime(own_admin, "brokerClientAuthenticationPlugin").endswith("AuthenticationToken")
    own_admin.ok("POST", f"{CONFIG}/{plugins}Disabled")
    assert runtime(own_admin, "brokerClientAuthenticationPlugin").endswith("AuthenticationDisabled")
