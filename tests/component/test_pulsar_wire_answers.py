"""Our answers to commands that must fail, on the binary protocol, against Apache Pulsar 4.0.7's own.

Each case sends a real Pulsar standalone and our broker the same raw commands (tests/transactions/client.py) on
fresh connections: a producer or consumer that may not be, a name or namespace that does not exist, a command for an
id never made, a schema that does not fit, a transaction with transactions off. For each the answer's command type
and error code must be Pulsar's (a client decides what to do from them: retry, give up, look up again), or both
brokers must close the connection, or both say nothing. ``DIFFERENCES`` lists where ours answers otherwise on
purpose, with the reason. The messages are not compared (Pulsar's often carry a Java exception's text).

Cost: one Pulsar standalone start (5-60 s) and a second or two of commands.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from broker.protocol import pulsar_api_pb2 as pb
from tests.admin.pulsar_answers import Answers, ask_both, request
from tests.transactions.client import T, TxnWireClient

pytestmark = [pytest.mark.apache_pulsar, pytest.mark.timeout(600)]

NS = "public/default"
QUIET_S = 1.0  # how long "no answer" is waited for (never asserted on time)
Case = Callable[["Wire"], Awaitable[Any]]


class Wire:
    """One broker's side of a case: fresh connections to it, its admin for a setup step, and unique names."""

    def __init__(self, port: int, web_url: str, prefix: str) -> None:
        self.port, self.web_url, self.prefix = port, web_url, prefix
        self.clients: list[TxnWireClient] = []
        self._ids = itertools.count(1)

    async def connect(self) -> TxnWireClient:
        client = await TxnWireClient.open(self.port)
        self.clients.append(client)
        return client

    def topic(self, name: str, domain: str = "persistent") -> str:
        return f"{domain}://{NS}/{self.prefix}-{name}"

    async def admin(self, method: str, path: str, body: Any = None) -> None:
        status, text = await asyncio.to_thread(request, self.web_url, method, path, body)
        assert status < 300, (method, path, status, text)

    async def close(self) -> None:
        for client in self.clients:
            await client.close()


def _command(kind: int, field: str, **values: Any) -> tuple[pb.BaseCommand, Any]:
    cmd = pb.BaseCommand(type=kind)  # type: ignore[arg-type]
    body = getattr(cmd, field)
    for name, value in values.items():
        if isinstance(value, pb.Schema | pb.MessageIdData):
            getattr(body, name).CopyFrom(value)
        else:
            setattr(body, name, value)
    return cmd, body


async def ask_of(client: TxnWireClient, kind: int, field: str, **values: Any) -> pb.BaseCommand:
    """A command with a request id; its answer (ConnectionError when the broker closed the connection)."""
    return await client.request(*_command(kind, field, **values))


def producer(topic: str, producer_id: int = 1, **values: Any) -> dict[str, Any]:
    return {"kind": T.PRODUCER, "field": "producer", "topic": topic, "producer_id": producer_id, **values}


def subscribe(topic: str, sub: str, consumer_id: int = 1, sub_type: int = pb.CommandSubscribe.Exclusive,
              **values: Any) -> dict[str, Any]:
    return {"kind": T.SUBSCRIBE, "field": "subscribe", "topic": topic, "subscription": sub,
            "consumer_id": consumer_id, "subType": sub_type, **values}


async def ask(client: TxnWireClient, spec: dict[str, Any]) -> pb.BaseCommand:
    """A PRODUCER or SUBSCRIBE after a LOOKUP of its topic, as clients send them (Pulsar serves a topic only
    once a lookup has placed its bundle here)."""
    spec = dict(spec)
    await client.lookup(spec["topic"])
    return await ask_of(client, spec.pop("kind"), spec.pop("field"), **spec)


def string_schema() -> pb.Schema:
    return pb.Schema(name="s", schema_data=b"", type=pb.Schema.String)


