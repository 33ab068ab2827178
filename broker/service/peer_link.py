"""Every binary connection this broker opens to a broker, its own or another cluster's: the replicator's producer on
a remote cluster (remote_producer.py), the transaction buffer client (txn_buffer_client.py) and the WebSocket
service's sessions (broker/websocket) are all clients of a broker, and connect, ask and answer the same way.

- ``PeerConnection``: one connection to one broker URL (the first of its hosts that answers): CONNECT with the
  broker client's credentials, requests answered by request id, keep-alive pings and authentication challenges
  answered, every other command handed to ``on_command``, its loss reported once to ``on_lost``;
- ``BrokerLink``: the connection to the broker owning a topic, found by LOOKUP from a service URL as the official
  clients find it (redirects followed, with their authoritative flag), and found again after a loss (``reopen``);
- ``CommandReader``: the commands arriving on the connection, decoded in order from the stream (any chunking);
  the end of the stream raises the connection's own error;
- ``close_writer``: a connection closed without waiting for ever on a broker that does not read it;
- ``connect_command``: the CONNECT, with the broker client's credentials;
- ``keepalive_reply``: the answer to what the other broker may ask of any client at any time: a PING (a PONG)
  and, with authentication, an AUTH_CHALLENGE.

The credentials are a function called when they are sent (``Credentials``): a token in a file is read again for
each connection and each challenge, as Pulsar's broker clients do (its token supplier reads the file each time), so a
token rotated in its file, or credentials changed with update-dynamic-config, reach live links at the next challenge
and new links at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from broker.auth.tls import client_context
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.frames import Frame, FrameDecoder
from broker.protocol.limits import MAX_PROTOCOL_VERSION, max_frame_size

if TYPE_CHECKING:
    from broker.service.remote_producer import RemoteSettings

T = pb.BaseCommand.Type
# The broker client's (auth method name, auth data) as they are now; the method None: no credentials.
Credentials = Callable[[], tuple[str | None, bytes]]

# Our own bound on a frame from another broker: lookups, receipts and small answers; Pulsar's default maximum
# message size (5 MB) plus the frame's overhead, as a client of ours would accept.
FRAME_LIMIT = max_frame_size(5 * 1024 * 1024)
READ_SIZE = 65536  # bytes asked of the stream at a time
CLOSE_TIMEOUT_S = 5.0  # for the unsent bytes of a connection being closed
MAX_LOOKUP_HOPS = 8  # redirects followed before giving up (the clients' own limits are of this order)
CONNECT_TIMEOUT_S = 10.0  # to connect and be CONNECTED (the official clients' connectionTimeout)


class RemoteError(Exception):
    """Another broker refused or broke off, or cannot be reached with these settings (its user retries)."""


class LinkError(RemoteError):
    """A request refused, or the connection failed; ``code``: the wire ServerError when the broker said one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


Address = tuple[str, int, bool]  # host, port, TLS


