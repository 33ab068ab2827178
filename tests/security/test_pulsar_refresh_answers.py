"""Credentials that expire on live connections, against Apache Pulsar 4.0.7: AUTH_CHALLENGE / AUTH_RESPONSE.

A real Pulsar standalone and our broker get the settings of tests/security/test_pulsar_auth_answers.py (token
provider, authorization, ``admin`` the super user) and ``authenticationRefreshCheckSeconds=1``. Raw connections with
JWTs that expire a few seconds after CONNECT then live through the expiry, each in its own way (all at once, so one
Pulsar start and one expiry's wait serve every case):

1. the broker's AUTH_CHALLENGE (its method, data, protocol version, server name), then the client's answer: a fresh
   token (again expiring: a second challenge), an expired one, a badly signed one, one of another role, one under
   another method name, an AUTH_RESPONSE without a method name or without data, no answer at all; a client that
   declared no support for refresh; requests while a challenge is pending;
2. AUTH_RESPONSE sent unprompted (fresh, another role's, expired) and before CONNECT;
3. producers and consumers open on a connection whose token expires: what they see before the connection goes;
4. the official Python client with a token supplier across several expiries: it keeps producing on one connection.

Each case gives what a client sees, in order: the frames the broker sends (PINGs answered and left out; an ERROR's
code, not its words) and whether it closes the connection. ``DIFFERENCES`` lists where ours answers otherwise on
purpose, with the reason (each must still differ). Timing is never compared: each wait only bounds how long the test
watches for something.

Cost: one Pulsar standalone start (5-60 s), then about 15 s per broker.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pulsar
import pytest

from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.errors import ProtocolError
from broker.protocol.frames import FrameDecoder
from broker.protocol.limits import DEFAULT_MAX_MESSAGE_SIZE, max_frame_size
from tests.component.test_pulsar_wire_answers import outcome
from tests.security.conftest import SUPER_USER, expiring_token, token
from tests.security.pki import Pki
from tests.security.test_pulsar_auth_answers import Answers, Endpoints, ask_both, call
from tests.security.test_wire import connect_cmd
from tests.transactions.client import T
from tests.waiting import wait_for

pytestmark = [pytest.mark.apache_pulsar, pytest.mark.timeout(600)]

REFRESH_CHECK_S = 1  # authenticationRefreshCheckSeconds on both (Pulsar's is whole seconds)
EXPIRES_S = 5.0  # a token's life: CONNECT and the first requests are done well before it ends
OPEN_EXPIRES_S = 10.0  # the same where a producer and a consumer are to be open first (on warmed-up topics)
WAIT_S = 10.0  # an answer that should come
CHALLENGE_WAIT_S = OPEN_EXPIRES_S + 20.0  # the token's life, then a refresh check or a few on a busy machine
CLOSE_WAIT_S = 5.0  # how long a connection is watched for more frames or a close (several refresh checks)
OTHER_ROLE = "somebody-else"
NS = "public/default"


# -- one raw connection ------------------------------------------------------------------------------------------------
class Session:
    """A raw connection: the broker's frames one by one (PINGs answered and skipped), None once it has closed."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder(max_frame_size(DEFAULT_MAX_MESSAGE_SIZE) * 2)
        self.notes: list[str] = []  # the words of ERRORs (shown in a failure's explanation, not compared)
        self.ids = iter(range(1, 1000))

    @classmethod
    async def open(cls, port: int) -> Session:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), WAIT_S)
        return cls(r, w)

    @classmethod
    async def connected(cls, port: int, cmd: pb.BaseCommand) -> tuple[Session, pb.BaseCommand]:
        session = await cls.open(port)
        session.send(cmd)
        answer = await session.next()
        assert answer is not None and answer.type == T.CONNECTED, answer
        return session, answer

    def send(self, cmd: pb.BaseCommand) -> None:
        self.writer.write(commands.frame(cmd))

    async def next(self, within: float = WAIT_S) -> pb.BaseCommand | None:
        """The next frame; None when the broker closed the connection; TimeoutError when nothing came ``within``."""
        async with asyncio.timeout(within):
            while True:
                try:
                    frame = self.decoder.next_frame()
                except ProtocolError:
                    return None
                if frame is not None:
                    if frame.command.type == T.PING:  # (as every client does)
                        self.send(pb.BaseCommand(type=T.PONG, pong=pb.CommandPong()))
                        continue
                    if frame.command.type == T.PONG:
                        continue
                    if frame.command.type == T.ERROR:
                        self.notes.append(frame.command.error.message)
                    return frame.command
                try:
                    data = await self.reader.read(65536)
                except ConnectionError:
                    return None
                if not data:
                    return None
                self.decoder.feed(data)

    async def seen(self, within: float = WAIT_S) -> str:
        """What comes next, described: a frame, "closed", or "nothing" within ``within``."""
        try:
            return describe(await self.next(within))
        except TimeoutError:
            return "nothing"

    async def until_closed(self, within: float = CLOSE_WAIT_S) -> list[str]:
        """Every frame until the broker closes ("closed"), or until none came for ``within`` ("left open")."""
        out: list[str] = []
        while True:
            try:
                cmd = await self.next(within)
            except TimeoutError:
                return [*out, "left open"]
            out.append(describe(cmd))
            if cmd is None:
                return out

    async def request(self, cmd: pb.BaseCommand, body: Any) -> str:
        body.request_id = next(self.ids)
        self.send(cmd)
        return await self.seen()

    async def producer(self, topic: str, producer_id: int = 1) -> str:
        """A LOOKUP (Pulsar's standalone serves a namespace bundle once looked up), then the PRODUCER; what the
        LOOKUP got instead of its answer, if anything (an ERROR, the close)."""
        if not (looked := await self.lookup(topic)).startswith("LOOKUP_RESPONSE"):
            return looked
        cmd = pb.BaseCommand(type=T.PRODUCER)
        cmd.producer.topic, cmd.producer.producer_id = topic, producer_id
        return await self.request(cmd, cmd.producer)

    async def subscribe(self, topic: str, consumer_id: int = 1) -> str:
        cmd = pb.BaseCommand(type=T.SUBSCRIBE)
        if not (looked := await self.lookup(topic)).startswith("LOOKUP_RESPONSE"):
            return looked
        s = cmd.subscribe
        s.topic, s.subscription, s.consumer_id, s.subType = topic, "sub", consumer_id, pb.CommandSubscribe.Shared
        return await self.request(cmd, s)

    async def lookup(self, topic: str) -> str:
        cmd = pb.BaseCommand(type=T.LOOKUP)
        cmd.lookupTopic.topic = topic
        return await self.request(cmd, cmd.lookupTopic)

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except ConnectionError:
            pass