def json_schema() -> pb.Schema:
    definition = (b'{"type":"record","name":"R","namespace":"n","fields":[{"name":"a","type":"int"}]}')
    return pb.Schema(name="s", schema_data=definition, type=pb.Schema.Json)


# -- the cases: each returns the answer that counts ------------------------------------------------------------------
async def producer_on_missing_namespace(w: Wire) -> Any:
    return await ask(await w.connect(), producer(f"persistent://{NS}-nosuch/t"))


async def producer_on_missing_tenant(w: Wire) -> Any:
    return await ask(await w.connect(), producer("persistent://nosuchtenant/ns/t"))


async def producer_on_invalid_name(w: Wire) -> Any:
    return await ask(await w.connect(), producer("persistent://public/default/a/b"))


async def producer_name_taken(w: Wire) -> Any:
    topic = w.topic("named")
    await ask(await w.connect(), producer(topic, producer_name="same"))
    return await ask(await w.connect(), producer(topic, producer_name="same"))


async def producer_id_reused_on_a_connection(w: Wire) -> Any:
    client = await w.connect()
    await ask(client, producer(w.topic("reused-a")))
    return await ask(client, producer(w.topic("reused-b")))


async def exclusive_producer_taken(w: Wire) -> Any:
    topic = w.topic("exclusive-producer")
    await ask(await w.connect(), producer(topic))
    return await ask(await w.connect(), producer(topic, producer_access_mode=pb.Exclusive))


async def producer_on_terminated_topic(w: Wire) -> Any:
    topic = w.topic("terminated")
    await ask(await w.connect(), producer(topic))
    await w.admin("POST", f"/admin/v2/persistent/{NS}/{w.prefix}-terminated/terminate")
    return await ask(await w.connect(), producer(topic))


async def producer_with_incompatible_schema(w: Wire) -> Any:
    topic = w.topic("schema")
    await ask(await w.connect(), producer(topic, schema=string_schema()))
    return await ask(await w.connect(), producer(topic, schema=json_schema()))


async def exclusive_subscription_taken(w: Wire) -> Any:
    topic = w.topic("exclusive")
    await ask(await w.connect(), subscribe(topic, "sub"))
    return await ask(await w.connect(), subscribe(topic, "sub"))


async def subscription_of_another_type(w: Wire) -> Any:
    topic = w.topic("types")
    await ask(await w.connect(), subscribe(topic, "sub", sub_type=pb.CommandSubscribe.Shared))
    return await ask(await w.connect(), subscribe(topic, "sub", sub_type=pb.CommandSubscribe.Failover))


async def consumer_id_reused_on_a_connection(w: Wire) -> Any:
    client = await w.connect()
    await ask(client, subscribe(w.topic("cid-a"), "sub"))
    return await ask(client, subscribe(w.topic("cid-b"), "sub"))


async def subscribe_on_missing_namespace(w: Wire) -> Any:
    return await ask(await w.connect(), subscribe(f"persistent://{NS}-nosuch/t", "sub"))


async def subscribe_with_empty_name(w: Wire) -> Any:
    return await ask(await w.connect(), subscribe(w.topic("empty-sub"), ""))


async def unsubscribe_with_others_connected(w: Wire) -> Any:
    topic = w.topic("unsub")
    first = await w.connect()
    await ask(first, subscribe(topic, "sub", sub_type=pb.CommandSubscribe.Shared))
    await ask(await w.connect(), subscribe(topic, "sub", sub_type=pb.CommandSubscribe.Shared))
    return await ask_of(first, T.UNSUBSCRIBE, "unsubscribe", consumer_id=1)


async def unsubscribe_unknown_consumer(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.UNSUBSCRIBE, "unsubscribe", consumer_id=77)


async def seek_unknown_consumer(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.SEEK, "seek", consumer_id=77, message_publish_time=1)


async def last_message_id_unknown_consumer(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.GET_LAST_MESSAGE_ID, "getLastMessageId", consumer_id=77)


