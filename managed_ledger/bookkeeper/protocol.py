"""BookKeeper's v2 binary bookie protocol (what Pulsar's BookKeeper client speaks by default), sans-IO.

Every message, both ways, is a frame: ``u32 length`` (big-endian, not counting itself) + body. A body starts with a
``u32`` packet header ``version << 24 | opCode << 16 | flags`` (version 2). Then:

======================  ==============================================================================================
ADD request             masterKey[20] · entry (see `digest`: the bookie takes ledger/entry ids from the entry itself)
ADD response            i32 rc · i64 ledgerId · i64 entryId
READ request            i64 ledgerId · i64 entryId · masterKey[20] only when FLAG_DO_FENCING is set
READ response           i32 rc · i64 ledgerId · i64 entryId · entry bytes (only when rc == EOK)
======================  ==============================================================================================

Reading entry -1 asks a bookie for the last entry it stores (how LAC reads and fencing find the ledger's end).

v2 responses carry no request id: a client matches them by (op, ledgerId, entryId), and responses to different
requests may come in any order (reads run on a thread pool, adds answer after the journal write).

A bookie decides per connection whether it speaks v2 or v3 (protobuf) from the first frame, for good: never send v3
frames on a connection that has spoken v2.

Malformed input (a length over the limit, a header with another version or an unknown op, a body too short for its
op) raises `ProtocolError`; the connection is then unusable and must be closed, since the framing may be lost.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import NamedTuple

from managed_ledger.bookkeeper.digest import MASTER_KEY_LENGTH

PROTOCOL_VERSION = 2
# Largest frame body accepted, as Pulsar's bookkeeper.conf sets nettyMaxFrameSizeBytes (5 MiB + 10 KiB); a bookie
# closes the connection on a larger frame.
MAX_FRAME_SIZE = 5 * 1024 * 1024 + 10 * 1024
# Entry id -1 in a READ: "the last entry you have" (BookieProtocol.LAST_ADD_CONFIRMED).
LAST_ADD_CONFIRMED = -1

_U32 = struct.Struct(">I")
_READ_REQ = struct.Struct(">Iqq")  # header, ledgerId, entryId
_RESP = struct.Struct(">Iiqq")  # header, rc, ledgerId, entryId: every v2 ADD/READ response starts so
_LEDGER_ENTRY = struct.Struct(">qq")


class OpCode(enum.IntEnum):
    ADD_ENTRY = 1
    READ_ENTRY = 2
    AUTH = 3
    READ_LAC = 4
    WRITE_LAC = 5
    GET_BOOKIE_INFO = 6
    BATCH_READ_ENTRY = 7


class Flag(enum.IntFlag):
    NONE = 0
    DO_FENCING = 0x0001  # READ: fence the ledger on this bookie first (needs the master key)
    RECOVERY_ADD = 0x0002  # ADD: allowed on a fenced ledger (a recovering reader re-replicating entries)
    HIGH_PRIORITY = 0x0004


class StatusCode(enum.IntEnum):
    """v2 return codes (BookieProtocol.java); the v3 protobuf codes differ (ENOLEDGER=402 ...)."""

    EOK = 0
    ENOLEDGER = 1
    ENOENTRY = 2
    EBADREQ = 100
    EIO = 101
    EUA = 102
    EBADVERSION = 103
    EFENCED = 104
    EREADONLY = 105
    ETOOMANYREQUESTS = 106
    EUNKNOWNLEDGERSTATE = 107


class ProtocolError(ValueError):
    """The peer broke the framing or sent an undecodable message; close the connection."""


_STATUS_CODES: dict[int, StatusCode] = {int(code): code for code in StatusCode}


def _status(rc: int) -> StatusCode | int:
    # (A dict lookup: StatusCode(rc) costs microseconds on every response.) An unknown code is reported as is;
    # callers treat it as an error.
    return _STATUS_CODES.get(rc, rc)


def pack_header(op: OpCode, flags: int = 0) -> int:
    # int() first: bit operations on an IntFlag go through enum's slow __and__ / __or__.
    return (PROTOCOL_VERSION << 24) | (int(op) << 16) | (int(flags) & 0xFFFF)


def unpack_header(value: int) -> tuple[int, int, int]:
    return value >> 24, (value >> 16) & 0xFF, value & 0xFFFF


# ---- messages ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AddRequest:
    master_key: bytes
    entry: bytes  # the packaged entry (digest.Digester.package)
    flags: Flag = Flag.NONE

    @property
    def ledger_id(self) -> int:
        return int(_LEDGER_ENTRY.unpack_from(self.entry)[0])

    @property
    def entry_id(self) -> int:
        return int(_LEDGER_ENTRY.unpack_from(self.entry)[1])


@dataclass(frozen=True)
class ReadRequest:
    ledger_id: int
    entry_id: int
    flags: Flag = Flag.NONE
    master_key: bytes | None = None  # required with DO_FENCING, not sent otherwise


# (NamedTuples: one is built per response on the publish path, and they cost a fraction of a frozen dataclass.)
class AddResponse(NamedTuple):
    status: StatusCode | int
    ledger_id: int
    entry_id: int


class ReadResponse(NamedTuple):
    status: StatusCode | int
    ledger_id: int
    entry_id: int
    entry: bytes  # empty unless status is EOK


Request = AddRequest | ReadRequest
Response = AddResponse | ReadResponse


# ---- encoders ----------------------------------------------------------------------------------------------------


_ADD_PREFIX = struct.Struct(">II")  # frame length, packet header
_ADD_RESPONSE_HEADER = (PROTOCOL_VERSION << 8) | OpCode.ADD_ENTRY  # the top two bytes of an ADD response's header
_ADD_RESPONSE_FRAME = struct.Struct(">IIiqq")  # frame length (24), header, rc, ledgerId, entryId


def _frame(body: bytes) -> bytes:
    if len(body) > MAX_FRAME_SIZE:
        raise ValueError(f"frame body of {len(body)} bytes exceeds {MAX_FRAME_SIZE}")
    return _U32.pack(len(body)) + body


class AddFrames:
    """The ADD frames of one writer (one master key, one set of flags): the packet header made once, the entry given
    as its head (`Digester.head`) and payload, joined into the frame in one copy. A writer encodes an entry once and
    sends the same bytes to every bookie of its write set."""

    def __init__(self, master_key: bytes, flags: int = 0) -> None:
        if len(master_key) != MASTER_KEY_LENGTH:
            raise ValueError(f"master key must be {MASTER_KEY_LENGTH} bytes")
        self._key = master_key
        self._header = pack_header(OpCode.ADD_ENTRY, flags)

    def frame(self, entry_head: bytes, payload: bytes) -> bytes:
        length = 4 + MASTER_KEY_LENGTH + len(entry_head) + len(payload)
        if length > MAX_FRAME_SIZE:
            raise ValueError(f"frame body of {length} bytes exceeds {MAX_FRAME_SIZE}")
        return b"".join((_ADD_PREFIX.pack(length, self._header), self._key, entry_head, payload))


def encode_request(request: Request) -> bytes:
    if isinstance(request, AddRequest):
        return AddFrames(request.master_key, request.flags).frame(b"", request.entry)
    body = _READ_REQ.pack(pack_header(OpCode.READ_ENTRY, request.flags), request.ledger_id, request.entry_id)
    if request.flags & Flag.DO_FENCING:
        if request.master_key is None or len(request.master_key) != MASTER_KEY_LENGTH:
            raise ValueError(f"a fencing read needs a {MASTER_KEY_LENGTH}-byte master key")
        body += request.master_key
    return _frame(body)


def encode_response(response: Response) -> bytes:
    """What a bookie sends (for fake bookies in tests and for round trips)."""
    if isinstance(response, AddResponse):
        return _frame(_RESP.pack(pack_header(OpCode.ADD_ENTRY), int(response.status), response.ledger_id,
                                 response.entry_id))
    head = _RESP.pack(pack_header(OpCode.READ_ENTRY), int(response.status), response.ledger_id, response.entry_id)
    return _frame(head + response.entry)


# ---- decoders ----------------------------------------------------------------------------------------------------


class _FrameBuffer:
    """Splits a byte stream into frame bodies; a length is checked against the limit before its body is buffered."""

    def __init__(self, max_frame_size: int) -> None:
        self._buffer = bytearray()
        self._max = max_frame_size

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        buffer = self._buffer
        buffer += data
        bodies: list[bytes] = []
        offset = 0
        while len(buffer) - offset >= 4:
            (length,) = _U32.unpack_from(buffer, offset)
            if length > self._max:
                raise ProtocolError(f"frame of {length} bytes exceeds the {self._max}-byte limit")
            if len(buffer) - offset - 4 < length:
                break
            bodies.append(bytes(buffer[offset + 4 : offset + 4 + length]))
            offset += 4 + length
        if offset:
            del buffer[:offset]
        return bodies

    @property
    def buffered(self) -> int:
        return len(self._buffer)


def _check(body: bytes, minimum: int) -> tuple[int, int]:
    """(op, flags) of a body that is at least `minimum` bytes long and speaks version 2."""
    if len(body) < 4:
        raise ProtocolError(f"frame of {len(body)} bytes has no packet header")
    version, op, flags = unpack_header(_U32.unpack_from(body)[0])
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {version}, expected {PROTOCOL_VERSION}")
    if len(body) < minimum:
        raise ProtocolError(f"op {op} frame of {len(body)} bytes is shorter than {minimum}")
    return op, flags


class ResponseDecoder:
    """Client side: feed bytes from a bookie, get responses."""

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self._frames = _FrameBuffer(max_frame_size)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Response]:
        if data and not self._frames.buffered and len(data) % _ADD_RESPONSE_FRAME.size == 0:
            # The common case on the publish path: nothing left over and only whole ADD responses, decoded in one
            # C loop with no copy per frame (else the general path below from the start).
            responses: list[Response] = []
            for length, header, rc, ledger_id, entry_id in _ADD_RESPONSE_FRAME.iter_unpack(data):
                if length != _RESP.size or header >> 16 != _ADD_RESPONSE_HEADER:
                    break
                responses.append(AddResponse(_STATUS_CODES.get(rc, rc), ledger_id, entry_id))
            else:
                return responses
        return [self._decode(body) for body in self._frames.feed(data)]

    @property
    def buffered(self) -> int:
        return self._frames.buffered

    @staticmethod
    def _decode(body: bytes) -> Response:
        if len(body) == _RESP.size:  # the common case, an ADD response, decoded with one unpack
            header, rc, ledger_id, entry_id = _RESP.unpack_from(body)
            if header >> 16 == _ADD_RESPONSE_HEADER:
                return AddResponse(_STATUS_CODES.get(rc, rc), ledger_id, entry_id)
        op, _ = _check(body, _RESP.size)
        _, rc, ledger_id, entry_id = _RESP.unpack_from(body)
        if op == OpCode.ADD_ENTRY:
            if len(body) != _RESP.size:
                raise ProtocolError(f"ADD response of {len(body)} bytes, expected {_RESP.size}")
            return AddResponse(_status(rc), ledger_id, entry_id)
        if op == OpCode.READ_ENTRY:
            return ReadResponse(_status(rc), ledger_id, entry_id, body[_RESP.size :])
        raise ProtocolError(f"unexpected response op {op}")


class RequestDecoder:
    """Bookie side (fake bookies in tests): feed bytes from a client, get requests."""

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self._frames = _FrameBuffer(max_frame_size)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Request]:
        return [self._decode(body) for body in self._frames.feed(data)]

    @staticmethod
    def _decode(body: bytes) -> Request:
        op, flags = _check(body, 4)
        if op == OpCode.ADD_ENTRY:
            # The master key, then at least the ledger and entry ids of the entry.
            _check(body, 4 + MASTER_KEY_LENGTH + _LEDGER_ENTRY.size)
            return AddRequest(body[4 : 4 + MASTER_KEY_LENGTH], body[4 + MASTER_KEY_LENGTH :], Flag(flags))
        if op == OpCode.READ_ENTRY:
            fencing = bool(flags & Flag.DO_FENCING)
            expected = _READ_REQ.size + (MASTER_KEY_LENGTH if fencing else 0)
            if len(body) != expected:
                raise ProtocolError(f"READ request of {len(body)} bytes, expected {expected}")
            _, ledger_id, entry_id = _READ_REQ.unpack_from(body)
            return ReadRequest(ledger_id, entry_id, Flag(flags), body[_READ_REQ.size :] if fencing else None)
        raise ProtocolError(f"unsupported request op {op}")
