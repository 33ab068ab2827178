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
from broker.protocol.text import mend_strings

_U32 = struct.Struct(">I")
_HEADER = struct.Struct(">II")
# A frame's header, the first 7 bytes of its command and the 8th (next_send_run).
_RUN_HEAD = struct.Struct(">II7sB")
_SEND = int(pb.BaseCommand.Type.SEND)
# Commands with no string field (or none the broker reads: an ACK's properties), not walked by mend_strings:
# the hot ones.
_NO_STRINGS = frozenset(int(t) for t in (
    pb.BaseCommand.Type.SEND, pb.BaseCommand.Type.FLOW, pb.BaseCommand.Type.ACK, pb.BaseCommand.Type.PING,
    pb.BaseCommand.Type.PONG, pb.BaseCommand.Type.REDELIVER_UNACKNOWLEDGED_MESSAGES, pb.BaseCommand.Type.MESSAGE,
    pb.BaseCommand.Type.SEND_RECEIPT))


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


class SendCommand(NamedTuple):
    """What the broker reads of a CommandSend (``next_frame_or_send``)."""

    producer_id: int
    sequence_id: int
    num_messages: int
    highest_sequence_id: int | None  # None when absent
    is_chunk: bool
    # (txnid_most_bits, txnid_least_bits) when either is present, else None.
    txn: tuple[int, int] | None


class SendFrame(NamedTuple):
    send: SendCommand
    payload: bytes | None


def send_command(send: pb.CommandSend) -> SendCommand:
    """A parsed CommandSend's fields, as ``SendCommand``."""
    txn = ((send.txnid_most_bits, send.txnid_least_bits)
           if send.HasField("txnid_most_bits") or send.HasField("txnid_least_bits") else None)
    return SendCommand(send.producer_id, send.sequence_id, send.num_messages,
                       send.highest_sequence_id if send.HasField("highest_sequence_id") else None,
                       send.is_chunk, txn)


# Builds a NamedTuple without its generated __new__ (a keyword-taking Python function): the hot path.
_new_tuple = tuple.__new__

# A BaseCommand holding only type = SEND (field 1, varint 6) and send (field 6, length-delimited):
# how every client encodes a SEND.
_SEND_PREFIX = b"\x08\x06\x32"


