"""The durable single-broker backend (``local:<dir>``, the default): the memory tree plus a journal.

One process owns the directory (an exclusive ``flock`` on ``<dir>/lock``; a second opener gets a
clear error). Persistent nodes live in ``<dir>/metadata.log``, an append-only journal:

    file   = MAGIC, then records
    record = u32 length of body | u32 CRC-32 of body | body        (big-endian)
    body   = ops, one after another, each one change of a node:
      b"W" path value version:i64 ctime_ms:i64 mtime_ms:i64    a persistent node written
      b"R" path                                                 a node removed
      b"C" path cversion:i64                                    raise a node's count of children created
    path   = u16 length | UTF-8;  value = u32 length | bytes

Every change (a put with the parents it creates, a delete, a recursive delete) is one record, so
it is on disk whole or not at all. ``put`` returns after the record was written and fsynced (and,
for a new journal, its directory entry too): a completed put survives kill -9 and power loss.
Metadata writes are rare, so each one pays its own fsync; no group commit.

Recovery replays records up to the first that is short, fails its checksum or does not decode (a
write torn by a crash), truncates the journal there and says so in the log and in ``recovery``.
When the journal has grown past twice the size of the live data, it is rewritten as one record of
the whole tree (to a temporary file, fsynced, renamed over the journal, directory fsynced).

Ephemeral nodes are never written: they die with the process, as with the session. Sequential
names stay ZooKeeper's (and unique) across restarts because an ephemeral create journals its
parent's new count of children created (``C``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from metadata_store import paths
from metadata_store.api import MetadataStoreError, Stat, StoreWriteError
from metadata_store.memory import Plan, TreeStore
from metadata_store.tree import PERSISTENT, Counter, NodeTree, Op, Remove, Write

log = logging.getLogger(__name__)

JOURNAL = "metadata.log"
LOCK = "lock"
MAGIC = b"PYPULSAR-METADATA-JOURNAL-1\n"  # names the format; a file without it is not ours
_HEADER = struct.Struct(">II")  # body length, CRC-32 of the body
# A record larger than this is corruption, not data: ZooKeeper's own limit on a request is 1 MiB
# (jute.maxbuffer) and a snapshot record of a large tree stays far below this.
MAX_RECORD_BYTES = 1 << 30
# Rewrite the journal when it is both past this size and twice the live data (a small journal is
# cheaper to keep than to rewrite).
COMPACT_MIN_BYTES = 1 << 20
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


class CorruptJournalError(MetadataStoreError):
    """The journal is not one of ours, or a record that passed its checksum does not make sense."""


@dataclass(frozen=True)
class Recovery:
    """What opening the journal found."""

    records: int  # records replayed
    valid_bytes: int  # the journal's length after recovery
    truncated_bytes: int  # bytes of a torn tail dropped (0 after a clean shutdown)


# ---- the record format -----------------------------------------------------------------------------------------


def _path_bytes(path: str) -> bytes:
    raw = path.encode()
    return _U16.pack(len(raw)) + raw


def encode_ops(ops: list[Op]) -> bytes:
    parts: list[bytes] = []
    for op in ops:
        if isinstance(op, Write):
            parts += [b"W", _path_bytes(op.path), _U32.pack(len(op.value)), op.value,
                      _I64.pack(op.version), _I64.pack(op.ctime_ms), _I64.pack(op.mtime_ms)]
        elif isinstance(op, Remove):
            parts += [b"R", _path_bytes(op.path)]
        else:
            parts += [b"C", _path_bytes(op.path), _I64.pack(op.cversion)]
    return b"".join(parts)


def encode_record(body: bytes) -> bytes:
    return _HEADER.pack(len(body), zlib.crc32(body)) + body


def decode_ops(body: bytes) -> list[Op]:
    """The ops of a record's body; CorruptJournalError (or struct.error/ValueError) when malformed."""
    ops: list[Op] = []
    view = memoryview(body)
    at = 0

    def take(n: int) -> bytes:
        nonlocal at
        if at + n > len(view):
            raise CorruptJournalError("a record ends inside an op")
        chunk = bytes(view[at:at + n])
        at += n
        return chunk

    def path() -> str:
        (length,) = _U16.unpack(take(2))
        return paths.check(take(length).decode())

    while at < len(view):
        kind = take(1)
        if kind == b"W":
            p = path()
            (length,) = _U32.unpack(take(4))
            value = take(length)
            (version,), (ctime,), (mtime,) = _I64.unpack(take(8)), _I64.unpack(take(8)), _I64.unpack(take(8))
            ops.append(Write(p, value, version, ctime, mtime, PERSISTENT))
        elif kind == b"R":
            ops.append(Remove(path()))
        elif kind == b"C":
            p = path()
            ops.append(Counter(p, _I64.unpack(take(8))[0]))
        else:
            raise CorruptJournalError(f"unknown op {kind!r}")
    return ops


