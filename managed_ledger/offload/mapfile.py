"""Hadoop's MapFile, as Apache Pulsar's ``filesystem`` offloader stores a ledger: written and read without Hadoop.

A MapFile is a directory of two SequenceFiles: ``data`` (the records, keys in increasing order) and ``index`` (every
128th key of ``data`` with the byte position of its record, or of its block). Pulsar keys a ledger's records by
``LongWritable`` (an 8-byte big-endian signed integer) and stores each value as a ``BytesWritable`` (a 4-byte
big-endian length, then the bytes). What is here follows Hadoop 3.4's SequenceFile (version 6) byte for byte:

- header: ``SEQ`` and the version byte 6; the key and value class names (each a Hadoop Text: a vint length, UTF-8);
  whether values are compressed, whether in blocks; the codec's class name when compressed (here always
  ``DefaultCodec``: zlib streams, header included); the metadata (an int32 count, then Text pairs); 16 sync bytes;
- records (``NONE`` and ``RECORD``): int32 record length (key + value as stored), int32 key length, the key, the
  value (for ``RECORD`` one zlib stream of the serialized value); before a record, once ``SYNC_INTERVAL`` bytes went
  by since the last sync, the escape int32 -1 and the 16 sync bytes;
- blocks (``BLOCK``): the escape and the sync bytes, a vint record count, then four zlib streams, each after its vint
  compressed length: the keys' lengths (vints), the keys, the values' lengths (vints), the values. A block is
  written when its keys and values reach ``block_size`` bytes (``io.seqfile.compress.blocksize``), and at the end.

Hadoop's vints are WritableUtils' (one byte for -112..127, else a length byte then big-endian bytes). Everything is
synchronous and blocking (files): callers run it off the event loop.
"""

from __future__ import annotations

import bisect
import enum
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

LONG_WRITABLE = "org.apache.hadoop.io.LongWritable"
BYTES_WRITABLE = "org.apache.hadoop.io.BytesWritable"
DEFAULT_CODEC = "org.apache.hadoop.io.compress.DefaultCodec"
VERSION = 6
SYNC_ESCAPE = -1
SYNC_HASH_SIZE = 16
SYNC_INTERVAL = 5 * 1024 * (4 + SYNC_HASH_SIZE)  # Hadoop's: 100 KiB between sync markers of record files
DEFAULT_BLOCK_SIZE = 1_000_000  # io.seqfile.compress.blocksize
INDEX_INTERVAL = 128  # io.map.index.interval
DATA_FILE, INDEX_FILE = "data", "index"

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")


class Compression(enum.Enum):
    NONE = "NONE"
    RECORD = "RECORD"
    BLOCK = "BLOCK"


class MapFileError(Exception):
    """A file that is not a SequenceFile or MapFile of the kind expected, or is cut short."""


# -- Hadoop's serial forms --------------------------------------------------------------------------------------------
def vlong(value: int) -> bytes:
    """WritableUtils.writeVLong."""
    if -112 <= value <= 127:
        return struct.pack(">b", value)
    first = -112
    if value < 0:
        value = ~value
        first = -120
    body = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return struct.pack(">b", first - len(body)) + body


