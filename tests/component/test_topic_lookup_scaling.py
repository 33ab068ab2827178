"""Topic lookups and creations ask the managed-ledger factory about one name, never for all of them
(issue 20, item 4: ``topic_exists`` sorted and scanned every stored ledger name, O(topics) per topic)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from broker.embedded import Broker
from broker.protocol import pulsar_api_pb2 as pb
from managed_ledger.api import ManagedLedgerFactory
from tests.component.wire import T, WireClient, port_of, producer_cmd, subscribe_cmd

TOPICS = 30


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker() as b:  # file storage in a temp dir
        yield b


def lookup_cmd(topic: str, request_id: int) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.LOOKUP)
    cmd.lookupTopic.topic = topic
    cmd.lookupTopic.request_id = request_id
    return cmd


def partitioned_metadata_cmd(topic: str, request_id: int) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=T.PARTITIONED_METADATA)
    cmd.partitionMetadata.topic = topic
    cmd.partitionMetadata.request_id = request_id
    return cmd


async def test_creating_topics_never_lists_every_stored_ledger(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    assert broker.server is not None
    factory: ManagedLedgerFactory = broker.server.service.ledger_factory
    calls = {"list_names": 0, "exists": 0}
    list_names, exists = factory.list_names, factory.exists

    def counted_list_names() -> list[str]:
        calls["list_names"] += 1
        return list_names()

    def counted_exists(name: str) -> bool:
        calls["exists"] += 1
        return exists(name)

    monkeypatch.setattr(factory, "list_names", counted_list_names)
    monkeypatch.setattr(factory, "exists", counted_exists)

    c = await WireClient.open(port_of(broker))
    await c.connect()
    request_id = 0
    for i in range(TOPICS):  # what a client does per topic: metadata, lookup, producer, consumer
        topic = f"persistent://public/default/many-{i}"
        request_id += 1
        c.send(partitioned_metadata_cmd(topic, request_id))
        assert (await c.recv()).partitionMetadataResponse.response == \
            pb.CommandPartitionedTopicMetadataResponse.Success
        request_id += 1
        c.send(lookup_cmd(topic, request_id))
        assert (await c.recv()).lookupTopicResponse.response == pb.CommandLookupTopicResponse.Connect
        request_id += 1
        c.send(producer_cmd(topic, producer_id=i, request_id=request_id))
        assert (await c.recv()).type == T.PRODUCER_SUCCESS
        request_id += 1
        c.send(subscribe_cmd(topic, "sub", consumer_id=i, request_id=request_id))
        assert (await c.recv()).type == T.SUCCESS
    c.close()

    assert calls["list_names"] == 0  # no per-topic scan of every name
    assert calls["exists"] >= TOPICS  # the one-name question was asked instead
    assert all(exists(f"public/default/persistent/many-{i}") for i in range(TOPICS))
