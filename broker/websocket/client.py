"""The WebSocket service's client of the binary protocol: one connection per WebSocket session (per partition of a
partitioned topic), to the broker that owns the topic, as Apache Pulsar's WebSocket service uses a Pulsar client
inside the broker.

The session's producer or consumer is an ordinary client of the broker: it connects with the broker client's
credentials (``brokerClientAuthenticationPlugin`` / ``...Parameters``), looks the topic up (following redirects to
the owner in cluster mode, as the official clients do), then creates its producer or subscribes. Every rule of the
broker (limits, flow control, schemas, deduplication, backlog quotas, authorization of the broker client's role)
applies unchanged, and the binary protocol's hot path knows nothing of the WebSocket service.

``BrokerLink`` is the connection: CONNECT, LOOKUP, requests answered by request id, keep-alive and authentication
challenges, and the commands for its one producer or consumer handed to ``on_command`` with their payload. The
connection's loss (the broker closed it, or closed the producer or consumer: an unload, a bundle moving to another
broker) is reported once to ``on_lost``; the session then reconnects (``reopen``) and makes its producer or consumer
again, as the official clients do.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable

from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.frames import Frame
from broker.protocol.limits import max_frame_size
from broker.service.consumer import WEBSOCKET_CLIENT_VERSION_PREFIX
from broker.service.peer_link import CommandReader, close_writer, connect_command, keepalive_reply
from broker.service.remote_producer import RemoteError, RemoteSettings, _addresses
from broker.version import __version__

T = pb.BaseCommand.Type
CLIENT_VERSION = f"{WEBSOCKET_CLIENT_VERSION_PREFIX}{__version__}"
REQUEST_TIMEOUT_S = 30.0  # the Java client's operationTimeout (30 s): a lookup, a PRODUCER, a SUBSCRIBE
MAX_LOOKUP_HOPS = 5


class LinkError(Exception):
    """The broker refused a request, or the connection failed; ``code``: the wire ServerError when the broker said
    one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class BrokerLink:
    """One connection to the broker owning ``topic`` (see the module docstring)."""

    def __init__(self, settings: RemoteSettings, topic: str, max_message_size: int,
                 on_command: Callable[[Frame], None], on_lost: Callable[[BaseException], None]) -> None:
        self.settings = settings
        self.url = settings.url
        self.topic = topic
        self._frame_limit = max_frame_size(max_message_size)
        # (set by the session that owns the link: its commands, and the loss of its connection)
        self.on_command = on_command
        self.on_lost = on_lost
        self._writer: asyncio.StreamWriter | None = None
        self._connected_to: tuple[str, int, bool] | None = None
        self._requests: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self._next_request = 1
        self._reader_task: asyncio.Task[None] | None = None
        self.closed = False
        self._lost = False  # (the loss of the current connection reported)

    # -- opening ---------------------------------------------------------------------------------------------------
    async def partitions(self) -> int:
        """The topic's partitions (0: not partitioned), asked of the service URL's broker as the clients ask before
        anything else (PARTITIONED_METADATA); LinkError when refused. The connection stays for ``open``."""
        await self._connect()
        cmd = pb.BaseCommand(type=T.PARTITIONED_METADATA)
        cmd.partitionMetadata.topic = self.topic
        r = (await self.request(cmd, cmd.partitionMetadata)).partitionMetadataResponse
        if r.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
            raise LinkError(f"{pb.ServerError.Name(r.error)}: {r.message}", r.error)
        return int(r.partitions)

    async def open(self) -> None:
        """Connect to the topic's owner: LOOKUP from the service URL, following redirects (LinkError when refused)."""
        authoritative = False
        for _ in range(MAX_LOOKUP_HOPS):
            if self._writer is None or self._writer.is_closing():
                await self._connect()
            cmd = pb.BaseCommand(type=T.LOOKUP)
            cmd.lookupTopic.topic, cmd.lookupTopic.authoritative = self.topic, authoritative
            r = (await self.request(cmd, cmd.lookupTopic)).lookupTopicResponse
            if r.response == pb.CommandLookupTopicResponse.Failed:
                raise LinkError(f"{pb.ServerError.Name(r.error)}: {r.message}", r.error)
            tls = self.settings.ssl_context is not None
            owner = (r.brokerServiceUrlTls if tls else r.brokerServiceUrl) or self.url
            if r.response == pb.CommandLookupTopicResponse.Connect and (
                    _addresses(owner)[0] == self._connected_to or r.proxy_through_service_url):
                return
            await self._disconnect()
            self.url = owner
            if r.response == pb.CommandLookupTopicResponse.Connect:
                await self._connect()
                return
            authoritative = r.authoritative
        raise LinkError(f"lookup of {self.topic} redirected more than {MAX_LOOKUP_HOPS} times")

    async def _connect(self) -> None:
        addresses = _addresses(self.url)
        reader: asyncio.StreamReader | None = None
        for i, (host, port, tls) in enumerate(addresses):
            context = self.settings.ssl_context if tls else None
            if tls and context is None:
                context = ssl.create_default_context()
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    reader, self._writer = await asyncio.open_connection(host, port, ssl=context)
            except (OSError, TimeoutError) as exc:
                if i == len(addresses) - 1:
                    raise LinkError(f"cannot connect to {self.url}: {exc}") from None
                continue
            self._connected_to = (host, port, tls)
            break
        assert reader is not None
        commands_in = CommandReader(reader, lambda: LinkError("connection closed by the broker"), self._frame_limit)
        try:  # (the credentials as they are now: a token file is read again, as for every broker client)
            self.write(connect_command(CLIENT_VERSION, self.settings.credentials))
        except RemoteError as exc:
            raise LinkError(f"broker client credentials: {exc}") from None
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            while True:
                got = await commands_in.next_command()
                if got.type == T.CONNECTED:
                    break
                if got.type == T.ERROR:
                    raise LinkError(f"{pb.ServerError.Name(got.error.error)}: {got.error.message}", got.error.error)
                self._keepalive(got)
        self._reader_task = asyncio.get_running_loop().create_task(self._read(commands_in))

    # -- requests ----------------------------------------------------------------------------------------------------
    async def request(self, cmd: pb.BaseCommand, body: object) -> pb.BaseCommand:
        """Send ``cmd`` (``body``: its sub-message, given a fresh request id) and await the answer with that id;
        LinkError for an ERROR answer or a timeout."""
        request_id = self._next_request
        self._next_request += 1
        body.request_id = request_id  # type: ignore[attr-defined]
        waiter: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self._requests[request_id] = waiter
        try:
            self.write(commands.frame(cmd))
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                answer = await waiter
        except TimeoutError:
            raise LinkError(f"{T.Name(cmd.type)} timed out", pb.ServiceNotReady) from None
        finally:
            self._requests.pop(request_id, None)
        if answer.type == T.ERROR:
            raise LinkError(f"{pb.ServerError.Name(answer.error.error)}: {answer.error.message}", answer.error.error)
        return answer

    def write(self, data: bytes) -> None:
        writer = self._writer
        if writer is None or writer.is_closing():
            raise LinkError("connection to the broker is closed")
        writer.write(data)

    async def drain(self) -> None:
        """Wait while the broker is not reading this connection (its backpressure reaches the WebSocket client)."""
        writer = self._writer
        if writer is not None and not writer.is_closing():
            await writer.drain()

    def _keepalive(self, cmd: pb.BaseCommand) -> None:
        try:
            reply = keepalive_reply(cmd, CLIENT_VERSION, self.settings.credentials)
        except RemoteError as exc:
            raise LinkError(f"broker client credentials: {exc}") from None
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
                    continue
                if cmd.type in (T.PING, T.AUTH_CHALLENGE):
                    self._keepalive(cmd)
                    continue
                self.on_command(frame)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # (OSError, LinkError, a ProtocolError, anything: the connection is lost)
            for waiter in self._requests.values():
                if not waiter.done():
                    waiter.set_exception(LinkError(f"connection lost: {exc}"))
            if self._writer is not None:
                self._writer.close()
            self.lost(exc)

    @property
    def lost_already(self) -> bool:
        return self._lost

    def lost(self, exc: BaseException) -> None:
        """The connection (or the producer or consumer on it, which the broker closed) is lost: report it once;
        the session reconnects (``reopen``) or ends."""
        if self._writer is not None:
            self._writer.close()
        if not self._lost and not self.closed:
            self._lost = True
            self.on_lost(exc)

    async def reopen(self) -> None:
        """A new connection to the topic's owner, looked up again from the service URL."""
        await self._disconnect()
        self.url = self.settings.url
        self._lost = False
        await self.open()

    # -- closing -----------------------------------------------------------------------------------------------------
    async def close(self) -> None:
        self.closed = True
        await self._disconnect()

    async def _disconnect(self) -> None:
        task, self._reader_task = self._reader_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        writer, self._writer = self._writer, None
        if writer is not None:
            await close_writer(writer)


# Answers carrying the request id of the request they answer: the field of each that holds it.
_ANSWERS = {
    T.LOOKUP_RESPONSE: "lookupTopicResponse", T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
    T.SUCCESS: "success", T.ERROR: "error", T.PRODUCER_SUCCESS: "producer_success",
    T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse", T.ACK_RESPONSE: "ackResponse",
}


def _request_id(cmd: pb.BaseCommand) -> int | None:
    field = _ANSWERS.get(cmd.type)
    if field is None:
        return None
    with contextlib.suppress(AttributeError):
        return int(getattr(cmd, field).request_id)
    return None