async def consumer_stats_unknown_consumer(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.CONSUMER_STATS, "consumerStats", consumer_id=77)


async def close_unknown_producer(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.CLOSE_PRODUCER, "close_producer", producer_id=77)


async def close_unknown_consumer(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.CLOSE_CONSUMER, "close_consumer", consumer_id=77)


async def lookup_on_missing_namespace(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.LOOKUP, "lookupTopic", topic=f"persistent://{NS}-nosuch/t")


async def lookup_of_invalid_name(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.LOOKUP, "lookupTopic", topic="not a topic name")


async def partitions_of_invalid_name(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.PARTITIONED_METADATA, "partitionMetadata", topic="persistent://x")


async def topics_of_missing_namespace(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.GET_TOPICS_OF_NAMESPACE, "getTopicsOfNamespace",
                        namespace=f"{NS}-nosuch")


async def topics_of_invalid_namespace(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.GET_TOPICS_OF_NAMESPACE, "getTopicsOfNamespace", namespace="no-slash")


async def watch_topics_of_missing_namespace(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.WATCH_TOPIC_LIST, "watchTopicList", watcher_id=1,
                        namespace=f"{NS}-nosuch", topics_pattern=f"persistent://{NS}-nosuch/.*")


async def schema_of_topic_without_one(w: Wire) -> Any:
    topic = w.topic("no-schema")
    await ask(await w.connect(), producer(topic))
    return await ask_of(await w.connect(), T.GET_SCHEMA, "getSchema", topic=topic)


async def new_transaction_with_transactions_off(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.NEW_TXN, "newTxn", tc_id=0)


async def coordinator_connect_with_transactions_off(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.TC_CLIENT_CONNECT_REQUEST, "tcClientConnectRequest", tc_id=0)


async def send_for_unknown_producer(w: Wire) -> Any:
    client = await w.connect()
    return await asyncio.wait_for(client.send_nowait(77, 0, "x"), QUIET_S)


async def read_compacted_on_shared(w: Wire) -> Any:
    return await ask(await w.connect(), subscribe(w.topic("compacted"), "sub", sub_type=pb.CommandSubscribe.Shared,
                                                  read_compacted=True))


async def subscribe_to_partitioned_base(w: Wire) -> Any:
    await w.admin("PUT", f"/admin/v2/persistent/{NS}/{w.prefix}-parted/partitions", 2)
    return await ask(await w.connect(), subscribe(w.topic("parted"), "sub"))


async def producer_on_partitioned_base(w: Wire) -> Any:
    await w.admin("PUT", f"/admin/v2/persistent/{NS}/{w.prefix}-parted/partitions", 2)
    return await ask(await w.connect(), producer(w.topic("parted")))


async def partitions_of_partitioned_topic(w: Wire) -> Any:
    await w.admin("PUT", f"/admin/v2/persistent/{NS}/{w.prefix}-parted/partitions", 3)
    return await ask_of(await w.connect(), T.PARTITIONED_METADATA, "partitionMetadata", topic=w.topic("parted"))


async def unsubscribe_twice(w: Wire) -> Any:
    client = await w.connect()
    await ask(client, subscribe(w.topic("unsub-twice"), "sub"))
    await ask_of(client, T.UNSUBSCRIBE, "unsubscribe", consumer_id=1)
    return await ask_of(client, T.UNSUBSCRIBE, "unsubscribe", consumer_id=1)


async def close_producer_twice(w: Wire) -> Any:
    client = await w.connect()
    await ask(client, producer(w.topic("close-twice")))
    await ask_of(client, T.CLOSE_PRODUCER, "close_producer", producer_id=1)
    return await ask_of(client, T.CLOSE_PRODUCER, "close_producer", producer_id=1)


async def seek_to_a_message_id(w: Wire) -> Any:
    client = await w.connect()
    await ask(client, subscribe(w.topic("seek"), "sub"))
    return await ask_of(client, T.SEEK, "seek", consumer_id=1, message_id=pb.MessageIdData(ledgerId=0, entryId=0))


