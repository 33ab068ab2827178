"""Pulsar's managed-ledger metadata formats and paths (sans-IO): what the znodes and cursor ledgers hold.

- The managed ledger's znode ``/managed-ledgers/<name>`` holds a ``ManagedLedgerInfo``: the ledger list (id, entries,
  size, close timestamp in ms; the current ledger only has its id) and properties. Pulsar names a topic's managed
  ledger ``tenant/namespace/persistent/<URL-encoded local name>`` (``TopicName.getPersistenceNamingEncoding``).
- Each durable cursor is a child znode, named by its URL-encoded name, holding a ``ManagedCursorInfo``: the cursor
  ledger's id (or -1) and a snapshot of the position. Each entry of a cursor ledger is a ``PositionInfo``.
- Ranges of individually deleted entries are open below and closed above (Guava ``Range.openClosed``): our closed
  range ``[l:a, l:b]`` is ``MessageRange((l, a-1), (l, b)]``.
- Binary protobuf, uncompressed (Pulsar's default ``managedLedgerInfoCompressionType=NONE``). A value starting with
  Pulsar's compression magic is refused with a clear error rather than misread.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote_plus

from google.protobuf.message import DecodeError, Message

from managed_ledger.bookkeeper.ml_data_formats_pb2 import (
    ManagedCursorInfo,
    ManagedLedgerInfo,
    MessageRange,
    PositionInfo,
)
from managed_ledger.cursor_base import CursorRecord
from managed_ledger.position import Position
from managed_ledger.range_set import PositionRangeSet

# Pulsar's root of managed-ledger znodes (PulsarClusterMetadataSetup creates it).
MANAGED_LEDGERS_ROOT = "/managed-ledgers"
# Pulsar's managedLedgerMaxUnackedRangesToPersist: ranges kept in one PositionInfo.
MAX_RANGES_TO_PERSIST = 10_000
# Pulsar's managedLedgerMaxUnackedRangesToPersistInMetadataStore: ranges kept in a cursor znode.
MAX_RANGES_IN_METADATA_STORE = 1000
# First two bytes of a compressed ManagedLedgerInfo / ManagedCursorInfo (MetaStoreImpl.MAGIC_MANAGED_INFO_METADATA).
COMPRESSION_MAGIC = 0x4778

_URL_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*_")


class MetadataFormatError(ValueError):
    """A znode or cursor-ledger entry that is not Pulsar managed-ledger metadata we can read."""


def url_encode(text: str) -> str:
    """Java's ``URLEncoder.encode(text, UTF-8)`` (Pulsar's ``Codec.encode``): space is ``+``, other bytes outside
    ``[A-Za-z0-9.-*_]`` are ``%XX``."""
    out = []
    for byte in text.encode():
        if byte in _URL_SAFE:
            out.append(chr(byte))
        elif byte == 0x20:
            out.append("+")
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def url_decode(text: str) -> str:
    """The inverse of ``url_encode`` (Java's ``URLDecoder.decode``)."""
    return unquote_plus(text)


def ledger_path(root: str, name: str) -> str:
    return f"{root}/{name}"


def cursor_path(root: str, name: str, cursor: str) -> str:
    return f"{root}/{name}/{url_encode(cursor)}"


def ledger_custom_metadata(name: str, cursor: str | None = None) -> tuple[tuple[str, bytes], ...]:
    """The custom metadata Pulsar gives the ledgers of a managed ledger, and its cursor ledgers
    (``LedgerMetadataUtils.buildBaseManagedLedgerMetadata`` / ``buildAdditionalMetadataForCursor``)."""
    base = (("application", b"pulsar"), ("component", b"managed-ledger"), ("pulsar/managed-ledger", name.encode()))
    return base if cursor is None else (*base, ("pulsar/cursor", cursor.encode()))


# -- the managed ledger's znode -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredLedger:
    """One LedgerInfo. ``entries``/``size`` are None for the current (open) ledger; ``timestamp_ms`` is 0 then."""

    ledger_id: int
    entries: int | None = None
    size: int | None = None
    timestamp_ms: int = 0


@dataclass(frozen=True)
class StoredManagedLedger:
    ledgers: tuple[StoredLedger, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()
    terminated: Position | None = None


def encode_ledger_info(info: StoredManagedLedger) -> bytes:
    message = ManagedLedgerInfo()
    for ledger in info.ledgers:
        item = message.ledgerInfo.add(ledgerId=ledger.ledger_id)
        if ledger.entries is not None:
            item.entries = ledger.entries
        if ledger.size is not None:
            item.size = ledger.size
        item.timestamp = ledger.timestamp_ms
    if info.terminated is not None:
        message.terminatedPosition.ledgerId, message.terminatedPosition.entryId = info.terminated
    for key, value in info.properties:
        message.properties.add(key=key, value=value)
    return message.SerializeToString()


def decode_ledger_info(data: bytes) -> StoredManagedLedger:
    """Parse a managed ledger's znode (empty: a managed ledger without ledgers yet)."""
    message = ManagedLedgerInfo()
    _parse(message, data, "ManagedLedgerInfo")
    ledgers = tuple(
        StoredLedger(item.ledgerId, item.entries if item.HasField("entries") else None,
                     item.size if item.HasField("size") else None, item.timestamp)
        for item in message.ledgerInfo
    )
    terminated = None
    if message.HasField("terminatedPosition"):
        terminated = Position(message.terminatedPosition.ledgerId, message.terminatedPosition.entryId)
    return StoredManagedLedger(ledgers, tuple((kv.key, kv.value) for kv in message.properties), terminated)


# -- cursors ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredCursorInfo:
    """A cursor's znode: the cursor ledger (-1: none, the snapshot is the state) and the snapshot."""

    cursors_ledger_id: int
    record: CursorRecord


def encode_position_info(record: CursorRecord, max_ranges: int = MAX_RANGES_TO_PERSIST) -> bytes:
    """One cursor-ledger entry. Past ``max_ranges`` the ranges furthest from the mark-delete are left out (those
    entries may be delivered again after a recovery; an unacknowledged one is never skipped)."""
    message = PositionInfo(ledgerId=record.mark_delete.ledger_id, entryId=record.mark_delete.entry_id)
    _fill_ranges(message.individualDeletedMessages, record.individually_deleted, max_ranges)
    _fill_properties(message, record.properties)
    _fill_batches(message, record.batch_acks, max_ranges)
    return message.SerializeToString()


def decode_position_info(data: bytes) -> CursorRecord:
    message = PositionInfo()
    _parse(message, data, "PositionInfo")
    record = CursorRecord(Position(message.ledgerId, message.entryId), _ranges(message.individualDeletedMessages),
                          {p.name: p.value for p in message.properties}, _batches(message))
    for item in message.individualDeletedMessageRanges:  # Pulsar's long-array form: not written by us
        raise MetadataFormatError(f"PositionInfo uses individualDeletedMessageRanges (key {item.key}), "
                                  "which this broker does not read")
    return record


def encode_cursor_info(cursors_ledger_id: int, record: CursorRecord,
                       max_ranges: int = MAX_RANGES_IN_METADATA_STORE) -> bytes:
    message = ManagedCursorInfo(cursorsLedgerId=cursors_ledger_id, markDeleteLedgerId=record.mark_delete.ledger_id,
                                markDeleteEntryId=record.mark_delete.entry_id)
    _fill_ranges(message.individualDeletedMessages, record.individually_deleted, max_ranges)
    _fill_properties(message, record.properties)
    if record.last_active is not None:
        message.lastActive = int(record.last_active * 1000)
    _fill_batches(message, record.batch_acks, max_ranges)
    return message.SerializeToString()


def decode_cursor_info(data: bytes) -> StoredCursorInfo:
    message = ManagedCursorInfo()
    _parse(message, data, "ManagedCursorInfo")
    record = CursorRecord(Position(message.markDeleteLedgerId, message.markDeleteEntryId),
                          _ranges(message.individualDeletedMessages), {p.name: p.value for p in message.properties},
                          _batches(message), message.lastActive / 1000 if message.HasField("lastActive") else None)
    return StoredCursorInfo(message.cursorsLedgerId, record)


# -- helpers ------------------------------------------------------------------------------------------------------


def _parse(message: Message, data: bytes, what: str) -> None:
    if len(data) >= 2 and struct.unpack_from(">H", data)[0] == COMPRESSION_MAGIC:
        raise MetadataFormatError(f"{what} is compressed (Pulsar's managedLedgerInfoCompressionType): not supported")
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise MetadataFormatError(f"not a {what}: {exc}") from exc
    if not message.IsInitialized():
        raise MetadataFormatError(f"{what} lacks required fields")


def _fill_ranges(target: Iterable[MessageRange], ranges: PositionRangeSet, max_ranges: int) -> None:
    container = target  # a repeated composite field
    for count, (first, last) in enumerate(ranges):
        if count == max_ranges:
            break
        item = container.add()  # type: ignore[attr-defined]
        item.lowerEndpoint.ledgerId, item.lowerEndpoint.entryId = first.ledger_id, first.entry_id - 1
        item.upperEndpoint.ledgerId, item.upperEndpoint.entryId = last.ledger_id, last.entry_id


def _ranges(items: Iterable[MessageRange]) -> PositionRangeSet:
    ranges = PositionRangeSet()
    for item in items:
        lower, upper = item.lowerEndpoint, item.upperEndpoint
        if lower.ledgerId != upper.ledgerId:
            raise MetadataFormatError(f"a deleted range spans ledgers {lower.ledgerId}..{upper.ledgerId}")
        if upper.entryId > lower.entryId:
            ranges.add_range(upper.ledgerId, lower.entryId + 1, upper.entryId)
    return ranges


def _fill_properties(message: ManagedCursorInfo | PositionInfo, properties: Mapping[str, int]) -> None:
    for name, value in sorted(properties.items()):
        message.properties.add(name=name, value=value)


def _fill_batches(message: ManagedCursorInfo | PositionInfo, batch_acks: Mapping[Position, list[int]],
                  max_entries: int) -> None:
    for position, words in sorted(batch_acks.items())[:max_entries]:
        item = message.batchedEntryDeletionIndexInfo.add()
        item.position.ledgerId, item.position.entryId = position
        item.deleteSet.extend(_signed64(w) for w in words)


def _batches(message: ManagedCursorInfo | PositionInfo) -> dict[Position, list[int]]:
    return {Position(item.position.ledgerId, item.position.entryId): list(item.deleteSet)
            for item in message.batchedEntryDeletionIndexInfo}


def _signed64(word: int) -> int:
    """Ack-set words are Java longs: an unsigned 64-bit word with the top bit set is stored negative."""
    return word - (1 << 64) if word >= 1 << 63 else word
