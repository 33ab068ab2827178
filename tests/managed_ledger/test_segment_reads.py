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

    def size(self) -> int:
        return self.inner.size()  # type: ignore[attr-defined, no-any-return]

    def pread_scratch(self, size: int, offset: int) -> bytes | memoryview:
        self.preads.append((size, offset))
        return self.inner.pread_scratch(size, offset)  # type: ignore[attr-defined, no-any-return]


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


@pytest.mark.parametrize("direct", [False, True])
def test_runs_are_read_through_one_reusable_buffer_and_copied_out(tmp_path: Path, direct: bool) -> None:
    """Each read fills the reading thread's buffer (no new memory per read) and the records are copied out:
    what an earlier read returned stays intact when later reads reuse the buffer, when a larger read grows it,
    and after a read that failed part-way (its views of the buffer released)."""
    small = [bytes([i]) * 3000 for i in range(4)]
    large = [bytes([100 + i]) * 700_000 for i in range(6)]  # (grows the buffer past its first size)
    fs = OsFileSystem()
    small_spans = write_segment(tmp_path / "small", small)
    large_spans = write_segment(tmp_path / "large", large)
    bad = bytearray((tmp_path / "large").read_bytes())
    bad[large_spans[1][0] + RECORD_HEADER_SIZE] ^= 0xFF
    (tmp_path / "bad").write_bytes(bytes(bad))
    handles = {name: fs.open_read(str(tmp_path / name), direct=direct) for name in ("small", "large", "bad")}
    try:
        first = read_run(handles["small"], small_spans)
        assert first == small
        assert all(type(d) is bytes for d in first)  # (copies, not views of the buffer)
        with pytest.raises(CorruptEntryError, match="checksum mismatch"):
            read_run(handles["bad"], large_spans)
        assert read_run(handles["large"], large_spans) == large
        assert read_run(handles["small"], small_spans[1:]) == small[1:]
        assert first == small
        # The plain pread still answers bytes of its own, at any offset and length.
        assert handles["large"].pread(10, large_spans[2][0] + RECORD_HEADER_SIZE + 5) == large[2][:10]
    finally:
        for handle in handles.values():
            handle.close()


@pytest.mark.parametrize("tail", [b"", bytes(4096), b"\x00\x00\x01\x00garbage", bytes(5)])
def test_records_counted_from_their_headers_as_a_scan_finds_them(tmp_path: Path, tail: bytes) -> None:
    """count_records (internal-info of a managed ledger not open) agrees with scan on an intact segment, one with the
    writer's zeros after the last record, one with a torn record and one with a torn header: same entries, same
    bytes of data; large records' data is skipped, not read."""
    data = [b"a" * 10, b"b" * 200_000, b"", b"c" * 70_000, b"d"]
    path = tmp_path / "s.seg"
    write_segment(path, data)
    with path.open("ab") as f:
        f.write(tail)
    handle = OsFileSystem().open_read(str(path))
    try:
        scanned = segment.scan(handle, 1)
        counting = CountingHandle(handle)
        counted = segment.count_records(counting, 1)  # type: ignore[arg-type]
        assert segment.count_records(handle, 2) is None  # (another ledger's header)
    finally:
        handle.close()
    assert scanned is not None and counted == (0.0, len(data), sum(map(len, data)))
    assert (scanned.index.entries, scanned.index.data_size) == counted[1:]
    assert sum(size for size, _ in counting.preads) < 300_000  # (the 200 KB record's data was skipped)
