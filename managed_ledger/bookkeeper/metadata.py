"""Ledger metadata as BookKeeper keeps it in ZooKeeper, and where (sans-IO).

Format (BookKeeper's LedgerMetadataSerDe, version 3, the one 4.9+ writes)::

    b"BookieMetadataFormatVersion\\t3\\n" + varint(len(msg)) + LedgerMetadataFormat

Version 2 (protobuf text format after the same header) is also read. Every update is a compare-and-set on the znode
version, so writers never lose each other's changes.

Znode of a ledger (the "hierarchical" layout, BookKeeper's default and Pulsar's): ids below 2^31 - 1 use
``/ledgers/00/0001/L2345`` (the id as 10 digits split 2/4/4), larger ones the long form
``/ledgers/000/0000/0042/9496/L7296`` (19 digits split 3/4/4/4/4).

Ledger ids: create an EPHEMERAL_SEQUENTIAL ``/ledgers/idgen/ID-`` znode and take the 10-digit suffix ZooKeeper gave
it (then delete the znode); once ids would pass 2^31 - 1 BookKeeper switches to ``/ledgers/idgen-long/HOB-<high>``
(see `client.ZkLedgerStore.new_ledger_id`).
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from google.protobuf import text_format

from managed_ledger.bookkeeper.bookkeeper_data_formats_pb2 import LedgerMetadataFormat
from managed_ledger.bookkeeper.digest import INVALID_ENTRY_ID, DigestType

HEADER_PREFIX = b"BookieMetadataFormatVersion\t"
CURRENT_FORMAT_VERSION = 3
# The short (10-digit) path and the short id generator hold ids up to Integer.MAX_VALUE, exclusive.
MAX_SHORT_LEDGER_ID = 2**31 - 1
DEFAULT_LEDGERS_ROOT = "/ledgers"


class LedgerState(enum.IntEnum):
    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


class MetadataFormatError(ValueError):
    """Bytes that are not BookKeeper ledger metadata we can read."""


@dataclass(frozen=True)
class Segment:
    """From `first_entry_id` on (until the next segment), entries are striped over `ensemble` (bookie ids)."""

    first_entry_id: int
    ensemble: tuple[str, ...]


@dataclass(frozen=True)
class LedgerMetadata:
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    segments: tuple[Segment, ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = INVALID_ENTRY_ID  # meaningful once CLOSED
    length: int = 0  # meaningful once CLOSED
    digest_type: DigestType = DigestType.CRC32C
    password: bytes = b""
    custom_metadata: tuple[tuple[str, bytes], ...] = ()
    ctime: int | None = None  # written only when present (BookKeeper's storeCtime)
    ctoken: int = 0
    format_version: int = field(default=CURRENT_FORMAT_VERSION, compare=False)
    znode_ctime: int | None = field(default=None, compare=False)  # the znode's creation time; never written

    def __post_init__(self) -> None:
        if not self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1:
            raise ValueError(f"need E >= Qw >= Qa >= 1, got {self.ensemble_size}/{self.write_quorum}/{self.ack_quorum}")
        if not self.segments:
            raise ValueError("a ledger has at least one segment")
        for segment in self.segments:
            if len(segment.ensemble) != self.ensemble_size:
                raise ValueError(f"segment at {segment.first_entry_id} has {len(segment.ensemble)} bookies, "
                                 f"expected {self.ensemble_size}")

    @property
    def creation_time(self) -> int | None:
        """ms since the epoch: the stored ctime, else the znode's (as BookKeeper reports it)."""
        return self.ctime if self.ctime is not None else self.znode_ctime

    @property
    def is_closed(self) -> bool:
        return self.state == LedgerState.CLOSED

    @property
    def last_ensemble(self) -> Segment:
        return self.segments[-1]

    def ensemble_at(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble of the segment holding `entry_id`: the last one starting at or before it."""
        chosen = self.segments[0]
        for segment in self.segments:
            if segment.first_entry_id > entry_id:
                break
            chosen = segment
        return chosen.ensemble

    def write_set(self, entry_id: int) -> list[str]:
        """The Qw bookies an entry goes to: ensemble indices (e + i) % E, e the absolute entry id."""
        ensemble = self.ensemble_at(entry_id)
        return [ensemble[(entry_id + i) % self.ensemble_size] for i in range(self.write_quorum)]

    def closed(self, last_entry_id: int, length: int) -> LedgerMetadata:
        return replace(self, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)

    def safe_string(self) -> str:
        """As BookKeeper's LedgerMetadataImpl.toSafeString prints it (what Pulsar's internal stats show with
        ``?metadata=true``): the password omitted, the custom values in base64, ordered as Java's HashMap
        orders them."""
        fields = [f"formatVersion={self.format_version}", f"ensembleSize={self.ensemble_size}",
                  f"writeQuorumSize={self.write_quorum}", f"ackQuorumSize={self.ack_quorum}",
                  f"state={self.state.name}"]
        if self.is_closed:
            fields += [f"length={self.length}", f"lastEntryId={self.last_entry_id}"]
        fields += [f"digestType={_JAVA_DIGEST_NAMES[self.digest_type]}", "password=OMITTED"]
        ensembles = ", ".join(f"{s.first_entry_id}=[{', '.join(s.ensemble)}]" for s in self.segments)
        custom = ", ".join(f"{k}=base64:{base64.b64encode(v).decode()}"
                           for k, v in java_hash_map_order(self.custom_metadata))
        return f"LedgerMetadata{{{', '.join(fields)}, ensembles={{{ensembles}}}, customMetadata={{{custom}}}}}"

    def bookies(self) -> set[str]:
        """Every bookie of every ensemble."""
        return {bookie for segment in self.segments for bookie in segment.ensemble}

    def with_state(self, state: LedgerState) -> LedgerMetadata:
        return replace(self, state=state)

    def with_ensemble_from(self, first_entry_id: int, ensemble: tuple[str, ...]) -> LedgerMetadata:
        """A new last segment from `first_entry_id` (replacing the last one if it starts there)."""
        kept = tuple(s for s in self.segments if s.first_entry_id < first_entry_id)
        return replace(self, segments=(*kept, Segment(first_entry_id, ensemble)))


# ---- serialization -----------------------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if offset >= len(data) or shift > 63:
            raise MetadataFormatError("truncated varint length")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, offset


# BookKeeper's client API names of the digest types (DigestType.MAC where the stored enum says HMAC).
_JAVA_DIGEST_NAMES = {DigestType.CRC32: "CRC32", DigestType.HMAC: "MAC", DigestType.CRC32C: "CRC32C",
                      DigestType.DUMMY: "DUMMY"}


def _java_string_hash(text: str) -> int:
    h = 0
    for unit in _utf16_units(text):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def java_hash_map_order(items: Iterable[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """``items`` in the order a java.util.HashMap they were put into (in this order) iterates them: by bucket
    (the spread String hash masked by the table size), then as put."""
    entries = list(items)
    size = 16
    while len(entries) > size * 3 // 4:
        size *= 2

    def bucket(key: str) -> int:
        h = _java_string_hash(key)
        return (h ^ (h >> 16)) & (size - 1)

    return sorted(entries, key=lambda kv: bucket(kv[0]))  # (sorted is stable: ties keep the order put)


def to_proto(metadata: LedgerMetadata) -> LedgerMetadataFormat:
    """The protobuf with the fields BookKeeper's v3 writer sets (lastEntryId, password, cToken always)."""
    msg = LedgerMetadataFormat(
        quorumSize=metadata.write_quorum,
        ackQuorumSize=metadata.ack_quorum,
        ensembleSize=metadata.ensemble_size,
        length=metadata.length,
        lastEntryId=metadata.last_entry_id,
        state=int(metadata.state),  # type: ignore[arg-type]
        digestType=int(metadata.digest_type),  # type: ignore[arg-type]
        password=metadata.password,
        cToken=metadata.ctoken,
    )
    if metadata.ctime is not None:
        msg.ctime = metadata.ctime
    for segment in metadata.segments:
        msg.segment.add(ensembleMember=list(segment.ensemble), firstEntryId=segment.first_entry_id)
    for key, value in metadata.custom_metadata:
        msg.customMetadata.add(key=key, value=value)
    return msg


