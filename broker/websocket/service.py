"""The WebSocket API on the HTTP port (``webSocketServiceEnabled``), as Apache Pulsar's broker serves it:
``/ws/v2/producer/{domain}/{tenant}/{namespace}/{topic}``, ``/ws/v2/consumer/.../{topic}/{subscription}``,
``/ws/v2/reader/.../{topic}`` and ``/ws/v3/consumer/{subscription}?topics=...``.

Opening a session, in Pulsar's handlers' order: the topic's name from the path, the query options (400 "Invalid
query params: ..."), authentication (the broker's providers on the request: the Authorization header, or the
``token`` query parameter a browser's WebSocket can send; 401 "Failed to authenticate"), authorization (produce, or
consume with the subscription, for the role; 403 "Not authorized"), then the producer or the subscription, made on
the session's own connection to the topic's owner (client.py; one per partition of a partitioned topic); a refusal
there is an HTTP error too (409 for a busy
producer or consumer, 404 for a topic that does not exist, 500 otherwise, with the broker's words), and only then is
the connection upgraded. A session's bad input (not JSON, bad base64, unknown ids) is answered on that session alone
(an error ack, or the session closed); other sessions and the broker go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote

from aiohttp import web

from broker.auth.authorization import TopicOperation
from broker.auth.service import METHOD_HEADER
from broker.errors import AuthenticationError, InvalidTopicNameError
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.frames import Frame
from broker.service.peer_link import BrokerLink, LinkError, RemoteError
from broker.service.remote_producer import RemoteSettings, own_broker_settings
from broker.service.topic_watchers import compile_pattern
from broker.tasks import OwnedTasks
from broker.topic_name import TopicName
from broker.websocket.client import session_link
from broker.websocket.consumer import Consumers, ConsumerSession, Gate, reader_subscription
from broker.websocket.messages import (
    CLOSE_BAD_COMMAND,
    CLOSE_BAD_COMMAND_REASON,
    BadRequest,
    parse_producer_message,
    producer_ack,
)
from broker.websocket.options import (
    ConsumerOptions,
    OptionError,
    ReaderOptions,
    consumer_options,
    producer_options,
    reader_options,
)
from broker.websocket.pattern import PatternTopics
from broker.websocket.producer import PartitionedProducer, PartitionRouter, ProducerSession
from broker.websocket.session import CloseSession, Growth, Outbox, serve

if TYPE_CHECKING:
    from broker.auth import Security
    from broker.config import BrokerConfig


class Ports(Protocol):
    """The serving process's bound ports (0: that listener is off)."""

    @property
    def port(self) -> int: ...

    @property
    def tls_port(self) -> int: ...


