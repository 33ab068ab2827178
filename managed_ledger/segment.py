"""Segment files: the on-disk form of one ledger (a run of entries 0, 1, 2, ...).

One file per ledger, named ``<ledgerId, 20 digits>.seg`` in its managed ledger's directory.
All integers are big-endian.

File header, 32 bytes, written when the ledger is created (its directory entry synced at once on a
rollover, or, for the segment a managed ledger opens with, with its first entry or cursor file; its
bytes with the first entry's fdatasync, or when the segment is closed; so only the last segment can
be shorter than its header: one a crash caught before its first entry)::

    0   4  magic b"PMLS"
    4   2  format version (1)
    6   2  reserved, 0
    8   8  ledger id (unsigned)
   16   8  created-at time, seconds (IEEE 754 double) - ledger age for rollover and retention
   24   4  reserved, 0
   28   4  CRC32C of bytes 0..27

Then the records, back to back, one per entry, in entry-id order (entry id = record index)::

    0   4  n: length of the entry data
    4   4  CRC32C of bytes 0..3 and the n data bytes (so a flipped length bit is caught too)
    8   n  the entry data, verbatim (the producer's magic + crc + metadata + payload)

There is no footer and no separate index: records are only ever added after the last one, and
the record chain is self-describing. Recovery walks it from the header and stops at the first
record that is incomplete (a torn write), fails its CRC, or claims an absurd length; that record
and everything after it are cut (``ScanResult.valid_end``).

A segment may end in zeros: the writer writes whole blocks, the last one filled up with zeros
(``writer``), and a closed segment is cut back to its last record. Eight zero bytes where a record
header should be can never start a record (the CRC32C of a zero length field is not zero), so a
walk that meets them checks that only zeros follow and then ends cleanly (``ScanResult.zero_tail``):
records written over the zeros but never synced were lost, exactly as an unsynced append is. Zeros
followed by anything else are a torn write, cut as above.

The in-memory ``SegmentIndex`` (record offsets, 8 bytes per entry) is rebuilt by that walk on
open and extended on every add; reads use it to fetch a run of entries with one ``pread``.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass

from crc32c import crc32c

from managed_ledger.api import ManagedLedgerError
from managed_ledger.fs import FileHandle

MAGIC = b"PMLS"
VERSION = 1
SUFFIX = ".seg"

_HEADER = struct.Struct(">4sHHQdI")  # magic, version, reserved, ledger id, created at, reserved
HEADER_SIZE = _HEADER.size + 4  # + CRC32C
_RECORD = struct.Struct(">II")  # length, CRC32C
RECORD_HEADER_SIZE = _RECORD.size
_LENGTH = struct.Struct(">I")
_RECORD_HEADER = struct.Struct(">II")  # length, crc32c(length + data)

# Larger than any entry the broker accepts (maxMessageSize is 5 MiB by default, Pulsar's cap is
# the frame size); a length field above this is corruption, not data.
MAX_ENTRY_SIZE = 128 * 1024 * 1024

# Bytes read at a time while scanning a segment: big sequential reads, few system calls.
SCAN_CHUNK = 1024 * 1024


class CorruptEntryError(ManagedLedgerError):
    """A stored record failed its checksum or length check when read back."""


def file_name(ledger_id: int) -> str:
    return f"{ledger_id:020d}{SUFFIX}"


def ledger_id_of(name: str) -> int | None:
    """The ledger id of a segment file name, or None if it is not one."""
    stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else ""
    return int(stem) if stem.isdigit() else None


def encode_header(ledger_id: int, created_at: float) -> bytes:
    head = _HEADER.pack(MAGIC, VERSION, 0, ledger_id, created_at, 0)
    return head + _LENGTH.pack(crc32c(head))


def decode_header(data: bytes) -> tuple[int, float] | None:
    """(ledger id, created at) of a valid header, else None."""
    if len(data) < HEADER_SIZE:
        return None
    head = data[: _HEADER.size]
    (crc,) = _LENGTH.unpack_from(data, _HEADER.size)
    if crc32c(head) != crc:
        return None
    magic, version, _, ledger_id, created_at, _ = _HEADER.unpack(head)
    if magic != MAGIC or version != VERSION:
        return None
    return ledger_id, created_at


def encode_records(data: list[bytes], sizes: list[int]) -> list[bytes]:
    """The records of several entries, back to back, as (header, data) parts: the writer hands
    them to one gathering write, so entry data is never copied on its way to the file."""
    pack = _LENGTH.pack
    record_header = _RECORD_HEADER.pack
    parts: list[bytes] = []
    # The CRC of a length's 4 bytes, the seed of its record's CRC, once per run of one length: a
    # batch's entries mostly have one size (one producer's unbatched messages). (No dict of seeds:
    # a read's one entry, a batching client's SEND, costs 2.1 us instead of 3.2.)
    last = seed = -1
    for d, n in zip(data, sizes, strict=True):
        if n != last:
            seed = crc32c(pack(n))
            last = n
        parts += (record_header(n, crc32c(d, seed)), d)
    return parts


class SegmentIndex:
    """Where each record of a segment starts: ``offsets[i]`` for entry i, plus the end offset.

    ``array('Q')`` keeps it at 8 bytes per entry. Owned by the event loop; the worker threads
    get (offset, length) spans, never the index itself.
    """

    __slots__ = ("offsets",)

    def __init__(self, offsets: array[int] | None = None) -> None:
        self.offsets: array[int] = offsets if offsets is not None else array("Q", [HEADER_SIZE])

    @property
    def entries(self) -> int:
        return len(self.offsets) - 1

    @property
    def end(self) -> int:
        """File size once every indexed record is written."""
        return self.offsets[-1]

    @property
    def data_size(self) -> int:
        """Bytes of entry data (what LedgerInfo.size counts)."""
        return self.end - HEADER_SIZE - self.entries * RECORD_HEADER_SIZE

    def append(self, data_size: int) -> None:
        self.offsets.append(self.offsets[-1] + RECORD_HEADER_SIZE + data_size)

    def extend(self, data_sizes: list[int]) -> None:
        offsets = self.offsets
        end = offsets[-1]
        for n in data_sizes:
            end += RECORD_HEADER_SIZE + n
            offsets.append(end)

    def entry_size(self, entry_id: int) -> int:
        return self.offsets[entry_id + 1] - self.offsets[entry_id] - RECORD_HEADER_SIZE

    def span(self, entry_id: int) -> tuple[int, int]:
        """(offset, record length including its header) of an entry."""
        start = self.offsets[entry_id]
        return start, self.offsets[entry_id + 1] - start

    def truncate(self, entries: int) -> None:
        del self.offsets[entries + 1 :]


@dataclass(frozen=True)
class ScanResult:
    ledger_id: int
    created_at: float
    index: SegmentIndex
    file_size: int
    problem: str | None  # why the walk stopped before the end of the file, None if it did not
    zero_tail: bool = False  # the walk ended cleanly at zeros that run to the end of the file

    @property
    def valid_end(self) -> int:
        return self.index.end

    @property
    def cut_bytes(self) -> int:
        return self.file_size - self.index.end


class _ChunkReader:
    """Sequential reads through a window, so scanning costs one pread per ``chunk`` bytes."""

    def __init__(self, handle: FileHandle, chunk: int = SCAN_CHUNK) -> None:
        self._handle = handle
        self._chunk = chunk
        self._buf = b""
        self._start = 0

    def read(self, offset: int, size: int) -> memoryview:
        """size bytes at offset (fewer at the end of the file)."""
        end = offset + size
        if not (self._start <= offset and end <= self._start + len(self._buf)):
            self._buf = self._handle.pread(max(size, self._chunk), offset)
            self._start = offset
        i = offset - self._start
        return memoryview(self._buf)[i : i + size]


def scan(handle: FileHandle, expected_ledger_id: int) -> ScanResult | None:
    """Walk a segment's records; None if its header is missing or bad.

    Checks every record's CRC: a scan touches all the data once, on open, and CRC32C runs at
    memory speed, so closed segments are verified too (bit rot is found before it is served).
    """
    file_size = handle.size()
    header = decode_header(handle.pread(HEADER_SIZE, 0))
    if header is None or header[0] != expected_ledger_id:
        return None
    reader = _ChunkReader(handle)
    offsets = array("Q", [HEADER_SIZE])
    pos = HEADER_SIZE
    problem: str | None = None
    zero_tail = False
    while pos < file_size:
        head = reader.read(pos, RECORD_HEADER_SIZE)
        if head == _NO_RECORD or (len(head) < RECORD_HEADER_SIZE and head == _NO_RECORD[: len(head)]):
            zero_tail = _zeros_to_end(reader, pos, file_size)
            if not zero_tail:
                problem = f"zeros at offset {pos} and data after them"
            break
        if len(head) < RECORD_HEADER_SIZE:
            problem = f"torn record header at offset {pos}"
            break
        length, crc = _RECORD.unpack(head)
        if length > MAX_ENTRY_SIZE:
            problem = f"record length {length} at offset {pos} is not plausible"
            break
        data = reader.read(pos + RECORD_HEADER_SIZE, length)
        if len(data) < length:
            problem = f"torn record at offset {pos} ({len(data)} of {length} bytes)"
            break
        if crc32c(data, crc32c(head[:4])) != crc:
            problem = f"checksum mismatch in the record at offset {pos}"
            break
        pos += RECORD_HEADER_SIZE + length
        offsets.append(pos)
    return ScanResult(header[0], header[1], SegmentIndex(offsets), file_size, problem, zero_tail)


_NO_RECORD = bytes(RECORD_HEADER_SIZE)
# The window of ``count_records``: many small records' headers per read, a large record's data mostly skipped.
_COUNT_CHUNK = 64 * 1024


def count_records(handle: FileHandle, expected_ledger_id: int) -> tuple[float, int, int] | None:
    """A segment's creation time, entries and bytes of entry data, from its header and record headers alone (None if
    its header is missing or bad): what ``scan`` finds in a segment without damage, without checking (or reading,
    past 64 KiB) each record's data. For showing a stored ledger that is not open; a torn or zeroed tail ends the
    count as it ends a scan."""
    file_size = handle.size()
    header = decode_header(handle.pread(HEADER_SIZE, 0))
    if header is None or header[0] != expected_ledger_id:
        return None
    reader = _ChunkReader(handle, _COUNT_CHUNK)
    pos, entries = HEADER_SIZE, 0
    while pos + RECORD_HEADER_SIZE <= file_size:
        head = reader.read(pos, RECORD_HEADER_SIZE)
        if head == _NO_RECORD:
            break
        end = pos + RECORD_HEADER_SIZE + _RECORD.unpack(head)[0]
        if end > file_size or end - pos > RECORD_HEADER_SIZE + MAX_ENTRY_SIZE:
            break
        pos, entries = end, entries + 1
    return header[1], entries, pos - HEADER_SIZE - entries * RECORD_HEADER_SIZE


def _zeros_to_end(reader: _ChunkReader, pos: int, file_size: int) -> bool:
    while pos < file_size:
        chunk = reader.read(pos, min(SCAN_CHUNK, file_size - pos))
        if not chunk or chunk.tobytes().strip(b"\0"):
            return False
        pos += len(chunk)
    return True


# A run of records is read in preads of about this many bytes (a record longer than that alone), each
# into the reading thread's reusable buffer (``pread_scratch``), out of which the records are copied.
# A new buffer per read (a backlog's first read with its read-ahead is 4-6 MB) was new memory each
# time, and faulting its pages in cost the read worker more than the pread and the copies together;
# and with direct I/O each pread is a device request, so fewer, larger ones cost less CPU per byte.
READ_CHUNK_BYTES = 1024 * 1024


def read_run(handle: FileHandle, spans: list[tuple[int, int]]) -> list[bytes]:
    """The data of contiguous records (spans: (offset, record length), ascending, back to back)
    with a pread per ``READ_CHUNK_BYTES`` or so; every record's length and CRC is checked."""
    out: list[bytes] = []
    start = 0  # index in spans of the chunk's first record
    n = len(spans)
    while start < n:
        chunk_offset = spans[start][0]
        end = start + 1
        while end < n and spans[end][0] + spans[end][1] - chunk_offset <= READ_CHUNK_BYTES:
            end += 1
        total = spans[end - 1][0] + spans[end - 1][1] - chunk_offset
        blob = handle.pread_scratch(total, chunk_offset)
        try:
            if len(blob) < total:
                raise CorruptEntryError(
                    f"segment shorter than its index ({len(blob)} of {total} bytes at {chunk_offset})")
            out += _split_run(blob, chunk_offset, spans[start:end])
        finally:
            if isinstance(blob, memoryview):
                blob.release()  # (the thread's buffer must stay growable)
        start = end
    return out


def read_run_cached(handle: FileHandle, first_offset: int, spans: list[tuple[int, int]]) -> list[bytes] | None:
    """``read_run`` if the bytes are all in the page cache (no wait for the disk), else None."""
    blob = handle.pread_cached(spans[-1][0] + spans[-1][1] - first_offset, first_offset)
    return None if blob is None else _split_run(blob, first_offset, spans)


def _split_run(blob: bytes | bytearray | memoryview, first_offset: int, spans: list[tuple[int, int]]) -> list[bytes]:
    view = memoryview(blob)
    out: list[bytes] = []
    for offset, record_length in spans:
        i = offset - first_offset
        length, crc = _RECORD.unpack_from(view, i)
        if length != record_length - RECORD_HEADER_SIZE:
            raise CorruptEntryError(f"record at offset {offset}: length {length}, index says {record_length}")
        data = view[i + RECORD_HEADER_SIZE : i + record_length]
        if crc32c(data, crc32c(view[i : i + 4])) != crc:
            raise CorruptEntryError(f"record at offset {offset}: checksum mismatch")
        out.append(bytes(data))
    return out
