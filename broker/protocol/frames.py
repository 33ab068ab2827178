"""Sans-IO frame decoder: feed bytes in any chunking, take complete frames out.

Wire layout (all integers big-endian):

    [totalSize:u32][commandSize:u32][BaseCommand]                       simple command
    [totalSize:u32][commandSize:u32][BaseCommand][payload ...]          SEND / MESSAGE

``totalSize`` counts everything after itself. Whatever follows the command inside the frame is the
payload; for SEND it is ``[0x0e01][crc32c:u32]`` (optional) ``[metadataSize:u32][MessageMetadata][body]``,
which the broker stores verbatim as the entry: its layout is entry.py's.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.errors import ProtocolError
from broker.protocol.limits import MIN_TOTAL_SIZE

_U32 = struct.Struct(">I")
_HEADER = struct.Struct(">II")
_SEND = int(pb.BaseCommand.Type.SEND)


# BaseCommand.Type value -> name of the sub-message field carrying it (same number, by design).
_FIELD_FOR_TYPE = {
    f.number: f.name for f in pb.BaseCommand.DESCRIPTOR.fields if f.message_type is not None
}


def command_body(command: pb.BaseCommand) -> Message | None:
    """The sub-message a BaseCommand carries for its type (None for an unknown type)."""
    field = _FIELD_FOR_TYPE.get(command.type)
    return getattr(command, field) if field is not None and command.HasField(field) else None


class Frame(NamedTuple):
    command: pb.BaseCommand
    # Bytes after the command inside the frame (SEND payload), or None for simple commands.
    payload: bytes | None


class FrameDecoder:
    """Incremental decoder. ``feed()`` buffers, ``next_frame()`` returns a Frame or None.

    Partial frames are kept as a list of chunks and joined once the whole frame is there, so a
    5 MiB message arriving in 64 KiB reads is copied a constant number of times, not once per read.
    """

    __slots__ = ("_buf", "_chunks", "_chunks_len", "_max_frame", "_need", "_pos")

    def __init__(self, max_frame_size: int) -> None:
        self._max_frame = max_frame_size
        self._buf: bytes = b""
        self._pos = 0
        self._chunks: list[bytes] = []
        self._chunks_len = 0
        # Bytes the buffer must hold (from _pos) before another frame can be decoded.
        self._need = 4

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos + self._chunks_len

    def feed(self, data: bytes) -> None:
        if not data:
            return
        if self._chunks or (len(self._buf) - self._pos) + len(data) < self._need:
            self._chunks.append(data)
            self._chunks_len += len(data)
            if (len(self._buf) - self._pos) + self._chunks_len < self._need:
                return
            parts = [self._buf[self._pos :], *self._chunks]
            self._buf = b"".join(parts)
            self._chunks.clear()
            self._chunks_len = 0
        elif self._pos < len(self._buf):
            self._buf = self._buf[self._pos :] + data
        else:
            self._buf = data
        self._pos = 0

    def next_frame(self) -> Frame | None:
        if self._chunks:
            return None
        buf, pos = self._buf, self._pos
        avail = len(buf) - pos
        if avail < 4:
            self._need = 4
            return None
        (total,) = _U32.unpack_from(buf, pos)
        if total + 4 > self._max_frame:
            raise ProtocolError(f"frame of {total + 4} bytes exceeds the limit of {self._max_frame}")
        if total < MIN_TOTAL_SIZE:
            raise ProtocolError(f"frame totalSize {total} is too small")
        if avail < total + 4:
            self._need = total + 4
            return None
        (cmd_size,) = _U32.unpack_from(buf, pos + 4)
        if cmd_size == 0 or cmd_size > total - 4:
            raise ProtocolError(f"commandSize {cmd_size} does not fit in frame of totalSize {total}")
        end = pos + 4 + total
        cmd_end = pos + 8 + cmd_size
        view = memoryview(buf)
        command = pb.BaseCommand()
        try:
            command.ParseFromString(view[pos + 8 : cmd_end])  # type: ignore[arg-type]  # upb takes buffers
        except DecodeError as exc:
            raise ProtocolError(f"undecodable command: {exc}") from None
        if command.type == _SEND and command.HasField("send"):
            # The hottest command, checked field by field (IsInitialized costs twice as much):
            # its required fields, and message_id, its only sub-message (which has required fields).
            send = command.send
            if not (send.HasField("producer_id") and send.HasField("sequence_id")) or (
                    send.HasField("message_id") and not send.message_id.IsInitialized()):
                raise ProtocolError("SEND lacks required fields")
        elif not command.IsInitialized():
            missing = command.FindInitializationErrors()  # type: ignore[attr-defined]
            if missing == ["type"] and len(UnknownFieldSet(command)):
                # A command type this definition does not know (a newer client): proto2 keeps the
                # value as an unknown field. Handed on without a type; the router ignores it.
                self._pos = pos + 4 + total
                self._need = 4
                return Frame(command, None)
            raise ProtocolError(f"command lacks required fields: {', '.join(missing)}")
        elif command.type in _FIELD_FOR_TYPE and command_body(command) is None:
            raise ProtocolError(f"command of type {command.type} lacks its body")
        payload = bytes(view[cmd_end:end]) if end > cmd_end else None
        self._pos = end
        self._need = 4
        return Frame(command, payload)