# ---- the journal -----------------------------------------------------------------------------------------------


def _write_all(fd: int, data: bytes) -> None:
    written = 0
    while written < len(data):
        written += os.write(fd, data[written:])


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """The append-only file. Its methods block (file I/O): the store calls them in a worker thread."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / JOURNAL
        self._fd = -1
        self.size = 0
        self.live_size = 0  # the size of the last rewrite (or of the journal as found)
        self.broken: str | None = None  # why appends are refused (a write failed and could not be undone)

    def open(self, tree: NodeTree) -> Recovery:
        """Replay the journal into ``tree`` (creating an empty journal when there is none)."""
        if not self.path.exists():
            self._write_new(MAGIC)
        self._fd = os.open(self.path, os.O_RDWR)
        data = self._read_all()
        if not data.startswith(MAGIC):
            os.close(self._fd)
            self._fd = -1
            raise CorruptJournalError(f"{self.path} is not a metadata journal (bad header)")
        at, records = len(MAGIC), 0
        while True:
            end = self._next_record_end(data, at)
            if end is None:
                break
            try:
                tree.apply(decode_ops(data[at + _HEADER.size:end]))
            except (CorruptJournalError, ValueError, KeyError, struct.error) as e:
                # Intact (its checksum holds) yet meaningless: not a torn write but a bug or a foreign
                # file. Dropping it and what follows would lose data silently: refuse to open.
                os.close(self._fd)
                self._fd = -1
                raise CorruptJournalError(f"{self.path}: the record at offset {at} does not apply: {e!r}") from e
            at, records = end, records + 1
        truncated = len(data) - at
        if truncated:
            log.warning("%s: dropped a torn tail of %d bytes at offset %d (a write cut by a crash)",
                        self.path, truncated, at)
            os.ftruncate(self._fd, at)
            os.fsync(self._fd)
        self.size = self.live_size = at
        os.lseek(self._fd, at, os.SEEK_SET)
        return Recovery(records, at, truncated)

    def _read_all(self) -> bytes:
        chunks = []
        os.lseek(self._fd, 0, os.SEEK_SET)
        while chunk := os.read(self._fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)

    @staticmethod
    def _next_record_end(data: bytes, at: int) -> int | None:
        """Where the record at ``at`` ends, or None when there is no whole, intact record there."""
        if at + _HEADER.size > len(data):
            return None
        length, crc = _HEADER.unpack_from(data, at)
        end: int = at + _HEADER.size + length
        if length > MAX_RECORD_BYTES or end > len(data):
            return None
        if zlib.crc32(data[at + _HEADER.size:end]) != crc:
            return None
        return end

    def append(self, record: bytes) -> None:
        """Write one record and fsync it; on failure, cut the file back so no partial record stays."""
        if self.broken is not None:
            raise StoreWriteError(f"{self.path}: writes refused since an earlier failure: {self.broken}")
        try:
            _write_all(self._fd, record)
            os.fsync(self._fd)
        except OSError as e:
            try:
                os.ftruncate(self._fd, self.size)
                os.lseek(self._fd, self.size, os.SEEK_SET)
                os.fsync(self._fd)
            except OSError as undo:
                self.broken = f"{e}; undoing it failed too: {undo}"
            raise StoreWriteError(f"{self.path}: cannot write the journal: {e}") from e
        self.size += len(record)

    def wants_rewrite(self) -> bool:
        return self.size > COMPACT_MIN_BYTES and self.size > 2 * self.live_size

    def rewrite(self, snapshot: bytes) -> None:
        """Replace the journal by MAGIC + one record holding the whole tree."""
        content = MAGIC + encode_record(snapshot)
        self._write_new(content)
        fd = os.open(self.path, os.O_RDWR)
        os.lseek(fd, 0, os.SEEK_END)
        os.close(self._fd)
        self._fd = fd
        self.size = self.live_size = len(content)

    def _write_new(self, content: bytes) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            try:
                _write_all(fd, content)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):  # (a full disk: a partial copy must not hold its space)
                os.unlink(tmp)
            raise
        _fsync_dir(self.directory)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def snapshot_ops(tree: NodeTree) -> list[Op]:
    """The ops that rebuild the tree's persistent nodes, parents first, then the counts of children created."""
    writes: list[Op] = []
    counters: list[Op] = []

    def visit(path: str) -> None:
        node = tree.nodes[path]
        if path != paths.ROOT:
            writes.append(Write(path, node.value, node.version, node.ctime_ms, node.mtime_ms, PERSISTENT))
        if node.cversion:
            counters.append(Counter(path, node.cversion))
        for child in sorted(node.children):
            child_path = paths.join(path, child)
            if tree.nodes[child_path].owner == PERSISTENT:
                visit(child_path)

    visit(paths.ROOT)
    return writes + counters


