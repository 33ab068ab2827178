"""Where the file ledger keeps things, and the blocking work done off the loop on open.

Directory layout under the factory's root::

    ledger-ids                 highest ledger id handed out, reserved in blocks (see LedgerIds)
    ml/<encoded name>/         one directory per managed ledger
        name                   the managed ledger's name (JSON), written when it is created
        <ledgerId:020d>.seg    one segment file per ledger (format: segment.py)
        cursors/<name>.cur     one state file per durable cursor (format: cursor_store.py)
    ml/migrating.<i>/          while the names of an older layout are changed: one between its old and new name
    trash/                     directories being deleted (renamed here first: deletion is atomic)
    layout                     the naming of the managed ledgers (JSON ``{"names": N}``, see below)
    layout-migration           while the names of an older layout are changed: the plan (JSON)

The segment files are the list of ledgers: a ledger exists iff its file does, its creation time
is in its header, and its entries are its records. There is no separate ledger list to keep in
step with the data, so a crash between "create file" and "update list" cannot happen.

Names: ``layout`` holds the version of the names stored (``NAMES_VERSION``). A store without it was written by an
older version, whose names may differ from today's (a broker named a topic's managed ledger by its raw local name,
where Pulsar URL-encodes it): the factory's owner says how (``migrate_names``). The renames are planned first (the
plan synced), then every directory moves aside (``ml/migrating.<i>``: a name encode_name never spells, in ml/ itself
so that one sync of ml/ makes all the moves durable together), ml/ is synced and the plan marked so, then each moves
to its new name, ml/ is synced, ``layout`` is written and the plan removed: a crash anywhere resumes the same plan on
the next start, and a name is never taken for an old one twice (``layout`` is written before the plan goes).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from managed_ledger import cursor_store, segment
from managed_ledger.api import ManagedLedgerError
from managed_ledger.cursor_base import CursorRecord
from managed_ledger.fs import TMP_SUFFIX, FileHandle, FileSystem
from managed_ledger.offload.state import OFFLOADS_FILE, LedgerOffload, OffloadStateError
from managed_ledger.offload.state import decode as decode_offloads
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
LAYOUT_FILE = "layout"
MIGRATION_FILE = "layout-migration"
STAGED_PREFIX = "migrating."  # (encode_name escapes ".": no managed ledger's directory starts so)
# 2: a topic's managed ledger named as Pulsar names it (its local name URL-encoded); 1 (no ``layout`` file): raw.
NAMES_VERSION = 2


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
    offloads: list[LedgerOffload] = field(default_factory=list)  # (offload.state: the ledgers with a copy elsewhere)


def read_offloads(fs: FileSystem, directory: str, stats: FileLedgerStats | None = None) -> list[LedgerOffload]:
    """A managed ledger's offload records (its ``offloads`` file; none without one)."""
    offloads = join(directory, OFFLOADS_FILE)
    if not fs.exists(offloads):
        return []
    try:
        return decode_offloads(fs.read_file(offloads))
    except OffloadStateError as exc:
        # (Written atomically: only a disk fault damages it. The local copies still there are read as usual;
        # one deleted after its offload cannot be found without it.)
        if stats is not None:
            stats.add(corrupt_records_total=1)
        log.error("offload state %s is damaged (%s): ledgers known only from it are lost", offloads, exc)
        return []


def stored_ledgers(fs: FileSystem, directory: str) -> tuple[list[int], list[LedgerOffload]]:
    """A managed ledger's ledgers with a local segment, and its offload records, without recovering it."""
    local = sorted(i for i in map(segment.ledger_id_of, fs.listdir(directory)) if i is not None)
    return local, read_offloads(fs, directory)


@dataclass
class StoredFiles:
    """What a managed ledger's directory holds, read without changing anything (``read_stored``)."""

    modified_ms: int  # the directory's last change (a ledger made or removed, its offloads rewritten)
    offloads: list[LedgerOffload]
    # Each durable cursor's saved state and its file's last write (epoch ms).
    cursors: dict[str, tuple[CursorRecord, int]] = field(default_factory=dict)
    # Counted from the record headers (segment.count_records), when asked for: (ledger id, entries, bytes of
    # entry data, close time in epoch ms: the next segment's creation, the last one's last write).
    segments: list[tuple[int, int, int, int]] = field(default_factory=list)


