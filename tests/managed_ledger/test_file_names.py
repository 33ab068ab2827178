"""The file ledger's names of an older layout: a store written when a topic's managed ledger was named by its raw
local name (``tenant/ns/persistent/a/x``) is renamed, once, to Pulsar's naming (``.../a%2Fx``: TopicName.
getPersistenceNamingEncoding), its data and cursors kept, and a power cut anywhere in the renaming loses nothing."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pulsar

from broker.embedded import BrokerThread
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import build_entry
from broker.topic_name import persistence_path_of_raw
from managed_ledger import InitialPosition, ManagedLedgerConfig, Position
from managed_ledger.file import FileManagedLedgerFactory
from managed_ledger.file_layout import LAYOUT_FILE, MIGRATION_FILE, NAMES_VERSION, encode_name
from tests.managed_ledger.crashfs import CrashFileSystem
from tests.managed_ledger.ml_support import FakeClock

ROOT = "/data/ledgers"
NS = "public/default/persistent"
KEEP = ManagedLedgerConfig(retention_time_s=-1, retention_size_bytes=-1)
# Old name (as an older version stored it) -> the name today. "a%2Fx" raw (a topic whose local name holds "%2F")
# is renamed to "a%252Fx", and "a/x" raw to "a%2Fx": one's new name is the other's old one.
RENAMED = {
    f"{NS}/a/x": f"{NS}/a%2Fx",
    f"{NS}/a%2Fx": f"{NS}/a%252Fx",
    f"{NS}/a b": f"{NS}/a+b",
    f"{NS}/a:x": f"{NS}/a%3Ax",
    f"{NS}/\u00fc": f"{NS}/%C3%BC",
    f"{NS}/l/" + "\u00e9" * 100: f"{NS}/l%2F" + "%C3%A9" * 100,  # (long: its directory's name is hashed, both times)
}
# (a compacted view's names, beside and nested under its topic's, are in its record: kept)
KEPT = [f"{NS}/a", "public/default/__compaction/a/x-1", f"{NS}/a/x/__compaction/2",
        "pulsar/system/persistent/__transaction_log_0"]


async def write_old_layout(factory: FileManagedLedgerFactory) -> dict[str, list[Position]]:
    """Each name of RENAMED and KEPT, stored as it is (what an older version did), with entries and a cursor."""
    written = {}
    for i, name in enumerate([*RENAMED, *KEPT]):
        ml = await factory.open(name, KEEP)
        cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST, properties={"i": i})
        written[name] = [await ml.add_entry_async(f"{name}:{j}".encode()) for j in range(3)]
        cursor.mark_delete(written[name][0])
        await cursor.flush()
    return written


async def check_new_layout(factory: FileManagedLedgerFactory, written: dict[str, list[Position]]) -> None:
    assert factory.list_names() == sorted([*RENAMED.values(), *KEPT])
    for i, (old, positions) in enumerate(written.items()):
        ml = await factory.open(RENAMED.get(old, old), KEEP)
        cursor = ml.cursors["sub"]
        assert cursor.mark_delete_position == positions[0] and cursor.properties == {"i": i}
        assert [e.data for e in await cursor.read_entries_async(10)] == [f"{old}:{j}".encode() for j in (1, 2)]


async def test_an_old_layout_is_renamed_to_pulsars_names_once(tmp_path: Path) -> None:
    old = FileManagedLedgerFactory(str(tmp_path), clock=FakeClock())  # (no migrate_names: names kept as given)
    written = await write_old_layout(old)
    await old.close()
    assert not (tmp_path / LAYOUT_FILE).exists()

    factory = FileManagedLedgerFactory(str(tmp_path), clock=FakeClock(), migrate_names=persistence_path_of_raw)
    await check_new_layout(factory, written)
    await factory.close()
    assert json.loads((tmp_path / LAYOUT_FILE).read_text()) == {"names": NAMES_VERSION}
    assert not (tmp_path / MIGRATION_FILE).exists()
    long_name = next(n for n in RENAMED.values() if n.startswith(f"{NS}/l%2F"))
    assert json.loads((tmp_path / "ml" / encode_name(long_name) / "name").read_text()) == {"name": long_name}

    # Once: the names now stored are today's, never taken for old ones again ("a%2Fx" stays "a%2Fx").
    again = FileManagedLedgerFactory(str(tmp_path), clock=FakeClock(), migrate_names=persistence_path_of_raw)
    await check_new_layout(again, written)
    await again.close()


async def test_a_new_store_is_marked_at_once(tmp_path: Path) -> None:
    """A store made today holds today's names: marked from the start, so a later start renames nothing."""
    factory = FileManagedLedgerFactory(str(tmp_path), clock=FakeClock(), migrate_names=persistence_path_of_raw)
    ml = await factory.open(f"{NS}/a%2Fx", KEEP)
    await ml.add_entry_async(b"m")
    await factory.close()
    assert json.loads((tmp_path / LAYOUT_FILE).read_text()) == {"names": NAMES_VERSION}
    factory = FileManagedLedgerFactory(str(tmp_path), clock=FakeClock(), migrate_names=persistence_path_of_raw)
    assert factory.list_names() == [f"{NS}/a%2Fx"]
    await factory.close()


