"""The WebSocket API in cluster mode: a session opened on one broker for a topic another broker owns reaches the
owner (the service's client follows the lookup, as Pulsar's WebSocket service does); the topic stays where it is."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid

import aiohttp

from tests.cluster.conftest import Brokers, http_json
from tests.websocket.conftest import b64, receive_json

TOPICS_TRIED = 64  # topics named until one is owned by the other broker (the namespace's bundles spread)


def owner(web_url: str, topic: str) -> str:
    return str(http_json(f"{web_url}/lookup/v2/topic/persistent/public/default/{topic}")["brokerUrl"])


async def test_a_session_reaches_the_topics_owner(brokers: Brokers) -> None:
    brokers.settings["webSocketServiceEnabled"] = "true"
    b1, b2 = brokers.start(2)
    for _ in range(TOPICS_TRIED):
        topic = f"ws-{uuid.uuid4().hex[:8]}"
        if owner(b1.web_url, topic) == b2.service_url:
            break
    else:
        raise AssertionError(f"none of {TOPICS_TRIED} topics was owned by the second broker")
    path = f"persistent/public/default/{topic}"
    base = b1.web_url.replace("http://", "ws://")
    async with aiohttp.ClientSession() as http, \
            http.ws_connect(f"{base}/ws/v2/consumer/{path}/sub") as consumer, \
            http.ws_connect(f"{base}/ws/v2/producer/{path}") as producer:
        for i in range(3):
            await producer.send_str(json.dumps({"payload": b64(f"m{i}".encode()), "context": str(i)}))
            ack = await receive_json(producer)
            assert ack["result"] == "ok" and ack["context"] == str(i)
        got = [await receive_json(consumer) for _ in range(3)]
        assert [base64.b64decode(g["payload"]) for g in got] == [b"m0", b"m1", b"m2"]
        for g in got:
            await consumer.send_str(json.dumps({"messageId": g["messageId"]}))
        async with http.ws_connect(f"{base}/ws/v2/reader/{path}?messageId=earliest") as reader:
            assert base64.b64decode((await receive_json(reader))["payload"]) == b"m0"
        # The producer and the consumer are the owner's (the stats are asked of it; the topic did not move).
        stats = await asyncio.to_thread(http_json, f"{b2.web_url}/admin/v2/{path}/stats")
        assert len(stats["publishers"]) == 1 and len(stats["subscriptions"]["sub"]["consumers"]) == 1
    assert owner(b1.web_url, topic) == b2.service_url


async def test_a_partitioned_topic_over_both_brokers(brokers: Brokers) -> None:
    """A partitioned topic's partitions, owned by either broker: a producer on one broker and a consumer on the other
    reach each partition's owner."""
    brokers.settings["webSocketServiceEnabled"] = "true"
    b1, b2 = brokers.start(2)
    topic = f"ws-{uuid.uuid4().hex[:8]}"
    path = f"persistent/public/default/{topic}"
    await asyncio.to_thread(http_json, f"{b1.web_url}/admin/v2/{path}/partitions", "PUT", 30, 6)
    async with aiohttp.ClientSession() as http, \
            http.ws_connect(f"{b2.web_url.replace('http://', 'ws://')}/ws/v2/consumer/{path}/sub") as consumer, \
            http.ws_connect(f"{b1.web_url.replace('http://', 'ws://')}/ws/v2/producer/{path}"
                            "?messageRoutingMode=RoundRobinPartition") as producer:
        for i in range(12):
            await producer.send_str(json.dumps({"payload": b64(f"m{i}".encode())}))
            assert (await receive_json(producer))["result"] == "ok"
        got = [await receive_json(consumer) for _ in range(12)]
        assert sorted(base64.b64decode(g["payload"]) for g in got) == sorted(f"m{i}".encode() for i in range(12))
    owners = {owner(b1.web_url, f"{topic}-partition-{i}") for i in range(6)}
    assert owners <= {b1.service_url, b2.service_url}
