"""The asyncio BookKeeper client against real bookies (3 bookies, one ZooKeeper) and BookKeeper's Java client."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cluster.local import LocalCluster, add_bookie, bookkeeper_lib, kill_bookie
from managed_ledger.bookkeeper.client import BookKeeper, LedgerClosedError, LedgerFencedError, LedgerWriter
from managed_ledger.bookkeeper.digest import Digester, DigestType, master_key
from managed_ledger.bookkeeper.metadata import LedgerState, ledger_path, serialize
from managed_ledger.bookkeeper.protocol import AddRequest, ReadRequest, StatusCode
from tests.bookkeeper.conftest import require_cluster_deps

JAVA_SOURCE = Path(__file__).parent / "java" / "BkInterop.java"


@pytest.fixture
async def bk(bk_cluster: LocalCluster) -> AsyncIterator[BookKeeper]:
    async with BookKeeper(bk_cluster.zk_address) as client:
        yield client


async def write(lh: LedgerWriter, count: int, prefix: bytes = b"m") -> list[int]:
    return list(await asyncio.gather(*(lh.add_entry_nowait(prefix + b"%d" % i) for i in range(count))))


@pytest.mark.parametrize(("e", "qw", "qa"), [(3, 2, 2), (1, 1, 1), (3, 3, 2)])
async def test_write_read_close(bk: BookKeeper, e: int, qw: int, qa: int) -> None:
    lh = await bk.create_ledger(e, qw, qa)
    assert await write(lh, 40) == list(range(40))
    assert lh.last_add_confirmed == 39
    assert await lh.read(0, 39) == [b"m%d" % i for i in range(40)]
    await lh.close()

    md, version = await bk.read_metadata(lh.ledger_id)
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, 39, sum(len(b"m%d" % i) for i in range(40)))
    assert (md.ensemble_size, md.write_quorum, md.ack_quorum) == (e, qw, qa) and version == 1
    assert await bk.zk.exists(ledger_path(lh.ledger_id)) is not None

    reader = await bk.open_ledger(lh.ledger_id)
    assert reader.last_add_confirmed == 39
    assert await reader.read(30, 39) == [b"m%d" % i for i in range(30, 40)]
    await bk.delete_ledger(lh.ledger_id)


async def test_acknowledgements_come_in_entry_order(bk: BookKeeper) -> None:
    lh = await bk.create_ledger(3, 2, 2)
    order: list[int] = []
    futures = [lh.add_entry_nowait(b"x" * (i % 7) * 100) for i in range(200)]
    for f in futures:
        f.add_done_callback(lambda f: order.append(f.result()))
    await asyncio.gather(*futures)
    assert order == list(range(200))
    await lh.close()


async def test_entries_carry_the_lac(bk: BookKeeper) -> None:
    """A reader that opens without recovery sees the LAC piggy-backed on the last entries."""
    lh = await bk.create_ledger(3, 2, 2)
    for i in range(5):
        await lh.add_entry(b"e%d" % i)
    reader = await bk.open_ledger(lh.ledger_id, recover=False)
    assert reader.last_add_confirmed == 3  # entry 4 carries LAC 3 (it was sent before it was acknowledged)
    assert await reader.read(0, 3) == [b"e0", b"e1", b"e2", b"e3"]
    md, _ = await bk.read_metadata(lh.ledger_id)
    assert md.state == LedgerState.OPEN  # not fenced
    assert await lh.add_entry(b"e5") == 5
    await lh.close()


async def test_recovery_fences_the_old_writer(bk_cluster: LocalCluster) -> None:
    async with BookKeeper(bk_cluster.zk_address) as bk_a, BookKeeper(bk_cluster.zk_address) as bk_b:
        writer = await bk_a.create_ledger(3, 2, 2)
        assert await write(writer, 10, b"a") == list(range(10))

        recovered = await bk_b.open_ledger(writer.ledger_id, recover=True)
        assert recovered.last_add_confirmed == 9
        assert await recovered.read(0, 9) == [b"a%d" % i for i in range(10)]
        md, _ = await bk_b.read_metadata(writer.ledger_id)
        assert (md.state, md.last_entry_id) == (LedgerState.CLOSED, 9)

        with pytest.raises(LedgerFencedError):
            await writer.add_entry(b"too late")
        with pytest.raises(LedgerFencedError):
            await writer.add_entry(b"still too late")
        await writer.close()  # a failed writer closes without touching the metadata
        md_after, _ = await bk_b.read_metadata(writer.ledger_id)
        assert md_after == md


async def test_recovery_keeps_an_entry_that_reached_one_bookie(bk_cluster: LocalCluster) -> None:
    """A writer crashed after sending entry 5 to one bookie of its write set: recovery finds it and re-adds it with
    the recovery flag, so the other bookie (already fenced) accepts it too; the ledger closes at 5."""
    async with BookKeeper(bk_cluster.zk_address) as bk_a, BookKeeper(bk_cluster.zk_address) as bk_b:
        writer = await bk_a.create_ledger(3, 2, 2)
        await write(writer, 5, b"w")
        first, second = writer.metadata.write_set(5)
        entry = Digester(DigestType.CRC32C).package(writer.ledger_id, 5, 4, writer.length + 2, b"w5")
        response = await bk_a.bookies.request(first, AddRequest(master_key(b""), entry))
        assert response.status == StatusCode.EOK
        missing = await bk_a.bookies.request(second, ReadRequest(writer.ledger_id, 5))
        assert missing.status == StatusCode.ENOENTRY

        reader = await bk_b.open_ledger(writer.ledger_id)
        assert reader.last_add_confirmed == 5 and reader.length == writer.length + 2
        assert await reader.read(0, 5) == [b"w0", b"w1", b"w2", b"w3", b"w4", b"w5"]
        copied = await bk_b.bookies.request(second, ReadRequest(writer.ledger_id, 5))
        assert copied.status == StatusCode.EOK  # the recovery add reached the fenced bookie
        with pytest.raises(LedgerFencedError):
            await writer.add_entry(b"w6")
        await writer.close()


async def test_recovering_a_closed_or_empty_ledger(bk: BookKeeper) -> None:
    empty = await bk.create_ledger(3, 2, 2)
    reader = await bk.open_ledger(empty.ledger_id)
    assert (reader.last_add_confirmed, reader.metadata.state, reader.length) == (-1, LedgerState.CLOSED, 0)
    closed = await bk.create_ledger(1, 1, 1)
    await write(closed, 3)
    await closed.close()
    md_before, version_before = await bk.read_metadata(closed.ledger_id)
    again = await bk.open_ledger(closed.ledger_id)
    assert again.last_add_confirmed == 2
    assert await bk.read_metadata(closed.ledger_id) == (md_before, version_before)  # no write for a closed ledger


# ---- byte compatibility with BookKeeper's Java client ------------------------------------------------------------


async def run_java(cluster: LocalCluster, classes: Path, *args: str) -> list[str]:
    cmd = ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
           f"{classes}{os.pathsep}{bookkeeper_lib() / '*'}", "BkInterop", cluster.metadata_service_uri, *args]
    done = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if line.startswith(("LEDGER", "ENTRY", "METADATA"))]


@pytest.fixture(scope="module")
def java_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_cluster_deps(javac=True)
    out = tmp_path_factory.mktemp("bk-java")
    subprocess.run(["javac", "-nowarn", "-cp", str(bookkeeper_lib() / "*"), "-d", str(out), str(JAVA_SOURCE)],
                   check=True, capture_output=True, timeout=120)
    return out


async def test_java_client_reads_our_ledgers_and_we_read_its(
        bk: BookKeeper, bk_cluster: LocalCluster, java_classes: Path) -> None:
    ours_closed = await bk.create_ledger(3, 2, 2)
    await write(ours_closed, 7, b"py-")
    await ours_closed.close()
    ours_open = await bk.create_ledger(3, 2, 2)
    await write(ours_open, 4, b"open-")

    # Java writes a ledger and "crashes" (exits without closing it); Java recovers and reads both of ours.
    written = await run_java(bk_cluster, java_classes, "write", "5", "open")
    java_ledger = int(written[0].split()[1])
    lines = await run_java(bk_cluster, java_classes, "read", str(ours_closed.ledger_id), str(ours_open.ledger_id))

    assert f"LEDGER {ours_closed.ledger_id} LAC 6 LENGTH {sum(len(b'py-%d' % i) for i in range(7))}" in lines
    assert [f"ENTRY {ours_closed.ledger_id} {i} {(b'py-%d' % i).hex()}" for i in range(7)] == \
        [line for line in lines if line.startswith(f"ENTRY {ours_closed.ledger_id} ")]
    # Java's recovery open fenced our open ledger and closed it at our last entry.
    assert any(line.startswith(f"LEDGER {ours_open.ledger_id} LAC 3 ") for line in lines)
    with pytest.raises(LedgerFencedError):
        await ours_open.add_entry(b"after Java recovered")
    md, _ = await bk.read_metadata(ours_open.ledger_id)
    assert (md.state, md.last_entry_id) == (LedgerState.CLOSED, 3)

    # We recover Java's open ledger: its metadata (written by Java) parses, its entries verify.
    java_md, _ = await bk.read_metadata(java_ledger)
    assert java_md.state == LedgerState.OPEN and ("application", b"pulsar") in java_md.custom_metadata
    java_bytes, _ = await bk.zk.get(ledger_path(java_ledger))
    assert serialize(java_md) == java_bytes  # we write metadata byte for byte as Java does
    reader = await bk.open_ledger(java_ledger, recover=True)
    assert reader.last_add_confirmed == 4
    assert await reader.read(0, 4) == [b"java-%d" % i for i in range(5)]


async def test_ledger_metadata_is_printed_as_bookkeeper_prints_it(
        bk: BookKeeper, bk_cluster: LocalCluster, java_classes: Path) -> None:
    """What internal stats show with ?metadata=true: BookKeeper's own toSafeString of the same znodes."""
    custom = {"application": b"pulsar", "component": b"managed-ledger", "pulsar/managed-ledger": b"public/t"}
    closed = await bk.create_ledger(3, 2, 2, custom_metadata=custom.items())
    await write(closed, 3)
    await closed.close()
    still_open = await bk.create_ledger(2, 2, 1)
    ids = [closed.ledger_id, still_open.ledger_id]
    printed = await run_java(bk_cluster, java_classes, "metadata", *map(str, ids))
    ours = [f"METADATA {i} {(await bk.read_metadata(i))[0].safe_string()}" for i in ids]
    assert printed == ours
    assert "state=CLOSED, length=" in printed[0] and "customMetadata={component=base64:" in printed[0]


