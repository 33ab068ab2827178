"""The blob-store offloaders (``aws-s3``, ``S3``, ``aliyun-oss``, ``azureblob``, ``google-cloud-storage``): a closed
ledger copied to two objects of a bucket (an Azure container), as Apache Pulsar 4.0's BlobStoreManagedLedgerOffloader
(tiered-storage/jcloud) lays them out, so either reads what the other wrote.

- The data object ``<uuid>-ledger-<ledger id>``: blocks, one after the other. A block is a 128-byte header (the
  magic word 0xFBDBABCB, the header's length 128 as a long, the block's length as a long, its first entry id as a
  long, zeros to 128), then whole entries, each its length (int), its id (long) and its bytes as stored (the Pulsar
  entry), then the pattern FE DC DE AD repeated to the block's length. A block's length is the maximum block size,
  or less for the last ones: what is left of the ledger (its length by the metadata) with 12 bytes per entry and the
  header. An entry that does not fit in what is left of a block starts the next one.
- The index object ``<uuid>-ledger-<ledger id>-index``: the magic word 0xDE47DE47, the index's length (int), the data
  object's length (long), the block header's length (long), the number of blocks (int), the metadata's length
  (int), the ledger's metadata (BookKeeper's LedgerMetadataFormat, as the filesystem offloader's key -1), then per
  block its first entry id (long), its number from 1 (int) and its offset in the data object (long). Big-endian.
- Both carry the user metadata Pulsar's readers check (``s3managedledgeroffloaderformatversion`` = 1), with the
  object's role, the managed ledger's name and the broker's version and cluster.

Unlike Pulsar's, the data object's upload parts are not the blocks (one part per block holds up to 64 MiB in
memory): parts of PART_SIZE bytes, whatever the blocks; readers see the same object. An entry larger than the
maximum block size is refused (Pulsar's loop ends the object there and reports success, losing the rest).

``BlobStore`` is the store's side (offload.s3, offload.azure, offload.gcs; ``StoreKeys`` the settings they share);
blocking calls, run in the managed ledger's pool.
"""

from __future__ import annotations

import struct
import threading
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Protocol
from uuid import UUID

from managed_ledger.offload.api import OffloadedLedgerError, StoredObject, check_range
from managed_ledger.offload.ledger_metadata import LedgerMetadataError, OffloadedLedgerMetadata

BLOCK_MAGIC = 0xFBDBABCB
BLOCK_HEADER_SIZE = 128
_BLOCK_HEADER = struct.Struct(">Iqqq")
ENTRY_HEADER = struct.Struct(">iq")  # the entry's length, its id
PADDING = bytes((0xFE, 0xDC, 0xDE, 0xAD))
INDEX_MAGIC = 0xDE47DE47
INDEX_V2_MAGIC = 0x3D1FB0BC  # (Pulsar's streaming offload's index, of segments: not a ledger's)
_INDEX_HEADER = struct.Struct(">IiqqII")
_INDEX_ENTRY = struct.Struct(">qiq")

FORMAT_VERSION_KEY = "s3managedledgeroffloaderformatversion"
FORMAT_VERSION = "1"
SOFTWARE_VERSION_KEY = "s3managedledgeroffloadersoftwareversion"
CLUSTER_KEY = "pulsarclustername"
ML_NAME_KEY = "ManagedLedgerName"

S3_FAMILY = ("aws-s3", "s3", "aliyun-oss")  # (lower case)
MIB = 1024 * 1024
DEFAULT_MAX_BLOCK_SIZE = 64 * MIB
MIN_BLOCK_SIZE = 1024  # (the smallest maximum block taken: parts are not blocks here, so S3's 5 MiB parts do not
# bound it; Pulsar's check of 5 MiB is never called on its way to an offloader)
DEFAULT_READ_BUFFER_SIZE = MIB
PART_SIZE = 8 * MIB


class OffloadConfigError(ValueError):
    """Settings a blob-store driver cannot use (in Pulsar's words where it has them)."""


