"""Pulsar's managed-ledger metadata formats and paths (sans-IO): what the znodes and cursor ledgers hold.

- The managed ledger's znode ``/managed-ledgers/<name>`` holds a ``ManagedLedgerInfo``: the ledger list (id, entries,
  size, close timestamp in ms; the current ledger only has its id) and properties. Pulsar names a topic's managed
  ledger ``tenant/namespace/persistent/<URL-encoded local name>`` (``TopicName.getPersistenceNamingEncoding``).
- Each durable cursor is a child znode, named by its URL-encoded name, holding a ``ManagedCursorInfo``: the cursor
  ledger's id (or -1) and a snapshot of the position. Each entry of a cursor ledger is a ``PositionInfo``.
- Ranges of individually deleted entries are open below and closed above (Guava ``Range.openClosed``): our closed
  range ``[l:a, l:b]`` is ``MessageRange((l, a-1), (l, b)]``.
- Binary protobuf, uncompressed by default (Pulsar's ``managedLedgerInfoCompressionType=NONE``). Compressed values
  (Pulsar's ``MetaStoreImpl.compressManagedInfo``) are always read, and written when ``MetadataFormats`` says so:
  ``[magic 0x4778: u16][metadata size: i32][ManagedLedgerInfoMetadata / ManagedCursorInfoMetadata][payload]``, all
  big-endian, the payload compressed with Pulsar's message codecs (LZ4 raw block, ZLIB with its header, ZSTD frame,
  raw Snappy), and only when the serialized value is larger than the threshold (16 KiB by default).
- Individually deleted ranges in a cursor-ledger entry come as ``MessageRange``s, or (Pulsar's
  ``managedLedgerPersistIndividualAckAsLongArray``) as ``individualDeletedMessageRanges``: per ledger id, the words
  of a ``java.util.BitSet`` of deleted entry ids (``BitSet.toLongArray``: bit ``e % 64`` of word ``e // 64``).
  Both are read; which one is written follows ``MetadataFormats``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote_plus

from google.protobuf.message import DecodeError, Message

import compression_codecs
from managed_ledger.api import MAX_BATCH_DELETED_INDEX_TO_PERSIST, MAX_UNACKED_RANGES_TO_PERSIST
from managed_ledger.bookkeeper.ml_data_formats_pb2 import (
    CompressionType,
    ManagedCursorInfo,
    ManagedCursorInfoMetadata,
    ManagedLedgerInfo,
    ManagedLedgerInfoMetadata,
    MessageRange,
    PositionInfo,
)
from managed_ledger.cursor_base import CursorRecord
from managed_ledger.position import Position
from managed_ledger.range_set import PositionRangeSet

# Pulsar's root of managed-ledger znodes (PulsarClusterMetadataSetup creates it).
MANAGED_LEDGERS_ROOT = "/managed-ledgers"
# Pulsar's managedLedgerMaxUnackedRangesToPersistInMetadataStore: ranges kept in a cursor znode.
MAX_RANGES_IN_METADATA_STORE = 1000
# First two bytes of a compressed ManagedLedgerInfo / ManagedCursorInfo (MetaStoreImpl.MAGIC_MANAGED_INFO_METADATA).
COMPRESSION_MAGIC = 0x4778
_HEADER = struct.Struct(">Hi")  # the magic (Java short) and the metadata's size (Java int)
# Pulsar's managedLedgerInfoCompressionThresholdInBytes / managedCursorInfoCompressionThresholdInBytes: values up to
# this size are stored uncompressed even when a codec is configured.
DEFAULT_COMPRESSION_THRESHOLD_BYTES = 16 * 1024
# Pulsar's CompressionType names (the configuration values) -> the enum.
COMPRESSION_TYPES: dict[str, int] = compression_codecs.BY_NAME
_WORD_BITS = 64

_URL_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*_")


class MetadataFormatError(ValueError):
    """A znode or cursor-ledger entry that is not Pulsar managed-ledger metadata we can read."""


@dataclass(frozen=True)
class MetadataFormats:
    """How metadata is written (reading takes every form): Pulsar's managedLedgerInfoCompressionType and
    ...ThresholdInBytes, managedCursorInfoCompressionType and ...ThresholdInBytes, and
    managedLedgerPersistIndividualAckAsLongArray (false in Pulsar 4.0)."""

    ledger_info_compression: int = CompressionType.NONE
    ledger_info_threshold: int = DEFAULT_COMPRESSION_THRESHOLD_BYTES
    cursor_info_compression: int = CompressionType.NONE
    cursor_info_threshold: int = DEFAULT_COMPRESSION_THRESHOLD_BYTES
    acks_as_long_array: bool = False

    @classmethod
    def from_names(cls, ledger_info: str = "NONE", cursor_info: str = "NONE", **kwargs: int | bool) -> MetadataFormats:
        """From Pulsar's setting values; ValueError names a bad one."""
        def codec(key: str, name: str) -> int:
            try:
                return COMPRESSION_TYPES[name.strip().upper()]
            except KeyError:
                raise ValueError(f"{key}={name!r}: expected one of {', '.join(COMPRESSION_TYPES)}") from None

        return cls(codec("managedLedgerInfoCompressionType", ledger_info),
                   cursor_info_compression=codec("managedCursorInfoCompressionType", cursor_info),
                   **kwargs)  # type: ignore[arg-type]