def _read_send(buf: bytes, pos: int, end: int) -> SendCommand | None:
    """Hand-decode the CommandSend in buf[pos:end] when it has the common shape: producer_id,
    sequence_id and optionally num_messages, highest_sequence_id and is_chunk, each once, every
    varint at most 9 bytes (values below 2**63; num_messages below 2**31; is_chunk 0 or 1). Any
    other shape (transactions, marker, message_id, unknown fields, a repeated field, large or
    malformed varints) gives None, and the caller parses it with protobuf: for what this accepts,
    the values are the ones protobuf would read."""
    producer_id = sequence_id = highest = chunk = None
    num_messages = 1
    has_num = False
    while pos < end:
        tag = buf[pos]
        pos += 1
        if pos >= end:
            return None
        b = buf[pos]
        pos += 1
        if b < 0x80:
            value = b
        else:
            value = b & 0x7F
            shift = 7
            while True:
                if pos >= end or shift > 56:
                    return None
                b = buf[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
        if tag == 0x08 and producer_id is None:
            producer_id = value
        elif tag == 0x10 and sequence_id is None:
            sequence_id = value
        elif tag == 0x18 and not has_num and value < 0x80000000:
            num_messages = value
            has_num = True
        elif tag == 0x30 and highest is None:
            highest = value
        elif tag == 0x38 and chunk is None and value < 2:
            chunk = value
        else:
            return None
    if producer_id is None or sequence_id is None:
        return None
    return _new_tuple(SendCommand, (producer_id, sequence_id, num_messages, highest, chunk == 1, None))


def _read_unbatched_send(buf: bytes, pos: int, end: int) -> SendCommand | None:
    """The CommandSend of an unbatched message from every client: producer_id below 128, then
    sequence_id in 1-3 bytes, nothing else (``8 <= cmd_size <= 10``), read without a loop; None for
    anything else (``_read_send`` then reads it)."""
    if buf[pos] != 0x08 or buf[pos + 1] >= 0x80 or buf[pos + 2] != 0x10:
        return None
    n = end - pos - 3  # the sequence id's bytes
    b0 = buf[pos + 3]
    if n == 1:
        if b0 >= 0x80:
            return None
        seq = b0
    elif n == 2:
        b1 = buf[pos + 4]
        if b0 < 0x80 or b1 >= 0x80:
            return None
        seq = (b0 & 0x7F) | (b1 << 7)
    else:
        b1, b2 = buf[pos + 4], buf[pos + 5]
        if b0 < 0x80 or b1 < 0x80 or b2 >= 0x80:
            return None
        seq = (b0 & 0x7F) | ((b1 & 0x7F) << 7) | (b2 << 14)
    return _new_tuple(SendCommand, (buf[pos + 1], seq, 1, None, False, None))


def _unbatched_heads(producer_id: int) -> dict[int, bytes]:
    """The first 7 bytes of producer_id's unbatched CommandSend (``_read_unbatched_send``'s shape:
    type, the send field, its length, producer id) by command size (8-10: a 1-3 byte sequence id)."""
    return {size: bytes((0x08, 0x06, 0x32, size - 4, 0x08, producer_id, 0x10)) for size in (8, 9, 10)}


# The heads of producer ids below 128, made once (a run of batched SENDs, often one a read, needs
# them on every read).
_UNBATCHED_HEADS = [_unbatched_heads(pid) for pid in range(0x80)]
_NO_HEADS: dict[int, bytes] = {}

# One SEND of a run (``FrameDecoder.next_send_run``): (sequence id, highest sequence id, messages in
# it, payload), the highest sequence id being the sequence id where the command has none.
RunSend = tuple[int, int, int, bytes]


_CHUNKS_BEFORE_GATHERING = 16  # (see FrameDecoder._chunks)


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
        # Reads that do not yet complete the frame they belong to. Past a few they are gathered into one
        # bytearray: a client dripping a frame 2 bytes a read made a list of reads cost 20 times the bytes,
        # while a large frame's few big reads are joined once, at the end (no copy more).
        self._chunks: list[bytes | bytearray] = []
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
            chunks = self._chunks
            chunks.append(data)
            self._chunks_len += len(data)
            if len(chunks) > _CHUNKS_BEFORE_GATHERING:
                first = chunks[0]
                gathered = first if type(first) is bytearray else bytearray(first)
                for piece in chunks[1:]:
                    gathered += piece
                chunks[:] = [gathered]
            if (len(self._buf) - self._pos) + self._chunks_len < self._need:
                return
            self._buf = b"".join((self._buf[self._pos :], *self._chunks))
            self._chunks = []
            self._chunks_len = 0
        elif self._pos < len(self._buf):
            self._buf = self._buf[self._pos :] + data
        else:
            self._buf = data
        self._pos = 0

    def next_frame(self) -> Frame | None:
        frame = self._next(False)
        assert not isinstance(frame, SendFrame)
        return frame

    def next_frame_or_send(self) -> Frame | SendFrame | None:
        """Like ``next_frame``, but a SEND comes as a SendFrame (the broker's hot path: the
        common encodings are read without protobuf)."""
        buf, pos = self._buf, self._pos
        if not self._chunks and len(buf) - pos >= 12:
            total, cmd_size = _HEADER.unpack_from(buf, pos)
            end = pos + 4 + total
            # A whole frame within the limits holding a SEND of the usual shape (else _next
            # decodes it, or raises the error, as for any frame).
            if (end <= len(buf) and total + 4 <= self._max_frame and 4 < cmd_size <= total - 4
                    and buf.startswith(_SEND_PREFIX, pos + 8) and buf[pos + 11] == cmd_size - 4):
                cmd_end = pos + 8 + cmd_size
                send = _read_unbatched_send(buf, pos + 12, cmd_end) if 8 <= cmd_size <= 10 else None
                if send is None:
                    send = _read_send(buf, pos + 12, cmd_end)
                if send is not None:
                    self._pos = end
                    self._need = 4
                    return _new_tuple(SendFrame, (send, buf[cmd_end:end] if end > cmd_end else None))
        return self._next(True)

    def next_send_run(self, limit: int, budget: int) -> tuple[int, list[RunSend]] | None:
        """The SENDs one producer sent in a row at the head of the buffer, read in one pass: the
        producer id and at most ``limit`` SENDs, none after the one whose payload brings the run's
        payloads to ``budget`` bytes. A run holds only whole SEND frames of the shapes
        ``next_frame_or_send`` reads by hand, with a payload, not a chunk (no transaction: those
        shapes have none), none with a highest sequence id below its sequence id; it ends before
        any other frame, which ``next_frame_or_send`` then reads (None when the first frame is one)."""
        if self._chunks:
            return None
        buf, pos = self._buf, self._pos
        n = len(buf)
        max_frame = self._max_frame
        head_of = _RUN_HEAD.unpack_from
        sends: list[RunSend] = []
        append = sends.append
        producer_id = -1
        # The first 7 bytes of this producer's unbatched CommandSend, by command size (none until
        # the first SEND tells the producer): a frame that starts so has its sequence id read right here.
        head_for = _NO_HEADS.get
        # A whole SEND frame is more than 16 bytes: header, a command of 8 or more, a payload.
        while n - pos > 16 and limit > 0:
            total, cmd_size, head, b0 = head_of(buf, pos)
            end = pos + 4 + total
            cmd_end = pos + 8 + cmd_size
            if end > n or total + 4 > max_frame or cmd_end >= end:  # (cmd_end >= end: no payload)
                break
            seq = -1
            if head == head_for(cmd_size):
                if cmd_size == 8:
                    if b0 < 0x80:
                        seq = b0
                elif cmd_size == 9:
                    b1 = buf[pos + 16]
                    if b0 >= 0x80 and b1 < 0x80:
                        seq = (b0 & 0x7F) | (b1 << 7)
                else:
                    b1, b2 = buf[pos + 16], buf[pos + 17]
                    if b0 >= 0x80 and b1 >= 0x80 and b2 < 0x80:
                        seq = (b0 & 0x7F) | ((b1 & 0x7F) << 7) | (b2 << 14)
            if seq >= 0:
                append((seq, seq, 1, buf[cmd_end:end]))
            else:
                # Any other SEND of a shape _read_send reads (as next_frame_or_send checks it).
                if cmd_size <= 4 or not head.startswith(_SEND_PREFIX) or head[3] != cmd_size - 4:
                    break
                send = _read_send(buf, pos + 12, cmd_end)
                if send is None or send[4]:  # another shape, or a chunk
                    break
                pid = send[0]
                if pid != producer_id:
                    if producer_id >= 0:
                        break
                    producer_id = pid
                    if pid < 0x80:
                        head_for = _UNBATCHED_HEADS[pid].get
                highest = send[3]
                if highest is not None and highest < send[1]:
                    break  # (refused: read alone, as next_frame_or_send reads it)
                append((send[1], send[1] if highest is None else highest, send[2], buf[cmd_end:end]))
            pos = end
            limit -= 1
            budget -= end - cmd_end
            if budget <= 0:
                break
        if not sends:
            return None
        self._pos = pos
        self._need = 4
        return producer_id, sends

    def _next(self, sends: bool) -> Frame | SendFrame | None:
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
        if command.type not in _NO_STRINGS:
            mend_strings(command)
        payload = bytes(view[cmd_end:end]) if end > cmd_end else None
        self._pos = end
        self._need = 4
        if sends and command.type == _SEND:
            return SendFrame(send_command(command.send), payload)
        return Frame(command, payload)