def read_stored(fs: FileSystem, directory: str, count: bool) -> StoredFiles:
    """A managed ledger's stored state for showing it (its cursor files, offload records, with ``count`` its
    segments' entries): read only, so it can run beside the managed ledger being open and written. A file removed
    meanwhile (a trimmed ledger, a deleted cursor) is left out; a damaged cursor file too."""
    out = StoredFiles(fs.mtime_ms(directory), read_offloads(fs, directory))
    if count:
        found = []
        for ledger_id in sorted(i for i in map(segment.ledger_id_of, fs.listdir(directory)) if i is not None):
            path = join(directory, segment.file_name(ledger_id))
            try:
                handle = fs.open_read(path)
                try:
                    counted, modified_ms = segment.count_records(handle, ledger_id), fs.mtime_ms(path)
                finally:
                    handle.close()
            except FileNotFoundError:
                continue
            if counted is not None:
                found.append((ledger_id, *counted, modified_ms))
        out.segments = [(ledger_id, entries, size, round(found[i + 1][1] * 1000) if i + 1 < len(found) else modified)
                        for i, (ledger_id, _created, entries, size, modified) in enumerate(found)]
    cursors_dir = join(directory, CURSORS)
    for file in sorted(fs.listdir(cursors_dir)) if fs.exists(cursors_dir) else ():
        if not file.endswith(cursor_store.SUFFIX):
            continue
        path = join(cursors_dir, file)
        try:
            stored = cursor_store.decode(fs.read_file(path))
            out.cursors[stored.name] = (stored.record, fs.mtime_ms(path))
        except FileNotFoundError:
            continue
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            log.warning("cursor state %s is damaged (%s): not shown", path, exc)
    return out


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
    out.offloads = read_offloads(fs, directory, stats)
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


# -- names of an older layout (runs on start, before the scan of ml/) ------------------------------


def read_name(fs: FileSystem, directory: str) -> str | None:
    """The name a managed ledger's ``name`` file records (a long, hashed directory name's), or None."""
    try:
        return str(json.loads(fs.read_file(join(directory, NAME_FILE)))["name"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stored_name(fs: FileSystem, directory: str, entry: str) -> str | None:
    """The name of the managed ledger in ``directory`` (``entry`` its name in ml/)."""
    name = decode_name(entry)
    return name if name is not None else read_name(fs, directory)


def migrate_names(fs: FileSystem, root: str, rename: Callable[[str], str] | None) -> int:
    """Bring the store under ``root`` to ``NAMES_VERSION``: a plan a crash interrupted is finished; without
    ``layout``, each managed ledger whose name ``rename`` changes gets its new name (directory, ``name`` file); then
    ``layout`` is written. ``rename`` None: only an interrupted plan is finished (an owner that does not know the
    names leaves an older store as it is). The number of managed ledgers renamed."""
    layout_path, plan_path = join(root, LAYOUT_FILE), join(root, MIGRATION_FILE)
    ml_dir = join(root, "ml")
    if fs.exists(plan_path):
        plan = json.loads(fs.read_file(plan_path))
    elif fs.exists(layout_path) or rename is None:
        return 0
    else:
        moves = []
        for entry in sorted(e for e in fs.listdir(ml_dir) if not e.startswith(STAGED_PREFIX)):
            name = stored_name(fs, join(ml_dir, entry), entry)
            new = rename(name) if name is not None else None  # (no name: the scan deals with it)
            if new is not None and new != name:
                moves.append({"from": entry, "to": encode_name(new), "name": new})
        plan = {"phase": 1, "moves": moves}
        if moves:
            fs.replace_atomically(plan_path, json.dumps(plan).encode(), sync=True)
    moves = plan["moves"]
    if plan["phase"] == 1 and moves:
        for i, move in enumerate(moves):  # (every one aside first: a new name may be another's old one)
            source = join(ml_dir, move["from"])
            if fs.exists(source):
                fs.rename(source, join(ml_dir, f"{STAGED_PREFIX}{i}"))
        fs.fsync_dir(ml_dir)
        plan["phase"] = 2
        fs.replace_atomically(plan_path, json.dumps(plan).encode(), sync=True)
    renamed = 0
    for i, move in enumerate(moves):
        aside, target = join(ml_dir, f"{STAGED_PREFIX}{i}"), join(ml_dir, move["to"])
        if not fs.exists(aside):
            continue  # (moved before a crash)
        if fs.exists(target):  # (cannot be: a new name never spells an unchanged one. Kept, not lost.)
            log.error("managed ledger %s: %s is taken; its data stays in %s", move["name"], target, aside)
            continue
        name_file = join(aside, NAME_FILE)
        if decode_name(move["to"]) != move["name"]:  # (a long name: its "name" file says it)
            fs.replace_atomically(name_file, json.dumps({"name": move["name"]}).encode(), sync=True)
        elif fs.exists(name_file):  # (the old long name's)
            fs.unlink(name_file)
        fs.rename(aside, target)
        renamed += 1
        log.info("managed ledger renamed for the layout of version %d: %s", NAMES_VERSION, move["name"])
    fs.fsync_dir(ml_dir)
    fs.replace_atomically(layout_path, json.dumps({"names": NAMES_VERSION}).encode(), sync=True)
    if fs.exists(plan_path):
        fs.unlink(plan_path)
        fs.fsync_dir(root)
    return renamed