def crash_factory(fs: CrashFileSystem, migrate: bool) -> FileManagedLedgerFactory:
    return FileManagedLedgerFactory(ROOT, clock=FakeClock(), fs=fs,
                                    migrate_names=persistence_path_of_raw if migrate else None)


async def test_a_power_cut_anywhere_in_the_renaming_loses_nothing() -> None:
    """Cut the power after each mutating operation of the renaming in turn; the next start finishes it (or starts
    it again) and every managed ledger is under its new name with its entries and cursor. (The "drop" mode: what a
    directory's sync made durable stays, the rest is lost. Not "torn", whose unsynced directory changes survive one
    by one, so that a rename may lose both names: no file system's rename does that.)"""
    cut = 0
    while True:
        fs = CrashFileSystem(seed=cut)
        fs.makedirs_durable("/data")
        old = crash_factory(fs, migrate=False)
        written = await write_old_layout(old)
        await old.close()
        before = fs.ops
        fs.power_cut_after(cut)
        try:
            crash_factory(fs, migrate=True)
        except OSError:
            pass
        else:
            assert fs.ops - before <= cut  # (done within the allowance: every cut point was tried)
            break
        fs.reboot()
        factory = crash_factory(fs, migrate=True)
        await check_new_layout(factory, written)
        await factory.close()
        cut += 1
    assert cut > 10


def test_a_broker_over_an_old_data_dir_serves_its_topics_under_their_new_names(tmp_path: Path) -> None:
    """A broker started on a data dir of an older version: the topic ``a/x`` (stored as ``.../persistent/a/x``) keeps
    its messages and its subscription's position, and its ledger is now Pulsar's ``.../persistent/a%2Fx``."""

    async def write() -> None:
        old = FileManagedLedgerFactory(str(tmp_path / "ledgers"), clock=FakeClock())
        ml = await old.open(f"{NS}/a/x", KEEP)
        cursor = await ml.open_cursor("s", InitialPosition.EARLIEST)
        positions = [await ml.add_entry_async(message(i)) for i in range(3)]
        cursor.mark_delete(positions[0])
        await cursor.flush()
        await old.close()

    asyncio.run(write())
    with BrokerThread(data_dir=tmp_path) as broker:
        factory = broker.server.service.ledger_factory
        assert f"{NS}/a%2Fx" in factory.list_names() and f"{NS}/a/x" not in factory.list_names()
        with urllib.request.urlopen(f"{broker.web_url}/admin/v2/persistent/public/default", timeout=30) as reply:
            assert json.loads(reply.read()) == ["persistent://public/default/a/x"]
        url = f"{broker.web_url}/admin/v2/persistent/public/default/a%2Fx/stats"
        with urllib.request.urlopen(url, timeout=30) as reply:
            stats = json.loads(reply.read())
        assert stats["subscriptions"]["s"]["msgBacklog"] == 2
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            consumer = client.subscribe("persistent://public/default/a/x", "s")
            assert [consumer.receive(10_000).data() for _ in range(2)] == [payload(1), payload(2)]
        finally:
            client.close()


def message(i: int) -> bytes:
    """Message ``i`` as a topic stores it: its metadata and payload (``payload(i)``)."""
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1)
    return build_entry(metadata.SerializeToString(), payload(i))


def payload(i: int) -> bytes:
    return f"m{i}".encode()
