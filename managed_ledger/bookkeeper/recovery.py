"""Recovery open: fence a ledger whose writer may be gone and close it where it really ends (see `client`)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from managed_ledger.bookkeeper.bookie import BookieUnavailableError
from managed_ledger.bookkeeper.digest import Digester, DigestError, EntryFrame, master_key
from managed_ledger.bookkeeper.errors import BookKeeperError
from managed_ledger.bookkeeper.metadata import LedgerMetadata, LedgerState
from managed_ledger.bookkeeper.protocol import Flag, ReadRequest, ReadResponse, StatusCode
from managed_ledger.bookkeeper.writer import LedgerWriter

if TYPE_CHECKING:
    from managed_ledger.bookkeeper.client import BookKeeper

MISSING = (StatusCode.ENOENTRY, StatusCode.ENOLEDGER)


async def recover_ledger(bk: BookKeeper, ledger_id: int, metadata: LedgerMetadata, version: int,
                   password: bytes) -> LedgerMetadata:
    """Fence an OPEN (or IN_RECOVERY) ledger and close it at its last recoverable entry; returns the metadata."""
    metadata, version = await bk.update_metadata(
        ledger_id, metadata, version, lambda md: md.state == LedgerState.OPEN,
        lambda md: md.with_state(LedgerState.IN_RECOVERY))
    if metadata.is_closed:
        return metadata  # closed by its writer or another recoverer meanwhile
    lac, _ = await bk._read_last_add_confirmed(ledger_id, metadata, password, fence=True)
    lac = max(lac, metadata.last_ensemble.first_entry_id - 1)
    digester = Digester(metadata.digest_type, password)
    key = master_key(password)
    length = 0
    if lac >= 0:
        length = (await bk.read_entry(ledger_id, metadata, digester, lac)).length
    writer = LedgerWriter(bk, ledger_id, metadata, version, password, recovery=True, last_add_confirmed=lac,
                          length=length)
    needed_missing = metadata.write_quorum - metadata.ack_quorum + 1
    entry_id = lac + 1
    while True:
        frame = await _recovery_read(bk, ledger_id, writer.metadata, digester, key, entry_id, needed_missing)
        if frame is None:
            break
        # Re-add it with the recovery flag (fenced bookies accept it), so it reaches a full write quorum.
        await writer.add_entry(frame.payload)
        entry_id += 1
    await writer.close()
    return writer.metadata


async def _recovery_read(bk: BookKeeper, ledger_id: int, metadata: LedgerMetadata, digester: Digester, key: bytes,
                         entry_id: int, needed_missing: int) -> EntryFrame | None:
    """The entry, or None once enough bookies of its write set (Qw - Qa + 1) say they do not have it.

    A single "no such entry" is not enough: the entry may have reached Qa other bookies and been acknowledged.
    """
    write_set = metadata.write_set(entry_id)
    request = ReadRequest(ledger_id, entry_id, Flag.DO_FENCING | Flag.HIGH_PRIORITY, key)
    results = await asyncio.gather(*(bk.bookies.request(b, request) for b in write_set), return_exceptions=True)
    missing = 0
    for result in results:
        if isinstance(result, BookieUnavailableError):
            continue
        if isinstance(result, BaseException):
            raise result
        assert isinstance(result, ReadResponse)
        if result.status == StatusCode.EOK:
            with contextlib.suppress(DigestError):
                return digester.verify(result.entry, ledger_id, entry_id)
        elif result.status in MISSING:
            missing += 1
    if missing >= needed_missing:
        return None
    raise BookKeeperError(f"ledger {ledger_id} entry {entry_id}: cannot tell whether it exists "
                          f"({missing} of {len(write_set)} bookies said missing, {needed_missing} needed)")
