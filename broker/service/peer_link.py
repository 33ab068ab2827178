"""What every broker-to-broker binary connection does the same way: the replicator's producer on a remote cluster
(remote_producer.py) and the transaction buffer client (txn_buffer_client.py) are both clients of another broker.

- ``CommandReader``: the commands arriving on the connection, decoded in order from the stream (any chunking);
  the end of the stream raises the connection's own error;
- ``close_writer``: a connection closed without waiting for ever on a broker that does not read it;
- ``connect_command``: the CONNECT, with the broker client's credentials;
- ``keepalive_reply``: the answer to what the other broker may ask of any client at any time: a PING (a PONG)
  and, with authentication, an AUTH_CHALLENGE.

The last two take the credentials as a function called when they are sent (``Credentials``): a token in a file is
read again for each connection and each challenge, as Pulsar's broker clients do (its token supplier reads the file
each time), so a token rotated in its file, or credentials changed with update-dynamic-config, reach live links at
the next challenge and new links at once.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.frames import Frame, FrameDecoder
from broker.protocol.limits import MAX_PROTOCOL_VERSION, max_frame_size

T = pb.BaseCommand.Type
# The broker client's (auth method name, auth data) as they are now; the method None: no credentials.
Credentials = Callable[[], tuple[str | None, bytes]]

# Our own bound on a frame from another broker: lookups, receipts and small answers; Pulsar's default maximum
# message size (5 MB) plus the frame's overhead, as a client of ours would accept.
FRAME_LIMIT = max_frame_size(5 * 1024 * 1024)
READ_SIZE = 65536  # bytes asked of the stream at a time
CLOSE_TIMEOUT_S = 5.0  # for the unsent bytes of a connection being closed


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