async def last_message_id_of_empty_topic(w: Wire) -> Any:
    client = await w.connect()
    await ask(client, subscribe(w.topic("empty"), "sub"))
    return await ask_of(client, T.GET_LAST_MESSAGE_ID, "getLastMessageId", consumer_id=1)


async def wait_for_exclusive_producer(w: Wire) -> Any:
    topic = w.topic("wait-exclusive")
    await ask(await w.connect(), producer(topic, producer_access_mode=pb.Exclusive))
    return await ask(await w.connect(), producer(topic, producer_access_mode=pb.WaitForExclusive))


async def schema_version_that_does_not_exist(w: Wire) -> Any:
    topic = w.topic("schema-version")
    await ask(await w.connect(), producer(topic, schema=string_schema()))
    return await ask_of(await w.connect(), T.GET_SCHEMA, "getSchema", topic=topic,
                        schema_version=(7).to_bytes(8, "big"))


async def create_incompatible_schema(w: Wire) -> Any:
    topic = w.topic("schema-create")
    await ask(await w.connect(), producer(topic, schema=string_schema()))
    return await ask_of(await w.connect(), T.GET_OR_CREATE_SCHEMA, "getOrCreateSchema", topic=topic,
                        schema=json_schema())


async def producer_with_a_long_name(w: Wire) -> Any:
    return await ask(await w.connect(), producer(w.topic("x" * 5000)))


async def non_persistent_producer_exclusive_taken(w: Wire) -> Any:
    topic = w.topic("np-exclusive", "non-persistent")
    await ask(await w.connect(), producer(topic, producer_access_mode=pb.Exclusive))
    return await ask(await w.connect(), producer(topic))



# -- answers that succeed: the same fields set (a client reads them), values where both must agree ------------------
async def connected(w: Wire) -> Any:
    return (await w.connect()).connected


async def producer_success(w: Wire) -> Any:
    return await ask(await w.connect(), producer(w.topic("ok-producer")))


async def producer_success_with_schema(w: Wire) -> Any:
    return await ask(await w.connect(), producer(w.topic("ok-schema"), schema=string_schema()))


async def exclusive_producer_success(w: Wire) -> Any:
    return await ask(await w.connect(), producer(w.topic("ok-exclusive"), producer_access_mode=pb.Exclusive))


async def subscribe_success(w: Wire) -> Any:
    return await ask(await w.connect(), subscribe(w.topic("ok-sub"), "sub"))


async def lookup_success(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.LOOKUP, "lookupTopic", topic=w.topic("ok-lookup"))


async def partitions_of_plain_topic(w: Wire) -> Any:
    return await ask_of(await w.connect(), T.PARTITIONED_METADATA, "partitionMetadata", topic=w.topic("ok-plain"))


async def last_message_id_after_a_send(w: Wire) -> Any:
    client = await w.connect()
    topic = w.topic("ok-last")
    await ask(client, producer(topic))
    assert (await client.send(1, 0, "x")).type == T.SEND_RECEIPT
    await ask(client, subscribe(topic, "sub", consumer_id=2, initialPosition=pb.CommandSubscribe.Earliest))
    return await ask_of(client, T.GET_LAST_MESSAGE_ID, "getLastMessageId", consumer_id=2)


async def send_receipt(w: Wire) -> Any:
    client = await w.connect()
    await ask(client, producer(w.topic("ok-send")))
    return await client.send(1, 0, "x")


async def consumer_stats(w: Wire) -> Any:
    client = await w.connect()
    await ask(client, subscribe(w.topic("ok-stats"), "sub", sub_type=pb.CommandSubscribe.Shared))
    return await ask_of(client, T.CONSUMER_STATS, "consumerStats", consumer_id=1)


async def schema_of_a_topic(w: Wire) -> Any:
    topic = w.topic("ok-get-schema")
    await ask(await w.connect(), producer(topic, schema=string_schema()))
    return await ask_of(await w.connect(), T.GET_SCHEMA, "getSchema", topic=topic)


