"""Wire-level checks of what the Java and Go clients' compatibility suite (`make compat`) found:
commands and fields the Python client does not send."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from broker.embedded import Broker
from broker.protocol import pulsar_api_pb2 as pb
from broker.topic_name import TopicName
from tests.component.wire import T, WireClient, port_of, producer_cmd, subscribe_cmd


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker() as b:
        yield b


def partitioned_metadata(topic: str, request_id: int, auto_create: bool | None) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.PARTITIONED_METADATA)
    cmd.partitionMetadata.topic = topic
    cmd.partitionMetadata.request_id = request_id
    if auto_create is not None:
        cmd.partitionMetadata.metadata_auto_creation_enabled = auto_create
    return cmd


async def test_connected_advertises_partitioned_metadata_without_auto_creation(broker: Broker) -> None:
    """compat scenario partitions_no_autocreate: the Java client uses PIP-344 only when CONNECTED says so."""
    c = await WireClient.open(port_of(broker))
    flags = (await c.connect()).feature_flags
    assert flags.supports_get_partitioned_metadata_without_auto_creation
    assert flags.supports_topic_watchers  # PIP-145, so Java pattern consumers are pushed new topics
    c.close()


async def test_partitioned_metadata_without_auto_creation(broker: Broker) -> None:
    """PIP-344: metadata_auto_creation_enabled=false never creates; a missing topic is TopicNotFound."""
    assert broker.server is not None
    service = broker.server.service
    c = await WireClient.open(port_of(broker))
    await c.connect()
    missing = f"persistent://public/default/pip344-{uuid.uuid4().hex[:8]}"
    c.send(partitioned_metadata(missing, 1, auto_create=False))
    r = (await c.recv()).partitionMetadataResponse
    assert r.response == pb.CommandPartitionedTopicMetadataResponse.Failed
    assert r.error == pb.ServerError.TopicNotFound and r.message
    assert not service.topic_exists(TopicName.parse(missing))

    # an existing non-partitioned topic: 0 partitions
    c.send(producer_cmd(missing, producer_id=1, request_id=2))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    c.send(partitioned_metadata(missing, 3, auto_create=False))
    r = (await c.recv()).partitionMetadataResponse
    assert r.response == pb.CommandPartitionedTopicMetadataResponse.Success and r.partitions == 0

    # a partitioned topic and one of its partitions
    part = f"persistent://public/default/pip344p-{uuid.uuid4().hex[:8]}"
    await service.metadata.set_partitions(part, 2)
    c.send(partitioned_metadata(part, 4, auto_create=False))
    assert (await c.recv()).partitionMetadataResponse.partitions == 2
    c.send(partitioned_metadata(part + "-partition-1", 5, auto_create=False))
    r = (await c.recv()).partitionMetadataResponse
    assert r.response == pb.CommandPartitionedTopicMetadataResponse.Success and r.partitions == 0

    # without the field (older clients): as before, a missing topic is answered with 0 partitions
    c.send(partitioned_metadata(f"persistent://public/default/pip344o-{uuid.uuid4().hex[:8]}", 6, None))
    r = (await c.recv()).partitionMetadataResponse
    assert r.response == pb.CommandPartitionedTopicMetadataResponse.Success and r.partitions == 0
    c.close()



async def test_subscription_properties_from_subscribe(broker: Broker) -> None:
    """compat scenario subscription_properties (Java subscriptionProperties, Go SubscriptionProperties):
    the SUBSCRIBE that creates the subscription sets them; later consumers do not change them; stats
    and GET/PUT .../subscription/{sub}/properties show and replace them."""
    topic = f"persistent://public/default/subprops-{uuid.uuid4().hex[:8]}"
    c = await WireClient.open(port_of(broker))
    await c.connect()
    first = subscribe_cmd(topic, "s", consumer_id=1, request_id=1, sub_type=pb.CommandSubscribe.Shared)
    first.subscribe.subscription_properties.add(key="team", value="blue")
    c.send(first)
    assert (await c.recv()).type == T.SUCCESS
    second = subscribe_cmd(topic, "s", consumer_id=2, request_id=2, sub_type=pb.CommandSubscribe.Shared)
    second.subscribe.subscription_properties.add(key="team", value="red")
    c.send(second)
    assert (await c.recv()).type == T.SUCCESS
    path = f"{broker.web_url}/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}"
    async with aiohttp.ClientSession() as http:
        async with http.get(path + "/stats") as r:
            assert (await r.json())["subscriptions"]["s"]["subscriptionProperties"] == {"team": "blue"}
        async with http.get(path + "/subscription/s/properties") as r:
            assert r.status == 200 and await r.json() == {"team": "blue"}
        async with http.put(path + "/subscription/s/properties", json={"team": "green", "x": "1"}) as r:
            assert r.status == 204
        async with http.get(path + "/subscription/s/properties") as r:
            assert await r.json() == {"team": "green", "x": "1"}
        async with http.get(path + "/subscription/missing/properties") as r:
            assert r.status == 404
        async with http.put(path + "/subscription/s/properties", json={"n": 1}) as r:
            assert r.status == 400
    c.close()


async def test_subscription_properties_survive_unload_and_restart(tmp_path: Path) -> None:
    """They are stored with the subscription's cursor (Pulsar's cursorProperties): an unload, and a restart of
    the broker on the same data, find them; so do properties replaced over REST."""
    topic = f"persistent://public/default/subprops-kept-{uuid.uuid4().hex[:8]}"
    local = topic.rsplit("/", 1)[1]
    async with Broker(data_dir=tmp_path) as broker:
        c = await WireClient.open(port_of(broker))
        await c.connect()
        first = subscribe_cmd(topic, "s", consumer_id=1, request_id=1, sub_type=pb.CommandSubscribe.Shared)
        first.subscribe.subscription_properties.add(key="team", value="blue")
        c.send(first)
        assert (await c.recv()).type == T.SUCCESS
        c.close()
        path = f"{broker.web_url}/admin/v2/persistent/public/default/{local}"
        async with aiohttp.ClientSession() as http:
            async with http.put(path + "/unload") as r:
                assert r.status == 204
            async with http.get(path + "/subscription/s/properties") as r:
                assert await r.json() == {"team": "blue"}
            async with http.put(path + "/subscription/s/properties", json={"team": "green"}) as r:
                assert r.status == 204
    async with Broker(data_dir=tmp_path) as broker:
        path = f"{broker.web_url}/admin/v2/persistent/public/default/{local}"
        async with aiohttp.ClientSession() as http, http.get(path + "/subscription/s/properties") as r:
            assert r.status == 200 and await r.json() == {"team": "green"}


def watch_cmd(request_id: int, watcher_id: int, pattern: str, topics_hash: str | None = None) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.WATCH_TOPIC_LIST)
    w = cmd.watchTopicList
    w.request_id, w.watcher_id, w.namespace, w.topics_pattern = request_id, watcher_id, "public/default", pattern
    if topics_hash is not None:
        w.topics_hash = topics_hash
    return cmd


async def test_topic_list_watcher_pushes_new_and_deleted_topics(broker: Broker) -> None:
    """compat scenario regex_new_topic with the Java client's PIP-145 watcher: the matching topics
    at once, then WATCH_TOPIC_UPDATE when a matching topic appears or goes; a partitioned topic's
    base name is matched; a reconnect with the current hash gets an empty list."""
    assert broker.server is not None
    service = broker.server.service
    base = f"watch-{uuid.uuid4().hex[:8]}"
    first = f"persistent://public/default/{base}-a"
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(producer_cmd(first, producer_id=1, request_id=1))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    c.send(watch_cmd(2, 7, f"persistent://public/default/{base}-.*"))
    ok = (await c.recv()).watchTopicListSuccess
    assert ok.request_id == 2 and ok.watcher_id == 7 and list(ok.topic) == [first]
    first_hash = ok.topics_hash

    second = f"persistent://public/default/{base}-b"
    c.send(producer_cmd(second, producer_id=2, request_id=3))
    # (The update is pushed as the topic's ledger is created: it may come before the producer's answer.)
    frames = {f.type: f for f in [await c.recv(), await c.recv()]}
    assert set(frames) == {T.PRODUCER_SUCCESS, T.WATCH_TOPIC_UPDATE}
    update = frames[T.WATCH_TOPIC_UPDATE]
    assert update.watchTopicUpdate.watcher_id == 7 and list(update.watchTopicUpdate.new_topics) == [second]
    assert update.watchTopicUpdate.topics_hash != first_hash

    await service.metadata.set_partitions(f"persistent://public/default/{base}-p", 2)
    update = await c.recv()
    assert list(update.watchTopicUpdate.new_topics) == [f"persistent://public/default/{base}-p-partition-{i}"
                                                        for i in range(2)]
    await service.metadata.delete_partitioned(f"persistent://public/default/{base}-p")
    update = await c.recv()
    assert len(update.watchTopicUpdate.deleted_topics) == 2 and not update.watchTopicUpdate.new_topics
    current = update.watchTopicUpdate.topics_hash

    c.send(watch_cmd(4, 8, f"public/default/{base}-.*", topics_hash=current))  # no scheme, same hash: empty
    ok = (await c.recv()).watchTopicListSuccess
    assert ok.watcher_id == 8 and not ok.topic and ok.topics_hash == current

    close = pb.BaseCommand(type=T.WATCH_TOPIC_LIST_CLOSE)
    close.watchTopicListClose.request_id, close.watchTopicListClose.watcher_id = 5, 7
    c.send(close)
    assert (await c.recv()).success.request_id == 5

    c.send(watch_cmd(6, 9, "persistent://public/default/(unclosed"))
    err = await c.recv()
    assert err.type == T.ERROR and err.error.error == pb.ServerError.InvalidTopicName
    c.close()


async def test_initial_subscription_refused_when_auto_subscription_creation_is_off(broker: Broker) -> None:
    """compat scenario initial_subscription_refused (Java DLQ initialSubscriptionName): the producer
    is refused with NotAllowed naming the reason, and no subscription is made."""
    assert broker.server is not None
    service = broker.server.service
    ns = f"public/noauto-{uuid.uuid4().hex[:8]}"
    await service.metadata.create_namespace(
        ns, {"autoSubscriptionCreationOverride": {"allowAutoSubscriptionCreation": False}})
    topic = f"persistent://{ns}/t"
    c = await WireClient.open(port_of(broker))
    await c.connect()
    cmd = producer_cmd(topic, producer_id=1, request_id=1)
    cmd.producer.initial_subscription_name = "init"
    c.send(cmd)
    err = await c.recv()
    assert err.type == T.ERROR and err.error.error == pb.ServerError.NotAllowedError
    assert "auto subscription creation" in err.error.message
    loaded = service.topics.get(topic)
    assert loaded is None or "init" not in loaded.ledger.cursors
    c.close()


@pytest.mark.parametrize("subscription", ["pulsar.dedup", "pulsar.repl.elsewhere", "pulsar.txn.buffer", "__compaction"])
async def test_a_broker_cursor_name_is_refused_as_a_subscription(broker: Broker, subscription: str) -> None:
    """The names of the broker's own cursors (deduplication's, a replicator's, the transaction buffer's, the
    compactor's, whose acks Pulsar refuses) are
    reserved, as Pulsar's internalSubscribe refuses the replicator prefix and pulsar.dedup (ProducerBusy, its
    words; the C++ client reports it as InvalidConfiguration): a consumer on one would share that cursor and move
    it with its acks (deduplication's snapshot, what a replicator has sent). Both were let in. The admin API's
    subscription create refuses them too (412; Pulsar's does not check, but the collision is the same)."""
    topic = f"persistent://public/default/reserved-{uuid.uuid4().hex[:8]}"
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(producer_cmd(topic, producer_id=1, request_id=1))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    c.send(subscribe_cmd(topic, subscription, consumer_id=1, request_id=2))
    reply = await c.recv()
    assert reply.type == T.ERROR
    assert (reply.error.error, reply.error.message) == (
        pb.ProducerBusy, "Subscription with reserved subscription name attempted")
    c.send(subscribe_cmd(topic, "ordinary", consumer_id=2, request_id=3))
    assert (await c.recv()).type == T.SUCCESS  # (the connection goes on)
    path = f"{broker.web_url}/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}"
    async with aiohttp.ClientSession() as http:
        async with http.put(f"{path}/subscription/{subscription}") as r:
            assert r.status == 412
        async with http.get(f"{path}/subscriptions") as r:
            assert await r.json() == ["ordinary"]
    assert broker.server is not None
    loaded = broker.server.service.topics[topic]
    assert subscription not in loaded.subscriptions and subscription not in loaded.ledger.cursors
    c.close()