def describe(cmd: pb.BaseCommand | None) -> str:
    if cmd is None:
        return "closed"
    if cmd.type == T.AUTH_CHALLENGE:
        c = cmd.authChallenge
        # The server's name without its version ("Pulsar Server4.0.7", ours "Pulsar Server <version>").
        server = re.sub(r"\s*\d[\w.-]*$", "", c.server_version) if c.HasField("server_version") else "(none)"
        return (f"AUTH_CHALLENGE method={c.challenge.auth_method_name} data={c.challenge.auth_data.decode()} "
                f"protocol_version={c.protocol_version if c.HasField('protocol_version') else '(none)'} "
                f"server={server}")
    return " ".join(outcome(cmd))


def connect(role: str, expires: float | None = EXPIRES_S, refresh: bool = True,
            protocol_version: int = 20) -> pb.BaseCommand:
    """CONNECT with ``role``'s token (expiring ``expires`` s from now; None: never)."""
    credentials = token(role) if expires is None else expiring_token(role, expires)
    cmd = connect_cmd("token", credentials.encode())
    cmd.connect.protocol_version = protocol_version
    cmd.connect.feature_flags.supports_auth_refresh = refresh
    return cmd


def auth_response(data: bytes | None, method: str | None = "token") -> pb.BaseCommand:
    """AUTH_RESPONSE as the official clients send it (None leaves a field out)."""
    cmd = pb.BaseCommand(type=T.AUTH_RESPONSE)
    cmd.authResponse.client_version = "refresh-compare"
    cmd.authResponse.protocol_version = 20
    cmd.authResponse.response.SetInParent()
    if method is not None:
        cmd.authResponse.response.auth_method_name = method
    if data is not None:
        cmd.authResponse.response.auth_data = data
    return cmd


def fresh(role: str = SUPER_USER) -> bytes:
    return token(role).encode()


def expired_token() -> bytes:
    return token(SUPER_USER, exp=1).encode()


def topic(name: str) -> str:
    return f"persistent://{NS}/refresh-{name}-{uuid.uuid4().hex[:8]}"