# ---- bookie failure: runs last, it replaces a bookie of the shared cluster ----------------------------------------


async def test_ensemble_change_when_a_bookie_is_killed(bk: BookKeeper, bk_cluster: LocalCluster) -> None:
    await asyncio.to_thread(add_bookie, bk_cluster)  # a fourth bookie to replace the one killed
    lh = await bk.create_ledger(3, 2, 2)
    assert await write(lh, 10, b"before-") == list(range(10))
    victim = lh.metadata.last_ensemble.ensemble[1]
    await asyncio.to_thread(kill_bookie, bk_cluster, victim)  # kill -9

    assert await write(lh, 10, b"after-") == list(range(10, 20))
    segments = lh.metadata.segments
    assert len(segments) == 2 and segments[1].first_entry_id == 10
    assert victim not in segments[1].ensemble and len(set(segments[1].ensemble)) == 3
    assert await lh.read(0, 19) == [b"before-%d" % i for i in range(10)] + [b"after-%d" % i for i in range(10)]
    await lh.close()

    md, _ = await bk.read_metadata(lh.ledger_id)
    assert md.segments == segments and md.last_entry_id == 19
    reader = await bk.open_ledger(lh.ledger_id)
    assert await reader.read(8, 12) == [b"before-8", b"before-9", b"after-0", b"after-1", b"after-2"]