def serialize(metadata: LedgerMetadata) -> bytes:
    body = to_proto(metadata).SerializeToString()
    return HEADER_PREFIX + str(CURRENT_FORMAT_VERSION).encode() + b"\n" + _varint(len(body)) + body


def parse(data: bytes, znode_ctime: int | None = None) -> LedgerMetadata:
    """Read metadata of format version 2 or 3; `znode_ctime` is kept apart (not written back), as BookKeeper does."""
    if not data.startswith(HEADER_PREFIX):
        raise MetadataFormatError("no BookieMetadataFormatVersion header")
    end = data.find(b"\n", len(HEADER_PREFIX))
    digits = data[len(HEADER_PREFIX) : end]
    if end < 0 or not digits.isdigit() or len(digits) > 10:
        raise MetadataFormatError("bad format version line")
    version = int(digits)
    msg = LedgerMetadataFormat()
    try:
        if version == 3:
            length, start = _read_varint(data, end + 1)
            if start + length > len(data):
                raise MetadataFormatError("metadata shorter than its length prefix")
            msg.ParseFromString(data[start : start + length])
        elif version == 2:
            text_format.Parse(data[end + 1 :].decode(), msg)
        else:
            raise MetadataFormatError(f"metadata format version {version} is not supported")
    except MetadataFormatError:
        raise
    except Exception as e:  # protobuf's DecodeError / ParseError / UnicodeDecodeError
        raise MetadataFormatError(f"undecodable ledger metadata: {e}") from e
    return from_proto(msg, version, znode_ctime)