def addresses(url: str) -> list[Address]:
    """(host, port, TLS) of each broker a pulsar:// or pulsar+ssl:// URL names: Pulsar's service URLs may name
    several (``pulsar://host1:6650,host2:6650``), as a cluster's brokerServiceUrl may. RemoteError for a URL that
    cannot be used."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("pulsar", "pulsar+ssl"):
        raise RemoteError(f"unsupported broker service URL {url!r}")
    tls = scheme == "pulsar+ssl"
    out = []
    for host_port in rest.split("/", 1)[0].split(","):
        try:
            parsed = urlparse(f"{scheme}://{host_port.strip()}")
            host, port = parsed.hostname, parsed.port
        except ValueError as exc:  # (a port that is not a number, or out of range)
            raise RemoteError(f"unsupported broker service URL {url!r}: {exc}") from None
        if not host:
            raise RemoteError(f"unsupported broker service URL {url!r}")
        out.append((host, port or (6651 if tls else 6650), tls))
    return out


class CommandReader:
    """The commands of one connection, in order (a new connection gets a new reader: no bytes carry over)."""

    def __init__(self, reader: asyncio.StreamReader, on_end: Callable[[], Exception],
                 frame_limit: int = FRAME_LIMIT) -> None:
        self._reader = reader
        self._on_end = on_end  # the error raised when the other broker closes the connection
        self._decoder = FrameDecoder(frame_limit)

    async def next_command(self) -> pb.BaseCommand:
        return (await self.next_frame()).command

    async def next_frame(self) -> Frame:
        """The next command with its payload (a MESSAGE's entry; None for a simple command)."""
        while True:
            frame = self._decoder.next_frame()
            if frame is not None:
                return frame
            data = await self._reader.read(READ_SIZE)
            if not data:
                raise self._on_end()
            self._decoder.feed(data)


def connect_command(client_version: str, credentials: Credentials) -> bytes:
    connect = pb.BaseCommand(type=T.CONNECT)
    c = connect.connect
    c.client_version, c.protocol_version = client_version, MAX_PROTOCOL_VERSION
    auth_method, auth_data = credentials()
    if auth_method is not None:
        c.auth_method_name, c.auth_data = auth_method, auth_data
    return commands.frame(connect)


def keepalive_reply(cmd: pb.BaseCommand, client_version: str, credentials: Credentials) -> bytes | None:
    """The frame answering a PING or an AUTH_CHALLENGE (None for any other command, or a challenge to a connection
    without credentials)."""
    if cmd.type == T.PING:
        return commands.pong()
    if cmd.type != T.AUTH_CHALLENGE:
        return None
    auth_method, auth_data = credentials()
    if auth_method is not None:
        reply = pb.BaseCommand(type=T.AUTH_RESPONSE)
        r = reply.authResponse
        r.client_version, r.protocol_version = client_version, MAX_PROTOCOL_VERSION
        r.response.auth_method_name, r.response.auth_data = auth_method, auth_data
        return commands.frame(reply)
    return None


async def close_writer(writer: asyncio.StreamWriter) -> None:
    """Close a connection to another broker, waiting for its unsent bytes at most CLOSE_TIMEOUT_S: a broker that is
    not reading it (it paused it: rate limit, backpressure) would keep the flush, and this close, waiting; then it
    is aborted."""
    writer.close()
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await writer.wait_closed()
    except TimeoutError:
        writer.transport.abort()
    except (OSError, ssl.SSLError):
        pass


# Answers carrying the request id of the request they answer: the field of each that holds it.
_ANSWERS = {
    T.LOOKUP_RESPONSE: "lookupTopicResponse", T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
    T.SUCCESS: "success", T.ERROR: "error", T.PRODUCER_SUCCESS: "producer_success",
    T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse", T.ACK_RESPONSE: "ackResponse",
    T.GET_OR_CREATE_SCHEMA_RESPONSE: "getOrCreateSchemaResponse",
    T.END_TXN_ON_PARTITION_RESPONSE: "endTxnOnPartitionResponse",
    T.END_TXN_ON_SUBSCRIPTION_RESPONSE: "endTxnOnSubscriptionResponse",
    T.WATCH_TOPIC_LIST_SUCCESS: "watchTopicListSuccess",
}


def _request_id(cmd: pb.BaseCommand) -> int | None:
    field = _ANSWERS.get(cmd.type)
    if field is None:
        return None
    with contextlib.suppress(AttributeError):
        return int(getattr(cmd, field).request_id)
    return None


class PeerConnection:
    """One connection to one broker (see the module docstring). ``connect`` opens it; once lost or closed it is
    ``ended`` for good: its user opens another."""

    def __init__(self, url: str, credentials: Credentials, ssl_context: ssl.SSLContext | None, client_version: str,
                 timeout_s: float, frame_limit: int = FRAME_LIMIT,
                 on_command: Callable[[Frame], None] | None = None,
                 on_lost: Callable[[BaseException], None] | None = None) -> None:
        self.url = url
        self._credentials = credentials
        self._ssl_context = ssl_context  # (for a pulsar+ssl:// URL; None: the system's CAs)
        self._client_version = client_version
        self._timeout_s = timeout_s  # for each request's answer
        self._frame_limit = frame_limit
        self._on_command = on_command  # every command that answers no request and asks for no keep-alive reply
        self._on_lost = on_lost
        self.address: Address | None = None  # the host of the URL that answered
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._requests: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self._ids = itertools.count(1)
        self.ended = False
        self._closed = False  # (by its user: no loss to report)

    async def connect(self) -> None:
        """Reach the URL's first broker that answers, as Pulsar's clients try a service URL's hosts in turn, then
        CONNECT; LinkError when none answers or the broker refuses."""
        try:
            hosts = addresses(self.url)
        except RemoteError as exc:
            raise LinkError(str(exc)) from None
        reader: asyncio.StreamReader | None = None
        for i, (host, port, tls) in enumerate(hosts):
            # (Pulsar's broker clients do not check host names by default)
            context = (self._ssl_context or client_context(check_hostname=False)) if tls else None
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):  # (not wait_for: on 3.11 it can swallow a cancel)
                    reader, self._writer = await asyncio.open_connection(host, port, ssl=context)
            except (OSError, TimeoutError) as exc:
                if i == len(hosts) - 1:
                    raise LinkError(f"cannot connect to {self.url}: {exc or type(exc).__name__}") from None
                continue
            self.address = (host, port, tls)
            break
        assert reader is not None
        commands_in = CommandReader(reader, lambda: LinkError(f"connection to {self.url} closed by the broker"),
                                    self._frame_limit)
        try:
            self.write(connect_command(self._client_version, self._credentials))
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                while True:
                    got = await commands_in.next_command()
                    if got.type == T.CONNECTED:
                        break
                    if got.type == T.ERROR:
                        raise LinkError(f"{self.url} refused the connection: {pb.ServerError.Name(got.error.error)}"
                                        f": {got.error.message}", got.error.error)
                    self._keepalive(got)
        except BaseException as exc:
            self.ended = True
            if self._writer is not None:
                self._writer.close()
            if isinstance(exc, LinkError) or not isinstance(exc, Exception):
                raise
            if isinstance(exc, RemoteError):  # (the credentials cannot be used)
                raise LinkError(f"broker client credentials: {exc}") from None
            if isinstance(exc, TimeoutError):
                raise LinkError(f"{self.url} did not answer CONNECT within {CONNECT_TIMEOUT_S:.0f} s") from None
            raise LinkError(f"connection to {self.url} lost: {exc or type(exc).__name__}") from None
        self._reader_task = asyncio.get_running_loop().create_task(self._read(commands_in))

    async def request(self, cmd: pb.BaseCommand, body: object) -> pb.BaseCommand:
        """Send ``cmd`` (``body``: its sub-message, given a fresh request id) and await the answer with that id;
        LinkError for an ERROR answer, a timeout or the connection's loss."""
        request_id = next(self._ids)
        body.request_id = request_id  # type: ignore[attr-defined]
        waiter: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self._requests[request_id] = waiter
        try:
            self.write(commands.frame(cmd))
            async with asyncio.timeout(self._timeout_s):
                answer = await waiter
        except TimeoutError:
            raise LinkError(f"{T.Name(cmd.type)} to {self.url}: no answer within {self._timeout_s:.0f} s",
                            pb.ServiceNotReady) from None
        finally:
            self._requests.pop(request_id, None)
        if answer.type == T.ERROR:
            raise LinkError(f"{pb.ServerError.Name(answer.error.error)}: {answer.error.message}", answer.error.error)
        return answer

    def write(self, data: bytes) -> None:
        writer = self._writer
        if self.ended or writer is None or writer.is_closing():
            raise LinkError(f"connection to {self.url} is closed")
        writer.write(data)

    async def drain(self) -> None:
        """Wait while the broker is not reading this connection."""
        writer = self._writer
        if writer is not None and not writer.is_closing():
            await writer.drain()

    def _keepalive(self, cmd: pb.BaseCommand) -> None:
        reply = keepalive_reply(cmd, self._client_version, self._credentials)
        if reply is not None:
            self.write(reply)

    async def _read(self, reader: CommandReader) -> None:
        try:
            while True:
                frame = await reader.next_frame()
                cmd = frame.command
                request_id = _request_id(cmd)
                if request_id is not None:
                    waiter = self._requests.get(request_id)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(cmd)
                elif cmd.type in (T.PING, T.AUTH_CHALLENGE):
                    self._keepalive(cmd)
                elif self._on_command is not None:
                    self._on_command(frame)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # (OSError, LinkError, a ProtocolError, anything: the connection is lost)
            self.lost(exc)

    def lost(self, exc: BaseException) -> None:
        """The connection (or what its user made on it, which the broker closed) is lost: nothing more is written,
        waiting requests fail, and ``on_lost`` hears of it once (not after the user's own ``close``)."""
        first = not self.ended
        self.ended = True
        if self._writer is not None:
            self._writer.close()
        self._fail_requests(LinkError(f"connection to {self.url} lost: {exc}"))
        if first and not self._closed and self._on_lost is not None:
            self._on_lost(exc)

    def _fail_requests(self, exc: LinkError) -> None:
        for waiter in self._requests.values():
            if not waiter.done():
                waiter.set_exception(exc)

    async def close(self) -> None:
        self._closed = self.ended = True
        task, self._reader_task = self._reader_task, None
        writer, self._writer = self._writer, None
        try:
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        finally:
            # (also when this close is cancelled: a connection left open keeps what was made on it, a producer
            # the other broker then refuses to make again under its name as busy)
            self._fail_requests(LinkError(f"connection to {self.url} closed"))
            if writer is not None:
                writer.close()
        if writer is not None:
            await close_writer(writer)


