"""What every broker-to-broker binary connection does the same way: the replicator's producer on a remote cluster
(remote_producer.py) and the transaction buffer client (txn_buffer_client.py) are both clients of another broker.

- ``CommandReader``: the commands arriving on the connection, decoded in order from the stream (any chunking);
  the end of the stream raises the connection's own error;
- ``connect_command``: the CONNECT, with the broker client's credentials;
- ``keepalive_reply``: the answer to what the other broker may ask of any client at any time: a PING (a PONG)
  and, with authentication, an AUTH_CHALLENGE.

Both take the credentials as a function called when they are sent (``Credentials``): a token in a file is read again
for each connection and each challenge, as Pulsar's broker clients do (its token supplier reads the file each time),
so a token rotated in its file, or credentials changed with update-dynamic-config, reach live links at the next
challenge and new links at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.frames import FrameDecoder
from broker.protocol.limits import MAX_PROTOCOL_VERSION, max_frame_size

T = pb.BaseCommand.Type
# The broker client's (auth method name, auth data) as they are now; the method None: no credentials.
Credentials = Callable[[], tuple[str | None, bytes]]

# Our own bound on a frame from another broker: lookups, receipts and small answers; Pulsar's default maximum
# message size (5 MB) plus the frame's overhead, as a client of ours would accept.
FRAME_LIMIT = max_frame_size(5 * 1024 * 1024)
READ_SIZE = 65536  # bytes asked of the stream at a time


class CommandReader:
    """The commands of one connection, in order (a new connection gets a new reader: no bytes carry over)."""

    def __init__(self, reader: asyncio.StreamReader, on_end: Callable[[], Exception]) -> None:
        self._reader = reader
        self._on_end = on_end  # the error raised when the other broker closes the connection
        self._decoder = FrameDecoder(FRAME_LIMIT)

    async def next_command(self) -> pb.BaseCommand:
        while True:
            frame = self._decoder.next_frame()
            if frame is not None:
                return frame.command
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