class WebSocketContext(Protocol):
    """What the WebSocket service needs of the web service's context (broker.admin.context.AdminContext meets it)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def security(self) -> Security: ...

    @property
    def process(self) -> Ports: ...

log = logging.getLogger(__name__)
T = pb.BaseCommand.Type

PATH_PREFIX = "/ws/v2/"
# A partitioned topic's partitions are asked again this often (the Java client's autoUpdatePartitionsInterval).
PARTITIONS_CHECK_S = 60.0
# The HTTP statuses of a refusal while the producer or the subscription is made (Pulsar's getErrorCode).
_STATUS: dict[int, int] = {
    pb.ProducerBusy: 409, pb.ConsumerBusy: 409, pb.IncompatibleSchema: 409, pb.ProducerFenced: 409,
    pb.AuthenticationError: 401, pb.AuthorizationError: 403, pb.TopicNotFound: 404,
    pb.ProducerBlockedQuotaExceededError: 503, pb.ProducerBlockedQuotaExceededException: 503,
    pb.TopicTerminatedError: 503, pb.TooManyRequests: 429,
}


class WebSocketService:
    """The three endpoints and the sessions they open (each owned here: closed with the web service)."""

    def __init__(self, ctx: WebSocketContext) -> None:
        self.ctx = ctx
        self.sessions = OwnedTasks("websocket sessions")
        self._sockets: set[web.WebSocketResponse] = set()

    def register(self, router: web.UrlDispatcher) -> None:
        router.add_get(PATH_PREFIX + "producer/{tail:.*}", self.producer)
        router.add_get(PATH_PREFIX + "consumer/{tail:.*}", self.consumer)
        router.add_get(PATH_PREFIX + "reader/{tail:.*}", self.reader)
        router.add_get("/ws/v3/consumer/{tail:.*}", self.multi_topic_consumer)

    async def close(self) -> None:
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await ws.close(code=1001, message=b"broker shutting down")
        await self.sessions.close()

    # -- the endpoints ---------------------------------------------------------------------------------------------
    async def producer(self, request: web.Request) -> web.StreamResponse:
        topic = _topic(request, subscription=False)
        self._check_access(request, topic, TopicOperation.PRODUCE, "")
        options = _options(lambda: producer_options(request.query))
        outbox = Outbox()
        name = str(topic.full)
        partitions, first = await self._partitions(name, "producer")
        if partitions == 0:
            sessions = [ProducerSession(first, name, options, outbox.put)]
        else:
            sessions = [ProducerSession(self._link(f"{name}-partition-{i}"), f"{name}-partition-{i}", options,
                                        outbox.put, partition=i) for i in range(partitions)]
        for session in sessions:
            session.link.on_command = _producer_commands(session)

        async def start_all() -> None:
            # (a partitioned topic's producers under one name: the first partition's, as the Java client's)
            await sessions[0].start()
            for session in sessions[1:]:
                session.producer_name = sessions[0].producer_name
                await session.start()

        await self._start([s.link for s in sessions], start_all(), "producer")
        sender: ProducerSession | PartitionedProducer = sessions[0]
        growth = Growth(f"websocket producer {name}")
        if partitions > 0:
            sender = router = PartitionedProducer(sessions, PartitionRouter(partitions, options))

            async def add_partitions(_topic: str, old: int, new: int, ws: web.WebSocketResponse) -> None:
                for i in range(old, new):  # (under the producer's name, as the Java client's)
                    session = ProducerSession(self._link(f"{name}-partition-{i}"), f"{name}-partition-{i}",
                                              options, outbox.put, partition=i)
                    session.producer_name = sessions[0].producer_name
                    session.link.on_command = _producer_commands(session)
                    sessions.append(session)
                    await growth.add(session.link, session.start, session.restart, ws)
                router.router.partitions = new

        async def on_text(text: str) -> None:
            try:
                message = parse_producer_message(text)
            except BadRequest as exc:
                outbox.put(producer_ack(None, getattr(exc, "context", None), (exc.code, str(exc))))
                return
            await sender.send(message)

        async def close() -> None:
            await growth.close()
            for session in sessions:
                await session.close()

        follow = None if partitions == 0 else growth.runs(self._partitions_follower({name: partitions},
                                                                                   add_partitions))
        return await serve(request, self.ctx.config, self._sockets, outbox, [(s.link, s.restart) for s in sessions],
                           on_text, close, on_open=follow)

    async def consumer(self, request: web.Request) -> web.StreamResponse:
        topic, subscription = _topic_and_subscription(request)
        options = _options(lambda: consumer_options(request.query, str(topic.full), subscription))
        self._check_access(request, topic, TopicOperation.CONSUME, subscription)
        return await self._consume(request, [topic], subscription, options, None)

    async def multi_topic_consumer(self, request: web.Request) -> web.StreamResponse:
        """``/ws/v3/consumer/{subscription}?topics=a,b``: one subscription on each topic of the list (the Java
        client's multi-topic consumer, as Pulsar's MultiTopicConsumerHandler makes it), their messages on the one
        WebSocket; the consume permission is needed on every topic. ``?topicsPattern=...``: on each persistent topic
        of the pattern's namespace that matches it, those made later too (pattern.py); the consume permission is
        asked for the pattern as a topic name (its namespace's grants), as Pulsar's handler asks."""
        subscription, topics, pattern = _multi_topic_request(request)
        options = _options(lambda: consumer_options(request.query, str(topics[0].full), subscription))
        for topic in topics:
            self._check_access(request, topic, TopicOperation.CONSUME, subscription)
        if pattern is not None:
            return await self._consume_pattern(request, pattern, topics[0], subscription, options)
        return await self._consume(request, topics, subscription, options, None)

    async def reader(self, request: web.Request) -> web.StreamResponse:
        topic = _topic(request, subscription=False)
        options = _options(lambda: reader_options(request.query))
        self._check_access(request, topic, TopicOperation.CONSUME, "")
        return await self._consume(request, [topic], reader_subscription(), None, options)

    async def _consume(self, request: web.Request, topics: list[TopicName], subscription: str,
                       options: ConsumerOptions | None, reader: ReaderOptions | None) -> web.StreamResponse:
        """The sessions of a consumer or a reader WebSocket: one per topic, or per partition of a partitioned one."""
        what = "reader" if reader is not None else "consumer"
        outbox = Outbox()
        names: list[str] = []
        links: list[BrokerLink] = []
        parted: dict[str, int] = {}  # (the partitioned topics: partitions added later are followed)
        try:
            for topic in topics:
                name = str(topic.full)
                partitions, first = await self._partitions(name, what)
                if partitions > 0 and reader is not None and reader.start not in ("earliest", "latest"):
                    # (the Java client's refusal, in its words: Pulsar's reader of a partitioned topic starts at
                    # the earliest or the latest message only)
                    raise _http_error(500, "Failed to create reader: The partitioned topic startMessageId is "
                                           "illegal")
                if partitions == 0:
                    names.append(name)
                    links.append(first)
                else:
                    parted[name] = partitions
                    parts = [f"{name}-partition-{i}" for i in range(partitions)]
                    names += parts
                    links += [self._link(n) for n in parts]
        except BaseException:
            for link in links:
                await link.close()
            raise
        gate = Gate.of(options, reader)
        if len(topics) > 1:  # (message ids do not name their topic: each is remembered with its session)
            gate.owners = {}
        sessions = [self._consumer_session(n, subscription, options, reader, outbox, gate, link)
                    for link, n in zip(links, names, strict=True)]

        async def start_all() -> None:
            for session in sessions:
                await session.start()

        try:
            await self._start(links, start_all(), what)
        except BadRequest as exc:  # (a reader's start message id)
            for link in links:
                await link.close()
            raise _http_error(500, f"Failed to create reader: {exc}") from None
        consumers = Consumers(sessions, outbox.put, gate)  # (the same list: sessions added later are in both)
        growth = Growth(f"websocket {what} {names[0]}")
        initial = [(s.link, s.restart) for s in sessions]

        async def add_partitions_of(topic: str, old: int, new: int, ws: web.WebSocketResponse) -> None:
            for i in range(old, new):
                session = self._consumer_session(f"{topic}-partition-{i}", subscription, options, reader, outbox,
                                                 gate)
                consumers.sessions.append(session)  # (after the others: a partition's index is its place)
                await growth.add(session.link, session.start, session.restart, ws)

        async def close() -> None:
            await growth.close()
            for session in sessions:
                await session.close()

        follow = growth.runs(self._partitions_follower(parted, add_partitions_of)) if parted else None
        return await serve(request, self.ctx.config, self._sockets, outbox, initial, _consumer_text(consumers),
                           close, on_open=follow)

    async def _consume_pattern(self, request: web.Request, pattern: str, topic: TopicName, subscription: str,
                               options: ConsumerOptions) -> web.StreamResponse:
        """A consumer of the topics matching ``pattern``: one session per topic (partition-level names), made and
        ended as the broker's topic-list watcher tells topics made and deleted while the WebSocket runs."""
        try:
            compile_pattern(pattern)
        except re.error as exc:
            raise _http_error(400, f"Invalid query params: {exc}") from None
        outbox = Outbox()
        gate = Gate.of(options, None)
        gate.owners = {}  # (message ids do not name their topic)
        watch = PatternTopics(self._settings(), topic.namespace, pattern)
        try:
            names = await watch.start()
        except LinkError as exc:
            await watch.close()
            raise _refusal(exc, "consumer") from None
        sessions = {name: self._consumer_session(name, subscription, options, None, outbox, gate) for name in names}

        async def start_all() -> None:
            for session in sessions.values():
                await session.start()

        try:
            await self._start([s.link for s in sessions.values()], start_all(), "consumer")
        except BaseException:
            await watch.close()
            raise
        consumers = Consumers(list(sessions.values()), outbox.put, gate)
        growth = Growth(f"websocket pattern consumer {pattern}")

        async def follow(ws: web.WebSocketResponse) -> None:
            for session in sessions.values():
                growth.keep(session.link, session.restart, ws)
            while True:
                try:
                    made, deleted = await watch.changes()
                except LinkError as exc:
                    log.warning("WebSocket pattern consumer of %s: %s", pattern, exc)
                    await ws.close(code=1011, message=f"Topic watcher lost: {exc}".encode()[:120])
                    return
                for name in deleted:
                    if name in sessions:
                        session = sessions.pop(name)
                        await session.close()
                        await growth.end(session.link)
                        consumers.remove(session)
                for name in made:
                    if name not in sessions:
                        session = sessions[name] = self._consumer_session(name, subscription, options, None, outbox,
                                                                          gate)
                        consumers.sessions.append(session)
                        await growth.add(session.link, session.start, session.restart, ws)

        async def close() -> None:
            await growth.close()
            for session in sessions.values():
                await session.close()
                await session.link.close()  # (also those of a WebSocket that ended before it was followed)
            await watch.close()

        return await serve(request, self.ctx.config, self._sockets, outbox, [], _consumer_text(consumers), close,
                           on_open=growth.runs(follow))

    def _consumer_session(self, name: str, subscription: str, options: ConsumerOptions | None,
                          reader: ReaderOptions | None, outbox: Outbox, gate: Gate,
                          link: BrokerLink | None = None) -> ConsumerSession:
        """A consumer or reader session of a WebSocket, on ``link`` or, by default, a link of its own (not open
        yet)."""
        link = link if link is not None else self._link(name)
        session = ConsumerSession(link, name, subscription, options, reader, outbox.put, self._link, gate=gate)
        link.on_command = _consumer_commands(session)
        return session

    def _partitions_follower(self, parted: dict[str, int],
                             add: Callable[[str, int, int, web.WebSocketResponse], Awaitable[None]]
                             ) -> Callable[[web.WebSocketResponse], Coroutine[Any, Any, None]]:
        """What follows the partitioned topics of a WebSocket (topic -> partitions): every PARTITIONS_CHECK_S, as the
        Java client's autoUpdatePartitions, each topic's partitions asked again, and ``add(topic, old, new, ws)``
        told of any added."""
        async def follow(ws: web.WebSocketResponse) -> None:
            known = dict(parted)
            while True:
                await asyncio.sleep(PARTITIONS_CHECK_S)
                counts = await self._partition_counts(list(known))
                for topic, count in known.items():
                    now = counts.get(topic)
                    if now is not None and now > count:
                        known[topic] = now
                        await add(topic, count, now, ws)
        return follow

    async def _partition_counts(self, topics: list[str]) -> dict[str, int]:
        """The topics' partitions now, all asked on one connection; a topic the broker could not be asked about
        now is left out (asked again at the next check)."""
        try:
            link = self._link(topics[0])
        except web.HTTPException:  # (the broker client's settings are not usable now)
            return {}
        counts: dict[str, int] = {}
        try:
            for topic in topics:
                try:
                    counts[topic] = await link.partitions(topic)
                except LinkError as exc:
                    log.debug("WebSocket: partitions of %s not known now: %s", topic, exc)
        finally:
            await link.close()
        return counts

    # -- shared steps ------------------------------------------------------------------------------------------------
    async def _partitions(self, topic: str, what: str) -> tuple[int, BrokerLink]:
        """The topic's partitions (PARTITIONED_METADATA, as the clients ask first), and a link to the topic: still
        connected when it is not partitioned (its session's), closed when it is (each partition gets its own)."""
        link = self._link(topic)
        try:
            partitions = await link.partitions()
        except LinkError as exc:
            await link.close()
            raise _refusal(exc, what) from None
        if partitions > 0:
            await link.close()
        return partitions, link

    async def _start(self, links: list[BrokerLink], create: Coroutine[Any, Any, None], what: str) -> None:
        """Connect each link and make the producers or the subscriptions (``create``); an HTTP error when refused
        (every link then closed)."""
        try:
            for link in links:
                await link.open()
            await create
        except LinkError as exc:
            for link in links:
                await link.close()
            raise _refusal(exc, what) from None
        except BaseException:
            create.close()
            for link in links:
                await link.close()
            raise

    def _check_access(self, request: web.Request, topic: TopicName, op: TopicOperation, subscription: str) -> None:
        """AbstractWebSocketHandler.checkAuth: 401 "Failed to authenticate", 403 "Not authorized"."""
        security = self.ctx.security
        role: str | None = None
        if security.authentication.enabled:
            authorization = request.headers.get("Authorization")
            if authorization is None and "token" in request.query:
                token = request.query["token"]
                authorization = token if token.startswith("Bearer ") else f"Bearer {token}"
            transport = request.transport
            peer_cert = transport.get_extra_info("peercert") if transport is not None else None
            try:
                role = security.authentication.authenticate_http(authorization, peer_cert or None,
                                                                 request.headers.get(METHOD_HEADER))
            except AuthenticationError as exc:
                log.info("WebSocket %s from %s: authentication failed: %s", request.path, request.remote, exc.reason)
                raise _http_error(401, "Failed to authenticate") from None
        if security.authorization.enabled and not security.authorization.allows(topic, op, role, subscription):
            log.info("WebSocket %s from %s: role %s is not authorized", request.path, request.remote, role)
            raise _http_error(403, "Not authorized")

    def _settings(self) -> RemoteSettings:
        process = self.ctx.process
        return own_broker_settings(self.ctx.config, process.port, process.tls_port)

    def _link(self, topic: str) -> BrokerLink:
        try:
            settings = self._settings()
        except RemoteError as exc:
            raise _http_error(500, f"Failed to create producer/consumer: {exc}") from None
        return session_link(settings, topic, self.ctx.config.maxMessageSize)


def _refusal(exc: LinkError, what: str) -> web.HTTPException:
    """The broker's refusal of a session's producer or subscription as Pulsar's handlers answer it (their
    getErrorCode / getErrorMessage; a reader's failures all 500)."""
    if what == "reader":
        return _http_error(500, f"Failed to create reader: {exc}")
    status = _STATUS.get(exc.code, 500) if exc.code is not None else 500
    return _http_error(status, f"Failed to create producer/consumer: {exc}")


def _consumer_text(consumers: Consumers) -> Callable[[str], Awaitable[None]]:
    """What a consumer or reader WebSocket does with the client's text: one command, or the session closed (1011)
    for text that is not one."""
    async def on_text(text: str) -> None:
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict):
                raise ValueError("a command is a JSON object")
        except ValueError:
            if consumers.reader:  # (Pulsar's reader handler closes the session, then counts a message taken)
                await consumers.on_command({})
            raise CloseSession(CLOSE_BAD_COMMAND, CLOSE_BAD_COMMAND_REASON) from None
        try:
            await consumers.on_command(doc)
        except (BadRequest, LinkError) as exc:
            raise CloseSession(CLOSE_BAD_COMMAND, f"{CLOSE_BAD_COMMAND_REASON}: {exc}") from None
    return on_text