async def topics_of_namespace(w: Wire) -> Any:
    client = await w.connect()
    await ask(client, producer(w.topic("ok-listed")))
    return await ask_of(client, T.GET_TOPICS_OF_NAMESPACE, "getTopicsOfNamespace", namespace=NS)


async def one_message_received(w: Wire, name: str, sub_type: int = pb.CommandSubscribe.Exclusive,
                               ) -> tuple[TxnWireClient, Any]:
    """A message sent to a new topic and received by consumer 2 (from the earliest position): the client and it."""
    client = await w.connect()
    topic = w.topic(name)
    await ask(client, producer(topic))
    await client.send(1, 0, "x")
    await ask(client, subscribe(topic, "sub", consumer_id=2, sub_type=sub_type,
                                initialPosition=pb.CommandSubscribe.Earliest))
    client.flow(2, 10)
    return client, await client.receive(2)


async def ack_with_a_receipt(w: Wire) -> Any:
    client, message = await one_message_received(w, "ok-ack")
    return await client.ack(2, message)


async def message_delivered(w: Wire) -> Any:
    return (await one_message_received(w, "ok-message", pb.CommandSubscribe.Shared))[1].command


async def message_redelivered(w: Wire) -> Any:
    client, _ = await one_message_received(w, "ok-redelivered", pb.CommandSubscribe.Shared)
    client.redeliver_unacknowledged(2)
    return (await client.receive(2)).command


async def active_consumer_change(w: Wire) -> Any:
    client = await w.connect()
    await ask(client, subscribe(w.topic("ok-failover"), "sub", sub_type=pb.CommandSubscribe.Failover))
    return await asyncio.wait_for(client.pushed(T.ACTIVE_CONSUMER_CHANGE).get(), QUIET_S * 5)


async def reached_end_of_topic(w: Wire) -> Any:
    client = await w.connect()
    await ask(client, subscribe(w.topic("ok-end"), "sub"))
    client.flow(1, 10)
    await w.admin("POST", f"/admin/v2/persistent/{NS}/{w.prefix}-ok-end/terminate")
    return await asyncio.wait_for(client.pushed(T.REACHED_END_OF_TOPIC).get(), QUIET_S * 5)


async def producer_closed_by_unload(w: Wire) -> Any:
    client = await w.connect()
    await ask(client, producer(w.topic("ok-unload-p")))
    await w.admin("PUT", f"/admin/v2/persistent/{NS}/{w.prefix}-ok-unload-p/unload")
    return await asyncio.wait_for(client.pushed(T.CLOSE_PRODUCER).get(), QUIET_S * 5)


async def consumer_closed_by_unload(w: Wire) -> Any:
    client = await w.connect()
    await ask(client, subscribe(w.topic("ok-unload-c"), "sub"))
    await w.admin("PUT", f"/admin/v2/persistent/{NS}/{w.prefix}-ok-unload-c/unload")
    return await asyncio.wait_for(client.pushed(T.CLOSE_CONSUMER).get(), QUIET_S * 5)


