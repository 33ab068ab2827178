"""The WebSocket API (broker/websocket/) with aiohttp's WebSocket client: producer, consumer and reader sessions,
their options, flow control, bad input (answered on the session alone) and HTTP refusals."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import uuid

import aiohttp
import pytest

from broker.embedded import BrokerThread
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.peer_link import BrokerLink
from broker.websocket import service
from broker.websocket.producer import java_string_hash
from tests.websocket.conftest import WAIT_S, b64, receive_json, send, ws_url

pytestmark = pytest.mark.timeout(120)


def topic_path(kind: str = "persistent") -> str:
    return f"{kind}/public/default/ws-{uuid.uuid4().hex[:10]}"


def message_id(text: str) -> pb.MessageIdData:
    mid = pb.MessageIdData()
    mid.ParseFromString(base64.b64decode(text))
    return mid


async def test_produce_then_consume(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    topic = topic_path()
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub")) as consumer, \
            http.ws_connect(ws_url(ws_broker, f"/ws/v2/producer/{topic}")) as producer:
        acks = [await send(producer, f"m{i}".encode(), context=f"c{i}", key=f"k{i}", properties={"p": str(i)},
                           eventTime="2026-12-06T05:00:00.5Z") for i in range(3)]
        assert [a["result"] for a in acks] == ["ok"] * 3
        assert [a["context"] for a in acks] == ["c0", "c1", "c2"]
        ids = [message_id(a["messageId"]) for a in acks]
        assert [i.entryId for i in ids] == sorted(i.entryId for i in ids)
        for i in range(3):
            got = await receive_json(consumer)
            assert base64.b64decode(got["payload"]) == f"m{i}".encode()
            assert got["messageId"] == acks[i]["messageId"]
            assert got["key"] == f"k{i}" and got["properties"] == {"p": str(i)}
            assert got["redeliveryCount"] == 0
            assert got["eventTime"] == "2026-12-06T05:00:00.5Z"
            assert got["publishTime"].endswith("Z")
            await consumer.send_str(json.dumps({"messageId": got["messageId"]}))


async def no_message_before_answer(ws: aiohttp.ClientWebSocketResponse) -> None:
    """Ask isEndOfTopic: the answer comes before any message the session would (wrongly) still deliver, as the
    session answers commands in order after delivering what it may."""
    await ws.send_str(json.dumps({"type": "isEndOfTopic"}))
    assert await receive_json(ws) == {"endOfTopic": False}


async def produce(http: aiohttp.ClientSession, broker: BrokerThread, topic: str, payloads: list[bytes],
                  query: str = "") -> list[str]:
    async with http.ws_connect(ws_url(broker, f"/ws/v2/producer/{topic}{query}")) as producer:
        for p in payloads:
            await producer.send_str(json.dumps({"payload": b64(p)}))
        acks = [await receive_json(producer) for _ in payloads]
    assert [a["result"] for a in acks] == ["ok"] * len(payloads), acks
    return [a["messageId"] for a in acks]


async def http_status(http: aiohttp.ClientSession, broker: BrokerThread, path: str,
                      headers: dict[str, str] | None = None) -> tuple[int, str | None]:
    """The answer to an upgrade request: its status and, for a refusal, its JSON reason."""
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": base64.b64encode(b"0123456789abcdef").decode(), **(headers or {})}
    async with http.get(broker.web_url + path, headers=upgrade) as r:
        if r.status == 101:
            return 101, None
        return r.status, (await r.json()).get("reason")


async def test_batched_producer_and_compression(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    topic = topic_path()
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub")) as consumer:
        query = "?batchingEnabled=true&batchingMaxMessages=4&batchingMaxPublishDelay=60000&compressionType=ZSTD"
        ids = await produce(http, ws_broker, topic, [f"b{i}".encode() * 50 for i in range(4)], query)
        assert [message_id(i).batch_index for i in ids] == [0, 1, 2, 3]  # (batchingMaxMessages: one full batch)
        assert len({(message_id(i).ledgerId, message_id(i).entryId) for i in ids}) == 1
        got = [await receive_json(consumer) for _ in range(4)]
        assert [base64.b64decode(g["payload"]) for g in got] == [f"b{i}".encode() * 50 for i in range(4)]
        assert [(message_id(g["messageId"]).batch_index, message_id(g["messageId"]).batch_size) for g in got] == \
            [(i, 4) for i in range(4)]
        # A batch's entry is acknowledged once each of its messages is: after three acks it is still there.
        for g in got[:3]:
            await consumer.send_str(json.dumps({"messageId": g["messageId"]}))
        await no_message_before_answer(consumer)
        assert await backlog(http, ws_broker, topic, "sub") == 1  # (one entry)
        await consumer.send_str(json.dumps({"messageId": got[3]["messageId"]}))
        await eventually_backlog(http, ws_broker, topic, "sub", 0)


async def backlog(http: aiohttp.ClientSession, broker: BrokerThread, topic: str, sub: str) -> int:
    async with http.get(f"{broker.web_url}/admin/v2/{topic}/stats") as r:
        stats = await r.json()
    return int(stats["subscriptions"][sub]["msgBacklog"])


async def eventually_backlog(http: aiohttp.ClientSession, broker: BrokerThread, topic: str, sub: str,
                             expected: int) -> None:
    async with asyncio.timeout(WAIT_S):
        while True:
            if await backlog(http, broker, topic, sub) == expected:
                return
            await asyncio.sleep(0.02)


async def test_push_mode_delivers_no_more_than_the_receiver_queue(ws_broker: BrokerThread,
                                                                  http: aiohttp.ClientSession) -> None:
    topic = topic_path()
    url = ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub?receiverQueueSize=2&subscriptionType=Shared")
    async with http.ws_connect(url) as consumer:
        await produce(http, ws_broker, topic, [f"m{i}".encode() for i in range(5)])
        first = [await receive_json(consumer) for _ in range(2)]
        await no_message_before_answer(consumer)  # (two delivered, none acknowledged: the third waits)
        await consumer.send_str(json.dumps({"messageId": first[0]["messageId"]}))
        third = await receive_json(consumer)
        assert base64.b64decode(third["payload"]) == b"m2"
        await no_message_before_answer(consumer)


async def test_pull_mode_delivers_what_the_permits_allow(ws_broker: BrokerThread,
                                                         http: aiohttp.ClientSession) -> None:
    topic = topic_path()
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub?pullMode=true")) as consumer:
        await produce(http, ws_broker, topic, [f"m{i}".encode() for i in range(5)])
        await no_message_before_answer(consumer)
        await consumer.send_str(json.dumps({"type": "permit", "permitMessages": 2}))
        got = [base64.b64decode((await receive_json(consumer))["payload"]) for _ in range(2)]
        assert got == [b"m0", b"m1"]
        await no_message_before_answer(consumer)
        await consumer.send_str(json.dumps({"type": "permit", "permitMessages": 3}))
        got = [base64.b64decode((await receive_json(consumer))["payload"]) for _ in range(3)]
        assert got == [b"m2", b"m3", b"m4"]


async def test_negative_ack_redelivers(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    topic = topic_path()
    url = ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub?subscriptionType=Shared&negativeAckRedeliveryDelay=0")
    async with http.ws_connect(url) as consumer:
        await produce(http, ws_broker, topic, [b"again"])
        first = await receive_json(consumer)
        await consumer.send_str(json.dumps({"type": "negativeAcknowledge", "messageId": first["messageId"]}))
        second = await receive_json(consumer)
        assert second["messageId"] == first["messageId"] and second["redeliveryCount"] == 1


async def test_ack_timeout_redelivers(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    topic = topic_path()
    url = ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub?subscriptionType=Shared&ackTimeoutMillis=1000")
    async with http.ws_connect(url) as consumer:
        await produce(http, ws_broker, topic, [b"unacked"])
        first = await receive_json(consumer)
        second = await receive_json(consumer)  # (not acknowledged within a second: redelivered)
        assert second["messageId"] == first["messageId"] and second["redeliveryCount"] == 1


async def test_unsubscribe_and_end_of_topic(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    topic = topic_path()
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/gone")) as consumer:
        await no_message_before_answer(consumer)
        await consumer.send_str(json.dumps({"type": "unsubscribe"}))
        await consumer.send_str(json.dumps({"type": "isEndOfTopic"}))
        assert await receive_json(consumer) == {"endOfTopic": False}
    async with http.get(f"{ws_broker.web_url}/admin/v2/{topic}/subscriptions") as r:
        assert "gone" not in await r.json()
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub")) as consumer:
        await no_message_before_answer(consumer)
        async with http.post(f"{ws_broker.web_url}/admin/v2/{topic}/terminate") as r:
            assert r.status == 200, await r.text()
        async with asyncio.timeout(WAIT_S):
            while True:
                await consumer.send_str(json.dumps({"type": "isEndOfTopic"}))
                if await receive_json(consumer) == {"endOfTopic": True}:
                    break


async def test_reader_start_positions(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    topic = topic_path()
    ids = await produce(http, ws_broker, topic, [b"r0", b"r1", b"r2"])
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/reader/{topic}?messageId=earliest")) as reader:
        got = [await receive_json(reader) for _ in range(3)]
        assert [g["messageId"] for g in got] == ids
        await no_message_before_answer(reader)
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/reader/{topic}?messageId={ids[0]}")) as reader:
        assert [(await receive_json(reader))["messageId"] for _ in range(2)] == ids[1:]
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/reader/{topic}?readerName=r&receiverQueueSize=1")) as reader:
        await no_message_before_answer(reader)  # (latest: nothing of the past)
        new = await produce(http, ws_broker, topic, [b"r3"])
        assert (await receive_json(reader))["messageId"] == new[0]
    # Within a batch: a start at a message of the batch reads the messages after it.
    batch_ids = await produce(http, ws_broker, topic, [b"x0", b"x1", b"x2"],
                              "?batchingEnabled=true&batchingMaxMessages=3&batchingMaxPublishDelay=60000")
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/reader/{topic}?messageId={batch_ids[0]}")) as reader:
        assert [base64.b64decode((await receive_json(reader))["payload"]) for _ in range(2)] == [b"x1", b"x2"]


async def test_reader_flow_control(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    """A reader's client takes a message by answering it (any text): at most receiverQueueSize unanswered."""
    topic = topic_path()
    await produce(http, ws_broker, topic, [f"m{i}".encode() for i in range(4)])
    url = ws_url(ws_broker, f"/ws/v2/reader/{topic}?messageId=earliest&receiverQueueSize=2")
    async with http.ws_connect(url) as reader:
        got = [await receive_json(reader) for _ in range(2)]
        await no_message_before_answer(reader)
        await reader.send_str(json.dumps({"messageId": got[0]["messageId"]}))
        assert base64.b64decode((await receive_json(reader))["payload"]) == b"m2"