def _producer_commands(session: ProducerSession) -> Callable[[Frame], None]:
    def on_command(frame: Frame) -> None:
        session.on_command(frame.command)
    return on_command


def _consumer_commands(session: ConsumerSession) -> Callable[[Frame], None]:
    """What a consumer's link hands its session: messages, the end of the topic, the broker closing it."""
    def on_command(frame: Frame) -> None:
        cmd = frame.command
        if cmd.type == T.MESSAGE and frame.payload is not None:
            session.on_message(cmd.message, frame.payload)
        elif cmd.type == T.REACHED_END_OF_TOPIC:
            session.on_end_of_topic()
        elif cmd.type == T.CLOSE_CONSUMER:
            session.link.lost(LinkError("the broker closed the consumer"))
    return on_command


def _http_error(status: int, text: str) -> web.HTTPException:
    cls = {400: web.HTTPBadRequest, 401: web.HTTPUnauthorized, 403: web.HTTPForbidden, 404: web.HTTPNotFound,
           409: web.HTTPConflict, 429: web.HTTPTooManyRequests, 503: web.HTTPServiceUnavailable,
           501: web.HTTPNotImplemented, 504: web.HTTPGatewayTimeout}.get(status, web.HTTPInternalServerError)
    # (the reason: the web service's JSON error middleware answers {"reason": ...} with it)
    return cls(reason=text.replace("\r", " ").replace("\n", " "))


