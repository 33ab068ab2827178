"""Our WebSocket API against Apache Pulsar 4.0.7's own (a standalone with ``webSocketServiceEnabled=true``).

Both get the settings of tests/security/test_pulsar_auth_answers.py (token authentication, authorization, ``admin``
a super user and the broker client's role) and the same questions: a producer's acks (ok, batched, bad JSON, bad
base64, no payload, a bad event time), a consumer's and a reader's messages (their JSON keys, the message ids'
fields, the time format), commands (ack, isEndOfTopic, bad JSON, a bad message id, a permit without its count), the
HTTP answers to bad paths and options, and authentication and authorization (no token, a bad one, the ``token``
query parameter, a role without a grant, with produce, with consume).

Answers are reduced to what must match: statuses, JSON keys, result words, the fields a message id sets, the close
code of a session Pulsar closes, and texts where Pulsar's are its own words (not a Java exception's). ``DIFFERENCES``
lists where ours answers otherwise on purpose, with the reason (each must still differ).
"""

from __future__ import annotations

import asyncio
import base64
import html
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest

from broker.protocol import pulsar_api_pb2 as pb
from tests.admin import pulsar_answers
from tests.security.conftest import SUPER_USER, token
from tests.security.pki import Pki, make_pki
from tests.security.test_pulsar_auth_answers import Endpoints, ask_both

pytestmark = [pytest.mark.apache_pulsar, pytest.mark.timeout(600)]

WAIT_S = 15.0
IDLE_TIMEOUT_MS = 12_000  # (webSocketSessionIdleTimeoutMillis: longer than any case leaves its session idle)
MAX_TEXT_FRAME = 65_536  # (webSocketMaxTextFrameSize)
NS = "public/default"
WRITER, READER, STRANGER = "writer", "reader", "stranger"
Answers = dict[str, Any]


def _id_values(text: str) -> dict[str, int]:
    """A message id's fields and values, but the ledger and entry (which differ between brokers)."""
    mid = pb.MessageIdData()
    mid.ParseFromString(base64.b64decode(text))
    return {f.name: v for f, v in mid.ListFields() if f.name not in ("ledgerId", "entryId")}


def id_fields(text: str) -> list[str]:
    mid = pb.MessageIdData()
    mid.ParseFromString(base64.b64decode(text))
    return sorted(f.name for f, _ in mid.ListFields())


def message_shape(doc: dict[str, Any]) -> dict[str, Any]:
    """A consumer's message: its keys, the id's fields, the time format, and the values that must be equal."""
    shape: dict[str, Any] = {"keys": sorted(doc), "id": id_fields(doc["messageId"]),
                             "publishTime": bool(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z",
                                                              doc["publishTime"]))}
    for key in ("payload", "properties", "key", "eventTime", "redeliveryCount"):
        shape[key] = doc.get(key)
    return shape


def ack_shape(doc: dict[str, Any]) -> dict[str, Any]:
    shape = {"keys": sorted(doc), "result": doc.get("result"), "context": doc.get("context")}
    if "messageId" in doc:
        shape["id"] = id_fields(doc["messageId"])
    if "errorCode" in doc:
        shape["errorCode"] = doc["errorCode"]
    return shape