CASES: list[Case] = [
    producer_on_missing_namespace, producer_on_missing_tenant, producer_on_invalid_name, producer_name_taken,
    producer_id_reused_on_a_connection, exclusive_producer_taken, producer_on_terminated_topic,
    producer_with_incompatible_schema, exclusive_subscription_taken, subscription_of_another_type,
    consumer_id_reused_on_a_connection, subscribe_on_missing_namespace, subscribe_with_empty_name,
    unsubscribe_with_others_connected, unsubscribe_unknown_consumer, seek_unknown_consumer,
    last_message_id_unknown_consumer, consumer_stats_unknown_consumer, close_unknown_producer,
    close_unknown_consumer, lookup_on_missing_namespace, lookup_of_invalid_name, partitions_of_invalid_name,
    topics_of_missing_namespace, topics_of_invalid_namespace, watch_topics_of_missing_namespace,
    schema_of_topic_without_one, new_transaction_with_transactions_off,
    coordinator_connect_with_transactions_off, send_for_unknown_producer, read_compacted_on_shared,
    subscribe_to_partitioned_base, producer_on_partitioned_base, partitions_of_partitioned_topic, unsubscribe_twice,
    close_producer_twice, seek_to_a_message_id, last_message_id_of_empty_topic, wait_for_exclusive_producer,
    schema_version_that_does_not_exist, create_incompatible_schema, producer_with_a_long_name,
    non_persistent_producer_exclusive_taken,
]
SUCCESSES: list[Case] = [
    connected, producer_success, producer_success_with_schema, exclusive_producer_success, subscribe_success,
    lookup_success, partitions_of_plain_topic, last_message_id_after_a_send, send_receipt, consumer_stats,
    schema_of_a_topic, topics_of_namespace, ack_with_a_receipt, message_delivered, message_redelivered,
    active_consumer_change, reached_end_of_topic, producer_closed_by_unload, consumer_closed_by_unload,
]

# case name -> (fields only ours sets, fields only Pulsar's sets), each with the reason.
FIELD_DIFFERENCES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # Pulsar 4.0 deduplicates replicated messages by their source ledger and entry ids, and says so to the
    # replicators of other clusters that connect; ours deduplicates them by sequence id (their older way), so it
    # does not claim it.
    "connected": ((), ("connected.feature_flags.supports_repl_dedup_by_lid_and_eid=True",)),
}

# Commands Pulsar sends and ours does not: case name -> why.
UNSENT = {
    # Pulsar 4.0.7 sends REACHED_END_OF_TOPIC to a consumer at the end of a terminated topic; the C++ client (and so
    # the Python and Node clients) takes it for an invalid command and drops the connection, again at each
    # reconnection (measured against Pulsar 4.0.7 with pulsar-client 3.x), and the Go client would too. Ours sends
    # it to the Java client only (tests/component/test_reached_end.py); this test's client is none.
    "reached_end_of_topic": "the C++ client drops its connection on it",
}

# case name -> why ours answers otherwise.
_NO_NAMESPACE = ("Pulsar answers ServiceNotReady ('redo the lookup': clients retry until their timeout); the "
                 "namespace does not exist and ours says so (TopicNotFound: the client gives up at once)")
DIFFERENCES: dict[str, str] = {
    "producer_on_missing_namespace": _NO_NAMESPACE, "producer_on_missing_tenant": _NO_NAMESPACE,
    "subscribe_on_missing_namespace": _NO_NAMESPACE,
    # Pulsar 4.0.7's handleConsumerStats calls getNow on a missing future (NullPointerException), which closes
    # the connection; ours answers ConsumerNotFound, the answer that code was written to give.
    "consumer_stats_unknown_consumer": "Pulsar closes the connection on an internal error",
    # Pulsar 4.0.7 parses the name outside its error handling (IllegalArgumentException: the connection closed);
    # ours answers InvalidTopicName (the code Pulsar gives a topic name it cannot parse).
    "topics_of_invalid_namespace": "Pulsar closes the connection on an internal error",
    # Ours bounds a topic name to 4,096 characters (broker/topic_name.py: it goes into metadata paths and
    # directories); Pulsar sets no bound.
    "producer_with_a_long_name": "a bound on name length",
}


def fields(message: Any, prefix: str = "") -> tuple[str, ...]:
    """An answer's fields as set: each one's path, with its value where a client branches on it (a flag or an
    enum: a lookup's response, producer_ready, a feature flag); ids, names, positions and versions by name only."""
    out: list[str] = []
    for descriptor, value in message.ListFields():
        path = f"{prefix}{descriptor.name}"
        if descriptor.type == descriptor.TYPE_MESSAGE:
            values = value if descriptor.is_repeated else [value]
            out.append(path)
            for v in values[:1]:
                out.extend(fields(v, path + "."))
        elif descriptor.type in (descriptor.TYPE_BOOL, descriptor.TYPE_ENUM):
            out.append(f"{path}={value}")
        else:
            out.append(path)
    return tuple(sorted(set(out)))


