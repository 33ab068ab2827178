"""segment.read_run: a run of records read back in preads of about READ_CHUNK_BYTES each."""

from __future__ import annotations

from pathlib import Path

import pytest

from managed_ledger import segment
from managed_ledger.fs import OsFileSystem
from managed_ledger.segment import HEADER_SIZE, RECORD_HEADER_SIZE, CorruptEntryError, read_run


class CountingHandle:
    """A file handle that records each pread's (size, offset)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.preads: list[tuple[int, int]] = []

    def pread(self, size: int, offset: int) -> bytes:
        self.preads.append((size, offset))
        return self.inner.pread(size, offset)  # type: ignore[attr-defined, no-any-return]


def write_segment(path: Path, data: list[bytes]) -> list[tuple[int, int]]:
    """A segment file with these entries; their spans (offset, record length)."""
    parts = segment.encode_records(data, [len(d) for d in data])
    path.write_bytes(segment.encode_header(1, 0.0) + b"".join(parts))
    spans, offset = [], HEADER_SIZE
    for d in data:
        spans.append((offset, RECORD_HEADER_SIZE + len(d)))
        offset += RECORD_HEADER_SIZE + len(d)
    return spans


@pytest.fixture
def entries() -> list[bytes]:
    # Sizes around the chunk size set below (100): several records to a chunk, one alone, one longer.
    sizes = [10, 20, 30, 5, 90, 250, 1, 40, 40, 40, 0, 60]
    return [bytes([i]) * n for i, n in enumerate(sizes)]


def test_a_run_is_read_in_chunks_of_whole_records(tmp_path: Path, entries: list[bytes],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segment, "READ_CHUNK_BYTES", 100)
    spans = write_segment(tmp_path / "s", entries)
    handle = CountingHandle(OsFileSystem().open_read(str(tmp_path / "s")))
    try:
        for first in range(len(spans)):  # every suffix of the run, from an offset inside the file
            handle.preads.clear()
            assert read_run(handle, spans[first:]) == entries[first:]  # type: ignore[arg-type]
            assert len(handle.preads) > 1 or sum(n for _, n in spans[first:]) <= 100
            # Each pread is whole records, back to back, and no longer than the chunk unless one record is.
            offset = spans[first][0]
            for size, at in handle.preads:
                assert at == offset
                assert size <= 100 or any(o == at and n == size for o, n in spans)
                offset += size
            assert offset == spans[-1][0] + spans[-1][1]
    finally:
        handle.inner.close()  # type: ignore[attr-defined]


def test_a_bad_record_in_a_later_chunk_and_a_short_file_are_errors(tmp_path: Path, entries: list[bytes],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segment, "READ_CHUNK_BYTES", 100)
    path = tmp_path / "s"
    spans = write_segment(path, entries)
    raw = bytearray(path.read_bytes())
    raw[spans[9][0] + RECORD_HEADER_SIZE] ^= 0xFF  # a data byte of the tenth record
    path.write_bytes(bytes(raw))
    fs = OsFileSystem()
    handle = fs.open_read(str(path))
    try:
        assert read_run(handle, spans[:9]) == entries[:9]
        with pytest.raises(CorruptEntryError, match="checksum mismatch"):
            read_run(handle, spans)
    finally:
        handle.close()
    path.write_bytes(bytes(raw[: spans[-1][0] + 3]))  # the last record torn
    handle = fs.open_read(str(path))
    try:
        with pytest.raises(CorruptEntryError, match="shorter than its index"):
            read_run(handle, spans[10:])
    finally:
        handle.close()