def from_proto(msg: LedgerMetadataFormat, version: int = CURRENT_FORMAT_VERSION,
               znode_ctime: int | None = None) -> LedgerMetadata:
    state = LedgerState(msg.state)
    closed = state == LedgerState.CLOSED
    return LedgerMetadata(
        ensemble_size=msg.ensembleSize,
        write_quorum=msg.quorumSize,
        ack_quorum=msg.ackQuorumSize if msg.HasField("ackQuorumSize") else msg.quorumSize,
        segments=tuple(Segment(s.firstEntryId, tuple(s.ensembleMember)) for s in msg.segment),
        state=state,
        last_entry_id=msg.lastEntryId if closed and msg.HasField("lastEntryId") else INVALID_ENTRY_ID,
        length=msg.length if closed else 0,
        digest_type=DigestType(msg.digestType) if msg.HasField("digestType") else DigestType.CRC32,
        password=msg.password,
        custom_metadata=tuple((kv.key, kv.value) for kv in msg.customMetadata),
        ctime=msg.ctime if msg.HasField("ctime") else None,
        ctoken=msg.cToken,
        format_version=version,
        znode_ctime=znode_ctime,
    )


# ---- znode layout ------------------------------------------------------------------------------------------------


def ledger_path(ledger_id: int, root: str = DEFAULT_LEDGERS_ROOT) -> str:
    """The hybrid hierarchical path of a ledger's metadata znode."""
    if ledger_id < 0:
        raise ValueError(f"negative ledger id {ledger_id}")
    if ledger_id < MAX_SHORT_LEDGER_ID:
        s = f"{ledger_id:010d}"
        return f"{root}/{s[0:2]}/{s[2:6]}/L{s[6:10]}"
    s = f"{ledger_id:019d}"
    return f"{root}/{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"


def ledger_id_from_path(path: str, root: str = DEFAULT_LEDGERS_ROOT) -> int:
    """The inverse of `ledger_path` (for listing ledgers)."""
    if not path.startswith(root + "/"):
        raise ValueError(f"{path} is not under {root}")
    parts = path[len(root) + 1 :].split("/")
    if len(parts) not in (3, 5) or not parts[-1].startswith("L"):
        raise ValueError(f"{path} is not a ledger znode path")
    digits = "".join(parts[:-1]) + parts[-1][1:]
    if not digits.isdigit() or len(digits) != (10 if len(parts) == 3 else 19):
        raise ValueError(f"{path} is not a ledger znode path")
    return int(digits)


def sequential_suffix(name: str, prefix: str = "ID-") -> int:
    """The number ZooKeeper appended to a sequential znode's name (10 digits)."""
    name = name.rsplit("/", 1)[-1]
    if not name.startswith(prefix) or not name[len(prefix) :].isdigit():
        raise ValueError(f"{name!r} is not a {prefix}<sequence> znode")
    return int(name[len(prefix) :])