def outcome(answer: Any) -> tuple[str, ...]:
    """What a client acts on: the answer's type and error code (or, for lookups, its response type)."""
    if isinstance(answer, BaseException):
        return ("closed",) if isinstance(answer, ConnectionError) else ("no answer",)
    assert isinstance(answer, pb.BaseCommand)
    name = pb.BaseCommand.Type.Name(answer.type)
    field = answer.ListFields()[1][1] if len(answer.ListFields()) > 1 else None
    parts = [name]
    for attr in ("response", "error", "error_code"):
        if field is not None and hasattr(field, attr) and field.HasField(attr):
            value = getattr(field, attr)
            parts.append(pb.ServerError.Name(value) if attr != "response" else f"response {value}")
    return tuple(parts)


def message(answer: Any) -> str:
    if isinstance(answer, pb.BaseCommand) and len(answer.ListFields()) > 1:
        field = answer.ListFields()[1][1]
        for attr in ("message", "error_message"):
            if hasattr(field, attr) and field.HasField(attr):
                return str(getattr(field, attr))
    return repr(answer)


def ask_every_case(service_url: str, web_url: str, metrics_path: str) -> Answers:
    port = int(service_url.rsplit(":", 1)[1])

    async def run() -> Answers:
        out: Answers = {}
        for i, case in enumerate(CASES):
            wire = Wire(port, web_url, f"c{i}")
            try:
                answer: Any = await case(wire)
            except (ConnectionError, TimeoutError) as exc:
                answer = exc
            finally:
                await wire.close()
            out[case.__name__] = (0, (outcome(answer), message(answer)))
        return out
    return {**asyncio.run(run()), **ask_every_success(port, web_url)}


def ask_every_success(port: int, web_url: str) -> Answers:
    async def run() -> Answers:
        out: Answers = {}
        for i, case in enumerate(SUCCESSES):
            wire = Wire(port, web_url, f"s{i}")
            try:
                found = fields(await case(wire))
            except TimeoutError:
                found = ("no answer",)
            finally:
                await wire.close()
            out[f"ok {case.__name__}"] = (0, (found, ""))
        return out
    return asyncio.run(run())


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Answers]:
    return ask_both(tmp_path_factory.mktemp("pulsar-wire"), ask_every_case)


@pytest.mark.parametrize("case", [c.__name__ for c in SUCCESSES])
def test_answer_has_pulsars_fields(answers: dict[str, Answers], case: str) -> None:
    (ours, our_text), (theirs, their_text) = answers["ours"][f"ok {case}"][1], answers["pulsar"][f"ok {case}"][1]
    if case in UNSENT:
        assert ours == ("no answer",) and theirs != ours, (ours, theirs)
        return
    allowed_ours, allowed_theirs = FIELD_DIFFERENCES.get(case, ((), ()))
    only_ours = set(ours) - set(theirs) - set(allowed_ours)
    only_theirs = set(theirs) - set(ours) - set(allowed_theirs)
    assert not only_ours and not only_theirs, (f"only ours: {sorted(only_ours)}; only Pulsar's: {sorted(only_theirs)}"
                                               f"\nours: {our_text}\nPulsar's: {their_text}")


@pytest.mark.parametrize("case", [c.__name__ for c in CASES])
def test_refusal_has_pulsars_answer(answers: dict[str, Answers], case: str) -> None:
    (ours, our_message), (theirs, their_message) = answers["ours"][case][1], answers["pulsar"][case][1]
    if case in DIFFERENCES:
        assert ours != theirs, f"ours now answers as Pulsar: {ours}; remove it from DIFFERENCES"
        return
    assert ours == theirs, f"ours {ours} ({our_message}); Pulsar's {theirs} ({their_message})"