PLAIN = MetadataFormats()


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
    """One LedgerInfo. ``entries``/``size`` are None for the current (open) ledger; ``timestamp_ms`` is 0 then.
    ``offload_context``: its OffloadContext as stored (b"": none), kept as it is (a Pulsar broker's offload)."""

    ledger_id: int
    entries: int | None = None
    size: int | None = None
    timestamp_ms: int = 0
    offload_context: bytes = b""


@dataclass(frozen=True)
class StoredManagedLedger:
    ledgers: tuple[StoredLedger, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()
    terminated: Position | None = None


def encode_ledger_info(info: StoredManagedLedger, formats: MetadataFormats = PLAIN) -> bytes:
    message = ManagedLedgerInfo()
    for ledger in info.ledgers:
        item = message.ledgerInfo.add(ledgerId=ledger.ledger_id)
        if ledger.entries is not None:
            item.entries = ledger.entries
        if ledger.size is not None:
            item.size = ledger.size
        item.timestamp = ledger.timestamp_ms
        if ledger.offload_context:
            item.offloadContext.ParseFromString(ledger.offload_context)
    if info.terminated is not None:
        message.terminatedPosition.ledgerId, message.terminatedPosition.entryId = info.terminated
    for key, value in info.properties:
        message.properties.add(key=key, value=value)
    return _compressed(message.SerializeToString(), formats.ledger_info_compression, formats.ledger_info_threshold,
                       ManagedLedgerInfoMetadata)


def decode_ledger_info(data: bytes) -> StoredManagedLedger:
    """Parse a managed ledger's znode (empty: a managed ledger without ledgers yet)."""
    message = ManagedLedgerInfo()
    _parse(message, _uncompressed(data, ManagedLedgerInfoMetadata, "ManagedLedgerInfo"), "ManagedLedgerInfo")
    ledgers = tuple(
        StoredLedger(item.ledgerId, item.entries if item.HasField("entries") else None,
                     item.size if item.HasField("size") else None, item.timestamp,
                     item.offloadContext.SerializeToString() if item.HasField("offloadContext") else b"")
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


def encode_position_info(record: CursorRecord, max_ranges: int = MAX_UNACKED_RANGES_TO_PERSIST,
                         formats: MetadataFormats = PLAIN) -> bytes:
    """One cursor-ledger entry. Past ``max_ranges`` (the managed ledger's managedLedgerMaxUnackedRangesToPersist) the
    ranges furthest from the mark-delete are left out (those entries may be delivered again after a recovery; an
    unacknowledged one is never skipped). In the long-array form the limit counts deleted entries, ledger by ledger,
    as Pulsar's ``toRanges``. The partly acknowledged batches are bounded apart, at Pulsar's
    managedLedgerMaxBatchDeletedIndexToPersist default."""
    message = PositionInfo(ledgerId=record.mark_delete.ledger_id, entryId=record.mark_delete.entry_id)
    if formats.acks_as_long_array:
        _fill_long_arrays(message, record.individually_deleted, max_ranges)
    else:
        _fill_ranges(message.individualDeletedMessages, record.individually_deleted, max_ranges)
    _fill_properties(message, record.properties)
    _fill_batches(message, record.batch_acks, MAX_BATCH_DELETED_INDEX_TO_PERSIST)
    return message.SerializeToString()


def decode_position_info(data: bytes) -> CursorRecord:
    message = PositionInfo()
    _parse(message, data, "PositionInfo")
    ranges = _ranges(message.individualDeletedMessages)
    for item in message.individualDeletedMessageRanges:  # Pulsar's long-array form
        for first, last in _bit_runs(item.values):
            ranges.add_range(item.key, first, last)
    return CursorRecord(Position(message.ledgerId, message.entryId), ranges,
                        {p.name: p.value for p in message.properties}, _batches(message))


def encode_cursor_info(cursors_ledger_id: int, record: CursorRecord,
                       max_ranges: int = MAX_RANGES_IN_METADATA_STORE, formats: MetadataFormats = PLAIN) -> bytes:
    message = ManagedCursorInfo(cursorsLedgerId=cursors_ledger_id, markDeleteLedgerId=record.mark_delete.ledger_id,
                                markDeleteEntryId=record.mark_delete.entry_id)
    _fill_ranges(message.individualDeletedMessages, record.individually_deleted, max_ranges)
    _fill_properties(message, record.properties)
    if record.last_active is not None:
        message.lastActive = int(record.last_active * 1000)
    _fill_batches(message, record.batch_acks, MAX_BATCH_DELETED_INDEX_TO_PERSIST)
    for name, value in sorted(record.cursor_properties.items()):
        message.cursorProperties.add(name=name, value=value)
    return _compressed(message.SerializeToString(), formats.cursor_info_compression, formats.cursor_info_threshold,
                       ManagedCursorInfoMetadata)


def decode_cursor_info(data: bytes) -> StoredCursorInfo:
    message = ManagedCursorInfo()
    _parse(message, _uncompressed(data, ManagedCursorInfoMetadata, "ManagedCursorInfo"), "ManagedCursorInfo")
    record = CursorRecord(Position(message.markDeleteLedgerId, message.markDeleteEntryId),
                          _ranges(message.individualDeletedMessages), {p.name: p.value for p in message.properties},
                          _batches(message), message.lastActive / 1000 if message.HasField("lastActive") else None,
                          {p.name: p.value for p in message.cursorProperties})
    return StoredCursorInfo(message.cursorsLedgerId, record)


# -- helpers ------------------------------------------------------------------------------------------------------


def _compressed(data: bytes, codec: int, threshold: int,
                metadata_type: type[ManagedLedgerInfoMetadata] | type[ManagedCursorInfoMetadata]) -> bytes:
    """Pulsar's ``compressLedgerInfo`` / ``compressCursorInfo``: the value as is unless a codec is set and the
    value is larger than the threshold."""
    if codec == CompressionType.NONE or len(data) <= threshold:
        return data
    metadata = metadata_type(compressionType=codec, uncompressedSize=len(data)).SerializeToString()  # type: ignore[arg-type]
    return _HEADER.pack(COMPRESSION_MAGIC, len(metadata)) + metadata + compression_codecs.compress(codec, data)


def _uncompressed(data: bytes, metadata_type: type[ManagedLedgerInfoMetadata] | type[ManagedCursorInfoMetadata],
                  what: str) -> bytes:
    """Pulsar's ``parseManagedLedgerInfo`` / ``parseManagedCursorInfo``: a value with the magic is decompressed."""
    if len(data) < _HEADER.size or struct.unpack_from(">H", data)[0] != COMPRESSION_MAGIC:
        return data
    _, size = _HEADER.unpack_from(data)
    if size < 0 or _HEADER.size + size > len(data):
        raise MetadataFormatError(f"compressed {what}: bad metadata size {size}")
    metadata = metadata_type()
    _parse(metadata, data[_HEADER.size:_HEADER.size + size], f"{what}'s compression metadata")
    payload = data[_HEADER.size + size:]
    try:
        plain = compression_codecs.decompress(metadata.compressionType, payload, metadata.uncompressedSize)
    except compression_codecs.DecompressionError as exc:
        raise MetadataFormatError(f"compressed {what} does not decompress: {exc!r}") from exc
    if len(plain) != metadata.uncompressedSize:
        raise MetadataFormatError(f"compressed {what}: {len(plain)} bytes, {metadata.uncompressedSize} announced")
    return plain


def _fill_long_arrays(message: PositionInfo, ranges: PositionRangeSet, max_entries: int) -> None:
    """Per ledger, the BitSet words of its deleted entries; a ledger that would take the count of deleted entries
    past ``max_entries`` is left out (Pulsar's ``toRanges``)."""
    words_of: dict[int, list[int]] = {}
    for first, last in ranges:
        words = words_of.setdefault(first.ledger_id, [])
        for entry_id in range(first.entry_id, last.entry_id + 1):
            index, bit = divmod(entry_id, _WORD_BITS)
            if index >= len(words):
                words.extend([0] * (index + 1 - len(words)))
            words[index] |= 1 << bit
    count = 0
    for ledger_id, words in words_of.items():
        count += sum(w.bit_count() for w in words)
        if count > max_entries:
            continue
        message.individualDeletedMessageRanges.add(key=ledger_id, values=[signed64(w) for w in words])


def _bit_runs(words: Iterable[int]) -> Iterable[tuple[int, int]]:
    """Runs [first, last] of set bits of BitSet words (Java longs, so possibly negative)."""
    start = -1
    base = 0
    full = (1 << _WORD_BITS) - 1
    for word in words:
        word &= full
        if word in (0, full):  # (most words: a whole run, or none)
            if word and start < 0:
                start = base
            elif not word and start >= 0:
                yield start, base - 1
                start = -1
            base += _WORD_BITS
            continue
        for bit in range(_WORD_BITS):
            if word >> bit & 1:
                if start < 0:
                    start = base + bit
            elif start >= 0:
                yield start, base + bit - 1
                start = -1
        base += _WORD_BITS
    if start >= 0:
        yield start, base - 1


def _parse(message: Message, data: bytes, what: str) -> None:
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
        item.deleteSet.extend(signed64(w) for w in words)


def _batches(message: ManagedCursorInfo | PositionInfo) -> dict[Position, list[int]]:
    return {Position(item.position.ledgerId, item.position.entryId): list(item.deleteSet)
            for item in message.batchedEntryDeletionIndexInfo}


def signed64(word: int) -> int:
    """Ack-set words are Java longs: an unsigned 64-bit word with the top bit set is stored negative."""
    return word - (1 << 64) if word >= 1 << 63 else word