@dataclass(frozen=True)
class Owner:
    """Where a LOOKUP ended: the owner's URL, the connection that said so, and whether to reach the owner through it
    (a proxy's answer)."""

    url: str
    answered_by: PeerConnection
    proxy_through: bool


async def look_up(topic: str, url: str, connection_to: Callable[[str], Awaitable[PeerConnection]],
                  tls: bool) -> Owner:
    """The owner of ``topic``: LOOKUP asked of ``url``'s broker, then of each broker a Redirect names (at most
    MAX_LOOKUP_HOPS), over the connections ``connection_to`` gives; LinkError when refused."""
    authoritative = False
    for _ in range(MAX_LOOKUP_HOPS):
        connection = await connection_to(url)
        cmd = pb.BaseCommand(type=T.LOOKUP)
        cmd.lookupTopic.topic, cmd.lookupTopic.authoritative = topic, authoritative
        r = (await connection.request(cmd, cmd.lookupTopic)).lookupTopicResponse
        if r.response == pb.CommandLookupTopicResponse.Failed:
            raise LinkError(f"{pb.ServerError.Name(r.error)}: {r.message}", r.error)
        target = (r.brokerServiceUrlTls if tls else r.brokerServiceUrl) or url
        if r.response == pb.CommandLookupTopicResponse.Connect:
            return Owner(target, connection, r.proxy_through_service_url)
        url, authoritative = target, r.authoritative  # a redirect: ask the broker it names
    raise LinkError(f"lookup of {topic} redirected more than {MAX_LOOKUP_HOPS} times")


