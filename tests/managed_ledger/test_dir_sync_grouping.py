"""New names (subscriptions' cursor files, topics' directories and segments) are made durable by
directory fsyncs grouped per writer round: one fsync of a directory for all the files created in it
in the round, and still nothing confirmed before its name is durable (issue 20, item 4). A new
topic's names are synced with the first thing stored in it (its first add, a cursor file), not
when it is opened.

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

from managed_ledger import InitialPosition, ManagedLedgerError, Position
from managed_ledger.file import FileManagedLedger, FileManagedLedgerFactory
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

    def open_append(self, path: str, *, create: bool, direct: bool = False) -> FileHandle:
        if create:
            self.events.append(("create", path))
        return super().open_append(path, create=create, direct=direct)


def factory(fs: CrashFileSystem) -> FileManagedLedgerFactory:
    return FileManagedLedgerFactory(ROOT, clock=FakeClock(), fs=fs, fault_retry_interval_s=0)


async def stored(ml: FileManagedLedger) -> list[tuple[Position, bytes]]:
    """(position, data) of every entry stored in the managed ledger."""
    entries = await ml.new_non_durable_cursor(Position(-1, -1), "check").read_entries_async(100)
    return [(e.position, e.data) for e in entries]


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


async def test_topics_written_together_share_the_parent_directory_sync() -> None:
    """Opening a new topic syncs no directory; the first adds of topics opened together sync their parent
    once, in their round, and each add is receipted only once its names are durable."""
    fs = CountingFileSystem()
    fs.makedirs_durable("/data")
    f = factory(fs)
    await f.open("warm-up")  # the factory's own directories and ledger-id file
    parent = f"{ROOT}/ml"
    syncs_before = sum(fs.dir_syncs.values())
    ledgers = await asyncio.gather(*(f.open(f"topic-{i}") for i in range(TOPICS)))
    assert sum(fs.dir_syncs.values()) == syncs_before  # opening costs no directory sync
    before = fs.dir_syncs[parent]
    release = await hold_writer(f)
    adding = [asyncio.ensure_future(ml.add_entry_async(f"first of {ml.name}".encode())) for ml in ledgers]
    await asyncio.sleep(0)  # every add is queued now, while the writer is held
    release.set()
    await asyncio.wait_for(asyncio.gather(*adding), 10)
    assert fs.dir_syncs[parent] - before == 1  # eight new directories, one sync of their parent
    assert all(fs.dir_syncs[ml.directory] == 1 for ml in ledgers)

    fs.power_cut()  # every receipt was given after its names were durable
    await f.close()
    fs.reboot()
    f = factory(fs)
    for i in range(TOPICS):
        ml = await f.open(f"topic-{i}")
        assert [data for _, data in await stored(ml)] == [f"first of topic-{i}".encode()]
    await f.close()


async def test_a_new_topic_costs_no_sync_until_something_is_stored_in_it() -> None:
    """The directory and the first segment are made in one round with no directory sync; the first add syncs
    both directories (the topic's own and its parent) before its receipt; an explicit creation syncs them at
    once. A power cut before either may take back the empty topic, which is made again on its next use."""
    fs = CountingFileSystem()
    fs.makedirs_durable("/data")
    f = factory(fs)
    await f.open("warm-up")
    parent = f"{ROOT}/ml"
    fs.events.clear()
    ml = await f.open("new-topic")
    assert [kind for kind, _ in fs.events] == ["create"]  # the segment; no fsync_dir
    position = await ml.add_entry_async(b"first")
    assert ("fsync_dir", parent) in fs.events and ("fsync_dir", ml.directory) in fs.events
    explicit = await f.open("explicit-topic")
    await explicit.sync_creation()
    assert ("fsync_dir", explicit.directory) in fs.events
    await f.open("never-used")

    fs.power_cut()
    await f.close()
    fs.reboot()
    f = factory(fs)
    assert f.exists("new-topic") and f.exists("explicit-topic")
    assert not f.exists("never-used")  # (nothing stored, not explicit: its names were never synced)
    ml = await f.open("new-topic")
    assert await stored(ml) == [(position, b"first")]
    again = await f.open("never-used")
    await again.add_entry_async(b"after the cut")
    await f.close()


async def test_a_topic_s_cursors_directory_is_made_with_its_first_subscription_and_survives_a_power_cut() -> None:
    """Opening a new topic makes one directory (no cursors/: a topic without subscriptions never needs it). The
    first subscription, made after the topic's names were synced by an add, makes cursors/ and syncs the topic's
    directory too (the new name is in it) before it is confirmed: it survives a power cut right after."""
    fs = CountingFileSystem()
    fs.makedirs_durable("/data")
    f = factory(fs)
    ml = await f.open("t")
    assert not fs.exists(f"{ml.directory}/cursors")
    position = await ml.add_entry_async(b"first")  # (syncs the topic's names: the directory's are durable)
    fs.events.clear()
    await ml.open_cursor("sub", InitialPosition.EARLIEST)
    assert ("fsync_dir", ml.directory) in fs.events and ("fsync_dir", f"{ml.directory}/cursors") in fs.events
    fs.events.clear()
    await ml.open_cursor("second", InitialPosition.LATEST)
    assert ("fsync_dir", ml.directory) not in fs.events  # (cursors/ is known durable now)

    fs.power_cut()
    await f.close()
    fs.reboot()
    f = factory(fs)
    ml = await f.open("t")
    assert set(ml.cursors) == {"sub", "second"}
    assert await stored(ml) == [(position, b"first")]
    await ml.open_cursor("after-reboot", InitialPosition.EARLIEST)  # (a recovered cursor: cursors/ exists)
    await f.close()


async def test_a_failed_sync_of_a_new_topic_s_names_fails_its_adds_and_they_are_synced_again() -> None:
    fs = CountingFileSystem()
    fs.makedirs_durable("/data")
    f = factory(fs)
    ml = await f.open("t")
    fs.inject("fsync_dir", errno.EIO, count=1, path_part="/ml")
    results = await asyncio.gather(*(ml.add_entry_async(b"x") for _ in range(3)), return_exceptions=True)
    assert all(isinstance(r, ManagedLedgerError) for r in results), results  # none receipted
    await f.writer.barrier()  # (the recovery the failure started has run)
    assert not ml.is_fenced
    syncs_before = fs.dir_syncs[f"{ROOT}/ml"]
    position = await asyncio.wait_for(ml.add_entry_async(b"after"), 10)
    assert fs.dir_syncs[f"{ROOT}/ml"] == syncs_before + 1  # the names are synced again before this receipt

    fs.power_cut()
    await f.close()
    fs.reboot()
    f = factory(fs)
    ml = await f.open("t")
    assert await stored(ml) == [(position, b"after")]
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