class Asker:
    def __init__(self, web_url: str, http: aiohttp.ClientSession) -> None:
        self.base = web_url.replace("http://", "ws://")
        self.web = web_url
        self.http = http

    def url(self, path: str, role: str | None = SUPER_USER) -> tuple[str, dict[str, str]]:
        return self.base + path, ({"Authorization": f"Bearer {token(role)}"} if role else {})

    async def connect(self, path: str, role: str | None = SUPER_USER) -> aiohttp.ClientWebSocketResponse:
        url, headers = self.url(path, role)
        return await self.http.ws_connect(url, headers=headers, autoclose=False)

    async def refusal(self, path: str, role: str | None = SUPER_USER, query_token: str | None = None) -> Any:
        """The HTTP status of a refused (or accepted: 101) upgrade, and its body's first line when it is ours or
        Pulsar's words (not an HTML page)."""
        url, headers = self.url(path, role)
        headers.update({"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                        "Sec-WebSocket-Key": base64.b64encode(b"0123456789abcdef").decode()})
        url = url.replace("ws://", "http://")
        if query_token is not None:
            url += ("&" if "?" in url else "?") + f"token={query_token}"
        async with self.http.get(url, headers=headers) as r:
            text = (await r.text()) if r.status != 101 else ""
            return r.status, _words(text)

    async def next_json(self, ws: aiohttp.ClientWebSocketResponse) -> Any:
        msg = await ws.receive(timeout=WAIT_S)
        if msg.type != aiohttp.WSMsgType.TEXT:
            return {"closed": msg.type.name, "code": ws.close_code}
        return json.loads(msg.data)

    async def closed(self, ws: aiohttp.ClientWebSocketResponse) -> Any:
        """How the server ends a session it closes: the frame's type and the close code (and its reason), or the
        text it answers instead."""
        msg = await ws.receive(timeout=WAIT_S)
        if msg.type == aiohttp.WSMsgType.TEXT:
            return "TEXT", json.loads(msg.data)
        return msg.type.name, msg.data if msg.type == aiohttp.WSMsgType.CLOSE else None, msg.extra, ws.close_code


def _words(text: str) -> str | None:
    """Pulsar's words in an error body: Jetty writes them into its HTML page's <title> ("Error 400 ..."); ours is
    the text itself."""
    m = re.search(r"<title>Error \d+ (.*?)</title>", text, re.S)
    if m:
        return m.group(1).strip()
    return text.strip().splitlines()[0] if text.strip() else None


async def ask_async(e: Endpoints) -> Answers:
    out: Answers = {}
    async with aiohttp.ClientSession() as http:
        a = Asker(e.web_url, http)
        admin = {"Authorization": f"Bearer {token(SUPER_USER)}"}
        for role, actions in ((WRITER, ["produce"]), (READER, ["consume"])):
            async with http.post(f"{a.web}/admin/v2/namespaces/{NS}/permissions/{role}", json=actions,
                                 headers=admin) as r:
                assert r.status < 300, await r.text()
        topic = f"persistent/{NS}/ws-compare"
        # (a session left idle while the others run: closed IDLE_TIMEOUT_MS after its last frame)
        idle = await a.connect(f"/ws/v2/consumer/persistent/{NS}/ws-idle/sub")
        idle_since = asyncio.get_running_loop().time()

        # -- a consumer first (so the messages stay), then a producer ---------------------------------------------
        consumer = await a.connect(f"/ws/v2/consumer/{topic}/sub")
        producer = await a.connect(f"/ws/v2/producer/{topic}")
        sent = [{"payload": base64.b64encode(b"one").decode(), "context": "c1", "key": "k",
                 "properties": {"a": "1"}, "eventTime": "2026-12-06T05:00:00.5Z"},
                {"payload": base64.b64encode(b"two").decode(), "context": "c2"}]
        acks = []
        for doc in sent:
            await producer.send_str(json.dumps(doc))
            acks.append(await a.next_json(producer))
        out["producer ack"] = ack_shape(acks[0])
        for name, text in (("bad json", "{not json"), ("not base64", json.dumps({"payload": "!!!", "context": "x"})),
                           ("no payload", json.dumps({"context": "y"})),
                           ("bad event time", json.dumps({"payload": "AA==", "context": "z",
                                                          "eventTime": "yesterday"})),
                           ("unknown field", json.dumps({"payload": "AA==", "context": "u", "whatever": 1}))):
            await producer.send_str(text)
            out[f"producer {name}"] = ack_shape(await a.next_json(producer))
        got = [await a.next_json(consumer) for _ in range(3)]  # (the two, and the one with an unknown field)
        out["consumer message"] = message_shape(got[0])
        out["consumer message without key"] = message_shape(got[1])
        out["consumer ids are the producer's"] = [g["messageId"] for g in got[:2]] == [x["messageId"] for x in acks]
        await consumer.send_str(json.dumps({"messageId": got[0]["messageId"]}))
        await consumer.send_str(json.dumps({"type": "isEndOfTopic"}))
        out["consumer isEndOfTopic"] = await a.next_json(consumer)
        await consumer.send_str(json.dumps({"type": "permit"}))
        out["consumer permit without count (push mode)"] = await a.closed(consumer)
        for name, text in (("bad json", "{not json"), ("bad message id", json.dumps({"messageId": "!!"}))):
            ws = await a.connect(f"/ws/v2/consumer/{topic}/sub-{name.replace(' ', '-')}")
            await ws.send_str(text)
            out[f"consumer {name}"] = await a.closed(ws)
            await ws.close()
        await consumer.close()

        # -- batching -----------------------------------------------------------------------------------------------
        batched_topic = f"persistent/{NS}/ws-compare-batched"
        bc = await a.connect(f"/ws/v2/consumer/{batched_topic}/sub")
        bp = await a.connect(f"/ws/v2/producer/{batched_topic}?batchingEnabled=true&batchingMaxPublishDelay=50")
        for i in range(3):
            await bp.send_str(json.dumps({"payload": base64.b64encode(f"b{i}".encode()).decode(), "context": str(i)}))
        batch_acks = [await a.next_json(bp) for _ in range(3)]
        out["batched acks"] = [ack_shape(x) for x in batch_acks]
        batch_got = [await a.next_json(bc) for _ in range(3)]
        out["batched messages"] = [message_shape(x) for x in batch_got]
        out["batched ids, producer"] = [_id_values(x["messageId"]) for x in batch_acks]
        out["batched ids, consumer"] = [_id_values(x["messageId"]) for x in batch_got]
        for ws in (bc, bp, producer):
            await ws.close()

        # -- reader -------------------------------------------------------------------------------------------------
        rd = await a.connect(f"/ws/v2/reader/{topic}?messageId=earliest")
        out["reader earliest"] = [message_shape(await a.next_json(rd)) for _ in range(3)]
        await rd.send_str(json.dumps({"type": "isEndOfTopic"}))
        out["reader isEndOfTopic"] = await a.next_json(rd)
        await rd.close()
        rd = await a.connect(f"/ws/v2/reader/{topic}?messageId={acks[0]['messageId']}")
        out["reader after the first id"] = message_shape(await a.next_json(rd))["payload"]
        await rd.close()

        # -- HTTP answers ---------------------------------------------------------------------------------------------
        for name, path in (
                ("producer bad domain", f"/ws/v2/producer/other/{NS}/t"),
                ("producer short path", "/ws/v2/producer/persistent/public"),
                ("producer bad sendTimeoutMillis", f"/ws/v2/producer/{topic}?sendTimeoutMillis=abc"),
                ("producer bad compressionType", f"/ws/v2/producer/{topic}?compressionType=BAD"),
                ("producer bad messageRoutingMode", f"/ws/v2/producer/{topic}?messageRoutingMode=BAD"),
                ("producer bad batchingMaxMessages",
                 f"/ws/v2/producer/{topic}?batchingEnabled=true&batchingMaxMessages=x"),
                ("consumer no subscription", f"/ws/v2/consumer/{topic}"),
                ("consumer bad subscriptionType", f"/ws/v2/consumer/{topic}/s?subscriptionType=Bad"),
                ("consumer bad receiverQueueSize", f"/ws/v2/consumer/{topic}/s?receiverQueueSize=x"),
                ("consumer short ackTimeoutMillis", f"/ws/v2/consumer/{topic}/s?ackTimeoutMillis=10"),
                ("reader bad messageId", f"/ws/v2/reader/{topic}?messageId=!!"),
                ("producer ok", f"/ws/v2/producer/{topic}"),
                ("producer busy name", f"/ws/v2/producer/{topic}?producerName=taken"),
        ):
            if name == "producer busy name":
                holder = await a.connect(f"/ws/v2/producer/{topic}?producerName=taken")
                out[f"http {name}"] = await a.refusal(path)
                await holder.close()
            else:
                out[f"http {name}"] = await a.refusal(path)
        out["http exclusive consumer busy"] = await _busy_consumer(a, topic)
        out["http producer missing namespace"] = await a.refusal("/ws/v2/producer/persistent/public/no-such-ns/t")

        # -- the end of a terminated topic --------------------------------------------------------------------------
        ended = f"persistent/{NS}/ws-compare-ended"
        ec = await a.connect(f"/ws/v2/consumer/{ended}/sub")
        async with http.post(f"{a.web}/admin/v2/{ended}/terminate", headers=admin) as r:
            assert r.status == 200, await r.text()
        async with asyncio.timeout(WAIT_S):
            while True:
                await ec.send_str(json.dumps({"type": "isEndOfTopic"}))
                if (await a.next_json(ec)) == {"endOfTopic": True}:
                    break
        out["consumer isEndOfTopic after terminate"] = True
        await ec.close()

        # -- a partitioned topic: its partitions, and the whole ------------------------------------------------------
        ptopic = f"persistent/{NS}/ws-compare-partitioned"
        async with http.put(f"{a.web}/admin/v2/{ptopic}/partitions", json=2, headers=admin) as r:
            assert r.status == 204, await r.text()
        pc = await a.connect(f"/ws/v2/consumer/{ptopic}-partition-1/sub")
        pp = await a.connect(f"/ws/v2/producer/{ptopic}-partition-1")
        await pp.send_str(json.dumps({"payload": base64.b64encode(b"p").decode()}))
        pack = await a.next_json(pp)
        pgot = await a.next_json(pc)
        out["partition ids"] = {"producer": _id_values(pack["messageId"]), "consumer": _id_values(pgot["messageId"]),
                                "same": pack["messageId"] == pgot["messageId"]}
        for ws in (pc, pp):
            await ws.close()
        # The topic as a whole: a key's partition (JavaStringHash), one partition for messages without a key
        # (SinglePartition), the partition in the ids, the consumer reading every partition.
        wc = await a.connect(f"/ws/v2/consumer/{ptopic}/whole?subscriptionType=Shared")
        wp = await a.connect(f"/ws/v2/producer/{ptopic}")
        keyed = {}
        for key in ("hello", "a", "b", "key-7"):
            await wp.send_str(json.dumps({"payload": base64.b64encode(key.encode()).decode(), "key": key}))
            keyed[key] = _id_values((await a.next_json(wp))["messageId"])
        unkeyed = []
        for _ in range(3):
            await wp.send_str(json.dumps({"payload": base64.b64encode(b"u").decode()}))
            unkeyed.append(_id_values((await a.next_json(wp))["messageId"]).get("partition"))
        whole = [await a.next_json(wc) for _ in range(7)]
        out["partitioned topic"] = {
            "keyed": keyed, "unkeyed on one partition": len(set(unkeyed)) == 1,
            "consumer id fields": sorted({tuple(sorted(_id_values(w["messageId"]))) for w in whole}),
            "consumer keys": sorted(w.get("key", "") for w in whole)}
        for ws in (wc, wp):
            await ws.close()
        out["reader of a partitioned topic from an id"] = await _partitioned_reader_from_id(a, admin)

        # -- a dead-letter policy -----------------------------------------------------------------------------------
        dtopic = f"persistent/{NS}/ws-compare-dlq"
        dq = await a.connect(f"/ws/v2/consumer/{dtopic}-sub-DLQ/dlq-sub")
        dc = await a.connect(f"/ws/v2/consumer/{dtopic}/sub?subscriptionType=Shared&negativeAckRedeliveryDelay=0"
                             "&maxRedeliverCount=1")
        dp = await a.connect(f"/ws/v2/producer/{dtopic}")
        await dp.send_str(json.dumps({"payload": base64.b64encode(b"poison").decode(), "key": "k",
                                      "properties": {"p": "1"}}))
        dack = await a.next_json(dp)
        counts = []
        for _ in range(2):
            got_d = await a.next_json(dc)
            counts.append(got_d["redeliveryCount"])
            await dc.send_str(json.dumps({"type": "negativeAcknowledge", "messageId": got_d["messageId"]}))
        dead = await a.next_json(dq)
        origin = pb.MessageIdData()
        origin.ParseFromString(base64.b64decode(dack["messageId"]))
        out["dead letter"] = {
            "redelivery counts": counts, "message": message_shape(dead) | {"properties": None},
            "property names": sorted(dead["properties"]), "REAL_TOPIC": dead["properties"].get("REAL_TOPIC"),
            "REAL_SUBSCRIPTION": dead["properties"].get("REAL_SUBSCRIPTION"),
            "ORIGIN_MESSAGE_IDY_TIME is the id": dead["properties"].get("ORIGIN_MESSAGE_IDY_TIME")
            == f"{origin.ledgerId}:{origin.entryId}:-1",
            "ORIGIN_MESSAGE_ID is the id": dead["properties"].get("ORIGIN_MESSAGE_ID")
            == f"{origin.ledgerId}:{origin.entryId}:-1"}
        for ws in (dq, dc, dp):
            await ws.close()

        # -- the multi-topic consumer (/ws/v3/consumer/{subscription}?topics=...) -------------------------------------
        v3_topics = [f"persistent://{NS}/ws-v3-a", f"persistent://{NS}/ws-v3-b"]
        v3 = await a.connect(f"/ws/v3/consumer/v3sub?topics={','.join(v3_topics)}&subscriptionType=Shared")
        for i, t in enumerate(v3_topics):
            wp = await a.connect(f"/ws/v2/producer/{t.replace('://', '/')}")
            await wp.send_str(json.dumps({"payload": base64.b64encode(f"v3-{i}".encode()).decode()}))
            await a.next_json(wp)
            await wp.close()
        v3_got = [await a.next_json(v3) for _ in v3_topics]
        for m in v3_got:
            await v3.send_str(json.dumps({"messageId": m["messageId"]}))
        backlogs = [await _backlog_reaches_zero(a, t, "v3sub") for t in v3_topics]
        await v3.send_str(json.dumps({"type": "isEndOfTopic"}))
        out["v3 consumer of two topics"] = {
            "payloads": sorted(base64.b64decode(m["payload"]).decode() for m in v3_got),
            "message": message_shape(v3_got[0]) | {"payload": None}, "acked on each topic": backlogs,
            "isEndOfTopic": await a.next_json(v3)}
        await v3.close()
        for name, path in (
                ("v3 no topics", "/ws/v3/consumer/s"),
                ("v3 topics and pattern", "/ws/v3/consumer/s?topics=a&topicsPattern=a.*"),
                ("v3 empty subscription", "/ws/v3/consumer/?topics=a"),
                ("v3 pattern", f"/ws/v3/consumer/s?topicsPattern=persistent://{NS}/ws-v3-.*"),
        ):
            out[f"http {name}"] = await a.refusal(path)
        for v3_role in (READER, WRITER, STRANGER):
            out[f"auth v3 consumer {v3_role}"] = (await a.refusal(
                f"/ws/v3/consumer/s3?topics={','.join(v3_topics)}", v3_role))[0]

        # -- the session limits: a text frame over webSocketMaxTextFrameSize, a session idle for
        # webSocketSessionIdleTimeoutMillis ---------------------------------------------------------------------------
        big = await a.connect(f"/ws/v2/producer/persistent/{NS}/ws-big")
        await big.send_str(json.dumps({"payload": "A" * MAX_TEXT_FRAME}))
        out["text frame over the limit"] = await a.closed(big)
        await big.close()
        msg = await idle.receive(timeout=IDLE_TIMEOUT_MS / 1000 + WAIT_S)
        out["idle session"] = (msg.type.name, msg.data, msg.extra,
                               asyncio.get_running_loop().time() - idle_since >= IDLE_TIMEOUT_MS / 1000)
        await idle.close()

        # -- authentication and authorization -------------------------------------------------------------------------
        auth_cases: list[tuple[str, str, str | None, str | None]] = [
                ("producer no token", f"/ws/v2/producer/{topic}", None, None),
                ("producer bad token", f"/ws/v2/producer/{topic}", None, "not-a-jwt"),
                ("producer token parameter", f"/ws/v2/producer/{topic}", None, token(SUPER_USER)),
                ("producer stranger", f"/ws/v2/producer/{topic}", STRANGER, None),
                ("producer writer", f"/ws/v2/producer/{topic}", WRITER, None),
                ("producer reader", f"/ws/v2/producer/{topic}", READER, None),
                ("consumer stranger", f"/ws/v2/consumer/{topic}/s2", STRANGER, None),
                ("consumer writer", f"/ws/v2/consumer/{topic}/s2", WRITER, None),
                ("consumer reader", f"/ws/v2/consumer/{topic}/s2", READER, None),
                ("reader reader", f"/ws/v2/reader/{topic}", READER, None),
                ("reader stranger", f"/ws/v2/reader/{topic}", STRANGER, None),
        ]
        for name, path, who, query_token in auth_cases:
            out[f"auth {name}"] = (await a.refusal(path, who, query_token))[0]
    return out


async def _partitioned_reader_from_id(a: Asker, admin: dict[str, str]) -> Any:
    """A reader of a partitioned topic from the id of one of its messages: Pulsar 4.0.7's Java client refuses a start
    message id on a partitioned topic (earliest and latest only)."""
    topic = f"persistent/{NS}/ws-compare-reader-parted"
    async with a.http.put(f"{a.web}/admin/v2/{topic}/partitions", json=2, headers=admin) as r:
        assert r.status == 204, await r.text()
    producer = await a.connect(f"/ws/v2/producer/{topic}")
    await producer.send_str(json.dumps({"payload": base64.b64encode(b"r").decode()}))
    mid = (await a.next_json(producer))["messageId"]
    await producer.close()
    status, words = await a.refusal(f"/ws/v2/reader/{topic}?messageId={quote(mid, safe='')}")
    if words is not None and words.startswith("{"):
        words = json.loads(words)["reason"]
    # (the refusal's own words, after the Java exceptions' names Pulsar's handler puts before them)
    return status, None if words is None else words.rsplit(": ", 1)[-1]


async def _backlog_reaches_zero(a: Asker, topic: str, subscription: str,
                                headers: dict[str, str] | None = None) -> bool:
    """Whether the subscription's backlog on ``topic`` reaches 0 within WAIT_S (acknowledgements are grouped)."""
    url = f"{a.web}/admin/v2/{topic.replace('://', '/')}/stats"
    deadline = asyncio.get_running_loop().time() + WAIT_S
    if headers is None:
        headers = {"Authorization": f"Bearer {token(SUPER_USER)}"}
    while asyncio.get_running_loop().time() < deadline:
        async with a.http.get(url, headers=headers) as r:
            if r.status == 200 and (await r.json())["subscriptions"][subscription]["msgBacklog"] == 0:
                return True
        await asyncio.sleep(0.1)
    return False


async def _busy_consumer(a: Asker, topic: str) -> Any:
    holder = await a.connect(f"/ws/v2/consumer/{topic}/exclusive-one")
    try:
        return await a.refusal(f"/ws/v2/consumer/{topic}/exclusive-one")
    finally:
        await holder.close()


def ask(e: Endpoints) -> Answers:
    return asyncio.run(ask_async(e))


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Answers]:
    pki: Pki = make_pki(tmp_path_factory.mktemp("pki"))
    workdir: Path = tmp_path_factory.mktemp("pulsar-websocket")
    # (the broker client's credentials: a super user's, which the WebSocket service's client connects with)
    return ask_both(workdir, pki, ask, {
        "webSocketServiceEnabled": "true",
        "webSocketSessionIdleTimeoutMillis": str(IDLE_TIMEOUT_MS), "webSocketMaxTextFrameSize": str(MAX_TEXT_FRAME),
        "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "brokerClientAuthenticationParameters": f"token:{token(SUPER_USER)}"})


# Where ours answers otherwise on purpose: key -> why.
_CLOSE_CODE_3 = ("Pulsar's handler closes the session with its WebSocketError code 3, which is not a code a WebSocket "
                 "close may carry: Jetty drops the connection without a close frame (the client sees 1006); ours "
                 "closes it with 1011 and Pulsar's words, \"Failed to de-serialize from JSON\"")
_BAD_PATH = ("Pulsar's handler throws from its constructor on a path that names no topic and Jetty answers 500; a bad "
             "path is the client's fault: ours answers 400 with the words Pulsar puts in its exception")
DIFFERENCES: dict[str, str] = {
    "consumer bad json": _CLOSE_CODE_3,
    "consumer permit without count (push mode)": _CLOSE_CODE_3,
    "http producer bad domain": _BAD_PATH,
    "http producer short path": _BAD_PATH,
    "http v3 no topics": _BAD_PATH,
    "http v3 topics and pattern": _BAD_PATH,
    "http v3 pattern": ("Pulsar 4.0.7's consumer of a topics pattern, in this setting (authentication, the asker and "
                        "the broker client super users), is refused by its own broker: 403 \"Client is not authorized "
                        "to GetTopicsOfNamespace\"; ours is served (101)"),
}
# HTTP answers whose words after Pulsar's own prefix are the broker's or a Java exception's: the prefix is compared.
_PREFIX_ONLY = ("http producer busy name", "http exclusive consumer busy", "http reader bad messageId",
                "http producer missing namespace")


def comparable(key: str, value: Any) -> Any:
    """What must match of an answer: an HTTP answer's status and words (ours in a JSON reason, Pulsar's in its HTML
    page, entities and all), a closed session's close code."""
    if key.startswith("http ") and isinstance(value, tuple):
        status, words = value[0], value[1]
        if words is not None and words.startswith("{"):
            words = json.loads(words).get("reason")
        if words is not None:
            words = html.unescape(words)
            if key in _PREFIX_ONLY:
                words = words.split(": ", 1)[0]
        return status, words
    if key in ("consumer bad message id", "text frame over the limit"):
        return value[0], value[-1]  # (the close frame and its code; the reason is a Java exception's text)
    if key == "idle session":  # (Jetty's words after the name of the Java exception it gives them in; the time
        # idle, in ms, as it was when the check ran)
        words = value[2].removeprefix("java.util.concurrent.TimeoutException: ")
        return value[0], value[1], re.sub(r"expired: \d+/", "expired: <idle>/", words), value[3]
    return value


KEYS = ["producer ack", "producer bad json", "producer not base64", "producer no payload", "producer bad event time",
        "producer unknown field", "consumer message", "consumer message without key", "consumer ids are the producer's",
        "consumer isEndOfTopic", "consumer permit without count (push mode)", "consumer bad json",
        "consumer bad message id", "batched acks", "batched messages", "batched ids, producer",
        "batched ids, consumer", "reader earliest", "reader isEndOfTopic", "reader after the first id",
        "http producer bad domain", "http producer short path", "http producer bad sendTimeoutMillis",
        "http producer bad compressionType", "http producer bad messageRoutingMode",
        "http producer bad batchingMaxMessages", "http consumer no subscription", "http consumer bad subscriptionType",
        "http consumer bad receiverQueueSize", "http consumer short ackTimeoutMillis", "http reader bad messageId",
        "http producer ok", "http producer busy name", "http exclusive consumer busy",
        "http producer missing namespace", "consumer isEndOfTopic after terminate", "dead letter",
        "partition ids", "partitioned topic", "reader of a partitioned topic from an id", "text frame over the limit",
        "idle session",
        "v3 consumer of two topics", "http v3 no topics", "http v3 topics and pattern", "http v3 empty subscription",
        "http v3 pattern", "auth v3 consumer reader", "auth v3 consumer writer", "auth v3 consumer stranger",
        "auth producer no token", "auth producer bad token", "auth producer token parameter",
        "auth producer stranger", "auth producer writer", "auth producer reader", "auth consumer stranger",
        "auth consumer writer", "auth consumer reader", "auth reader reader", "auth reader stranger"]


@pytest.mark.parametrize("key", KEYS)
def test_answer_is_pulsars(answers: dict[str, Answers], key: str) -> None:
    theirs, ours = comparable(key, answers["pulsar"][key]), comparable(key, answers["ours"][key])
    if key in DIFFERENCES:
        assert ours != theirs, f"{key}: kept as a difference ({DIFFERENCES[key]}), but now the same: {ours!r}"
    else:
        assert ours == theirs, f"{key}:\n  Pulsar: {theirs!r}\n  ours:   {ours!r}"


def test_every_answer_is_compared(answers: dict[str, Answers]) -> None:
    assert sorted(answers["pulsar"]) == sorted(KEYS) == sorted(answers["ours"])


# -- a consumer of a topics pattern, without authentication (with it, Pulsar 4.0.7's own is refused: above) -----------
async def ask_pattern_async(web_url: str) -> Answers:
    """The topics of a pattern: two that match before the WebSocket (one partitioned), one made while it runs, one
    that does not match: what comes, that acknowledgements reach each topic, that nothing subscribes the other."""
    out: Answers = {}
    prefix = f"persistent/{NS}/ws-pattern"
    async with aiohttp.ClientSession() as http:
        a = Asker(web_url, http)
        async with http.put(f"{web_url}/admin/v2/{prefix}-b/partitions", json=2) as r:
            assert r.status == 204, await r.text()
        for topic in (f"{prefix}-a", f"{prefix}x-other"):
            async with http.put(f"{web_url}/admin/v2/{topic}", json={}) as r:
                assert r.status == 204, await r.text()
        pattern = quote(f"persistent://{NS}/ws-pattern-.*", safe="")
        consumer = await a.connect(f"/ws/v3/consumer/pat?topicsPattern={pattern}&subscriptionType=Shared"
                                   "&subscriptionInitialPosition=Earliest", None)
        sends = ((f"{prefix}x-other", ["not mine"]), (f"{prefix}-a", ["a"]), (f"{prefix}-b", ["b0", "b1"]),
                 (f"{prefix}-c", ["c"]))  # (-c: made now, while the consumer runs)
        for topic, payloads in sends:
            producer = await a.connect(f"/ws/v2/producer/{topic}?messageRoutingMode=RoundRobinPartition", None)
            for p in payloads:
                await producer.send_str(json.dumps({"payload": base64.b64encode(p.encode()).decode()}))
                await a.next_json(producer)
            await producer.close()
        got = []
        for _ in range(4):
            msg = await consumer.receive(timeout=PATTERN_WAIT_S)
            got.append(json.loads(msg.data) if msg.type == aiohttp.WSMsgType.TEXT else {"closed": msg.type.name})
        for m in got:
            if "messageId" in m:
                await consumer.send_str(json.dumps({"messageId": m["messageId"]}))
        out["pattern consumer messages"] = sorted(base64.b64decode(m["payload"]).decode() for m in got
                                                  if "payload" in m)
        b0 = [m for m in got if m.get("payload") == base64.b64encode(b"b0").decode()]  # (a partition's message)
        out["pattern consumer message"] = message_shape(b0[0]) | {"payload": None} if b0 else got
        acked = {}
        for topic in (f"{prefix}-a", f"{prefix}-b-partition-0", f"{prefix}-b-partition-1", f"{prefix}-c"):
            acked[topic.rsplit("/", 1)[1]] = await _backlog_reaches_zero(a, topic, "pat", headers={})
        out["pattern consumer acks"] = acked
        async with http.get(f"{web_url}/admin/v2/{prefix}x-other/stats") as r:
            out["pattern consumer left the other topic alone"] = "pat" not in (await r.json())["subscriptions"]
        await consumer.close()
        nowhere = quote("persistent://public/nosuch/x.*", safe="")
        out["pattern consumer of a namespace that does not exist"] = await a.refusal(
            f"/ws/v3/consumer/s?topicsPattern={nowhere}", None)
    return out


PATTERN_WAIT_S = 70.0  # (a topic made while the consumer runs: the watcher tells it at once; polling, within 1 min)
PATTERN_KEYS = ["pattern consumer messages", "pattern consumer message", "pattern consumer acks",
                "pattern consumer left the other topic alone", "pattern consumer of a namespace that does not exist"]


@pytest.fixture(scope="module")
def pattern_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Answers]:
    return pulsar_answers.ask_both(tmp_path_factory.mktemp("pulsar-websocket-pattern"),
                                   lambda _service, web, _metrics: asyncio.run(ask_pattern_async(web)),
                                   "webSocketServiceEnabled=true\n", webSocketServiceEnabled=True)


@pytest.mark.parametrize("key", PATTERN_KEYS)
def test_pattern_consumer_answer_is_pulsars(pattern_answers: dict[str, Answers], key: str) -> None:
    assert pattern_answers["ours"][key] == pattern_answers["pulsar"][key]
