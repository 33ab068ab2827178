"""The schema registry as clients and the admin API see it: versions, deletes, consumers' schemas."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pulsar
import pytest
from pulsar.schema import AvroSchema, BytesSchema, Integer, Record, String, StringSchema

from broker.embedded import BrokerThread
from tests.admin.conftest import Admin


@pytest.fixture(scope="module")
def pulsar_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with BrokerThread(data_dir=tmp_path_factory.mktemp("schema-registry")) as b:
        yield b


def new_topic(prefix: str) -> tuple[str, str]:
    """A fresh topic and its schema path."""
    local = f"{prefix}-{uuid.uuid4().hex[:8]}"
    return f"persistent://public/default/{local}", f"/admin/v2/schemas/public/default/{local}/schema"


RECORD = '{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}'


def test_the_same_definition_is_one_version(admin: Admin) -> None:
    # Pulsar looks a schema up by its parsed definition and type (getSchemaVersionBySchemaData):
    # neither the text's layout nor the properties make another version.
    _, path = new_topic("same")
    assert admin.ok("POST", path, {"type": "AVRO", "schema": RECORD, "properties": {"k": "1"}}) == {
        "version": {"version": 0}}
    spaced = json.dumps(json.loads(RECORD), indent=2)
    for body in ({"type": "AVRO", "schema": RECORD}, {"type": "AVRO", "schema": spaced, "properties": {"k": "2"}}):
        reply = admin.post(path, body)
        assert reply.status == 200 and reply.json == {"version": {"version": 0}}
    assert [s["version"] for s in admin.ok("GET", path + "s")["getSchemaResponses"]] == [0]
    _, strings = new_topic("same-string")
    assert admin.ok("POST", strings, {"type": "STRING", "schema": ""})["version"] == {"version": 0}
    assert admin.ok("POST", strings, {"type": "STRING", "schema": "", "properties": {"x": "y"}})["version"] == {
        "version": 0}


def test_a_deleted_schema_keeps_its_version_numbers(admin: Admin) -> None:
    # Pulsar's delete appends a tombstone version; what comes after starts afresh (no compatibility
    # with what was deleted) under a new number, so a message written with an old version never
    # finds another schema under that number.
    _, path = new_topic("deleted")
    admin.ok("POST", path, {"type": "AVRO", "schema": RECORD})
    assert admin.delete(path).json == {"version": 1}
    assert admin.get(path).status == 404
    assert admin.get(f"{path}/0").status == 404
    assert admin.get(f"{path}/1").status == 404
    assert admin.ok("GET", path + "s") == {"getSchemaResponses": []}
    # Deleting again is no error: another tombstone, as Pulsar's delete appends one whatever is there.
    assert admin.delete(path).json == {"version": 2}
    reply = admin.post(path, {"type": "STRING", "schema": ""})  # FULL would refuse a type change
    assert reply.status == 200 and reply.json == {"version": {"version": 3}}
    assert admin.ok("GET", path)["version"] == 3 and admin.get(f"{path}/0").status == 404
    # The definition deleted earlier is no version now: a new one, checked against the live ones.
    assert admin.post(path, {"type": "AVRO", "schema": RECORD}).status == 409
    assert [s["version"] for s in admin.ok("GET", path + "s")["getSchemaResponses"]] == [3]


def test_a_consumer_reads_with_a_schema_the_topic_can_be_read_with(admin: Admin, client: pulsar.Client) -> None:
    # A consumer's schema only has to read what the topic holds (Pulsar's checkConsumerCompatibility:
    # BACKWARD against the latest version under BACKWARD, FORWARD, FORWARD_TRANSITIVE and FULL), not
    # be one producers could write with too.
    class Item(Record):  # type: ignore[misc]  # pulsar.schema.Record is untyped (no stubs)
        a = String(required=True)
        b = Integer(required=True)

    writer = Item

    class Item(Record):  # type: ignore[misc,no-redef]  # the same record, read without b
        a = String(required=True)

    reader = Item
    topic, _ = new_topic("projection")
    producer = client.create_producer(topic, schema=AvroSchema(writer))
    consumer = client.subscribe(topic, "projection", schema=AvroSchema(reader))
    producer.send(writer(a="x", b=1))
    assert consumer.receive(timeout_millis=10_000).value().a == "x"
    # The strategy still holds where the consumer's schema cannot read the topic's data.

    class Item(Record):  # type: ignore[misc,no-redef]
        a = String(required=True)
        c = Integer(required=True)

    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "unreadable", schema=AvroSchema(Item))


def test_a_consumer_schema_is_refused_on_a_topic_in_use_without_a_schema(admin: Admin, client: pulsar.Client) -> None:
    # Pulsar's addSchemaIfIdleOrCheckCompatible: a topic with no schema that has data, a producer or a
    # consumer (AUTO_CONSUME ones aside) holds schemaless data, so a consumer with a schema is refused
    # (IncompatibleSchema "... active topic with empty(BYTES) schema ..."); BYTES consumers send no schema.
    with_data, _ = new_topic("schemaless-data")
    producer = client.create_producer(with_data)
    producer.send(b"raw")
    producer.close()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(with_data, "typed", schema=StringSchema())
    bytes_consumer = client.subscribe(with_data, "bytes", schema=BytesSchema(),
                                      initial_position=pulsar.InitialPosition.Earliest)
    assert bytes_consumer.receive(timeout_millis=10_000).data() == b"raw"

    with_producer, path = new_topic("schemaless-producer")
    client.create_producer(with_producer)  # nothing sent
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(with_producer, "typed", schema=StringSchema())
    assert admin.get(path).status == 404  # nothing was registered

    with_consumer, _ = new_topic("schemaless-consumer")
    client.subscribe(with_consumer, "bytes")
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(with_consumer, "typed", schema=StringSchema())

    # An idle topic (nothing stored, nobody attached) adopts the consumer's schema.
    idle, path = new_topic("schemaless-idle")
    client.subscribe(idle, "typed", schema=StringSchema())
    assert admin.ok("GET", path)["type"] == "STRING"


def test_a_consumer_schema_on_a_schemaless_topic_in_use_is_let_through_when_always_compatible(
        admin: Admin, client: pulsar.Client) -> None:
    # checkConsumerCompatibility answers ALWAYS_COMPATIBLE before it looks for a schema.
    ns = admin.new_namespace()
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
    topic = f"persistent://{ns}/schemaless"
    client.create_producer(topic).send(b"raw")
    consumer = client.subscribe(topic, "typed", schema=StringSchema(), initial_position=pulsar.InitialPosition.Earliest)
    assert consumer.receive(timeout_millis=10_000).data() == b"raw"


def test_always_incompatible_refuses_a_consumer_even_with_the_stored_schema(admin: Admin,
                                                                            client: pulsar.Client) -> None:
    # Pulsar's checkConsumerCompatibility holds a consumer to ALWAYS_INCOMPATIBLE against every version
    # (checkCompatibilityWithAll, no exception for a version it matches): refused. A producer with the stored
    # schema gets its version (putSchemaIfAbsent finds it before any check); a new one is refused.
    ns = admin.new_namespace()
    topic = f"persistent://{ns}/frozen"
    client.create_producer(topic, schema=StringSchema()).close()
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", "ALWAYS_INCOMPATIBLE")
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "typed", schema=StringSchema())
    client.create_producer(topic, schema=StringSchema()).close()

    class Item(Record):  # type: ignore[misc]  # pulsar.schema.Record is untyped (no stubs)
        a = String()

    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(Item))
    client.subscribe(topic, "bytes").close()  # no schema: nothing to check


@pytest.mark.parametrize("strategy", ["BACKWARD", "BACKWARD_TRANSITIVE"])
def test_a_consumer_with_an_older_version_must_still_read_the_topic(admin: Admin, client: pulsar.Client,
                                                                    strategy: str) -> None:
    # Only the latest version itself passes unchecked, and only under the strategies checked against the latest
    # (checkCompatibilityWithLatest's hash test); a schema that is an older version is checked as any other:
    # here it cannot read the latest version's data.
    class Old(Record):  # type: ignore[misc]  # pulsar.schema.Record is untyped (no stubs)
        a = String(required=True)

    class New(Record):  # type: ignore[misc]
        b = String(required=True)

    ns = admin.new_namespace()
    topic = f"persistent://{ns}/moved-on"
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
    client.create_producer(topic, schema=AvroSchema(Old)).close()
    client.create_producer(topic, schema=AvroSchema(New)).close()
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", strategy)
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "old", schema=AvroSchema(Old))
    if strategy == "BACKWARD":
        client.subscribe(topic, "new", schema=AvroSchema(New)).close()
    else:  # checked against every version, the latest too: it cannot read the first version's data either
        with pytest.raises(pulsar.IncompatibleSchema):
            client.subscribe(topic, "new", schema=AvroSchema(New))


def test_a_consumer_schema_is_refused_after_the_topic_schema_was_deleted(admin: Admin,
                                                                         client: pulsar.Client) -> None:
    # Pulsar's hasSchema sees the latest stored version, a delete's tombstone too: the topic is then checked
    # (not idle), and with no live version a consumer's schema is refused, while a producer registers afresh.
    topic, path = new_topic("deleted-schema")
    client.create_producer(topic, schema=StringSchema()).close()
    admin.ok("DELETE", path)
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "typed", schema=StringSchema())
    client.create_producer(topic, schema=StringSchema()).close()
    client.subscribe(topic, "typed", schema=StringSchema()).close()