def read_vlong(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """WritableUtils.readVLong from ``buf`` at ``pos``: (the value, the position after it)."""
    try:
        first = struct.unpack_from(">b", buf, pos)[0]
    except struct.error:
        raise MapFileError("a vint cut short") from None
    if first >= -112:
        return first, pos + 1
    negative = first < -120
    end = pos + ((-119 - first) if negative else (-111 - first))  # (its size, the first byte included)
    if end > len(buf):
        raise MapFileError("a vint cut short")
    value = int.from_bytes(buf[pos + 1:end], "big")
    return (~value if negative else value), end


def text(value: str) -> bytes:
    """Hadoop's Text: a vint length, then UTF-8."""
    data = value.encode()
    return vlong(len(data)) + data


def long_writable(value: int) -> bytes:
    return _LONG.pack(value)


def bytes_writable(value: bytes) -> bytes:
    return _INT.pack(len(value)) + value


def parse_long_writable(data: bytes) -> int:
    if len(data) != 8:
        raise MapFileError(f"a LongWritable of {len(data)} bytes")
    return int(_LONG.unpack(data)[0])


def parse_bytes_writable(data: bytes) -> bytes:
    if len(data) < 4 or _INT.unpack_from(data)[0] != len(data) - 4:
        raise MapFileError("a BytesWritable whose length does not match its bytes")
    return data[4:]


# -- SequenceFile -----------------------------------------------------------------------------------------------------
class SequenceFileWriter:
    """Writes a SequenceFile of serialized keys and values (``append``), to ``out`` (owned: closed by ``close``)."""

    def __init__(self, out: BinaryIO, key_class: str, value_class: str, compression: Compression,
                 block_size: int = DEFAULT_BLOCK_SIZE, sync: bytes | None = None) -> None:
        self._out = out
        self.compression = compression
        self._block_size = block_size
        self._sync = sync if sync is not None else os.urandom(SYNC_HASH_SIZE)
        if len(self._sync) != SYNC_HASH_SIZE:
            raise ValueError("the sync marker is 16 bytes")
        compressed = compression is not Compression.NONE
        header = bytearray(b"SEQ" + bytes([VERSION]))
        header += text(key_class) + text(value_class)
        header += bytes([compressed, compression is Compression.BLOCK])
        if compressed:
            header += text(DEFAULT_CODEC)
        header += _INT.pack(0)  # (no metadata)
        header += self._sync
        self._pos = 0
        self._last_sync = 0
        self._write(bytes(header))
        # BLOCK: the records of the block being gathered
        self._records = 0
        self._key_lengths = bytearray()
        self._keys = bytearray()
        self._value_lengths = bytearray()
        self._values = bytearray()

    @property
    def position(self) -> int:
        """Hadoop's getLength: the bytes written so far (a BLOCK file's gathered records not yet among them)."""
        return self._pos

    def _write(self, data: bytes) -> None:
        self._out.write(data)
        self._pos += len(data)

    def _write_sync(self) -> None:
        if self._last_sync != self._pos:
            self._write(_INT.pack(SYNC_ESCAPE) + self._sync)
            self._last_sync = self._pos

    def append(self, key: bytes, value: bytes) -> None:
        if self.compression is Compression.BLOCK:
            self._key_lengths += vlong(len(key))
            self._keys += key
            self._value_lengths += vlong(len(value))
            self._values += value
            self._records += 1
            if len(self._keys) + len(self._values) >= self._block_size:
                self._flush_block()
            return
        stored = zlib.compress(value) if self.compression is Compression.RECORD else value
        if self._pos >= self._last_sync + SYNC_INTERVAL:
            self._write_sync()
        self._write(_INT.pack(len(key) + len(stored)) + _INT.pack(len(key)) + key + stored)

    def _flush_block(self) -> None:
        if not self._records:
            return
        self._write_sync()
        out = bytearray(vlong(self._records))
        for buffer in (self._key_lengths, self._keys, self._value_lengths, self._values):
            packed = zlib.compress(bytes(buffer))
            out += vlong(len(packed)) + packed
            buffer.clear()
        self._records = 0
        self._write(bytes(out))

    def close(self) -> None:
        if self.compression is Compression.BLOCK:
            self._flush_block()
        self._out.close()

    def discard(self) -> None:
        """Close the file as it is (the gathered records not written)."""
        self._out.close()


class SequenceFileReader:
    """Reads a SequenceFile's records (serialized key and value, values uncompressed) from ``f`` (owned)."""

    def __init__(self, f: BinaryIO, name: str = "") -> None:
        self._f = f
        self._name = name or getattr(f, "name", "SequenceFile")
        magic = self._exactly(4)
        if magic[:3] != b"SEQ" or magic[3] != VERSION:
            raise MapFileError(f"{self._name}: not a SequenceFile of version {VERSION} (starts {magic!r})")
        self.key_class = self._text()
        self.value_class = self._text()
        compressed, blocks = self._exactly(2)
        if compressed not in (0, 1) or blocks not in (0, 1):
            raise MapFileError(f"{self._name}: a bad compression flag")
        self.compression = (Compression.BLOCK if blocks else Compression.RECORD) if compressed else Compression.NONE
        if compressed:
            codec = self._text()
            if codec != DEFAULT_CODEC:
                raise MapFileError(f"{self._name}: compressed with {codec}; only {DEFAULT_CODEC} (zlib) is read")
        for _ in range(2 * self._int()):  # (the metadata's keys and values: not used)
            self._text()
        self._sync = self._exactly(SYNC_HASH_SIZE)
        self.data_start = self._f.tell()
        self._block: list[tuple[bytes, bytes]] = []
        # Where the record last yielded starts (its block's start, in a BLOCK file): a reader that goes on from
        # there reads at most that record again (MapFileReader resumes so).
        self.last_start = self.data_start
        # The block read last: (its start, its end, its records); a seek back to it decompresses nothing.
        self._cached: tuple[int, int, list[tuple[bytes, bytes]]] | None = None

    def close(self) -> None:
        self._f.close()

    def _exactly(self, n: int) -> bytes:
        data = self._f.read(n)
        if len(data) != n:
            raise MapFileError(f"{self._name}: cut short")
        return data

    def _int(self) -> int:
        return int(_INT.unpack(self._exactly(4))[0])

    def _vlong(self) -> int:
        first = self._exactly(1)
        signed = struct.unpack(">b", first)[0]
        if signed >= -112:
            return int(signed)
        rest = self._exactly(((-119 - signed) if signed < -120 else (-111 - signed)) - 1)
        return read_vlong(first + rest, 0)[0]

    def _text(self) -> str:
        return self._exactly(self._vlong()).decode()

    def _check_sync(self) -> None:
        if self._exactly(SYNC_HASH_SIZE) != self._sync:
            raise MapFileError(f"{self._name}: a sync marker that is not this file's")

    def seek(self, position: int) -> None:
        """Go to a record's (or a block's) position, as the index gives it."""
        self._f.seek(position)
        self._block = []

    def records(self) -> Iterator[tuple[bytes, bytes]]:
        """The records from the current position to the end: (key, value) as serialized."""
        while True:
            if self.compression is Compression.BLOCK:
                if not self._block:
                    if not self._read_block():
                        return
                    self._block.reverse()
                yield self._block.pop()
                continue
            start = self._f.tell()
            head = self._f.read(4)
            if not head:
                return
            if len(head) < 4:
                raise MapFileError(f"{self._name}: cut short")
            length = _INT.unpack(head)[0]
            if length == SYNC_ESCAPE:
                self._check_sync()
                continue
            key_length = self._int()
            if length < 0 or not 0 <= key_length <= length:
                raise MapFileError(f"{self._name}: a record of {length} bytes with a key of {key_length}")
            key = self._exactly(key_length)
            value = self._exactly(length - key_length)
            if self.compression is Compression.RECORD:
                value = _inflate(value, self._name)
            self.last_start = start
            yield key, value

    def _read_block(self) -> bool:
        start = self._f.tell()
        self.last_start = start
        cached = self._cached
        if cached is not None and cached[0] == start:
            self._f.seek(cached[1])
            self._block = list(cached[2])
            return True
        head = self._f.read(4)
        if not head:
            return False
        if len(head) < 4 or _INT.unpack(head)[0] != SYNC_ESCAPE:
            raise MapFileError(f"{self._name}: a block without its sync marker")
        self._check_sync()
        count = self._vlong()
        key_lengths, keys, value_lengths, values = (_inflate(self._exactly(self._vlong()), self._name)
                                                    for _ in range(4))
        key_at = value_at = kl = vl = 0
        block = []
        for _ in range(count):
            k, kl = read_vlong(key_lengths, kl)
            v, vl = read_vlong(value_lengths, vl)
            if k < 0 or v < 0 or key_at + k > len(keys) or value_at + v > len(values):
                raise MapFileError(f"{self._name}: a block whose lengths do not match its bytes")
            block.append((keys[key_at:key_at + k], values[value_at:value_at + v]))
            key_at += k
            value_at += v
        self._cached = (start, self._f.tell(), block)
        self._block = list(block)
        return True


def _inflate(data: bytes, name: str) -> bytes:
    try:
        inflater = zlib.decompressobj()
        out = inflater.decompress(data)
        if not inflater.eof:
            raise MapFileError(f"{name}: a compressed stream cut short")
        return out
    except zlib.error as exc:
        raise MapFileError(f"{name}: {exc}") from None


# -- MapFile ----------------------------------------------------------------------------------------------------------
class MapFileWriter:
    """Writes a MapFile of LongWritable keys (strictly increasing) and BytesWritable values at ``directory`` (which
    must not exist), as Hadoop's MapFile.Writer: the index has the first key, then a key each ``index_interval``
    records or more, when the data file's position moved (in a BLOCK file: at blocks' starts)."""

    def __init__(self, directory: Path, compression: Compression, block_size: int = DEFAULT_BLOCK_SIZE,
                 index_interval: int = INDEX_INTERVAL) -> None:
        directory.mkdir(parents=True)
        self.directory = directory
        self._data = SequenceFileWriter(open(directory / DATA_FILE, "xb"), LONG_WRITABLE, BYTES_WRITABLE,
                                        compression, block_size)
        self._index = SequenceFileWriter(open(directory / INDEX_FILE, "xb"), LONG_WRITABLE, LONG_WRITABLE,
                                         Compression.BLOCK)
        self._interval = index_interval
        self._count = 0
        self._last_indexed_count: int | None = None
        self._last_indexed_pos = -1
        self._last_key: int | None = None

    def append(self, key: int, value: bytes) -> None:
        if self._last_key is not None and key <= self._last_key:
            raise ValueError(f"key out of order: {key} after {self._last_key}")
        self._last_key = key
        pos = self._data.position
        due = self._last_indexed_count is None or self._count >= self._last_indexed_count + self._interval
        if due and pos > self._last_indexed_pos:
            self._index.append(long_writable(key), long_writable(pos))
            self._last_indexed_pos, self._last_indexed_count = pos, self._count
        self._data.append(long_writable(key), bytes_writable(value))
        self._count += 1

    def close(self) -> None:
        self._data.close()
        self._index.close()

    def close_quietly(self) -> None:
        """Close the files without writing what is gathered (after a failure)."""
        for writer in (self._data, self._index):
            try:
                writer.discard()
            except OSError:
                pass


class MapFileReader:
    """Reads a MapFile of LongWritable keys and BytesWritable values: ``get``, ``from_key``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        index = SequenceFileReader(open(directory / INDEX_FILE, "rb"), str(directory / INDEX_FILE))
        try:
            self._check_classes(index, LONG_WRITABLE)
            pairs = [(parse_long_writable(k), parse_long_writable(v)) for k, v in index.records()]
        finally:
            index.close()
        self._keys = [k for k, _ in pairs]
        self._positions = [p for _, p in pairs]
        self._resume: tuple[int, int] | None = None  # (the key last yielded, where its record or block starts)
        self._data = SequenceFileReader(open(directory / DATA_FILE, "rb"), str(directory / DATA_FILE))
        try:
            self._check_classes(self._data, BYTES_WRITABLE)
        except BaseException:
            self._data.close()
            raise

    @staticmethod
    def _check_classes(f: SequenceFileReader, value_class: str) -> None:
        if (f.key_class, f.value_class) != (LONG_WRITABLE, value_class):
            raise MapFileError(f"a SequenceFile of {f.key_class} -> {f.value_class}, not LongWritable -> "
                               f"{value_class.rsplit('.', 1)[-1]}")

    def close(self) -> None:
        self._data.close()

    def from_key(self, key: int) -> Iterator[tuple[int, bytes]]:
        """The records from the first key at or after ``key``, in order."""
        i = bisect.bisect_right(self._keys, key) - 1
        position = self._positions[i] if i >= 0 else self._data.data_start
        resume = self._resume
        if resume is not None and resume[0] <= key and (i < 0 or resume[0] >= self._keys[i]):
            position = resume[1]  # (nearer than the index's: a reader going on where it stopped)
        data = self._data
        data.seek(position)
        for k, v in data.records():
            record_key = parse_long_writable(k)
            if record_key >= key:
                self._resume = (record_key, data.last_start)
                yield record_key, parse_bytes_writable(v)

    def get(self, key: int) -> bytes | None:
        for record_key, value in self.from_key(key):
            return value if record_key == key else None
        return None