# ---- the store -------------------------------------------------------------------------------------------------


class LocalMetadataStore(TreeStore):
    """Open with ``await LocalMetadataStore.open(directory)``."""

    def __init__(self, directory: Path, tree: NodeTree, journal: Journal, lock_fd: int, recovery: Recovery) -> None:
        super().__init__(tree, f"local:{directory}")
        self.directory = directory
        self.recovery = recovery
        self._journal = journal
        self._lock_fd = lock_fd
        self._write_lock = asyncio.Lock()

    @classmethod
    async def open(cls, directory: str | Path) -> LocalMetadataStore:
        return await asyncio.to_thread(cls._open_blocking, Path(directory))

    @classmethod
    def _open_blocking(cls, directory: Path) -> LocalMetadataStore:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            lock_fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise MetadataStoreError(f"cannot open the metadata directory {directory}: {e}") from e
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(lock_fd)
            raise MetadataStoreError(f"{directory} is in use by another metadata store (lock held): {e}") from e
        tree, journal = NodeTree(), Journal(directory)
        try:
            recovery = journal.open(tree)
        except BaseException as e:
            journal.close()
            os.close(lock_fd)
            if isinstance(e, OSError):
                raise MetadataStoreError(f"cannot read the metadata journal in {directory}: {e}") from e
            raise
        return cls(directory, tree, journal, lock_fd, recovery)

    async def _commit(self, plan: Plan) -> Stat | None:
        async with self._write_lock:
            with self._tree.lock:
                ops, path = plan()
                durable = [op for op in ops if self._journalled(op)]
            if durable:
                record = encode_record(encode_ops(durable))
                await asyncio.to_thread(self._journal.append, record)
            with self._tree.lock:
                notes, stat = self._apply(ops, path)
            self._tree.broadcast(notes)
            if self._journal.wants_rewrite():
                await asyncio.to_thread(self._rewrite)
            return stat

    def _journalled(self, op: Op) -> bool:
        """Persistent writes, removes of persistent nodes, counters: not what only an ephemeral node did."""
        if isinstance(op, Write):
            return op.owner == PERSISTENT
        if isinstance(op, Remove):
            node = self._tree.nodes.get(op.path)
            return node is not None and node.owner == PERSISTENT
        return True

    def _rewrite(self) -> None:
        with self._tree.lock:
            snapshot = encode_ops(snapshot_ops(self._tree))
        try:
            self._journal.rewrite(snapshot)
        except OSError as e:
            # The old journal is intact (the new one is renamed over it only when complete): go on with it.
            log.error("%s: rewriting the journal failed (%s); keeping the old one", self._journal.path, e)

    async def _close_backend(self) -> None:
        async with self._write_lock:
            self._journal.close()
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