async def test_ensemble_change_with_adds_in_flight(bk: BookKeeper, bk_cluster: LocalCluster) -> None:
    await asyncio.to_thread(add_bookie, bk_cluster)
    lh = await bk.create_ledger(3, 2, 2)
    await write(lh, 3, b"a")
    victim = lh.metadata.last_ensemble.ensemble[0]
    in_flight = [lh.add_entry_nowait(b"b%d" % i) for i in range(30)]
    # SIGKILL before the loop runs the sends: the victim dies with these 30 adds pending, so they must be resent
    # to its replacement after the ensemble change.
    os.kill(next(b.pid for b in bk_cluster.bookies if b.address == victim), signal.SIGKILL)
    more = [lh.add_entry_nowait(b"c%d" % i) for i in range(10)]
    assert await asyncio.gather(*in_flight, *more) == list(range(3, 43))
    await asyncio.to_thread(kill_bookie, bk_cluster, victim)  # reap it
    segments = lh.metadata.segments
    assert len(segments) == 2 and segments[1].first_entry_id == 3 and victim not in segments[1].ensemble
    expected = [b"a0", b"a1", b"a2"] + [b"b%d" % i for i in range(30)] + [b"c%d" % i for i in range(10)]
    assert await lh.read(0, 42) == expected
    await lh.close()
    reader = await bk.open_ledger(lh.ledger_id)
    assert await reader.read(0, 42) == expected


async def test_recovery_with_a_dead_bookie(bk_cluster: LocalCluster) -> None:
    """Fencing needs Qw - Qa + 1 answers per write quorum, not every bookie; re-adding an entry whose write set has
    the dead bookie makes the recovering reader change the ensemble, written with its final close."""
    await asyncio.to_thread(add_bookie, bk_cluster)
    async with BookKeeper(bk_cluster.zk_address) as bk_a, BookKeeper(bk_cluster.zk_address) as bk_b:
        writer = await bk_a.create_ledger(3, 2, 2)
        for i in range(10):  # one at a time, so that entry 9 carries LAC 8
            await writer.add_entry(b"d%d" % i)
        # Recovery reads on from LAC + 1 = 9 and re-adds entry 9: kill one of its write set.
        victim = writer.metadata.write_set(9)[0]
        await asyncio.to_thread(kill_bookie, bk_cluster, victim)

        reader = await bk_b.open_ledger(writer.ledger_id)
        assert reader.last_add_confirmed == 9
        assert await reader.read(0, 9) == [b"d%d" % i for i in range(10)]
        md, _ = await bk_b.read_metadata(writer.ledger_id)
        assert md.state == LedgerState.CLOSED and md.last_entry_id == 9
        assert victim not in md.last_ensemble.ensemble and md.last_ensemble.first_entry_id == 9
        with pytest.raises((LedgerFencedError, LedgerClosedError)):
            await writer.add_entry(b"too late")
        await writer.close()
