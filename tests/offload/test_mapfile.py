"""Hadoop's MapFile as written and read here (managed_ledger/offload/mapfile.py); the same files read and written by
Hadoop itself: tests/offload/test_hadoop_mapfile.py."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from managed_ledger.offload import mapfile
from managed_ledger.offload.mapfile import (
    SYNC_INTERVAL,
    Compression,
    MapFileError,
    MapFileReader,
    MapFileWriter,
    SequenceFileReader,
    read_vlong,
    vlong,
)


def records(n: int, seed: int = 1) -> dict[int, bytes]:
    rnd = random.Random(seed)
    out = {-1: b"metadata" * 10}
    for i in range(n):
        size = rnd.choice((0, 1, 100, 3000))
        out[i] = rnd.randbytes(size) if i % 2 else bytes([i % 251]) * size  # (some that compress, some that do not)
    return out


def write(path: Path, recs: dict[int, bytes], compression: Compression, **kw: int) -> Path:
    writer = MapFileWriter(path, compression, **kw)
    for k, v in recs.items():
        writer.append(k, v)
    writer.close()
    return path


@pytest.mark.parametrize("value", [0, 1, -1, 127, -112, -113, 128, 255, 256, 65535, 2**31 - 1, -(2**31), 2**63 - 1,
                                   -(2**63)])
def test_vints_as_hadoop(value: int) -> None:
    data = vlong(value)
    assert read_vlong(data, 0) == (value, len(data))
    assert len(data) == 1 if -112 <= value <= 127 else len(data) >= 2


def test_vint_bytes_as_hadoop_writes_them() -> None:
    # WritableUtils.writeVLong: a byte for -112..127; else -113 - (byte count) for positives, -121 - count negatives
    assert vlong(127) == b"\x7f" and vlong(-112) == b"\x90"
    assert vlong(128) == b"\x8f\x80" and vlong(1000) == b"\x8e\x03\xe8"
    assert vlong(-113) == b"\x87\x70"


@pytest.mark.parametrize("compression", list(Compression))
@pytest.mark.parametrize("block_size", [1_000_000, 20_000])
def test_round_trip(tmp_path: Path, compression: Compression, block_size: int) -> None:
    recs = records(600)
    reader = MapFileReader(write(tmp_path / "m", recs, compression, block_size=block_size))
    try:
        assert [(k, v) for k, v in reader.from_key(-1)] == list(recs.items())
        for key in (-1, 0, 1, 127, 128, 129, 300, 599):
            assert reader.get(key) == recs[key]
        assert [k for k, _ in reader.from_key(451)][:3] == [451, 452, 453]
        assert reader.get(600) is None and reader.get(-2) is None
    finally:
        reader.close()


def test_a_record_file_has_sync_markers_every_100_kib(tmp_path: Path) -> None:
    recs = {i: bytes([i % 256]) * 5000 for i in range(100)}  # ~500 KB: four or five markers
    path = write(tmp_path / "m", recs, Compression.NONE)
    data = (path / "data").read_bytes()
    sync = _sync_of(path / "data")
    escapes = data.count(struct.pack(">i", -1) + sync)
    assert escapes == len(data) // SYNC_INTERVAL
    reader = MapFileReader(path)
    assert dict(reader.from_key(0)) == recs
    reader.close()


def _sync_of(path: Path) -> bytes:
    reader = SequenceFileReader(open(path, "rb"))
    try:
        return reader._sync
    finally:
        reader.close()


def test_the_index_has_a_key_every_128_records_and_at_blocks_only(tmp_path: Path) -> None:
    recs = {i: b"v" * 10 for i in range(1000)}
    reader = MapFileReader(write(tmp_path / "r", recs, Compression.RECORD))
    assert reader._keys == list(range(0, 1000, 128))
    reader.close()
    reader = MapFileReader(write(tmp_path / "b", recs, Compression.BLOCK, block_size=5000))
    # (a key is indexed where the data file's position moved: the first key, then keys starting a block)
    assert reader._keys[0] == 0 and len(reader._keys) > 1
    assert all(b - a >= 128 for a, b in zip(reader._keys, reader._keys[1:], strict=False))
    reader.close()


def test_keys_must_increase(tmp_path: Path) -> None:
    writer = MapFileWriter(tmp_path / "m", Compression.NONE)
    writer.append(0, b"")
    with pytest.raises(ValueError, match="out of order"):
        writer.append(0, b"")
    writer.close()


@pytest.mark.parametrize("damage", ["truncated", "not a sequence file", "other codec", "bad sync", "bad zlib"])
@pytest.mark.parametrize("compression", [Compression.RECORD, Compression.BLOCK])
def test_damaged_files_are_refused_clearly(tmp_path: Path, damage: str, compression: Compression) -> None:
    path = write(tmp_path / "m", records(50), compression)
    data = bytearray((path / "data").read_bytes())
    if damage == "truncated":
        del data[len(data) - 7:]
    elif damage == "not a sequence file":
        data[:3] = b"XYZ"
    elif damage == "other codec":
        at = data.index(b"DefaultCodec")
        data[at:at + 12] = b"GzipCodec\x00\x00\x00"
    elif damage == "bad sync":
        sync = _sync_of(path / "data")
        at = data.rindex(struct.pack(">i", -1) + sync) if compression is Compression.BLOCK else len(data) - 30
        data[at + 4:at + 20] = bytes(16)
        if compression is not Compression.BLOCK:  # (a record file: a made-up escape with a wrong hash)
            data[at:at + 4] = struct.pack(">i", -1)
    else:
        at = data.rindex(b"\x78\x9c")  # a zlib stream's header
        data[at + 2:at + 6] = b"\xff\xff\xff\xff"
    (path / "data").write_bytes(bytes(data))
    with pytest.raises(MapFileError):
        reader = MapFileReader(path)
        try:
            list(reader.from_key(-1))
        finally:
            reader.close()


@pytest.mark.parametrize("compression", [Compression.RECORD, Compression.BLOCK])
def test_reading_on_where_the_last_read_stopped_decompresses_nothing_twice(
        tmp_path: Path, compression: Compression, monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer reads a few entries at a time: each read goes on from the record (or the block) where the last one
    stopped, so every stream is inflated once (not once per read from the index's key before it)."""
    recs = {i: bytes([i % 256]) * 500 for i in range(1000)}
    reader = MapFileReader(write(tmp_path / "m", recs, compression, block_size=100_000))
    inflated: list[int] = []
    real = mapfile._inflate
    def counting(data: bytes, name: str) -> bytes:
        inflated.append(1)
        return real(data, name)

    monkeypatch.setattr(mapfile, "_inflate", counting)
    for first in range(0, 1000, 7):
        got = []
        for key, value in reader.from_key(first):
            got.append(value)
            if key == min(first + 6, 999):
                break
        assert got == [recs[k] for k in range(first, min(first + 7, 1000))]
    reader.close()
    # RECORD: each value once, and the one a read stopped at once more (143 reads); BLOCK: each block's 4 streams once
    # (a block starts at each index key here: 200 records a block, an index key every 128 records or more)
    assert len(inflated) <= (1000 + 143 if compression is Compression.RECORD else 4 * len(reader._keys)), len(inflated)
