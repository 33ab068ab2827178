"""Where the file ledger keeps things, and the blocking work done off the loop on open.

Directory layout under the factory's root::

    ledger-ids                 highest ledger id handed out, reserved in blocks (see LedgerIds)
    ml/<encoded name>/         one directory per managed ledger
        name                   the managed ledger's name (JSON), written when it is created
        <ledgerId:020d>.seg    one segment file per ledger (format: segment.py)
        cursors/<name>.cur     one state file per durable cursor (format: cursor_store.py)
    trash/                     directories being deleted (renamed here first: deletion is atomic)

The segment files are the list of ledgers: a ledger exists iff its file does, its creation time
is in its header, and its entries are its records. There is no separate ledger list to keep in
step with the data, so a crash between "create file" and "update list" cannot happen.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field

from managed_ledger import cursor_store, segment
from managed_ledger.api import ManagedLedgerError
from managed_ledger.cursor_base import CursorRecord
from managed_ledger.fs import TMP_SUFFIX, FileHandle, FileSystem
from managed_ledger.position import Position
from managed_ledger.range_set import PositionRangeSet
from managed_ledger.segment import SegmentIndex
from managed_ledger.stats import FileLedgerStats

log = logging.getLogger(__name__)

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
# File names stay well under the 255-byte limit of common file systems.
_MAX_ENCODED = 180
# encode_name's escapes of the ASCII characters outside _SAFE, for str.translate.
_ASCII_ESCAPES = {i: f"%{i:02X}" for i in range(128) if chr(i) not in _SAFE}
NAME_FILE = "name"
CURSORS = "cursors"


def encode_name(name: str) -> str:
    """A file-name-safe, reversible spelling of name: %XX for every byte outside [A-Za-z0-9_-]
    (so "/" and "." never reach the file system). Too long: a prefix plus a hash (then only
    the ``name`` file inside tells the real name)."""
    if name.isascii():  # (the usual case: one translate, no per-character Python)
        out = name.translate(_ASCII_ESCAPES)
    else:
        out = "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in name)
    if len(out) > _MAX_ENCODED:
        out = out[:100] + "~" + hashlib.sha256(name.encode()).hexdigest()[:40]
    return out


def decode_name(encoded: str) -> str | None:
    """The name encode_name spelled, or None for a hashed (too long) one."""
    if "~" in encoded:
        return None
    if "%" not in encoded:
        return encoded
    raw = bytearray()
    i = 0
    while i < len(encoded):
        if encoded[i] == "%":
            raw.append(int(encoded[i + 1 : i + 3], 16))
            i += 3
        else:
            raw += encoded[i].encode()
            i += 1
    return raw.decode()


def join(*parts: str) -> str:
    return "/".join(parts)


# -- ledger ids -------------------------------------------------------------------------------

# Ledger ids reserved per write of the ledger-ids file: one small synced write per this many
# ledgers, so creating a ledger normally costs no metadata write at all.
LEDGER_ID_BLOCK = 10_000


class LedgerIds:
    """Ledger ids, unique and increasing across the factory and across restarts.

    The file holds an id above every id handed out; it is moved up a block at a time (atomic
    replace + sync) before an id of the new block is used. On start, ids also begin above every
    segment file found, so even a lost ``ledger-ids`` file cannot make positions go backwards.
    """

    def __init__(self, fs: FileSystem, path: str, highest_seen: int) -> None:
        self._fs = fs
        self._path = path
        reserved = 0
        if fs.exists(path):
            try:
                reserved = int(json.loads(fs.read_file(path))["reservedUpTo"])
            except (ValueError, KeyError, TypeError) as exc:
                log.error("ledger-id file %s is damaged (%s); continuing above the ids on disk", path, exc)
        self._next = max(reserved, highest_seen + 1, 1)
        self._reserved = self._next  # nothing of the new block reserved yet

    def next(self) -> int:
        if self._next >= self._reserved:
            reserved = self._next + LEDGER_ID_BLOCK
            try:
                self._fs.replace_atomically(self._path, json.dumps({"reservedUpTo": reserved}).encode(), sync=True)
            except OSError as exc:
                raise ManagedLedgerError(f"cannot reserve ledger ids: {exc}") from exc
            self._reserved = reserved
        ledger_id = self._next
        self._next += 1
        return ledger_id


# -- recovery of one managed ledger's directory (runs on a worker thread) ------------------------


@dataclass
class RecoveredSegment:
    ledger_id: int
    created_at: float
    index: SegmentIndex


@dataclass
class Recovered:
    segments: list[RecoveredSegment] = field(default_factory=list)  # ledger id order
    cursors: dict[str, CursorRecord] = field(default_factory=dict)


def recover_directory(fs: FileSystem, directory: str, stats: FileLedgerStats) -> Recovered:
    """Scan every segment (cutting torn or corrupt tails) and load the cursor states."""
    out = Recovered()
    names = fs.listdir(directory)
    changed = False
    for file in names:
        if file.endswith(TMP_SUFFIX):  # an atomic replace that never finished
            fs.unlink(join(directory, file))
            changed = True
    ledger_ids = sorted(i for i in map(segment.ledger_id_of, names) if i is not None)
    for ledger_id in ledger_ids:
        path = join(directory, segment.file_name(ledger_id))
        recovered, cut = _recover_segment(fs, path, ledger_id, stats, last=ledger_id == ledger_ids[-1])
        changed = changed or cut
        if recovered is not None:
            out.segments.append(recovered)
    if changed:
        fs.fsync_dir(directory)
    cursors_dir = join(directory, CURSORS)
    if fs.exists(cursors_dir):
        for file in sorted(fs.listdir(cursors_dir)):
            if file.endswith(cursor_store.SUFFIX):
                _load_cursor(fs, join(cursors_dir, file), file, out, stats)
            elif file.endswith(TMP_SUFFIX):
                fs.unlink(join(cursors_dir, file))
    return out


def _all_zeros(handle: FileHandle, size: int) -> bool:
    """Whether the first size bytes of the file are all zeros (read a MiB at a time)."""
    step = 1 << 20
    return not any(handle.pread(min(step, size - offset), offset).strip(b"\0") for offset in range(0, size, step))


def _recover_segment(
    fs: FileSystem, path: str, ledger_id: int, stats: FileLedgerStats, *, last: bool
) -> tuple[RecoveredSegment | None, bool]:
    handle = fs.open_append(path, create=False)
    try:
        result = segment.scan(handle, ledger_id)
        if result is None:
            size = handle.size()
            if last and (size < segment.HEADER_SIZE or _all_zeros(handle, size)):
                # The header becomes durable with the first entry's sync: a short last segment (or
                # one that holds only zeros) was created shortly before a crash and never confirmed
                # an entry. Nothing lost. (A zeroed header with anything after it is damage: below.)
                log.info("segment %s: created before a crash, never written (%d bytes); removed", path, size)
                fs.unlink(path)
                return None, True
            stats.add(corrupt_records_total=1, truncated_bytes_total=size)
            if size < segment.HEADER_SIZE:
                # A short segment that is not the last one: it was closed, so it was synced
                # (a closed ledger with entries had them confirmed); the disk lost it.
                log.warning("segment %s: torn header (%d bytes); removed", path, size)
                fs.unlink(path)
            else:
                # A full-size header that fails its check: the disk damaged it. Nothing in the
                # file can be trusted; keep the bytes aside for a human to look at.
                log.error("segment %s: damaged header; %d bytes moved aside as .corrupt", path, size)
                fs.rename(path, path + ".corrupt")
            return None, True
        if result.problem is not None:
            log.warning(
                "segment %s (ledger %d): %s; kept %d entries, cut %d bytes from offset %d",
                path, ledger_id, result.problem, result.index.entries, result.cut_bytes, result.valid_end,
            )
            stats.add(corrupt_records_total=1, truncated_bytes_total=result.cut_bytes)
            handle.truncate(result.valid_end)
            handle.sync()
        elif result.zero_tail:
            # The zeros after the last record, which the writer had not cut yet (the broker stopped
            # before closing the segment): nothing lost. No sync: should the cut itself be lost, the
            # next open finds the same zeros.
            log.debug("segment %s: %d zero bytes after the last record cut", path, result.cut_bytes)
            handle.truncate(result.valid_end)
        return RecoveredSegment(ledger_id, result.created_at, result.index), result.problem is not None
    finally:
        try:
            handle.close()
        except OSError:
            pass


def _load_cursor(fs: FileSystem, path: str, file: str, out: Recovered, stats: FileLedgerStats) -> None:
    try:
        stored = cursor_store.decode(fs.read_file(path))
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        stats.add(corrupt_records_total=1)
        name = decode_name(file[: -len(cursor_store.SUFFIX)])
        if name is None:
            log.error("cursor state %s is damaged (%s) and its name is unknown: cursor dropped", path, exc)
            return
        # Not knowing what was acknowledged, deliver everything again (at-least-once).
        log.error("cursor state %s is damaged (%s): cursor %r restarts from the first entry", path, exc, name)
        out.cursors[name] = CursorRecord(Position(-1, -1), PositionRangeSet(), {})
        return
    out.cursors[stored.name] = stored.record
