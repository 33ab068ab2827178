"""Cluster mode: the wire fuzz (tests/component/command_fuzz.py) against two broker processes on one ZooKeeper and
BookKeeper. Each connection goes to either broker and opens with a LOOKUP of its topic, whose answer may name the
other broker (Connect: the owner; Redirect: the broker to ask next). The session follows it as a client does, or
deliberately does not: then its producer and consumer are asked of the non-owner, which must refuse them
(ServiceNotReady, as Pulsar's BrokerService.checkTopicNsOwnership refuses a topic whose bundle another broker owns),
and its random commands meet a broker that does not own their topic. Now and then a bundle is unloaded (admin REST)
while a session runs, so its topic moves between the brokers mid-session. Two streams of sessions run side by side
(their own seeds), so the sessions and unloads of one meet those of the other.

What must hold: every command that carries a request id is answered exactly once (each session's ids are made unique
for that), or its connection closed, within ANSWER_S; neither broker process dies or logs an error or a traceback;
the messages whose SEND was acknowledged (on a topic of their own, produced through either broker across the unloads)
are all delivered at the end; and afterwards each broker still serves a producer and a consumer of a topic it owns.
PULSAR_FUZZ_SEED=<n> runs another seed, PULSAR_FUZZ_CLUSTER_SESSIONS=<n> more or fewer connections (in all),
PULSAR_FUZZ_CLUSTER_LANES=<n> more or fewer streams (1: each seed's run is the same every time but for the brokers'
own choices, such as where a bundle goes)."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import aiohttp
import pytest

from broker.metadata.bundles import NamespaceBundles
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.frames import Frame
from broker.topic_name import TopicName
from cluster import processes
from cluster.local import BrokerInfo
from tests.admin.http_fuzz import LogTail
from tests.cluster.conftest import Brokers
from tests.component.command_fuzz import _FIELD, CommandFuzz, frame, lookup, ping
from tests.component.wire import T, WireClient, producer_cmd, send_frame, subscribe_cmd

SEED = int(os.environ.get("PULSAR_FUZZ_SEED", "6650"))
SESSIONS = int(os.environ.get("PULSAR_FUZZ_CLUSTER_SESSIONS", "300"))
LANES = int(os.environ.get("PULSAR_FUZZ_CLUSTER_LANES", "2"))
# How often a session follows its opening's Redirect; how often a bundle is unloaded while a session runs; how often
# a session first produces to the topic whose acknowledged messages are checked at the end.
FOLLOW = 0.6
UNLOAD = 0.08
KEPT = 0.15
# No load shedding: the bundles move only when the test unloads them (so a session that did not follow its Redirect
# knows the broker it talks to is not the owner, unless it unloaded a bundle meanwhile).
SETTINGS = {"transactionCoordinatorEnabled": "true", "topicLevelPoliciesEnabled": "true",
            "loadBalancerSheddingEnabled": "false"}
NAMESPACE = "public/default"
KEPT_TOPIC = "persistent://public/default/fuzz-kept"
KEPT_SUBSCRIPTION = "keeper"  # (no name the fuzz uses: the kept messages stay)
# Pulsar's answer to an unload of a bundle being unloaded (NamespaceService.findBrokerServiceUrl's
# IllegalStateException, a 500): two sessions may unload one bundle at once.
BEING_UNLOADED = "is being unloaded"
# An answer not here in this long is a hang (Pulsar's clients give up on an operation after 30 s; here every answer
# takes well under a second, but an end of a transaction whose topics move waits for their new owners).
ANSWER_S = 20.0
# The fuzz stops after this many hangs (a broker that stopped answering: the rest would only wait).
HUNG_LIMIT = 3
FIRST_REQUEST_ID = 1000  # the session's commands with a request id get FIRST_REQUEST_ID, +1, ... (the opening's 90-101)


@dataclass
class Outcome:
    """What went wrong in the run (each a line of the failure message)."""

    hung: list[str] = field(default_factory=list)
    twice: list[str] = field(default_factory=list)
    non_owner: list[str] = field(default_factory=list)
    unloads: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)

    def lines(self) -> Iterator[str]:
        for name, found in vars(self).items():
            yield from (f"{name}: {line}" for line in found)


class Conn:
    """A WireClient that keeps each frame's payload (the kept topic's messages are read back) and counts the answers
    to request ids."""

    def __init__(self, c: WireClient) -> None:
        self.c = c
        self.answers: dict[int, int] = {}
        self.first: dict[int, pb.BaseCommand] = {}  # the first answer to each request id
        self.waiting: set[int] = set()  # (a PRODUCER_SUCCESS not ready: another answer to come)
        self.twice: list[str] = []

    @classmethod
    async def open(cls, port: int) -> Conn:
        conn = cls(await WireClient.open(port))
        await conn.c.connect()
        return conn

    def write(self, data: bytes) -> None:
        self.c.writer.write(data)

    async def recv(self) -> Frame:
        c = self.c

        async def one() -> Frame:
            while True:
                f = c.decoder.next_frame()
                if f is not None:
                    return f
                data = await c.reader.read(65536)
                if not data:
                    raise ConnectionError("closed by broker")
                c.decoder.feed(data)
        f = await asyncio.wait_for(one(), ANSWER_S)
        self._count(f.command)
        return f

    def _count(self, cmd: pb.BaseCommand) -> None:
        if cmd.type in (T.CLOSE_PRODUCER, T.CLOSE_CONSUMER):  # (the broker's own, e.g. in an unload: request id -1)
            return
        inner = getattr(cmd, _FIELD.get(cmd.type, ""), None)
        if inner is None or "request_id" not in inner.DESCRIPTOR.fields_by_name or not inner.HasField("request_id"):
            return
        rid = inner.request_id
        if rid in self.waiting:  # (the answer after a producer's "not ready yet")
            self.waiting.discard(rid)
            return
        if cmd.type == T.PRODUCER_SUCCESS and not cmd.producer_success.producer_ready:
            self.waiting.add(rid)
        self.answers[rid] = self.answers.get(rid, 0) + 1
        self.first.setdefault(rid, cmd)
        if self.answers[rid] == 2:
            self.twice.append(f"request {rid} answered again with {pb.BaseCommand.Type.Name(cmd.type)}")

    async def answer_to(self, rid: int) -> pb.BaseCommand:
        """The (first) answer to request ``rid``, maybe received already: the broker answers requests in the order
        they complete (a SUBSCRIBE's answer may come before that of the PRODUCER sent first)."""
        while rid not in self.first:
            await self.recv()
        return self.first[rid]

    def close(self) -> None:
        self.c.close()


def port_of_url(url: str) -> int:
    port = urlparse(url).port
    assert port is not None, url
    return port


async def open_on_owner(port: int, topic: str, rid: int = 90) -> tuple[Conn, pb.CommandLookupTopicResponse]:
    """A connection to the broker that serves ``topic``, found as a client finds it: a LOOKUP from ``port``, a
    Redirect's broker asked again (with the answer's authoritative flag), a Connect's broker connected to; the
    connection and the last LOOKUP's answer."""
    conn = await Conn.open(port)
    authoritative = False
    for hop in range(5):
        cmd = lookup(topic, rid + hop)  # (a Redirect to the same broker is asked again on the same connection)
        cmd.lookupTopic.authoritative = authoritative
        conn.write(frame(cmd, b""))
        answer = (await conn.answer_to(rid + hop)).lookupTopicResponse
        if answer.response == pb.CommandLookupTopicResponse.Failed:
            return conn, answer
        if port_of_url(answer.brokerServiceUrl) != port:
            conn.close()
            port = port_of_url(answer.brokerServiceUrl)
            conn = await Conn.open(port)
        if answer.response == pb.CommandLookupTopicResponse.Connect:
            return conn, answer
        authoritative = answer.authoritative
    return conn, answer


# public/default's bundles (its first four: the test splits none)
BUNDLES = [b.range_name for b in NamespaceBundles.equal(NAMESPACE, 4).bundles]


def bundle_of(topic: str) -> str | None:
    """The range of public/default's bundle ``topic`` falls in."""
    try:
        name = TopicName.parse(topic)
    except Exception:
        return None
    if name.namespace != NAMESPACE:
        return None
    return NamespaceBundles.equal(NAMESPACE, 4).find(name.full).range_name


class ClusterFuzz:
    def __init__(self, brokers: list[BrokerInfo], http: aiohttp.ClientSession) -> None:
        self.ports = [port_of_url(b.service_url) for b in brokers]
        self.web = [b.web_url for b in brokers]
        self.http = http
        self.out = Outcome()
        self.kept_sent = 0
        self.kept: set[bytes] = set()  # the bodies of the kept topic's messages whose SEND was acknowledged
        self.unloads = 0  # unloads started, and ended (each counts twice: a change means one ran meanwhile)

    # -- one session ---------------------------------------------------------------------------------------------
    async def sessions(self, seed: int, count: int) -> None:
        """``count`` sessions one after another, from ``seed``."""
        fuzz = CommandFuzz(seed)
        rng = random.Random(-seed)  # (the cluster's own choices: the commands stay those of the seed)
        for _ in range(count):
            if len(self.out.hung) >= HUNG_LIMIT:
                return
            await self.session(fuzz, rng)

    async def session(self, fuzz: CommandFuzz, rng: random.Random) -> None:
        opening, commands = fuzz.opening(), fuzz.session()
        entry, by = rng.randrange(2), rng.randrange(2)  # (the broker connected to; the one asked to unload)
        follow, unload, kept = rng.random() < FOLLOW, rng.random() < UNLOAD, rng.random() < KEPT
        rid = FIRST_REQUEST_ID
        tracked: dict[int, str] = {}
        for cmd, _ in commands:  # (unique request ids: each one's answers are counted)
            inner = getattr(cmd, _FIELD[cmd.type])
            if "request_id" in inner.DESCRIPTOR.fields_by_name:
                inner.request_id = rid
                tracked[rid] = pb.BaseCommand.Type.Name(cmd.type)
                rid += 1
        if kept:
            await self.produce_kept(self.ports[entry])
        topic = opening[0].producer.topic if opening else ""
        moving = None
        phase = "lookup"
        conn = await Conn.open(self.ports[entry])
        try:
            if opening:
                conn.write(frame(lookup(topic, 99), b""))
                unloads = self.unloads
                answer = (await conn.answer_to(99)).lookupTopicResponse
                # Connect names the owner, Redirect the broker to ask next (the owner to be, or the leader, which
                # picks one): either may be the other broker.
                elsewhere = (answer.response != pb.CommandLookupTopicResponse.Failed
                             and port_of_url(answer.brokerServiceUrl) != self.ports[entry])
                if elsewhere and follow:
                    conn.close()
                    conn, answer = await open_on_owner(self.ports[entry], topic)
                if unload:
                    moving = asyncio.create_task(self.unload(by, bundle_of(topic) or rng.choice(BUNDLES)))
                phase = "opening"
                conn.write(b"".join(frame(cmd, b"") for cmd in opening))
                opened = [(await conn.answer_to(r)) for r in (100, 101)]
                # Told the owner is the other broker (a Connect), with no unload since: this one must refuse them.
                # (After a Redirect the bundle had no owner: another session's lookup may have given it to this one.)
                if (elsewhere and not follow and answer.response == pb.CommandLookupTopicResponse.Connect
                        and unloads == self.unloads and unloads % 2 == 0):
                    for what, cmd in zip(("PRODUCER", "SUBSCRIBE"), opened, strict=True):
                        if cmd.type != T.ERROR or cmd.error.error != pb.ServiceNotReady:
                            self.out.non_owner.append(f"{what} {topic} on the non-owner: {cmd}".replace("\n", " "))
            elif unload:
                moving = asyncio.create_task(self.unload(by, rng.choice(BUNDLES)))
            phase = "session"
            conn.write(b"".join(frame(cmd, payload) for cmd, payload in commands) + frame(ping(), b""))
            pong = False
            while not pong or any(r not in conn.answers for r in tracked):
                pong |= (await conn.recv()).command.type == T.PONG
        except ConnectionError:
            pass  # (closed by the broker: an answer too, e.g. to a command only a broker sends)
        except TimeoutError:
            unanswered = ([f"{r} {tracked[r]}" for r in tracked if r not in conn.answers] or ["PING"]
                          if phase == "session" else [f"the {phase}"])
            self.out.hung.append(f"{time.strftime('%H:%M:%S')} on broker {entry}, topic {topic!r} (follow {follow}): "
                                 f"unanswered {unanswered} of "
                                 f"{[pb.BaseCommand.Type.Name(cmd.type) for cmd, _ in commands]}")
        finally:
            conn.close()
            if moving is not None:
                await moving
        self.out.twice += conn.twice

    async def unload(self, by: int, bundle: str) -> None:
        """PUT .../{bundle}/unload through broker ``by`` (its redirect to the owner followed): 204 (a bundle nobody
        owns too, as Pulsar answers), or Pulsar's 500 while another session's unload of it runs."""
        url = f"{self.web[by]}/admin/v2/namespaces/{NAMESPACE}/{bundle}/unload"
        self.unloads += 1
        try:
            async with self.http.put(url) as answer:
                text = await answer.text()
                if answer.status != 204 and not (answer.status == 500 and BEING_UNLOADED in text):
                    self.out.unloads.append(f"PUT {url} -> {answer.status} {text[:300]}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.out.unloads.append(f"PUT {url} -> {exc!r}")
        finally:
            self.unloads += 1

    # -- the kept topic -----------------------------------------------------------------------------------------
    async def produce_kept(self, port: int) -> None:
        """A few messages to the kept topic through its owner (looked up from ``port``); those acknowledged are
        remembered. (Refusals while its bundle moves are fine: a client would send them again.)"""
        try:
            conn, _ = await open_on_owner(port, KEPT_TOPIC)
        except (ConnectionError, TimeoutError):
            return
        try:
            conn.write(frame(producer_cmd(KEPT_TOPIC, 1, 1), b""))
            if (await conn.answer_to(1)).type != T.PRODUCER_SUCCESS:
                return
            bodies = {}
            for seq in range(3):
                bodies[seq] = b"kept-%06d" % self.kept_sent
                self.kept_sent += 1
                conn.write(frame(*send_frame(1, seq, bodies[seq])))
            for _ in bodies:
                cmd = (await conn.recv()).command
                while cmd.type not in (T.SEND_RECEIPT, T.SEND_ERROR, T.CLOSE_PRODUCER):
                    cmd = (await conn.recv()).command
                if cmd.type != T.SEND_RECEIPT:
                    return
                self.kept.add(bodies[cmd.send_receipt.sequence_id])
        except (ConnectionError, TimeoutError):
            return
        finally:
            conn.close()

    async def subscribe_kept(self) -> Conn:
        conn, _ = await open_on_owner(self.ports[0], KEPT_TOPIC)
        earliest = pb.CommandSubscribe.Earliest
        conn.write(frame(subscribe_cmd(KEPT_TOPIC, KEPT_SUBSCRIPTION, 1, 1, initialPosition=earliest), b""))
        answer = await conn.answer_to(1)
        assert answer.type == T.SUCCESS, answer
        return conn

    async def check_kept(self) -> None:
        """Every acknowledged message of the kept topic is delivered to its subscription."""
        missing = set(self.kept)
        conn = await self.subscribe_kept()
        try:
            flow = pb.BaseCommand(type=T.FLOW)
            flow.flow.consumer_id, flow.flow.messagePermits = 1, self.kept_sent + 1000
            conn.write(frame(flow, b""))
            while missing:
                f = await conn.recv()
                if f.command.type == T.MESSAGE and f.payload is not None:
                    missing.discard(f.payload[-len(b"kept-000000"):])
        except TimeoutError:
            self.out.lost.append(f"{len(missing)} of {len(self.kept)} acknowledged messages never delivered: "
                                 f"{sorted(missing)[:10]}")
        finally:
            conn.close()

    # -- after the run ------------------------------------------------------------------------------------------
    async def still_serving(self) -> None:
        """Each broker, through a topic it owns (new names looked up until each has one): a subscription, a
        message produced and consumed."""
        served: dict[int, str] = {}
        for i in range(60):
            if len(served) == len(self.ports):
                break
            topic = f"persistent://{NAMESPACE}/after-fuzz-{i}"
            conn, answer = await open_on_owner(self.ports[i % 2], topic)
            conn.close()
            if answer.response == pb.CommandLookupTopicResponse.Connect:
                served.setdefault(port_of_url(answer.brokerServiceUrl), topic)
        for port in self.ports:
            if port not in served:
                self.out.after.append(f"no topic of 60 looked up is served by the broker on {port}")
                continue
            try:
                await round_trip(port, served[port])
            except (AssertionError, ConnectionError, TimeoutError) as exc:
                self.out.after.append(f"round trip on {port} ({served[port]}): {exc!r}")


async def round_trip(port: int, topic: str) -> None:
    conn = await Conn.open(port)
    try:
        conn.write(frame(subscribe_cmd(topic, "after", 1, 1), b""))
        assert (reply := await conn.answer_to(1)).type == T.SUCCESS, reply
        conn.write(frame(producer_cmd(topic, 7, 2), b""))
        assert (reply := await conn.answer_to(2)).type == T.PRODUCER_SUCCESS, reply
        conn.write(frame(*send_frame(7, 0, b"still fine")))
        flow = pb.BaseCommand(type=T.FLOW)
        flow.flow.consumer_id, flow.flow.messagePermits = 1, 10
        conn.write(frame(flow, b""))
        while (reply := (await conn.recv()).command).type != T.MESSAGE:
            assert reply.type == T.SEND_RECEIPT, reply
    finally:
        conn.close()


@asynccontextmanager
async def watching(started: list[BrokerInfo]) -> Any:
    """The brokers' logs read after the run (errors, tracebacks), and their processes checked alive."""
    logs = [LogTail(b.log) for b in started]
    found: list[str] = []
    try:
        yield found
    finally:
        found += [line for log in logs for line in log.errors()]
        found += [f"broker {b.directory} died" for b in started if not processes.alive(b.pid)]


@pytest.mark.timeout(120 + SESSIONS)
async def test_random_commands_to_either_broker_are_answered_once_and_never_fail_a_broker(brokers: Brokers) -> None:
    brokers.settings.update(SETTINGS)
    started = brokers.start(2)
    async with watching(started) as logged, aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        fuzz = ClusterFuzz(started, http)
        (await fuzz.subscribe_kept()).close()  # (the subscription that keeps the acknowledged messages)
        await asyncio.gather(*(fuzz.sessions(SEED + 1000 * lane, SESSIONS // LANES) for lane in range(LANES)))
        await fuzz.check_kept()
        await fuzz.still_serving()
    failures = [*fuzz.out.lines(), *(f"logged: {line}" for line in logged)]
    assert not failures, f"seed {SEED}: {len(failures)} failures\n" + "\n".join(failures[:30])