# -- the cases: each returns what the client saw, in order -------------------------------------------------------------
Case = Callable[[Endpoints], Awaitable[tuple[list[str], list[str]]]]
CASES: dict[str, Case] = {}


def case(fn: Callable[[Session], Awaitable[list[str]]], cmd: Callable[[], pb.BaseCommand] = lambda: connect(SUPER_USER),
         ) -> Case:
    """A case on a connection opened with ``cmd`` (by default the super user's expiring token, refresh supported)."""
    async def run(e: Endpoints) -> tuple[list[str], list[str]]:
        session, _ = await Session.connected(e.port, cmd())
        try:
            return await fn(session), session.notes
        finally:
            await session.close()
    return run


def challenged_then(answer: Callable[[], pb.BaseCommand] | None, then: Callable[[Session], Awaitable[list[str]]]
                    | None = None) -> Callable[[Session], Awaitable[list[str]]]:
    """Await the challenge, send ``answer`` (None: none), then ``then`` (by default: every frame until a close)."""
    async def run(s: Session) -> list[str]:
        seen = [await s.seen(CHALLENGE_WAIT_S)]
        if answer is not None:
            s.send(answer())
        return seen + (await then(s) if then is not None else await s.until_closed())
    return run


async def still_serves(s: Session) -> list[str]:
    """Whether the connection still serves requests (a PRODUCER answered), then what follows for a while."""
    answer = await s.producer(topic("after"))
    return [answer] if answer == "closed" else [answer, *await s.until_closed()]


async def refreshed_twice(s: Session) -> list[str]:
    """After an answer with a token that expires too: its own challenge, answered for good; requests served."""
    second = await s.seen(CHALLENGE_WAIT_S)
    s.send(auth_response(fresh()))
    return [second, *await still_serves(s)]


# Topics loaded (with subscription "sub") before the cases run, where a case's requests must be quick: before its token
# expires, or before the next refresh check closes a connection whose challenge is pending (Pulsar's standalone takes
# seconds to load a bundle or a topic the first time).
WARM = {what: topic(what) for what in ("pending", "open without refresh", "open unanswered")}


async def warm_up(e: Endpoints) -> None:
    s, _ = await Session.connected(e.port, connect(SUPER_USER, None))
    try:
        for i, name in enumerate(WARM.values()):
            assert await s.producer(name, i) == "PRODUCER_SUCCESS", name
            assert await s.subscribe(name, i) == "SUCCESS", name
    finally:
        await s.close()


async def requests_while_pending(s: Session) -> list[str]:
    seen = [await s.seen(CHALLENGE_WAIT_S), await s.producer(WARM["pending"]), await s.lookup(WARM["pending"])]
    s.send(auth_response(fresh()))
    return seen + await still_serves(s)


def unprompted(answer: Callable[[], pb.BaseCommand]) -> Callable[[Session], Awaitable[list[str]]]:
    async def run(s: Session) -> list[str]:
        s.send(answer())
        return await still_serves(s)
    return run


def with_producer_and_consumer(name: str) -> Callable[[Session], Awaitable[list[str]]]:
    """A producer and a consumer open when the token expires; the challenge (if any) never answered."""
    async def run(s: Session) -> list[str]:
        seen = [await s.producer(name), await s.subscribe(name)]
        return seen + await s.until_closed(CHALLENGE_WAIT_S + CLOSE_WAIT_S)
    return run