class BrokerLink:
    """The connection to the broker owning ``topic``, found from ``settings.url`` (see the module docstring).

    ``on_command`` gets what the broker sends for what its user made there (a producer, a consumer); ``on_lost``
    hears once of the connection's loss (also of a producer or consumer the broker closed: ``lost``), until
    ``reopen``."""

    def __init__(self, settings: RemoteSettings, topic: str, client_version: str, timeout_s: float,
                 frame_limit: int = FRAME_LIMIT, on_command: Callable[[Frame], None] | None = None,
                 on_lost: Callable[[BaseException], None] | None = None) -> None:
        self.settings = settings
        self.topic = topic
        self._client_version = client_version
        self._timeout_s = timeout_s
        self._frame_limit = frame_limit
        # (its user's, and may be set after the link is made)
        self.on_command: Callable[[Frame], None] = on_command or (lambda _: None)
        self.on_lost: Callable[[BaseException], None] = on_lost or (lambda _: None)
        self._connection: PeerConnection | None = None
        self.closed = False
        self._lost = False  # (the loss of the current connection reported)

    @property
    def url(self) -> str:
        """The URL of the broker this link is connected to (the service URL before it is)."""
        connection = self._connection
        return connection.url if connection is not None else self.settings.url

    async def partitions(self, topic: str | None = None) -> int:
        """The topic's partitions (0: not partitioned), asked of the service URL's broker as the clients ask before
        anything else (PARTITIONED_METADATA); LinkError when refused. The connection stays for ``open``. ``topic``:
        another topic's, asked on the same connection (any broker answers for any topic)."""
        connection = self._connection
        if connection is None or connection.ended:
            connection = await self._connect(self.settings.url)
        cmd = pb.BaseCommand(type=T.PARTITIONED_METADATA)
        cmd.partitionMetadata.topic = topic if topic is not None else self.topic
        r = (await connection.request(cmd, cmd.partitionMetadata)).partitionMetadataResponse
        if r.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
            raise LinkError(f"{pb.ServerError.Name(r.error)}: {r.message}", r.error)
        return int(r.partitions)

    async def open(self) -> None:
        """Connect to the topic's owner: LOOKUP from the service URL (or the broker this link is connected to),
        following redirects; LinkError when refused."""
        async def connection_to(url: str) -> PeerConnection:
            current = self._connection
            if current is not None and not current.ended and current.url == url:
                return current
            return await self._connect(url)

        current = self._connection
        start = current.url if current is not None and not current.ended else self.settings.url
        owner = await look_up(self.topic, start, connection_to, self.settings.ssl_context is not None)
        if not owner.proxy_through and _first_address(owner.url) != owner.answered_by.address:
            await self._connect(owner.url)

    async def _connect(self, url: str) -> PeerConnection:
        await self._disconnect()

        def lost(exc: BaseException) -> None:
            if connection is self._connection:
                self._report(exc)

        connection = PeerConnection(url, self.settings.credentials, self.settings.ssl_context, self._client_version,
                                    self._timeout_s, self._frame_limit, lambda frame: self.on_command(frame), lost)
        await connection.connect()
        self._connection = connection
        return connection

    def _live(self) -> PeerConnection:
        connection = self._connection
        if connection is None:
            raise LinkError("connection to the broker is closed")
        return connection

    async def request(self, cmd: pb.BaseCommand, body: object) -> pb.BaseCommand:
        return await self._live().request(cmd, body)

    def write(self, data: bytes) -> None:
        self._live().write(data)

    async def drain(self) -> None:
        """Wait while the broker is not reading this connection (its backpressure reaches this link's user)."""
        if self._connection is not None:
            await self._connection.drain()

    @property
    def lost_already(self) -> bool:
        return self._lost

    def lost(self, exc: BaseException) -> None:
        """The connection (or the producer or consumer on it, which the broker closed) is lost: report it once;
        the user reconnects (``reopen``) or ends."""
        if self._connection is not None:
            self._connection.lost(exc)  # (reported through its on_lost, once)
        else:
            self._report(exc)

    def _report(self, exc: BaseException) -> None:
        if not self._lost and not self.closed:
            self._lost = True
            self.on_lost(exc)

    async def reopen(self) -> None:
        """A new connection to the topic's owner, looked up again from the service URL."""
        await self._disconnect()
        self._lost = False
        await self.open()

    async def close(self) -> None:
        self.closed = True
        await self._disconnect()

    async def _disconnect(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()


def _first_address(url: str) -> Address:
    try:
        return addresses(url)[0]
    except RemoteError as exc:
        raise LinkError(str(exc)) from None