@dataclass(frozen=True)
class StoreKeys:
    """A blob-store driver's settings, each from the first of its keys set (Pulsar's TieredStorageConfiguration)."""

    bucket: str
    region: str
    endpoint: str
    max_block_size: int
    read_buffer_size: int

    @classmethod
    def of(cls, settings: Mapping[str, Any], prefixes: tuple[str, ...],
           max_block_default: int = DEFAULT_MAX_BLOCK_SIZE) -> StoreKeys:
        """``<prefix>Bucket``... for each prefix in turn (empty or 0: not set)."""
        def first(suffix: str) -> Any:
            for prefix in prefixes:
                value = settings.get(prefix + suffix)
                if value not in (None, "", 0):
                    return value
            return None

        bucket, region, endpoint = (str(first(s) or "") for s in ("Bucket", "Region", "ServiceEndpoint"))
        return cls(bucket, region, endpoint, int(first("MaxBlockSizeInBytes") or max_block_default),
                   int(first("ReadBufferSizeInBytes") or DEFAULT_READ_BUFFER_SIZE))

    def check(self, driver: str) -> None:
        """A bucket, a block of at least MIN_BLOCK_SIZE, a positive read buffer; OffloadConfigError else."""
        if not self.bucket:
            raise OffloadConfigError(f"Bucket cannot be empty for {driver} offload")
        if self.max_block_size < MIN_BLOCK_SIZE:
            raise OffloadConfigError(f"ManagedLedgerOffloadMaxBlockSizeInBytes cannot be less than {MIN_BLOCK_SIZE} "
                                     f"bytes for {driver} offload")
        if self.read_buffer_size <= 0:
            raise OffloadConfigError(f"the read buffer size must be positive for {driver} offload, got "
                                     f"{self.read_buffer_size}")


class BlobStoreError(OSError):
    """The store refused or could not be reached (an OSError: the managed ledger counts it as a storage error)."""


class BlobMissingError(BlobStoreError):
    """No such object (or bucket)."""


class BlobStore(Protocol):
    """An object store's calls (blocking), as S3 has them."""

    def start_upload(self, bucket: str, key: str, metadata: Mapping[str, str]) -> str:
        """A multipart upload begun: its id."""

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, data: bytes) -> str:
        """One part (numbered from 1) uploaded: its ETag."""

    def complete_upload(self, bucket: str, key: str, upload_id: str, etags: list[str]) -> None: ...

    def abort_upload(self, bucket: str, key: str, upload_id: str) -> None: ...

    def put(self, bucket: str, key: str, data: bytes, metadata: Mapping[str, str]) -> None: ...

    def get(self, bucket: str, key: str, start: int | None = None,
            end: int | None = None) -> tuple[bytes, dict[str, str]]:
        """The object's bytes (``start`` to ``end`` inclusive, when given) and its user metadata (lower-case keys);
        BlobMissingError when it is not there."""

    def delete(self, bucket: str, key: str) -> None:
        """Nothing there is no error."""

    def list_objects(self, bucket: str) -> Iterator[Listed]:
        """Every object of the bucket, page by page."""

    def metadata(self, bucket: str, key: str) -> dict[str, str]:
        """The object's user metadata (lower-case keys), for a listing that does not carry it; BlobMissingError."""


def next_page(pages: Iterator[Iterable[Any]]) -> list[Any] | None:
    """The next page of an SDK's listing, read whole (None: no more)."""
    page = next(pages, None)
    return None if page is None else list(page)


def first_line(exc: Exception) -> str:
    """The first line of an SDK's error (its message may go on with the whole response)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class Listed:
    """An object as a bucket's listing gives it (``metadata`` None: the listing does not carry it)."""

    name: str
    size: int
    last_modified_ms: int
    uri: str
    metadata: Mapping[str, str] | None


def parse_object_name(name: str) -> tuple[int | None, str | None]:
    """The ledger id and copy uuid an object's name carries (Pulsar's DataBlockUtils.parseLedgerId and
    parseContextUuid: ``<uuid>-ledger-<id>``, with ``-index`` or not); None where it does not."""
    base = name.removesuffix("-index")
    at = base.find("-ledger-")
    if at < 0:
        return None, None
    try:
        ledger_id = int(base[at + len("-ledger-"):])
    except ValueError:
        return None, None
    at = name.find(f"-ledger-{ledger_id}")
    return ledger_id, name[:at] if at > 0 else None