CASES.update({
    "fresh token (expiring too), then requests": case(challenged_then(
        lambda: auth_response(expiring_token(SUPER_USER, EXPIRES_S).encode()), refreshed_twice)),
    "expired token": case(challenged_then(lambda: auth_response(expired_token()))),
    "token of another key": case(challenged_then(lambda: auth_response(token(SUPER_USER, b"k" * 50).encode()))),
    "malformed token": case(challenged_then(lambda: auth_response(b"not-a-jwt"))),
    "empty token": case(challenged_then(lambda: auth_response(b""))),
    "token of another role": case(challenged_then(lambda: auth_response(fresh(OTHER_ROLE)), still_serves)),
    "another method name": case(challenged_then(lambda: auth_response(fresh(), "basic"), still_serves)),
    "no method name": case(challenged_then(lambda: auth_response(fresh(), None), still_serves)),
    "no auth data": case(challenged_then(lambda: auth_response(None), still_serves)),
    "no response at all": case(challenged_then(lambda: pb.BaseCommand(
        type=T.AUTH_RESPONSE, authResponse=pb.CommandAuthResponse(client_version="x")), still_serves)),
    "never answered": case(challenged_then(None)),
    "requests while the challenge is pending": case(requests_while_pending),
    "client without refresh support": case(lambda s: s.until_closed(CHALLENGE_WAIT_S),
                                           lambda: connect(SUPER_USER, refresh=False)),
    "unprompted fresh token": case(unprompted(lambda: auth_response(fresh())), lambda: connect(SUPER_USER, None)),
    "unprompted token of another role": case(unprompted(lambda: auth_response(fresh(OTHER_ROLE))),
                                             lambda: connect(SUPER_USER, None)),
    "unprompted expired token": case(unprompted(lambda: auth_response(expired_token())),
                                     lambda: connect(SUPER_USER, None)),
    "producer and consumer, client without refresh support": case(
        with_producer_and_consumer(WARM["open without refresh"]),
        lambda: connect(SUPER_USER, OPEN_EXPIRES_S, refresh=False)),
    "producer and consumer, challenge never answered": case(with_producer_and_consumer(WARM["open unanswered"]),
                                                             lambda: connect(SUPER_USER, OPEN_EXPIRES_S)),
})


async def before_connect(e: Endpoints) -> tuple[list[str], list[str]]:
    """AUTH_RESPONSE as a connection's first command."""
    s = await Session.open(e.port)
    try:
        s.send(auth_response(fresh()))
        return await s.until_closed(), s.notes
    finally:
        await s.close()


def protocol_versions(version: int) -> Case:
    """CONNECT at protocol ``version``: the version CONNECTED answers, then the challenge's."""
    async def run(e: Endpoints) -> tuple[list[str], list[str]]:
        s, connected = await Session.connected(e.port, connect(SUPER_USER, protocol_version=version))
        try:
            return [f"CONNECTED protocol_version={connected.connected.protocol_version}",
                    await s.seen(CHALLENGE_WAIT_S)], s.notes
        finally:
            await s.close()
    return run


CASES.update({
    "AUTH_RESPONSE before CONNECT": before_connect,
    "protocol version 99 at CONNECT": protocol_versions(99),
    "protocol version 10 at CONNECT": protocol_versions(10),
})


