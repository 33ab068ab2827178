"""Our MapFiles against Hadoop's own (3.4.0, the line Pulsar 4.0's filesystem offloader is built on), both ways:
Hadoop's MapFile.Reader reads what ours writes (sequentially and by key, as Pulsar's read handle does), ours reads
what Hadoop's MapFile.Writer writes as Pulsar's offloader calls it, and for the same records both write the same
bytes but the 16 random sync bytes of each file. Hadoop runs as tests/offload/java/MapFileCheck.java on the jars
`make offload-deps` fetches."""

from __future__ import annotations

import hashlib
import random
import struct
import uuid
from pathlib import Path

import pytest

from cluster.apache_pulsar import REPO_ROOT
from managed_ledger.offload.filesystem import FileSystemOffloader
from managed_ledger.offload.ledger_metadata import OffloadedLedgerMetadata
from managed_ledger.offload.mapfile import Compression, MapFileReader, MapFileWriter, SequenceFileReader
from tests.offload.java_tool import compiled, run

HADOOP_LIB = REPO_ROOT / ".deps" / "hadoop" / "lib"
ML = "public/default/persistent/hadoop"


@pytest.fixture(scope="module")
def hadoop(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command that runs MapFileCheck."""
    return compiled("MapFileCheck", HADOOP_LIB, "hadoop-client-api-*.jar", tmp_path_factory.mktemp("mapfile-check"),
                    "make offload-deps")


def records(n: int, size: int | None = None, seed: int = 7) -> dict[int, bytes]:
    rnd = random.Random(seed)
    out = {-1: rnd.randbytes(100)}
    for i in range(n):
        length = size if size is not None else rnd.choice((0, 1, 77, 3000))
        out[i] = rnd.randbytes(length) if i % 3 else bytes([i % 256]) * length
    return out


def hadoop_lines(recs: dict[int, bytes]) -> str:
    """What MapFileCheck's read prints for these records."""
    lines = [f"{k} {len(v)} {hashlib.sha256(v).hexdigest()}" for k, v in recs.items()]
    return "\n".join([*lines, f"RANDOM-OK {len(recs)}"]) + "\n"


CASES = [(c, n, size) for c in Compression for n, size in ((1000, None), (300, 5000))]  # (BLOCK: 1 and 2 blocks)


@pytest.mark.parametrize(("compression", "n", "size"), CASES)
def test_hadoop_reads_ours(hadoop: list[str], tmp_path: Path, compression: Compression, n: int,
                           size: int | None) -> None:
    recs = records(n, size)
    writer = MapFileWriter(tmp_path / "m", compression)
    for k, v in recs.items():
        writer.append(k, v)
    writer.close()
    assert run([*hadoop, "read", str(tmp_path / "m")]) == hadoop_lines(recs)


@pytest.mark.parametrize(("compression", "n", "size"), CASES)
def test_ours_reads_hadoops_and_writes_the_same_bytes(hadoop: list[str], tmp_path: Path, compression: Compression,
                                                      n: int, size: int | None) -> None:
    recs = records(n, size)
    spec = tmp_path / "spec"
    spec.write_bytes(b"".join(struct.pack(">qi", k, len(v)) + v for k, v in recs.items()))
    run([*hadoop, "write", str(tmp_path / "theirs"), compression.value, str(spec)])
    reader = MapFileReader(tmp_path / "theirs")
    try:
        assert dict(reader.from_key(-1)) == recs
        assert all(reader.get(k) == v for k, v in recs.items())
    finally:
        reader.close()
    writer = MapFileWriter(tmp_path / "ours", compression)
    for k, v in recs.items():
        writer.append(k, v)
    writer.close()
    for name in ("data", "index"):
        assert _sync_masked(tmp_path / "ours" / name) == _sync_masked(tmp_path / "theirs" / name), name


def _sync_masked(path: Path) -> bytes:
    """The file with its sync marker's bytes (random per file) zeroed wherever they stand."""
    f = SequenceFileReader(open(path, "rb"))
    try:
        sync = f._sync
    finally:
        f.close()
    return path.read_bytes().replace(sync, bytes(len(sync)))


def test_an_offloaded_ledger_both_ways(hadoop: list[str], tmp_path: Path) -> None:
    """Our offloader's copy, read by Hadoop; a copy Hadoop wrote at the offloader's path, read by our offloader."""
    entries = [bytes([i % 256]) * (i * 13 % 2000) for i in range(400)]
    metadata = OffloadedLedgerMetadata.of_managed_ledger(ML, len(entries) - 1, sum(map(len, entries)), 1_700_000_000)
    offloader = FileSystemOffloader(tmp_path / "base")
    ours, theirs = uuid.uuid4(), uuid.uuid4()
    offloader.offload(ML, 3, ours, metadata, iter(entries))
    recs = {-1: metadata.serialize(), **dict(enumerate(entries))}
    assert run([*hadoop, "read", str(offloader.ledger_path(ML, 3, ours))]) == hadoop_lines(recs)

    spec = tmp_path / "spec"
    spec.write_bytes(b"".join(struct.pack(">qi", k, len(v)) + v for k, v in recs.items()))
    path = offloader.ledger_path(ML, 4, theirs)
    run([*hadoop, "write", str(path), "BLOCK", str(spec)])
    ledger = offloader.open(ML, 4, theirs)
    try:
        assert ledger.metadata == metadata
        assert ledger.read(0, 399) == entries and ledger.read(250, 251) == entries[250:252]
    finally:
        ledger.close()
    offloader.delete(ML, 4, theirs)  # (Hadoop's .crc side files go too)
    assert not path.exists()
