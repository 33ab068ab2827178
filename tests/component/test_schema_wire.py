"""Schema commands on the wire: GET_OR_CREATE_SCHEMA and the namespace's isAllowAutoUpdateSchema."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from broker.embedded import Broker
from broker.errors import IncompatibleSchemaError
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.schemas import decode_version
from tests.component.wire import T, WireClient, port_of, producer_cmd, subscribe_cmd

TOPIC = "persistent://public/default/no-auto-update"


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker(isAllowAutoUpdateSchema=False) as b:
        yield b


def get_or_create(request_id: int, schema_type: int, topic: str = TOPIC) -> pb.BaseCommand:
    ask = pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA)
    ask.getOrCreateSchema.request_id = request_id
    ask.getOrCreateSchema.topic = topic
    ask.getOrCreateSchema.schema.name = "s"
    ask.getOrCreateSchema.schema.type = schema_type  # type: ignore[assignment]
    ask.getOrCreateSchema.schema.schema_data = b""
    return ask


async def test_get_or_create_schema_registers_nothing_when_auto_update_is_off(broker: Broker) -> None:
    # Pulsar's handleGetOrCreateSchema adds the schema as a producer would (Topic.addSchema): with
    # isAllowAutoUpdateSchema=false it only finds a version that is there already.
    c = await WireClient.open(port_of(broker))
    await c.connect()
    c.send(producer_cmd(TOPIC))
    assert (await c.recv()).type == T.PRODUCER_SUCCESS
    c.send(get_or_create(2, pb.Schema.String))
    answer = (await c.recv()).getOrCreateSchemaResponse
    assert answer.error_code == pb.ServerError.IncompatibleSchema
    assert "auto updating is disabled" in answer.error_message
    assert broker.server is not None
    schemas = broker.server.service.schemas
    assert not schemas.has_schema(TOPIC)
    # A version that is there already is found.
    version = await schemas.add_or_get(TOPIC, get_or_create(0, pb.Schema.String).getOrCreateSchema.schema)
    c.send(get_or_create(3, pb.Schema.String))
    answer = (await c.recv()).getOrCreateSchemaResponse
    assert not answer.HasField("error_code") and decode_version(answer.schema_version) == version
    c.close()


def avro(*fields: str) -> pb.Schema:
    definition = '{"type":"record","name":"R","fields":[' + ",".join(fields) + "]}"
    return pb.Schema(name="R", type=pb.Schema.Avro, schema_data=definition.encode())


async def test_two_registrations_at_once_are_checked_one_after_the_other(broker: Broker) -> None:
    """Each new version is compatible with the one before it (FULL, the default): two schemas that are each
    compatible with the topic's but not with each other cannot both get in by registering at the same time."""
    assert broker.server is not None
    registry = broker.server.service.schemas
    topic = "persistent://public/default/racing-schemas"
    a = '{"name":"a","type":"int"}'
    await registry.add_or_get(topic, avro(a))
    as_string = avro(a, '{"name":"b","type":"string","default":""}')
    as_int = avro(a, '{"name":"b","type":"int","default":0}')
    outcomes = await asyncio.gather(registry.add_or_get(topic, as_string), registry.add_or_get(topic, as_int),
                                    return_exceptions=True)
    assert outcomes[0] == 1 and isinstance(outcomes[1], IncompatibleSchemaError), outcomes
    assert len(registry.versions(topic)) == 2
    # the same new schema registered twice at once is one version
    again = avro(a, '{"name":"c","type":"long","default":0}')
    other = "persistent://public/default/racing-schemas-2"
    await registry.add_or_get(other, avro(a))
    assert list(await asyncio.gather(registry.add_or_get(other, again), registry.add_or_get(other, again))) == [1, 1]
    assert not registry._registering