# -- the official client -----------------------------------------------------------------------------------------------
def across_expiries(url: str, role: str, name: str, expiries: int, wait_s: float,
                    publisher: Callable[[str], object]) -> tuple[str, ...]:
    """pulsar-client at ``url`` with a supplier of ``role``'s tokens that expire: it is asked for one at CONNECT and
    for each challenge. Across ``expiries`` expiries (each awaited ``wait_s`` at most): whether every send succeeds,
    the producer keeps its connection (``publisher``: the topic's producer as the admin stats show it) and the
    consumer gets every message."""
    calls: list[str] = []

    def supplier() -> str:
        calls.append("token")
        return expiring_token(role, EXPIRES_S)

    client = pulsar.Client(url, authentication=pulsar.AuthenticationToken(supplier), operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(name, "sub")
        producer = client.create_producer(name)
        producer.send(b"0")
        since = publisher(name)
        sent = 1
        for supplied in range(len(calls) + 1, len(calls) + 1 + expiries):
            wait_for(lambda: len(calls) >= supplied, wait_s, "the supplier asked again (a challenge)")  # noqa: B023
            producer.send(str(sent).encode())
            sent += 1
        received = sorted(int(consumer.receive(int(WAIT_S * 1000)).data()) for _ in range(sent))
        return (f"sent {sent}", f"received all: {received == list(range(sent))}",
                f"producer kept its connection: {publisher(name) == since}")
    finally:
        client.close()


def official_client(e: Endpoints) -> tuple[list[str], list[str]]:
    """``across_expiries`` on the broker itself, three expiries."""
    seen = across_expiries(f"pulsar://127.0.0.1:{e.port}", SUPER_USER, topic("official"), 3, CHALLENGE_WAIT_S,
                           lambda name: publisher(e, name))
    return list(seen), []


def publisher(e: Endpoints, name: str) -> tuple[str, str]:
    """The topic's one producer's (address, connectedSince), from the admin stats."""
    reply = call(e.web_url, "GET", f"/admin/v2/persistent/{name.removeprefix('persistent://')}/stats", SUPER_USER)
    assert reply.status == 200, reply
    publishers = json.loads(reply.text)["publishers"]
    assert len(publishers) == 1, publishers
    return publishers[0]["address"], publishers[0]["connectedSince"]


def ask_everything(e: Endpoints) -> Answers:
    async def run() -> Answers:
        await warm_up(e)
        names = list(CASES)
        results = await asyncio.gather(*(CASES[n](e) for n in names), return_exceptions=True)
        out: Answers = {}
        for n, result in zip(names, results, strict=True):
            out[n] = ((f"failed: {result!r}",), "") if isinstance(result, BaseException) else \
                (tuple(result[0]), " | ".join(result[1]))
        return out

    answers = asyncio.run(run())
    seen, notes = official_client(e)
    answers["official client with a token supplier"] = (tuple(seen), " | ".join(notes))
    return answers


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> dict[str, Answers]:
    return ask_both(tmp_path_factory.mktemp("pulsar-refresh"), pki, ask_everything,
                    {"authenticationRefreshCheckSeconds": REFRESH_CHECK_S})


# Where ours answers otherwise on purpose: key -> why.
DIFFERENCES: dict[str, str] = {
    # Pulsar 4.0.7 answers 21 to both (its own protocol version); ours speaks protocol 20 at most
    # (broker/protocol/limits.py MAX_PROTOCOL_VERSION) and says so in both: the same rule, the lesser of the client's
    # and the broker's (test_the_challenge_speaks_the_connected_version).
    "protocol version 99 at CONNECT": "ours speaks protocol version 20 at most, Pulsar 4.0.7 21",
    # Pulsar: ERROR AuthenticationError "Failed to authenticate", then the close. That ERROR comes from a
    # NullPointerException (its handleAuthResponse looks at no state: there is no authentication state before CONNECT;
    # its log says "operation=authentication-refresh ... NullPointerException"). Ours applies its malformed-input
    # policy (broker/connection.py): any command but CONNECT before CONNECT closes the connection. Closed either way.
    "AUTH_RESPONSE before CONNECT": "Pulsar's ERROR there is the accident of a NullPointerException",
}

KEYS = [*CASES, "official client with a token supplier"]


def answers_racing_the_close_left_out(frames: tuple[str, ...]) -> tuple[str, ...]:
    """``frames`` without what came between an ERROR AuthenticationError and the close that follows it. Both brokers
    answer a refused token with that ERROR and then close (Pulsar's ServerCnx.authenticationFailed: the ERROR written,
    the close when the write completes); a request the client had sent right after its token may be answered in
    between by Pulsar (a CI run saw a LOOKUP_RESPONSE there, other runs none) and is not by ours, which closes at once.
    The refusal and the close are still compared; a connection that goes on serving after the ERROR ends in no close
    and is compared whole."""
    if len(frames) < 2 or frames[-1] != "closed" or "ERROR AuthenticationError" not in frames[:-1]:
        return frames
    refused = len(frames) - 1 - frames[::-1].index("ERROR AuthenticationError")
    return (*frames[:refused + 1], "closed")


@pytest.mark.parametrize("key", KEYS)
def test_refresh_answer_is_pulsars(answers: dict[str, Answers], key: str) -> None:
    (ours, our_notes), (theirs, their_notes) = answers["ours"][key], answers["pulsar"][key]
    if key in DIFFERENCES:
        assert ours != theirs, f"ours now answers as Pulsar: {ours}; remove it from DIFFERENCES"
        return
    assert answers_racing_the_close_left_out(ours) == answers_racing_the_close_left_out(theirs), \
        f"ours {ours} ({our_notes}); Pulsar's {theirs} ({their_notes})"


@pytest.mark.parametrize("broker", ["pulsar", "ours"])
@pytest.mark.parametrize("version", [10, 99])
def test_the_challenge_speaks_the_connected_version(answers: dict[str, Answers], broker: str, version: int) -> None:
    connected, challenge = answers[broker][f"protocol version {version} at CONNECT"][0]
    said = connected.removeprefix("CONNECTED protocol_version=")
    assert f"protocol_version={said} " in challenge, (connected, challenge)


def test_the_comparison_saw_challenges(answers: dict[str, Answers]) -> None:
    """Pulsar's side really challenged expired tokens (a run whose tokens never expired would compare little)."""
    theirs = answers["pulsar"]
    assert theirs["never answered"][0][0].startswith("AUTH_CHALLENGE"), theirs["never answered"]
    assert theirs["never answered"][0][-1] == "closed"
