"""The filesystem offloader (managed_ledger/offload/filesystem.py): where a ledger's copy goes, what it holds, reads,
deletes, and what a failed copy leaves."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from managed_ledger.offload.api import OffloadedLedgerError
from managed_ledger.offload.filesystem import FileSystemOffloader
from managed_ledger.offload.ledger_metadata import OffloadedLedgerMetadata
from managed_ledger.offload.mapfile import Compression, MapFileReader

ML = "public/default/persistent/t"
ENTRIES = [bytes([i % 256]) * (i * 7 % 900) for i in range(300)]


def metadata(entries: list[bytes]) -> OffloadedLedgerMetadata:
    return OffloadedLedgerMetadata.of_managed_ledger(ML, len(entries) - 1, sum(map(len, entries)), 1_700_000_000_000)


@pytest.mark.parametrize("compression", list(Compression))
def test_offload_then_read(tmp_path: Path, compression: Compression) -> None:
    offloader = FileSystemOffloader(tmp_path, compression)
    uid = uuid.uuid4()
    offloader.offload(ML, 7, uid, metadata(ENTRIES), iter(ENTRIES))
    path = tmp_path / ML / f"7-{uid}"
    assert sorted(p.name for p in path.iterdir()) == ["data", "index"]  # (Pulsar's layout: a MapFile directory)
    ledger = offloader.open(ML, 7, uid)
    try:
        assert ledger.last_entry_id == 299 and ledger.metadata.length == sum(map(len, ENTRIES))
        assert dict(ledger.metadata.custom_metadata) == {
            "application": b"pulsar", "component": b"managed-ledger", "pulsar/managed-ledger": ML.encode()}
        assert ledger.read(0, 299) == ENTRIES
        assert ledger.read(150, 151) == ENTRIES[150:152]
        assert ledger.read(299, 299) == ENTRIES[299:]
        for first, last in ((-1, 3), (5, 4), (0, 300)):
            with pytest.raises(OffloadedLedgerError, match=r"not in 0\.\.299"):
                ledger.read(first, last)
    finally:
        ledger.close()
    assert offloader.driver_metadata() == {"storageBasePath": str(tmp_path)}


def test_key_minus_one_holds_the_metadata(tmp_path: Path) -> None:
    uid = uuid.uuid4()
    FileSystemOffloader(tmp_path).offload(ML, 3, uid, metadata(ENTRIES[:5]), iter(ENTRIES[:5]))
    reader = MapFileReader(tmp_path / ML / f"3-{uid}")
    try:
        keys = [k for k, _ in reader.from_key(-1)]
        assert keys == [-1, 0, 1, 2, 3, 4]
        raw = reader.get(-1)
        assert raw is not None and OffloadedLedgerMetadata.parse(raw) == metadata(ENTRIES[:5])
    finally:
        reader.close()


def test_a_copy_that_fails_midway_leaves_nothing_to_read(tmp_path: Path) -> None:
    offloader = FileSystemOffloader(tmp_path)
    uid = uuid.uuid4()

    def failing() -> Iterator[bytes]:
        yield ENTRIES[0]
        raise OSError("the ledger could not be read")

    with pytest.raises(OSError, match="could not be read"):
        offloader.offload(ML, 9, uid, metadata(ENTRIES), failing())
    assert list((tmp_path / ML).iterdir()) == []
    with pytest.raises(OffloadedLedgerError, match="no offloaded copy"):
        offloader.open(ML, 9, uid)
    with pytest.raises(OffloadedLedgerError, match="2 entries read of 300"):  # (fewer entries than the metadata says)
        offloader.offload(ML, 9, uid, metadata(ENTRIES), iter(ENTRIES[:2]))
    assert list((tmp_path / ML).iterdir()) == []


def test_delete(tmp_path: Path) -> None:
    offloader = FileSystemOffloader(tmp_path)
    uid = uuid.uuid4()
    offloader.offload(ML, 4, uid, metadata(ENTRIES[:3]), iter(ENTRIES[:3]))
    (tmp_path / ML / f"5-{uid}.offloading").mkdir()  # (what a crash mid-copy leaves)
    offloader.delete(ML, 4, uid)
    offloader.delete(ML, 5, uid)
    offloader.delete(ML, 6, uid)  # (nothing there: no error)
    assert list((tmp_path / ML).iterdir()) == []


def test_a_damaged_copy_is_a_clear_error(tmp_path: Path) -> None:
    offloader = FileSystemOffloader(tmp_path)
    uid = uuid.uuid4()
    offloader.offload(ML, 2, uid, metadata(ENTRIES), iter(ENTRIES))
    data = tmp_path / ML / f"2-{uid}" / "data"
    data.write_bytes(data.read_bytes()[:-100])
    with pytest.raises(OffloadedLedgerError, match="ledger 2"):
        ledger = offloader.open(ML, 2, uid)
        try:
            ledger.read(0, 299)
        finally:
            ledger.close()