async def test_get_or_create_schema_on_a_topic_that_does_not_exist_is_topic_not_found() -> None:
    """As Pulsar's handleGetOrCreateSchema (getTopicIfExists, else TopicNotFound "Topic not found"): nothing is
    registered for a topic nobody created (it registered the schema of a topic that did not exist)."""
    async with Broker() as broker:
        c = await WireClient.open(port_of(broker))
        await c.connect()
        missing = "persistent://public/default/never-created"
        c.send(get_or_create(1, pb.Schema.String, missing))
        answer = (await c.recv()).getOrCreateSchemaResponse
        assert answer.error_code == pb.ServerError.TopicNotFound, answer
        assert broker.server is not None and not broker.server.service.schemas.has_schema(missing)
        c.send(producer_cmd(missing))  # created: then the schema is added
        assert (await c.recv()).type == T.PRODUCER_SUCCESS
        c.send(get_or_create(3, pb.Schema.String, missing))
        answer = (await c.recv()).getOrCreateSchemaResponse
        assert not answer.HasField("error_code") and answer.schema_version, answer
        c.close()


def typed_subscribe(topic: str, schema_type: int, consumer_id: int, request_id: int) -> pb.BaseCommand:
    cmd = subscribe_cmd(topic, f"sub-{consumer_id}", consumer_id, request_id)
    cmd.subscribe.schema.name = "s"
    cmd.subscribe.schema.type = schema_type  # type: ignore[assignment]
    cmd.subscribe.schema.schema_data = b""
    return cmd


async def test_an_auto_consume_consumer_is_not_checked_and_does_not_make_the_topic_in_use() -> None:
    """As Pulsar's handleSubscribe (no check for an AUTO_CONSUME schema, the Java client's Schema.AUTO_CONSUME())
    and addSchemaIfIdleOrCheckCompatible (AUTO_CONSUME consumers do not count): nothing is registered for it,
    and a consumer with a schema after it still finds the topic idle."""
    async with Broker() as broker:
        assert broker.server is not None
        schemas = broker.server.service.schemas
        topic = "persistent://public/default/auto-consume"
        c = await WireClient.open(port_of(broker))
        await c.connect()
        c.send(typed_subscribe(topic, pb.Schema.AutoConsume, 1, 1))
        assert (await c.recv()).type == T.SUCCESS
        assert not schemas.has_schema(topic)
        c.send(typed_subscribe(topic, pb.Schema.String, 2, 2))
        assert (await c.recv()).type == T.SUCCESS
        found = schemas.get(topic)
        assert found is not None and found[0]["type"] == pb.Schema.String
        # On a topic in use without a schema it is let through where a schema is refused.
        busy = "persistent://public/default/auto-consume-busy"
        c.send(producer_cmd(busy, producer_id=3, request_id=3))
        assert (await c.recv()).type == T.PRODUCER_SUCCESS
        c.send(typed_subscribe(busy, pb.Schema.AutoConsume, 4, 4))
        assert (await c.recv()).type == T.SUCCESS
        c.send(typed_subscribe(busy, pb.Schema.String, 5, 5))
        refused = await c.recv()
        assert refused.type == T.ERROR and refused.error.error == pb.ServerError.IncompatibleSchema, refused
        c.close()


async def test_an_idle_topic_adopts_a_consumer_schema_only_when_auto_update_is_on(broker: Broker) -> None:
    """Pulsar adds an idle topic's first schema for a consumer with Topic.addSchema, which with
    isAllowAutoUpdateSchema=false only finds a version that is there already."""
    assert broker.server is not None
    c = await WireClient.open(port_of(broker))
    await c.connect()
    topic = "persistent://public/default/idle-no-auto-update"
    c.send(typed_subscribe(topic, pb.Schema.String, 1, 1))
    refused = await c.recv()
    assert refused.type == T.ERROR and refused.error.error == pb.ServerError.IncompatibleSchema, refused
    assert "auto updating is disabled" in refused.error.message
    assert not broker.server.service.schemas.has_schema(topic)
    c.close()
