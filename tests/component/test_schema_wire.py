"""Schema commands on the wire: GET_OR_CREATE_SCHEMA and the namespace's isAllowAutoUpdateSchema."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from broker.embedded import Broker
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.schemas import decode_version
from tests.component.wire import T, WireClient, port_of, producer_cmd

TOPIC = "persistent://public/default/no-auto-update"


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker(isAllowAutoUpdateSchema=False) as b:
        yield b


def get_or_create(request_id: int, schema_type: int) -> pb.BaseCommand:
    ask = pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA)
    ask.getOrCreateSchema.request_id = request_id
    ask.getOrCreateSchema.topic = TOPIC
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
