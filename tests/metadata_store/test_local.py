"""What only the local backend has: durability across kill -9, torn tails, the journal's format and rewrite."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import metadata_store.local as local
from cluster import processes
from metadata_store import MetadataStoreError
from metadata_store.local import JOURNAL, MAGIC, CorruptJournalError, LocalMetadataStore

REPO = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent("""
    import asyncio, sys
    from metadata_store.local import LocalMetadataStore

    async def main() -> None:
        store = await LocalMetadataStore.open(sys.argv[1])
        i = 0
        while True:
            await store.put(f"/kill9/k{i % 7}", f"value-{i}".encode(), None)
            print(i, flush=True)  # only after the put returned
            i += 1

    asyncio.run(main())
""")


def _write_then_kill_9(directory: Path, after: int) -> int:
    """Run the writer until it reported ``after`` completed puts, SIGKILL it; the last put it reported."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(directory)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    processes.track(proc.pid, "metadata-store writer")
    try:
        assert proc.stdout is not None
        last = -1
        for line in proc.stdout:
            last = int(line)
            if last >= after:
                break
        proc.send_signal(signal.SIGKILL)  # right after a put returned, and likely inside the next one
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert last >= after, "the writer stopped early"
    return last


async def test_completed_puts_survive_kill_9(tmp_path: Path) -> None:
    directory = tmp_path / "md"
    last = await asyncio.to_thread(_write_then_kill_9, directory, 40)
    store = await LocalMetadataStore.open(directory)
    for i in range(last - 6, last + 1):  # the last completed put of each key
        got = await store.get(f"/kill9/k{i % 7}")
        assert got is not None
        # the put of i completed; a later one (i + 7, ...) may have completed unreported
        assert int(got.value.decode().split("-")[1]) >= i
    await store.close()


async def _three_puts(directory: Path) -> int:
    store = await LocalMetadataStore.open(directory)
    await store.put("/a", b"A", None)
    await store.put("/b/c", b"C", None)
    size = (directory / JOURNAL).stat().st_size
    await store.put("/d", b"D", None)
    await store.close()
    return size


@pytest.mark.parametrize("damage", ["cut in the header", "cut in the body", "bad checksum", "garbage appended"])
async def test_a_torn_tail_is_truncated_and_reported(tmp_path: Path, damage: str) -> None:
    directory = tmp_path / "md"
    before_last = await _three_puts(directory)
    journal = directory / JOURNAL
    data = journal.read_bytes()
    if damage == "cut in the header":
        data = data[: before_last + 5]
    elif damage == "cut in the body":
        data = data[:-3]
    elif damage == "bad checksum":
        data = data[:-1] + bytes([data[-1] ^ 0x01])
    else:
        data += b"\x00\x00\x01\x00junk"
        before_last = len(data) - 8
    journal.write_bytes(data)

    store = await LocalMetadataStore.open(directory)
    assert store.recovery.truncated_bytes == len(data) - before_last
    assert journal.stat().st_size == before_last == store.recovery.valid_bytes
    assert (await store.get("/a")) is not None and (await store.get("/b/c")) is not None
    if damage != "garbage appended":
        assert not await store.exists("/d")
    await store.put("/e", b"E", None)  # the journal goes on from the cut
    await store.close()
    again = await LocalMetadataStore.open(directory)
    assert again.recovery.truncated_bytes == 0
    got = await again.get("/e")
    assert got is not None and got.value == b"E"
    await again.close()


async def test_not_a_journal_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "md"
    directory.mkdir()
    (directory / JOURNAL).write_bytes(b"something else entirely")
    with pytest.raises(CorruptJournalError):
        await LocalMetadataStore.open(directory)


async def test_an_intact_record_that_does_not_apply_is_refused(tmp_path: Path) -> None:
    """A checksum that holds on nonsense is not a torn write: refuse rather than drop data."""
    directory = tmp_path / "md"
    directory.mkdir()
    bad = local.encode_record(b"X")
    (directory / JOURNAL).write_bytes(MAGIC + bad)
    with pytest.raises(CorruptJournalError):
        await LocalMetadataStore.open(directory)


async def test_one_process_owns_the_directory(tmp_path: Path) -> None:
    store = await LocalMetadataStore.open(tmp_path / "md")
    with pytest.raises(MetadataStoreError, match="in use"):
        await LocalMetadataStore.open(tmp_path / "md")
    await store.close()
    again = await LocalMetadataStore.open(tmp_path / "md")
    await again.close()


async def test_a_failed_write_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await LocalMetadataStore.open(tmp_path / "md")
    await store.put("/kept", b"1", None)
    real_write_all = local._write_all

    def half_then_enospc(fd: int, data: bytes) -> None:
        real_write_all(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(local, "_write_all", half_then_enospc)
    with pytest.raises(MetadataStoreError, match="No space"):
        await store.put("/lost/x", b"2", None)
    assert not await store.exists("/lost")
    monkeypatch.setattr(local, "_write_all", real_write_all)
    await store.put("/after", b"3", None)
    await store.close()
    again = await LocalMetadataStore.open(tmp_path / "md")
    assert again.recovery.truncated_bytes == 0
    assert await again.get_children("/") == ["after", "kept"]
    await again.close()


async def test_the_journal_is_rewritten_when_mostly_dead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "COMPACT_MIN_BYTES", 4096)
    directory = tmp_path / "md"
    store = await LocalMetadataStore.open(directory)
    await store.put("/q/plain", b"", None)
    eph = await store.put("/q/e-", b"", None, ephemeral=True, sequential=True)
    for i in range(500):
        await store.put("/hot", f"{i:0100d}".encode(), None)
    assert (directory / JOURNAL).stat().st_size < 4 * 4096
    await store.close()
    again = await LocalMetadataStore.open(directory)
    got = await again.get("/hot")
    assert got is not None and got.stat.version == 499 and got.value == f"{499:0100d}".encode()
    assert await again.get_children("/q") == ["plain"]
    later = await again.put("/q/e-", b"", None, sequential=True)
    assert later.path > eph.path  # the child-change count survived the rewrite
    await again.close()
