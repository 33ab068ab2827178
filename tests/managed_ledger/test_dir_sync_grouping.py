"""New names (subscriptions' cursor files, topics' directories and segments) are made durable by
directory fsyncs grouped per writer round: one fsync of a directory for all the files created in it
in the round, and still nothing confirmed before its name is durable (issue 20, item 4).

The writer is held on a task while the operations queue up, so the round is known: every operation
submitted meanwhile is in the next one. ``CrashFileSystem`` counts the directory fsyncs and loses
whatever was not synced on a power cut.
"""

from __future__ import annotations

import asyncio
import errno
import threading
from collections import Counter

import pytest

from managed_ledger import InitialPosition, ManagedLedgerError
from managed_ledger.file import FileManagedLedgerFactory
from managed_ledger.fs import FileHandle
from tests.managed_ledger.crashfs import CrashFileSystem
from tests.managed_ledger.ml_support import FakeClock

ROOT = "/data/ledgers"
SUBSCRIPTIONS = 20
TOPICS = 8


class CountingFileSystem(CrashFileSystem):
    """Counts fsync_dir calls per directory; ``events``: directory syncs and file creations, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.dir_syncs: Counter[str] = Counter()
        self.events: list[tuple[str, str]] = []

    def fsync_dir(self, path: str) -> None:
        self.dir_syncs[path] += 1
        self.events.append(("fsync_dir", path))
        super().fsync_dir(path)

    def open_append(self, path: str, *, create: bool) -> FileHandle:
        if create:
            self.events.append(("create", path))
        return super().open_append(path, create=create)


def factory(fs: CrashFileSystem) -> FileManagedLedgerFactory:
    return FileManagedLedgerFactory(ROOT, clock=FakeClock(), fs=fs, fault_retry_interval_s=0)


async def hold_writer(f: FileManagedLedgerFactory) -> threading.Event:
    """Park the writer thread on a task until the returned event is set (waits until it is parked)."""
    release, parked = threading.Event(), threading.Event()

    def park() -> None:
        parked.set()
        release.wait(10)

    f.writer.run(park)
    await asyncio.get_running_loop().run_in_executor(None, parked.wait, 10)
    return release


async def test_subscriptions_created_together_share_one_directory_sync_and_survive_a_power_cut() -> None:
    fs = CountingFileSystem()
    fs.makedirs_durable("/data")
    f = factory(fs)
    ml = await f.open("t")
    cursors_dir = f"{ml.directory}/cursors"
    before = fs.dir_syncs[cursors_dir]
    release = await hold_writer(f)
    opening = [asyncio.ensure_future(ml.open_cursor(f"sub-{i}", InitialPosition.EARLIEST))
               for i in range(SUBSCRIPTIONS)]
    await asyncio.sleep(0)  # every open submits its cursor write now, while the writer is held
    release.set()
    await asyncio.wait_for(asyncio.gather(*opening), 10)
    assert fs.dir_syncs[cursors_dir] - before == 1  # one round, one directory sync for all 20 files

    fs.power_cut()  # everything confirmed must have been durable already
    await f.close()
    fs.reboot()
    f = factory(fs)
    ml = await f.open("t")
    assert sorted(ml.cursors) == sorted(f"sub-{i}" for i in range(SUBSCRIPTIONS))
    await f.close()


async def test_topics_created_together_share_the_parent_directory_sync() -> None:
    fs = CountingFileSystem()
    fs.makedirs_durable("/data")
    f = factory(fs)
    await f.open("warm-up")  # the factory's own directories and ledger-id file
    parent = f"{ROOT}/ml"
    before = fs.dir_syncs[parent]
    release = await hold_writer(f)
    opening = [asyncio.ensure_future(f.open(f"topic-{i}")) for i in range(TOPICS)]
    for _ in range(3):
        await asyncio.sleep(0)
    release.set()
    ledgers = await asyncio.wait_for(asyncio.gather(*opening), 10)
    assert fs.dir_syncs[parent] - before == 1  # eight new directories, one sync of their parent
    for ml in ledgers:
        await ml.open_cursor("sub", InitialPosition.EARLIEST)

    fs.power_cut()
    await f.close()
    fs.reboot()
    f = factory(fs)
    for i in range(TOPICS):
        ml = await f.open(f"topic-{i}")
        assert list(ml.cursors) == ["sub"]
    await f.close()


async def test_a_new_topic_directory_and_first_segment_are_made_in_one_round() -> None:
    """The directory and the segment are queued together: the segment is created before the parent's sync (one
    round, not two: a directory sync awaited, then the segment), and opening returns only once both names are
    durable (a power cut right after finds the topic with its segment)."""
    fs = CountingFileSystem()
    fs.makedirs_durable("/data")
    f = factory(fs)
    await f.open("warm-up")
    parent = f"{ROOT}/ml"
    fs.events.clear()
    release = await hold_writer(f)  # (so the round is known: both queue up meanwhile)
    opening = asyncio.ensure_future(f.open("new-topic"))
    for _ in range(3):
        await asyncio.sleep(0)
    release.set()
    ml = await asyncio.wait_for(opening, 10)
    segment_created = next(i for i, (kind, _) in enumerate(fs.events) if kind == "create")
    parent_synced = fs.events.index(("fsync_dir", parent))
    own_synced = fs.events.index(("fsync_dir", ml.directory))
    assert segment_created < parent_synced and segment_created < own_synced

    fs.power_cut()
    await f.close()
    fs.reboot()
    f = factory(fs)
    assert f.exists("new-topic")
    ml = await f.open("new-topic")
    await ml.add_entry_async(b"after the cut")
    await f.close()


async def test_a_failed_directory_sync_fails_every_subscription_of_its_round() -> None:
    fs = CountingFileSystem()
    fs.makedirs_durable("/data")
    f = factory(fs)
    ml = await f.open("t")
    release = await hold_writer(f)
    fs.inject("fsync_dir", errno.EIO, count=1, path_part="/cursors")
    opening = [asyncio.ensure_future(ml.open_cursor(f"sub-{i}", InitialPosition.EARLIEST)) for i in range(5)]
    await asyncio.sleep(0)
    release.set()
    results = await asyncio.wait_for(asyncio.gather(*opening, return_exceptions=True), 10)
    assert all(isinstance(r, ManagedLedgerError) for r in results), results
    assert not list(ml.cursors)  # none was confirmed, none is kept
    created = await ml.open_cursor("sub-0", InitialPosition.EARLIEST)  # and the next round works
    assert created.name == "sub-0"
    await f.close()


@pytest.mark.parametrize("cut_at", range(1, 12))
async def test_no_confirmed_subscription_is_lost_wherever_the_power_goes(cut_at: int) -> None:
    """Subscriptions created in rounds while the power goes after cut_at more writes: each one
    confirmed exists after the reboot."""
    fs = CrashFileSystem()
    fs.makedirs_durable("/data")
    f = factory(fs)
    ml = await f.open("t")
    fs.power_cut_after(cut_at)
    confirmed: list[str] = []
    for round_no in range(4):
        names = [f"r{round_no}-{i}" for i in range(3)]
        results = await asyncio.gather(*(ml.open_cursor(n, InitialPosition.EARLIEST) for n in names),
                                       return_exceptions=True)
        confirmed += [n for n, r in zip(names, results, strict=True) if not isinstance(r, BaseException)]
    await f.close()
    fs.reboot()
    f = factory(fs)
    ml = await f.open("t")
    assert set(confirmed) <= set(ml.cursors)
    await f.close()