def _options(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except OptionError as exc:
        raise _http_error(400, f"Invalid query params: {exc}") from None


def _parts(request: web.Request) -> list[str]:
    """The path's segments after /ws/v2/{kind}/ (raw: a topic's name may hold an encoded '/')."""
    raw = request.raw_path.split("?", 1)[0]
    return raw.split("/")[4:]


def _topic_from(parts: list[str]) -> TopicName:
    """AbstractWebSocketHandler.extractTopicName: domain, tenant, namespace, then the topic's name (its segments
    joined by '/', empty ones skipped), URL-decoded. 400 when it is not a topic name."""
    if len(parts) < 4 or parts[0] not in ("persistent", "non-persistent"):
        raise _http_error(400, "Invalid query params: Invalid topic name format")
    local = "/".join([parts[3]] + [p for p in parts[4:] if p])
    name = f"{parts[0]}://{unquote(parts[1])}/{unquote(parts[2])}/{unquote(local)}"
    try:
        return TopicName.parse(name)
    except InvalidTopicNameError as exc:
        raise _http_error(400, f"Invalid query params: {exc}") from None


def _topic(request: web.Request, subscription: bool) -> TopicName:
    return _topic_from(_parts(request))


def _multi_topic_request(request: web.Request) -> tuple[str, list[TopicName], str | None]:
    """MultiTopicConsumerHandler's reading of ``/ws/v3/consumer/{subscription}``: the subscription (not empty),
    then ``topics`` (a comma-separated list of names, short ones in public/default) or ``topicsPattern`` (a regex,
    also read as a topic name: its namespace and the name permissions are asked for); 400 with Pulsar's words
    otherwise. The topics, or the pattern as a topic name and the pattern."""
    raw = request.raw_path.split("?", 1)[0].split("/")
    if len(raw) < 5:
        raise _http_error(400, "Invalid query params: Invalid topic name format")
    if not raw[4]:
        raise _http_error(400, "Invalid query params: Empty subscription name")
    query = request.query
    if "topicsPattern" not in query and "topics" not in query:
        raise _http_error(400, "Invalid query params: Should set topics or topicsPattern")
    if "topicsPattern" in query and "topics" in query:
        raise _http_error(400, "Invalid query params: Topics must be null when use topicsPattern")
    pattern = query.get("topicsPattern")
    try:
        if pattern is not None:
            return unquote(raw[4]), [TopicName.parse(pattern)], pattern
        return unquote(raw[4]), [TopicName.parse(name) for name in query["topics"].split(",")], None
    except InvalidTopicNameError as exc:
        raise _http_error(400, f"Invalid query params: {exc}") from None


def _topic_and_subscription(request: web.Request) -> tuple[TopicName, str]:
    """ConsumerHandler.extractSubscription: exactly /ws/v2/consumer/{domain}/{tenant}/{ns}/{topic}/{subscription}."""
    parts = _parts(request)
    if len(parts) != 5:
        raise _http_error(400, "Invalid query params: Invalid topic name format")
    if not parts[4]:
        raise _http_error(400, "Invalid query params: Empty subscription name")
    return _topic_from(parts[:4]), unquote(parts[4])
