"""Power cuts at random points (RELIABILITY.md G1b): nothing receipted is lost, flushed acks stay.

Each round opens the file ledger on a CrashFileSystem, runs a producer (concurrent adds) and a
consumer (reads, individual and cumulative acks, the odd flush) until the power goes after a
random number of disk operations, closes everything (with every operation failing), and
reboots with only what was synced ("drop") or with torn, partly written tails and random
directory-entry survival ("torn"). Segments are written a block at a time, the last partial block
again with each write, zeros after the last record (``writer``). After every reboot:

- every receipted entry is there, at the position its receipt named, unless the cursor had
  acknowledged it (then it may have been trimmed);
- the cursor is never ahead of the data: every receipted entry it had not acknowledged is still
  unacknowledged (it will be delivered), and its mark-delete is not past the last entry;
- acknowledgements that a completed flush() covered are still acknowledged, for every entry
  still stored (at-least-once, not at-least-twice).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from managed_ledger import InitialPosition, ManagedCursor, ManagedLedgerConfig, ManagedLedgerError, Position
from managed_ledger.file import FileManagedLedger, FileManagedLedgerFactory
from tests.managed_ledger.crashfs import CrashFileSystem
from tests.managed_ledger.ml_support import FakeClock

ROUNDS = 150  # power cuts per mode
CONFIG = ManagedLedgerConfig(max_entries_per_ledger=5, min_ledger_rollover_time_s=0)
GROUPING: list[dict[str, Any]] = [{}, {"group_bytes": 1024, "group_min_bytes": 64, "group_wait_s": 0.002}]


class Model:
    def __init__(self) -> None:
        self.receipted: dict[bytes, Position] = {}
        # Acknowledged (in memory, maybe not yet on disk): individually, or cumulatively up to.
        self.acked: set[bytes] = set()
        self.acked_upto = Position(-1, -1)
        # What a completed flush() covered.
        self.flushed: set[bytes] = set()
        self.flushed_upto = Position(-1, -1)
        self.sent = 0

    def is_acked(self, payload: bytes) -> bool:
        return payload in self.acked or self.receipted[payload] <= self.acked_upto

    def is_flushed(self, payload: bytes) -> bool:
        return payload in self.flushed or self.receipted[payload] <= self.flushed_upto


async def produce(ml: FileManagedLedger, model: Model, rng: random.Random, tag: str, fs: CrashFileSystem,
                  pad: bytes) -> None:
    for _ in range(30):
        if fs.dead:
            return
        payloads = [f"{tag}-{model.sent + i}".encode() + pad for i in range(rng.randint(1, 8))]
        model.sent += len(payloads)
        results = await asyncio.gather(*(ml.add_entry_async(p) for p in payloads), return_exceptions=True)
        for payload, result in zip(payloads, results, strict=True):
            if isinstance(result, Position):
                model.receipted[payload] = result
            else:
                assert isinstance(result, ManagedLedgerError), result
        await asyncio.sleep(0)


async def consume(cursor: ManagedCursor, model: Model, rng: random.Random, fs: CrashFileSystem) -> None:
    for _ in range(40):
        if fs.dead:
            return
        try:
            entries = await cursor.read_entries_async(rng.randint(1, 6))
        except ManagedLedgerError:
            return
        if not entries:
            await asyncio.sleep(0)
            continue
        if rng.random() < 0.3:
            cursor.mark_delete(entries[-1].position)
            model.acked_upto = max(model.acked_upto, entries[-1].position)
        else:
            chosen = [e for e in entries if rng.random() < 0.7]
            cursor.delete([e.position for e in chosen])
            model.acked.update(e.data for e in chosen)
        if rng.random() < 0.2:
            covered, covered_upto = set(model.acked), model.acked_upto
            try:
                await cursor.flush()
            except ManagedLedgerError:
                return
            model.flushed |= covered
            model.flushed_upto = max(model.flushed_upto, covered_upto)


def check_recovered(ml: FileManagedLedger, cursor: ManagedCursor, model: Model, stored: dict[bytes, Position]) -> None:
    assert cursor.mark_delete_position <= ml.last_confirmed_entry
    for payload, position in model.receipted.items():
        if not model.is_acked(payload):
            assert stored.get(payload) == position, f"receipted {payload!r} at {position} lost"
            assert not cursor.is_acked(position), f"cursor is ahead of unacknowledged {payload!r}"
        elif payload in stored:
            assert stored[payload] == position
        if model.is_flushed(payload) and payload in stored:
            # (A trimmed entry may be gone, and then there is nothing left to redeliver.)
            assert cursor.is_acked(position), f"flushed ack of {payload!r} forgotten"


async def stored_entries(ml: FileManagedLedger) -> dict[bytes, Position]:
    reader = ml.new_non_durable_cursor(Position(-1, -1), "verify")
    out: dict[bytes, Position] = {}
    while batch := await reader.read_entries_async(100):
        for e in batch:
            assert e.data not in out, f"{e.data!r} stored twice"
            out[e.data] = e.position
    await reader.close()
    return out


@pytest.mark.parametrize("mode", ["drop", "torn"])
async def test_no_receipted_entry_lost_through_power_cuts(mode: str) -> None:
    rng = random.Random(f"power-cut-{mode}")
    fs = CrashFileSystem(seed=rng.randrange(2**32), mode=mode)
    fs.makedirs_durable("/data")
    model = Model()
    cuts_during_work = 0
    for round_no in range(ROUNDS + 1):
        factory = FileManagedLedgerFactory(
            "/data/ledgers", clock=FakeClock(), fs=fs, fault_retry_interval_s=0,
            cursor_persist_interval_s=rng.choice([0.0, 0.001, 3600.0]), read_threads=1,
            cache_size_bytes=rng.choice([0, 2000, 1 << 20]),
            # Also small group thresholds, so that batches are heavy (synced in their writes when they
            # go to few segments) and streams grouped (a grouped round synced in its write).
            **rng.choice(GROUPING),
        )
        ml = await factory.open("t", CONFIG)
        cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        stored = await stored_entries(ml)
        check_recovered(ml, cursor, model, stored)
        # Acks that did not survive are simply not acks any more: the entries come again.
        model.acked = {p for p, pos in model.receipted.items() if cursor.is_acked(pos) or p not in stored}
        model.acked_upto = Position(-1, -1)
        if round_no == ROUNDS:
            await factory.close()
            break
        fs.power_cut_after(rng.randrange(1, 120))
        # Small entries (a ledger's stay in one block, written again write after write) or large ones
        # (over several blocks).
        pad = b"." * rng.choice([0, 0, 1500])
        await asyncio.gather(produce(ml, model, rng, f"r{round_no}", fs, pad), consume(cursor, model, rng, fs))
        cuts_during_work += fs.dead
        await factory.close()  # with the power off every write fails: close must still finish
        fs.power_cut()
        fs.reboot()
    assert cuts_during_work >= ROUNDS // 2  # most cuts hit the work, not the idle close
    assert len(model.receipted) > 100