async def test_non_persistent_topic(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    topic = topic_path("non-persistent")
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub")) as consumer:
        await produce(http, ws_broker, topic, [b"np"])
        assert base64.b64decode((await receive_json(consumer))["payload"]) == b"np"


async def test_delayed_delivery(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    """deliverAfterMs: a Shared subscription gets the later message first."""
    topic = topic_path()
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub?subscriptionType=Shared")) as consumer, \
            http.ws_connect(ws_url(ws_broker, f"/ws/v2/producer/{topic}")) as producer:
        assert (await send(producer, b"later", deliverAfterMs=1500))["result"] == "ok"
        assert (await send(producer, b"now"))["result"] == "ok"
        assert [base64.b64decode((await receive_json(consumer))["payload"]) for _ in range(2)] == [b"now", b"later"]


async def test_producer_options(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    topic = topic_path()
    url = ws_url(ws_broker, f"/ws/v2/producer/{topic}?producerName=named&initialSequenceId=41&sendTimeoutMillis=5000")
    async with http.ws_connect(url) as producer:
        assert (await send(producer, b"x"))["result"] == "ok"
        async with http.get(f"{ws_broker.web_url}/admin/v2/{topic}/stats") as r:
            publishers = (await r.json())["publishers"]
        assert [p["producerName"] for p in publishers] == ["named"]
        async with http.get(f"{ws_broker.web_url}/admin/v2/{topic}/internalStats") as r:
            assert r.status == 200


async def test_bad_input_answers_that_session_only(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    topic = topic_path()
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub")) as consumer, \
            http.ws_connect(ws_url(ws_broker, f"/ws/v2/producer/{topic}")) as producer:
        for text, result in (("{not json", "send-error:3"), ("[1, 2]", "send-error:3"),
                             (json.dumps({"payload": "!!!", "context": "c"}), "send-error:7"),
                             (json.dumps({"context": "c"}), "send-error:7"),
                             (json.dumps({"payload": "AA==", "eventTime": "never", "context": "c"}), "send-error:7"),
                             (json.dumps({"payload": "AA==", "properties": [1]}), "send-error:3"),
                             (json.dumps({"payload": "AA==", "deliverAt": "soon"}), "send-error:3")):
            await producer.send_str(text)
            ack = await receive_json(producer)
            assert ack["result"] == result, (text, ack)
            assert "errorMsg" in ack
        # The producer goes on; a consumer's bad command closes that consumer's session only.
        assert (await send(producer, b"fine"))["result"] == "ok"
        assert base64.b64decode((await receive_json(consumer))["payload"]) == b"fine"
        for command in ("{not json", json.dumps({"messageId": "!!"}), json.dumps({"messageId": b64(b"\xff\x01")}),
                        json.dumps({"type": "permit"}), json.dumps({"type": "whatever"})):
            async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/other")) as bad:
                await bad.send_str(command)
                msg = await bad.receive(timeout=WAIT_S)
                assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1011, (command, msg)
                assert "Failed to de-serialize from JSON" in str(msg.extra)
        assert (await send(producer, b"still fine"))["result"] == "ok"
        assert base64.b64decode((await receive_json(consumer))["payload"]) == b"still fine"


@pytest.mark.parametrize(("path", "status", "reason"), [
    ("/ws/v2/producer/other/public/default/t", 400, "Invalid query params: Invalid topic name format"),
    ("/ws/v2/producer/persistent/public", 400, "Invalid query params: Invalid topic name format"),
    ("/ws/v2/producer/persistent/public/default/t?sendTimeoutMillis=abc", 400,
     'Invalid query params: For input string: "abc"'),
    ("/ws/v2/producer/persistent/public/default/t?sendTimeoutMillis=-1", 400,
     "Invalid query params: sendTimeout needs to be >= 0"),
    ("/ws/v2/producer/persistent/public/default/t?compressionType=BAD", 400,
     "Invalid query params: Invalid compressionType BAD"),
    ("/ws/v2/producer/persistent/public/default/t?hashingScheme=BAD", 400,
     "Invalid query params: No enum constant org.apache.pulsar.client.api.HashingScheme.BAD"),
    ("/ws/v2/producer/persistent/public/default/t?initialSequenceId=1.5", 400,
     'Invalid query params: For input string: "1.5"'),
    ("/ws/v2/consumer/persistent/public/default/t", 400, "Invalid query params: Invalid topic name format"),
    ("/ws/v2/consumer/persistent/public/default/t/", 400, "Invalid query params: Empty subscription name"),
    ("/ws/v2/consumer/persistent/public/default/t/s?subscriptionType=Bad", 400,
     "Invalid query params: Invalid subscriptionType Bad"),
    ("/ws/v2/consumer/persistent/public/default/t/s?subscriptionMode=Bad", 400,
     "Invalid query params: Invalid subscriptionMode Bad"),
    ("/ws/v2/consumer/persistent/public/default/t/s?receiverQueueSize=-1", 400,
     "Invalid query params: receiverQueueSize needs to be >= 0"),
    ("/ws/v2/consumer/persistent/public/default/t/s?ackTimeoutMillis=10", 400,
     "Invalid query params: Ack timeout should be greater than 1000 ms"),
    ("/ws/v2/consumer/persistent/public/default/t/s?priorityLevel=x", 400,
     'Invalid query params: For input string: "x"'),
    ("/ws/v2/reader/persistent/public/default/t?receiverQueueSize=x", 400,
     'Invalid query params: For input string: "x"'),
    ("/ws/v2/reader/persistent/public/default/t?messageId=!!", 500, None),
    ("/ws/v2/producer/persistent/no-such-tenant/ns/t", 404, None),
])
async def test_http_refusals(ws_broker: BrokerThread, http: aiohttp.ClientSession, path: str, status: int,
                             reason: str | None) -> None:
    got_status, got_reason = await http_status(http, ws_broker, path)
    assert got_status == status, got_reason
    if reason is not None:
        assert got_reason == reason


async def test_busy_producer_and_consumer(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    topic = topic_path()
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/producer/{topic}?producerName=p")):
        status, reason = await http_status(http, ws_broker, f"/ws/v2/producer/{topic}?producerName=p")
        assert status == 409 and reason is not None and reason.startswith("Failed to create producer/consumer: ")
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/s")):
        status, reason = await http_status(http, ws_broker, f"/ws/v2/consumer/{topic}/s")
        assert status == 409 and reason is not None and "Exclusive consumer is already connected" in reason


async def test_closing_the_session_closes_its_producer_and_consumer(ws_broker: BrokerThread,
                                                                     http: aiohttp.ClientSession) -> None:
    topic = topic_path()
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/producer/{topic}")) as producer, \
            http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/s")):
        assert (await send(producer, b"x"))["result"] == "ok"
    async with asyncio.timeout(WAIT_S):
        while True:
            async with http.get(f"{ws_broker.web_url}/admin/v2/{topic}/stats") as r:
                stats = await r.json()
            if not stats["publishers"] and not stats["subscriptions"]["s"]["consumers"]:
                break
            await asyncio.sleep(0.02)


async def test_off_by_default(http: aiohttp.ClientSession) -> None:
    with BrokerThread(managedLedgerStorage="memory") as broker:
        status, _ = await http_status(http, broker, "/ws/v2/producer/persistent/public/default/t")
        assert status == 404


async def test_dead_letter_policy(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    """maxRedeliverCount=1: delivered twice (redelivery counts 0 and 1), then published to <topic>-<sub>-DLQ with
    the Java client's properties, and acknowledged on the subscription."""
    topic = topic_path()
    dlq = f"persistent://public/default/{topic.rsplit('/', 1)[1]}-sub-DLQ"
    dlq_path = dlq.replace("://", "/")
    query = "?subscriptionType=Shared&negativeAckRedeliveryDelay=0&maxRedeliverCount=1"
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub{query}")) as consumer, \
            http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{dlq_path}/dlq-sub")) as dead_letters, \
            http.ws_connect(ws_url(ws_broker, f"/ws/v2/producer/{topic}")) as producer:
        ack = await send(producer, b"poison", key="k", properties={"p": "1"})
        for count in (0, 1):
            got = await receive_json(consumer)
            assert got["redeliveryCount"] == count
            await consumer.send_str(json.dumps({"type": "negativeAcknowledge", "messageId": got["messageId"]}))
        dead = await receive_json(dead_letters)
        assert base64.b64decode(dead["payload"]) == b"poison" and dead["key"] == "k"
        mid = message_id(ack["messageId"])
        origin = f"{mid.ledgerId}:{mid.entryId}:-1"
        assert dead["properties"] == {"p": "1", "REAL_TOPIC": f"persistent://{topic.split('/', 1)[1]}",
                                      "ORIGIN_MESSAGE_ID": origin, "ORIGIN_MESSAGE_IDY_TIME": origin,
                                      "REAL_SUBSCRIPTION": "sub"}
        await eventually_backlog(http, ws_broker, topic, "sub", 0)
        await no_message_before_answer(consumer)


async def test_sessions_outlive_an_unload(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    """The broker closes the producer and the consumer (an unload; in cluster mode also a bundle moving): the
    sessions connect again, look the topic up and go on, as the Java client's producer and consumer do."""
    topic = topic_path()
    query = "?subscriptionType=Shared"
    # With deduplication on, a send the broker stored but could not receipt before the unload, sent again after
    # it, is stored once (the producer keeps its name and sequence ids across the reconnection).
    async with http.put(f"{ws_broker.web_url}/admin/v2/{topic}") as r:
        assert r.status == 204, await r.text()
    async with http.post(f"{ws_broker.web_url}/admin/v2/{topic}/deduplicationEnabled", json=True) as r:
        assert r.status == 204, await r.text()
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub{query}")) as consumer, \
            http.ws_connect(ws_url(ws_broker, f"/ws/v2/producer/{topic}")) as producer, \
            http.ws_connect(ws_url(ws_broker, f"/ws/v2/reader/{topic}?messageId=earliest")) as reader:
        assert (await send(producer, b"before"))["result"] == "ok"
        first = await receive_json(consumer)
        assert base64.b64decode((await receive_json(reader))["payload"]) == b"before"
        await reader.send_str(json.dumps({"messageId": first["messageId"]}))
        async with http.put(f"{ws_broker.web_url}/admin/v2/{topic}/unload") as r:
            assert r.status == 204, await r.text()
        await consumer.send_str(json.dumps({"messageId": first["messageId"]}))  # (lost or not: no error)
        for i in range(3):
            ack = await send(producer, f"after{i}".encode())
            assert ack["result"] == "ok", ack
        # At least once: the first message again when its acknowledgement was lost with the connection, a message
        # the old consumer had delivered and the new subscription delivers again.
        got: list[bytes] = []
        while b"after2" not in got:
            got.append(base64.b64decode((await receive_json(consumer))["payload"]))
            assert len(got) <= 8, got
        assert list(dict.fromkeys(g for g in got if g != b"before")) == [b"after0", b"after1", b"after2"]
        read = [base64.b64decode((await receive_json(reader))["payload"]) for _ in range(3)]
        assert read == [b"after0", b"after1", b"after2"]  # (the reader resumed after what it had delivered)


async def test_partitioned_topic(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    """A partitioned topic: the producer routes as the Java client (a key by its hash, else one partition), its ids
    name the partition; the consumer and the reader read every partition, acks go to each message's partition."""
    topic = topic_path()
    async with http.put(f"{ws_broker.web_url}/admin/v2/{topic}/partitions", json=3) as r:
        assert r.status == 204, await r.text()
    keys = ["hello", "a", "b", "key-7", "\u00e9t\u00e9"]
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub?subscriptionType=Shared")) as consumer:
        async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/producer/{topic}")) as producer:
            acks = [await send(producer, k.encode(), key=k) for k in keys]
            unkeyed = [await send(producer, f"u{i}".encode()) for i in range(4)]
        assert [message_id(a["messageId"]).partition for a in acks] == [java_string_hash(k) % 3 for k in keys]
        assert java_string_hash("hello") == 99162322  # ("hello".hashCode() in Java)
        assert len({message_id(a["messageId"]).partition for a in unkeyed}) == 1  # (SinglePartition)
        got = [await receive_json(consumer) for _ in range(len(keys) + 4)]
        assert sorted(g["messageId"] for g in got) == sorted(a["messageId"] for a in acks + unkeyed)
        for g in got:
            await consumer.send_str(json.dumps({"messageId": g["messageId"]}))
        for i in range(3):
            await eventually_backlog(http, ws_broker, f"{topic}-partition-{i}", "sub", 0)
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/producer/{topic}?messageRoutingMode=RoundRobinPartition")) \
            as producer:
        spread = [message_id((await send(producer, b"r"))["messageId"]).partition for _ in range(6)]
    assert sorted(spread) == [0, 0, 1, 1, 2, 2]
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/reader/{topic}?messageId=earliest")) as reader:
        read = [await receive_json(reader) for _ in range(len(keys) + 4 + 6)]
        assert len({r["messageId"] for r in read}) == len(read)
        await no_message_before_answer(reader)
    status, reason = await http_status(http, ws_broker, f"/ws/v2/reader/{topic}?messageId={acks[0]['messageId']}")
    assert status == 500 and reason is not None and reason.startswith("Failed to create reader")


async def test_partitioned_pull_mode(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    """Permits count over all the partitions of one consumer."""
    topic = topic_path()
    async with http.put(f"{ws_broker.web_url}/admin/v2/{topic}/partitions", json=2) as r:
        assert r.status == 204, await r.text()
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub?pullMode=true")) as consumer:
        async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/producer/{topic}?messageRoutingMode="
                                                     "RoundRobinPartition")) as producer:
            for i in range(6):
                assert (await send(producer, f"m{i}".encode()))["result"] == "ok"
        await consumer.send_str(json.dumps({"type": "permit", "permitMessages": 3}))
        got = [await receive_json(consumer) for _ in range(3)]
        await no_message_before_answer(consumer)
        await consumer.send_str(json.dumps({"type": "permit", "permitMessages": 3}))
        got += [await receive_json(consumer) for _ in range(3)]
        assert sorted(base64.b64decode(g["payload"]) for g in got) == [f"m{i}".encode() for i in range(6)]


async def test_a_frame_past_the_limit_closes_that_session(ws_broker: BrokerThread,
                                                          http: aiohttp.ClientSession) -> None:
    """Past webSocketMaxTextFrameSize (Pulsar's default, 1 MiB) the session is closed with 1009; others go on."""
    topic = topic_path()
    async with http.ws_connect(ws_url(ws_broker, f"/ws/v2/producer/{topic}")) as big, \
            http.ws_connect(ws_url(ws_broker, f"/ws/v2/producer/{topic}")) as other:
        await big.send_str(json.dumps({"payload": "A" * (1024 * 1024)}))
        msg = await big.receive(timeout=WAIT_S)
        assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1009
        assert (await send(other, b"fine"))["result"] == "ok"


async def test_idle_sessions_are_closed_and_frames_either_way_keep_them(http: aiohttp.ClientSession) -> None:
    """webSocketSessionIdleTimeoutMillis: a session with no frame for that long is closed with 1001 (Jetty's code and
    words for Pulsar); one whose client pings it is not, nor one the broker pings (webSocketPingDurationSeconds, the
    payload "PING" as Pulsar's handler sends it). Before: sessions were never closed and never pinged."""
    path = f"/ws/v2/consumer/{topic_path()}/sub"
    with BrokerThread(managedLedgerStorage="memory", webSocketServiceEnabled=True,
                      webSocketSessionIdleTimeoutMillis=2000) as broker:
        async with http.ws_connect(ws_url(broker, path), autoping=False) as pinging, \
                http.ws_connect(ws_url(broker, path.replace("/sub", "/idle"))) as idle:
            loop = asyncio.get_running_loop()
            until = loop.time() + 5
            while loop.time() < until:  # (pinged back to back for longer than the idle timeout)
                await pinging.ping(b"hi")
                pong = await pinging.receive(timeout=WAIT_S)
                assert (pong.type, pong.data) == (aiohttp.WSMsgType.PONG, b"hi")
            closed = await idle.receive(timeout=WAIT_S)
            assert (closed.type, closed.data) == (aiohttp.WSMsgType.CLOSE, 1001)
            assert re.fullmatch(r"Idle timeout expired: \d+/2000 ms", closed.extra or ""), closed.extra
            assert not pinging.closed
    with BrokerThread(managedLedgerStorage="memory", webSocketServiceEnabled=True,
                      webSocketSessionIdleTimeoutMillis=2500, webSocketPingDurationSeconds=1) as broker:
        async with http.ws_connect(ws_url(broker, path), autoping=False) as pinged:
            for _ in range(4):  # (past the idle timeout: the broker's pings are frames)
                ping = await pinged.receive(timeout=WAIT_S)
                assert (ping.type, ping.data) == (aiohttp.WSMsgType.PING, b"PING")
            assert not pinged.closed


async def test_multi_topic_consumer(ws_broker: BrokerThread, http: aiohttp.ClientSession) -> None:
    """/ws/v3/consumer/{subscription}?topics=...: one subscription on each topic (a partitioned one on each of its
    partitions), their messages on one WebSocket; an ack or a negative ack goes to the message's own topic (ids do
    not name it: the session remembers where each came from), and an id it never delivered closes the session."""
    plain, parted = topic_path(), topic_path()
    async with http.put(f"{ws_broker.web_url}/admin/v2/{parted}/partitions", json=2) as r:
        assert r.status == 204, await r.text()
    names = [t.replace("persistent/", "persistent://", 1) for t in (plain, parted)]
    url = ws_url(ws_broker, f"/ws/v3/consumer/multi?topics={','.join(names)}&subscriptionType=Shared"
                            "&negativeAckRedeliveryDelay=0")
    async with http.ws_connect(url) as consumer:
        await produce(http, ws_broker, plain, [b"p0", b"p1"])
        await produce(http, ws_broker, parted, [b"q0", b"q1", b"q2"], "?messageRoutingMode=RoundRobinPartition")
        got = {base64.b64decode(m["payload"]): m for m in [await receive_json(consumer) for _ in range(5)]}
        assert sorted(got) == [b"p0", b"p1", b"q0", b"q1", b"q2"]
        await consumer.send_str(json.dumps({"type": "negativeAcknowledge", "messageId": got[b"q1"]["messageId"]}))
        again = await receive_json(consumer)
        assert (again["messageId"], again["redeliveryCount"]) == (got[b"q1"]["messageId"], 1)
        for m in got.values():
            await consumer.send_str(json.dumps({"messageId": m["messageId"]}))
        await eventually_backlog(http, ws_broker, plain, "multi", 0)
        for i in range(2):
            await eventually_backlog(http, ws_broker, f"{parted}-partition-{i}", "multi", 0)
        stranger = base64.b64encode(pb.MessageIdData(ledgerId=999_999, entryId=0).SerializeToString()).decode()
        await consumer.send_str(json.dumps({"messageId": stranger}))
        closed = await consumer.receive(timeout=WAIT_S)
        assert (closed.type, closed.data) == (aiohttp.WSMsgType.CLOSE, 1011)


@pytest.mark.parametrize(("query", "status", "reason"), [
    ("", 400, "Invalid query params: Should set topics or topicsPattern"),
    ("?topics=a&topicsPattern=a.*", 400, "Invalid query params: Topics must be null when use topicsPattern"),
    ("?topicsPattern=persistent://public/default/a[", 400, None),
    ("?topics=a,,b", 400, None),
])
async def test_multi_topic_consumer_refusals(ws_broker: BrokerThread, http: aiohttp.ClientSession, query: str,
                                            status: int, reason: str | None) -> None:
    got_status, got_reason = await http_status(http, ws_broker, f"/ws/v3/consumer/sub{query}")
    assert got_status == status and (reason is None or got_reason == reason), (got_status, got_reason)
    empty = await http_status(http, ws_broker, "/ws/v3/consumer/?topics=a")
    assert empty == (400, "Invalid query params: Empty subscription name")


async def test_pattern_consumer_follows_the_topics_that_match(ws_broker: BrokerThread,
                                                             http: aiohttp.ClientSession) -> None:
    """/ws/v3/consumer/{subscription}?topicsPattern=...: every persistent topic of the namespace that matches (a
    partitioned one on each partition), one made while the WebSocket runs too, and none that does not match; a
    topic deleted meanwhile ends its subscription only."""
    prefix = f"persistent/public/default/pat-{uuid.uuid4().hex[:8]}"
    plain, parted, later, other = f"{prefix}-a", f"{prefix}-b", f"{prefix}-c", f"{prefix}x-d"
    async with http.put(f"{ws_broker.web_url}/admin/v2/{parted}/partitions", json=2) as r:
        assert r.status == 204, await r.text()
    for topic in (plain, other):
        async with http.put(f"{ws_broker.web_url}/admin/v2/{topic}") as r:
            assert r.status == 204, await r.text()
    pattern = prefix.replace("persistent/", "persistent://", 1) + "-.*"
    url = ws_url(ws_broker, f"/ws/v3/consumer/pat?topicsPattern={pattern}&subscriptionType=Shared"
                            "&subscriptionInitialPosition=Earliest")
    async with http.ws_connect(url) as consumer:
        await produce(http, ws_broker, other, [b"not mine"])
        await produce(http, ws_broker, plain, [b"a"])
        await produce(http, ws_broker, parted, [b"b0", b"b1"], "?messageRoutingMode=RoundRobinPartition")
        await produce(http, ws_broker, later, [b"c"])  # (made now: the watcher tells the session)
        got = [await receive_json(consumer) for _ in range(4)]
        assert sorted(base64.b64decode(m["payload"]) for m in got) == [b"a", b"b0", b"b1", b"c"]
        for m in got:
            await consumer.send_str(json.dumps({"messageId": m["messageId"]}))
        for topic in (plain, later, f"{parted}-partition-0", f"{parted}-partition-1"):
            await eventually_backlog(http, ws_broker, topic, "pat", 0)
        async with http.get(f"{ws_broker.web_url}/admin/v2/{other}/stats") as r:
            assert "pat" not in (await r.json())["subscriptions"]
        async with http.delete(f"{ws_broker.web_url}/admin/v2/{plain}?force=true") as r:
            assert r.status == 204, await r.text()
        await produce(http, ws_broker, later, [b"c again"])
        assert base64.b64decode((await receive_json(consumer))["payload"]) == b"c again"
        await no_message_before_answer(consumer)


async def test_the_partitions_of_a_websockets_topics_are_asked_on_one_connection_per_check(
        ws_broker: BrokerThread, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """A multi-topic consumer of two partitioned topics: each check asks both topics' partitions on one connection
    (before: a connection per topic per check), and partitions added to either are followed."""
    monkeypatch.setattr(service, "PARTITIONS_CHECK_S", 0.1)
    asked: list[tuple[int, str]] = []  # (the link, the topic asked)
    real = BrokerLink.partitions

    async def partitions(self: BrokerLink, topic: str | None = None) -> int:
        asked.append((id(self), topic if topic is not None else self.topic))
        return await real(self, topic)

    monkeypatch.setattr(BrokerLink, "partitions", partitions)
    first, second = topic_path(), topic_path()
    for topic in (first, second):
        async with http.put(f"{ws_broker.web_url}/admin/v2/{topic}/partitions", json=1) as r:
            assert r.status == 204, await r.text()
    names = [t.replace("persistent/", "persistent://", 1) for t in (first, second)]
    url = ws_url(ws_broker, f"/ws/v3/consumer/multi?topics={','.join(names)}&subscriptionType=Shared")
    async with http.ws_connect(url) as consumer:
        asked.clear()  # (the session's own first look: a link per topic, as before)
        async with http.post(f"{ws_broker.web_url}/admin/v2/{second}/partitions", json=2) as r:
            assert r.status == 204, await r.text()
        await produce(http, ws_broker, f"{second}-partition-1", [b"on the new partition"])
        got = await receive_json(consumer)
        assert base64.b64decode(got["payload"]) == b"on the new partition"
    by_link: dict[int, list[str]] = {}
    for link, topic in asked:
        if topic in names:  # (not the producer of the test's message, which asks about its partition)
            by_link.setdefault(link, []).append(topic)
    assert by_link and all(sorted(topics) == sorted(names) for topics in by_link.values()), by_link


async def test_partitions_added_while_sessions_run(ws_broker: BrokerThread, http: aiohttp.ClientSession,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A partitioned topic's partitions are asked again every PARTITIONS_CHECK_S (the Java client's
    autoUpdatePartitions, every minute): partitions added meanwhile get a producer (round robin reaches them) and a
    subscription (their messages come, and their acknowledgements reach them). Before: only a new session saw them."""
    monkeypatch.setattr(service, "PARTITIONS_CHECK_S", 0.1)
    topic = topic_path()
    async with http.put(f"{ws_broker.web_url}/admin/v2/{topic}/partitions", json=1) as r:
        assert r.status == 204, await r.text()
    url = ws_url(ws_broker, f"/ws/v2/consumer/{topic}/sub?subscriptionType=Shared")
    async with http.ws_connect(url) as consumer, \
            http.ws_connect(ws_url(ws_broker, f"/ws/v2/producer/{topic}?messageRoutingMode=RoundRobinPartition")) \
            as producer:
        async with http.post(f"{ws_broker.web_url}/admin/v2/{topic}/partitions", json=3) as r:
            assert r.status == 204, await r.text()
        seen: set[int] = set()
        async with asyncio.timeout(WAIT_S):
            while seen != {0, 1, 2}:  # (until the producer has the new partitions: round robin reaches each)
                ack = await send(producer, b"m")
                seen.add(message_id(ack["messageId"]).partition)
                got = await receive_json(consumer)
                await consumer.send_str(json.dumps({"messageId": got["messageId"]}))
        for i in range(3):
            await eventually_backlog(http, ws_broker, f"{topic}-partition-{i}", "sub", 0)