def data_key(ledger_id: int, uuid: UUID) -> str:
    return f"{uuid}-ledger-{ledger_id}"


def index_key(ledger_id: int, uuid: UUID) -> str:
    return f"{uuid}-ledger-{ledger_id}-index"


def block_header(block_size: int, first_entry_id: int) -> bytes:
    return _BLOCK_HEADER.pack(BLOCK_MAGIC, BLOCK_HEADER_SIZE, block_size, first_entry_id).ljust(BLOCK_HEADER_SIZE,
                                                                                                 b"\0")


def padding(size: int) -> bytes:
    return (PADDING * (size // len(PADDING) + 1))[:size]


def block_size_for(max_block_size: int, entries_left: int, bytes_left: int) -> int:
    """Pulsar's calculateBlockSize: the maximum, or what the rest of the ledger needs."""
    return min(max_block_size, entries_left * ENTRY_HEADER.size + bytes_left + BLOCK_HEADER_SIZE)


@dataclass(frozen=True)
class Block:
    first_entry_id: int
    number: int  # (Pulsar's part id: 1, 2, ...)
    offset: int  # in the data object


@dataclass(frozen=True)
class LedgerIndex:
    """A ledger's index object."""

    metadata: OffloadedLedgerMetadata
    data_length: int
    header_length: int
    blocks: tuple[Block, ...]
    _firsts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_firsts", tuple(b.first_entry_id for b in self.blocks))

    def serialize(self) -> bytes:
        metadata = self.metadata.serialize()
        length = _INDEX_HEADER.size + len(metadata) + _INDEX_ENTRY.size * len(self.blocks)
        out = bytearray(_INDEX_HEADER.pack(INDEX_MAGIC, length, self.data_length, self.header_length,
                                           len(self.blocks), len(metadata)))
        out += metadata
        for b in self.blocks:
            out += _INDEX_ENTRY.pack(b.first_entry_id, b.number, b.offset)
        return bytes(out)

    @classmethod
    def parse(cls, data: bytes) -> LedgerIndex:
        try:
            magic, _, data_length, header_length, count, metadata_length = _INDEX_HEADER.unpack_from(data)
        except struct.error:
            raise OffloadedLedgerError(f"an index object of {len(data)} bytes is too short") from None
        if magic != INDEX_MAGIC:
            what = "a streaming offload's index (V2)" if magic == INDEX_V2_MAGIC else f"magic 0x{magic:08x}"
            raise OffloadedLedgerError(f"not a ledger's index object: {what}")
        start = _INDEX_HEADER.size
        end = start + metadata_length + count * _INDEX_ENTRY.size
        if end > len(data) or header_length < _BLOCK_HEADER.size or count == 0:
            raise OffloadedLedgerError(f"a damaged index object ({len(data)} bytes: {count} blocks, "
                                       f"{metadata_length} bytes of metadata, headers of {header_length})")
        try:
            metadata = OffloadedLedgerMetadata.parse(data[start:start + metadata_length])
        except LedgerMetadataError as exc:
            raise OffloadedLedgerError(f"the index object's ledger metadata: {exc}") from None
        blocks = tuple(Block(*_INDEX_ENTRY.unpack_from(data, start + metadata_length + i * _INDEX_ENTRY.size))
                       for i in range(count))
        if blocks[0].first_entry_id != 0 or any(a.first_entry_id >= b.first_entry_id or a.offset >= b.offset
                                                for a, b in pairwise(blocks)):
            raise OffloadedLedgerError("a damaged index object: its blocks are not in order from entry 0")
        return cls(metadata, data_length, header_length, blocks)

    def block_of(self, entry_id: int) -> int:
        """The position in ``blocks`` of the block holding ``entry_id`` (the last starting at or before it)."""
        return bisect_right(self._firsts, entry_id) - 1

    def end_of(self, position: int) -> int:
        """Where block ``position`` ends in the data object."""
        return self.blocks[position + 1].offset if position + 1 < len(self.blocks) else self.data_length


def _check_version(key: str, metadata: Mapping[str, str]) -> None:
    """Pulsar's VERSION_CHECK: an object without format version 1 is not read."""
    version = metadata.get(FORMAT_VERSION_KEY)
    if version != FORMAT_VERSION:
        raise OffloadedLedgerError(f"invalid object version {version} for {key}, expect {FORMAT_VERSION}")


@dataclass(frozen=True)
class BlobStoreOffloader:
    """Offloads to (and reads from) a bucket of ``store``, as Pulsar's jcloud offloader configured alike.
    ``driver`` is the driver's name as Pulsar records it (aws-s3, S3, aliyun-oss, azureblob, google-cloud-storage);
    ``provider`` its provider's (AWS_S3, S3, ALIYUN_OSS, AZURE_BLOB, GOOGLE_CLOUD_STORAGE), recorded in the driver
    metadata with the bucket (Azure's container), region and endpoint."""

    store: BlobStore
    driver: str
    provider: str
    bucket: str
    region: str = ""
    endpoint: str = ""
    max_block_size: int = DEFAULT_MAX_BLOCK_SIZE
    read_buffer_size: int = DEFAULT_READ_BUFFER_SIZE
    user_metadata: Mapping[str, str] = field(default_factory=dict)  # (the broker's version, its cluster)
    family: tuple[str, ...] = S3_FAMILY  # (the drivers, lower case, whose copies this store reads)
    part_size: int = PART_SIZE

    @property
    def driver_name(self) -> str:
        return self.driver

    def reads_driver(self, driver: str) -> bool:
        """The S3 drivers' copies are all alike (read from the bucket each names); Azure's and GCS's their own."""
        return driver.lower() in self.family

    def driver_metadata(self) -> dict[str, str]:
        """Pulsar's TieredStorageConfiguration.getOffloadDriverMetadata."""
        return {"managedLedgerOffloadDriver": self.provider, "bucket": self.bucket, "region": self.region,
                "serviceEndpoint": self.endpoint}

    def _object_metadata(self, role: str, managed_ledger: str) -> dict[str, str]:
        return {**self.user_metadata, "role": role, ML_NAME_KEY: managed_ledger, FORMAT_VERSION_KEY: FORMAT_VERSION}

    def _bucket_of(self, driver_metadata: Mapping[str, str]) -> str:
        """The bucket a copy was written to (its context's), else this offloader's."""
        return driver_metadata.get("bucket") or self.bucket

    def begin(self, managed_ledger: str, ledger_id: int, uuid: UUID,
              metadata: OffloadedLedgerMetadata) -> BlockWriter:
        key = data_key(ledger_id, uuid)
        upload = self.store.start_upload(self.bucket, key, self._object_metadata("data", managed_ledger))
        return BlockWriter(self, managed_ledger, ledger_id, uuid, metadata, upload)

    def open(self, managed_ledger: str, ledger_id: int, uuid: UUID,
             driver_metadata: Mapping[str, str]) -> OffloadedBlobLedger:
        bucket, key = self._bucket_of(driver_metadata), index_key(ledger_id, uuid)
        try:
            raw, metadata = self.store.get(bucket, key)
        except BlobMissingError:
            raise OffloadedLedgerError(f"ledger {ledger_id}: no offloaded copy ({key} not in bucket "
                                       f"{bucket})") from None
        except BlobStoreError as exc:
            raise OffloadedLedgerError(f"ledger {ledger_id}: {exc}") from None
        _check_version(key, metadata)
        index = LedgerIndex.parse(raw)
        return OffloadedBlobLedger(self, bucket, ledger_id, data_key(ledger_id, uuid), index)

    def delete(self, managed_ledger: str, ledger_id: int, uuid: UUID, driver_metadata: Mapping[str, str]) -> None:
        bucket = self._bucket_of(driver_metadata)
        for key in (data_key(ledger_id, uuid), index_key(ledger_id, uuid)):
            self.store.delete(bucket, key)

    def scan(self) -> Iterator[StoredObject]:
        """Every object of the bucket (Pulsar's scanLedgers), with its user metadata (fetched per object where the
        listing does not carry it, as S3's does not: Pulsar's scan then has none, and finds nothing)."""
        for listed in self.store.list_objects(self.bucket):
            metadata = listed.metadata
            if metadata is None:
                try:
                    metadata = self.store.metadata(self.bucket, listed.name)
                except BlobMissingError:  # (deleted since the listing)
                    continue
            ledger_id, copy = parse_object_name(listed.name)
            yield StoredObject(listed.name, self.bucket, listed.uri, listed.size, listed.last_modified_ms,
                               dict(metadata), ledger_id, copy)


class BlockWriter:
    """One ledger's copy under way (offload.api.CopyWriter): entries into blocks, blocks into the data object's
    parts as they fill; at ``finish`` the upload completed and the index written."""

    def __init__(self, offloader: BlobStoreOffloader, managed_ledger: str, ledger_id: int, uuid: UUID,
                 metadata: OffloadedLedgerMetadata, upload_id: str) -> None:
        self._offloader = offloader
        self._store = offloader.store
        self._managed_ledger = managed_ledger
        self._ledger_id = ledger_id
        self._uuid = uuid
        self._metadata = metadata
        self._key = data_key(ledger_id, uuid)
        self._upload_id: str | None = upload_id
        self._completed = False
        self._etags: list[str] = []
        self._pending = bytearray()  # written, not uploaded yet
        self._length = 0  # the data object's length so far
        self._blocks: list[Block] = []
        self._block_end = 0  # where the open block ends (0: none open)
        self._next_entry = 0
        self._bytes_left = metadata.length

    def append(self, entries: Iterable[bytes]) -> None:
        for data in entries:
            needed = ENTRY_HEADER.size + len(data)
            if self._block_end == 0 or self._length + needed > self._block_end:
                self._close_block()
                self._open_block(needed)
            self._write(ENTRY_HEADER.pack(len(data), self._next_entry))
            self._write(data)
            self._next_entry += 1
            self._bytes_left -= len(data)
        self._upload_full_parts()

    def _open_block(self, needed: int) -> None:
        max_size = self._offloader.max_block_size
        if BLOCK_HEADER_SIZE + needed > max_size:
            raise OffloadedLedgerError(f"ledger {self._ledger_id}: entry {self._next_entry} ({needed} bytes with its "
                                       f"header) does not fit in a block of {max_size} bytes "
                                       "(managedLedgerOffloadMaxBlockSizeInBytes)")
        entries_left = self._metadata.last_entry_id + 1 - self._next_entry
        size = max(block_size_for(max_size, entries_left, self._bytes_left), BLOCK_HEADER_SIZE + needed)
        self._blocks.append(Block(self._next_entry, len(self._blocks) + 1, self._length))
        self._block_end = self._length + size
        self._write(block_header(size, self._next_entry))

    def _close_block(self) -> None:
        if self._block_end:
            self._write(padding(self._block_end - self._length))
            self._block_end = 0

    def _write(self, data: bytes) -> None:
        self._pending += data
        self._length += len(data)

    def _upload_full_parts(self) -> None:
        size = self._offloader.part_size
        while len(self._pending) >= size:
            self._upload_part(bytes(self._pending[:size]))
            del self._pending[:size]

    def _upload_part(self, data: bytes) -> None:
        assert self._upload_id is not None
        self._etags.append(self._store.upload_part(self._offloader.bucket, self._key, self._upload_id,
                                                   len(self._etags) + 1, data))

    def finish(self) -> None:
        expected = self._metadata.last_entry_id + 1
        if self._next_entry != expected:
            raise OffloadedLedgerError(f"ledger {self._ledger_id}: {self._next_entry} entries read of {expected}")
        self._close_block()
        self._upload_full_parts()
        if self._pending:
            self._upload_part(bytes(self._pending))
            self._pending.clear()
        offloader, bucket = self._offloader, self._offloader.bucket
        assert self._upload_id is not None
        self._store.complete_upload(bucket, self._key, self._upload_id, self._etags)
        self._completed = True
        index = LedgerIndex(self._metadata, self._length, BLOCK_HEADER_SIZE, tuple(self._blocks))
        self._store.put(bucket, index_key(self._ledger_id, self._uuid), index.serialize(),
                        offloader._object_metadata("index", self._managed_ledger))

    def abort(self) -> None:
        """Nothing is left: the upload aborted, or the data object deleted when the index could not be written
        (as Pulsar's does). Failures here are the store's to clean up (an aborted upload's parts expire)."""
        bucket, upload_id, self._upload_id = self._offloader.bucket, self._upload_id, None
        self._pending.clear()
        try:
            if self._completed:
                self._store.delete(bucket, self._key)
            elif upload_id is not None:
                self._store.abort_upload(bucket, self._key, upload_id)
        except BlobStoreError:
            pass


class OffloadedBlobLedger:
    """One offloaded ledger, open for reads (offload.api.OffloadedCopy): entries found by the index's blocks, read
    with ranged GETs of ``read_buffer_size`` bytes; where the last read ended is remembered, so reading on needs no
    scan from the block's start."""

    def __init__(self, offloader: BlobStoreOffloader, bucket: str, ledger_id: int, key: str,
                 index: LedgerIndex) -> None:
        self.ledger_id = ledger_id
        self.metadata = index.metadata
        self._store = offloader.store
        self._buffer_size = max(offloader.read_buffer_size, ENTRY_HEADER.size)
        self._bucket = bucket
        self._key = key
        self._index = index
        self._lock = threading.Lock()
        self._buffer = b""
        self._buffer_at = 0
        self._version_checked = False
        self._next: tuple[int, int] | None = None  # (entry id, its offset): where the last read ended

    @property
    def last_entry_id(self) -> int:
        return self.metadata.last_entry_id

    def read(self, first: int, last: int) -> list[bytes]:
        check_range(self.ledger_id, first, last, self.last_entry_id)
        with self._lock:
            try:
                return self._read(first, last)
            except BlobStoreError as exc:
                raise OffloadedLedgerError(f"ledger {self.ledger_id}: {exc}") from None

    def _read(self, first: int, last: int) -> list[bytes]:
        index = self._index
        block = index.block_of(first)
        block_start, block_end = index.blocks[block].offset, index.end_of(block)
        following = self._next
        if following is not None and following[0] == first and block_start < following[1] < block_end:
            position = following[1]  # (where the last read ended: in the block holding ``first``)
        else:
            position = block_start + index.header_length
        out: list[bytes] = []
        expected = first
        while expected <= last:
            if (position + ENTRY_HEADER.size > block_end
                    or (header := ENTRY_HEADER.unpack(self._bytes(position, ENTRY_HEADER.size)))[0] < 0):
                # the block's padding: the next entry starts the next block
                block += 1
                if block >= len(index.blocks) or index.blocks[block].first_entry_id != expected:
                    raise OffloadedLedgerError(f"ledger {self.ledger_id}: entry {expected} is in no block")
                block_end = index.end_of(block)
                position = index.blocks[block].offset + index.header_length
                continue
            size, entry_id = header
            if position + ENTRY_HEADER.size + size > block_end or entry_id > expected:
                raise OffloadedLedgerError(f"ledger {self.ledger_id}: entry {expected} not found (entry {entry_id} "
                                           f"of {size} bytes at offset {position})")
            if entry_id == expected:
                out.append(self._bytes(position + ENTRY_HEADER.size, size))
                expected += 1
            position += ENTRY_HEADER.size + size
        self._next = (expected, position)
        return out

    def _bytes(self, position: int, size: int) -> bytes:
        """``size`` bytes of the data object from ``position``: from the buffer, or a ranged GET of at least the
        read buffer's size (Pulsar's readBufferSizeInBytes)."""
        at = position - self._buffer_at
        if 0 <= at and at + size <= len(self._buffer):
            return self._buffer[at:at + size]
        end = min(max(position + size, position + self._buffer_size), self._index.data_length) - 1
        if end < position + size - 1:
            raise OffloadedLedgerError(f"ledger {self.ledger_id}: offset {position + size} is past the data object's "
                                       f"end ({self._index.data_length})")
        try:
            data, metadata = self._store.get(self._bucket, self._key, position, end)
        except BlobMissingError:
            raise OffloadedLedgerError(f"ledger {self.ledger_id}: the data object {self._key} is not in bucket "
                                       f"{self._bucket}") from None
        if not self._version_checked:
            _check_version(self._key, metadata)
            self._version_checked = True
        if len(data) < size:
            raise OffloadedLedgerError(f"ledger {self.ledger_id}: {len(data)} bytes read at offset {position}, "
                                       f"{size} needed")
        self._buffer, self._buffer_at = data, position
        return data[:size]

    def close(self) -> None:
        with self._lock:
            self._buffer = b""
