"""A file system in memory that forgets what was not synced: power cuts and disk errors for tests.

Implements ``managed_ledger.fs.FileSystem``. Every file remembers the content it had at its last
``sync()`` (and the bytes of each write made with ``sync=True`` since) and every directory the
entries it had at its last ``fsync_dir``. ``power_cut_after(n)`` lets n more mutating operations
through, then the power goes: every later operation fails with EIO (like a dead disk), and
``reboot()`` brings back only what was durable (Jepsen's lazyfs ``lose-unfsynced-writes``).
``mode="torn"`` is nastier: an unsynced append may survive in part (a torn record), and each
unsynced directory change survives or not, at random.

``inject(op, errno)`` makes the next ``count`` operations of a kind fail (ENOSPC on "write",
EIO on "sync", ...), to test write-error handling without filling a disk.

Thread-safe (one lock): the ledger's writer and worker threads use it concurrently.
"""

from __future__ import annotations

import errno as errno_codes
import os
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from managed_ledger.fs import TMP_SUFFIX, FileHandle


@dataclass(eq=False)
class _Inode:
    data: bytearray = field(default_factory=bytearray)
    durable: bytes = b""


@dataclass(eq=False)
class _Dir:
    entries: dict[str, _Inode | _Dir] = field(default_factory=dict)
    durable: dict[str, _Inode | _Dir] = field(default_factory=dict)


@dataclass
class _Fault:
    op: str
    errno: int
    count: int | None  # None: until cleared
    path_part: str


class CrashFileSystem:
    def __init__(self, seed: int = 0, mode: str = "drop") -> None:
        assert mode in ("drop", "torn")
        self.mode = mode
        self.random = random.Random(seed)
        self._root = _Dir()
        self._lock = threading.RLock()
        self._faults: list[_Fault] = []
        self._cut_after: int | None = None
        self.dead = False
        self.ops = 0  # mutating operations so far
        self.syncs = 0  # file syncs so far

    # -- test controls ------------------------------------------------------------------------

    def inject(self, op: str, errno: int, count: int | None = 1, path_part: str = "") -> None:
        """Fail the next count operations op ("write", "sync", "create", "truncate",
        "rename", "fsync_dir", "unlink", "read") on paths containing path_part."""
        with self._lock:
            self._faults.append(_Fault(op, errno, count, path_part))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def power_cut_after(self, operations: int) -> None:
        """Let that many more mutating operations happen, then lose power."""
        with self._lock:
            self._cut_after = operations
            if operations <= 0:
                self.dead = True

    def power_cut(self) -> None:
        self.power_cut_after(0)

    def reboot(self) -> None:
        """Power back: the disk holds what was durable (plus, in torn mode, some of the rest)."""
        with self._lock:
            self._crash(self._root)
            self.dead = False
            self._cut_after = None
            self._faults.clear()

    def makedirs_durable(self, path: str) -> None:
        """Test set-up: a directory that exists for sure (its entries are durable)."""
        with self._lock:
            node = self._root
            for part in _parts(path):
                child = node.entries.get(part)
                if not isinstance(child, _Dir):
                    child = _Dir()
                    node.entries[part] = child
                node.durable[part] = child
                node = child

    def file_bytes(self, path: str) -> bytes:
        with self._lock:
            return bytes(self._inode(path).data)

    def set_file_bytes(self, path: str, data: bytes) -> None:
        """Test helper: overwrite a file durably (a disk that changed bytes under us)."""
        with self._lock:
            inode = self._inode(path)
            inode.data = bytearray(data)
            inode.durable = bytes(data)

    # -- internals ----------------------------------------------------------------------------

    def _check(self, op: str, path: str, mutating: bool) -> None:
        """Called with the lock held before every operation."""
        if self.dead:
            raise OSError(errno_codes.EIO, f"power is off ({op} {path})")
        for fault in self._faults:
            if fault.op == op and fault.path_part in path:
                if fault.count is not None:
                    fault.count -= 1
                    if fault.count <= 0:
                        self._faults.remove(fault)
                raise OSError(fault.errno, f"{os.strerror(fault.errno)} (injected: {op} {path})")
        if mutating:
            self.ops += 1
            if self._cut_after is not None:
                self._cut_after -= 1
                if self._cut_after < 0:
                    self.dead = True
                    raise OSError(errno_codes.EIO, f"power is off ({op} {path})")

    def _dir(self, path: str) -> _Dir:
        node: _Inode | _Dir = self._root
        for part in _parts(path):
            if not isinstance(node, _Dir) or part not in node.entries:
                raise FileNotFoundError(errno_codes.ENOENT, "no such directory", path)
            node = node.entries[part]
        if not isinstance(node, _Dir):
            raise NotADirectoryError(errno_codes.ENOTDIR, "not a directory", path)
        return node

    def _split(self, path: str) -> tuple[_Dir, str]:
        parent, _, name = path.rstrip("/").rpartition("/")
        return self._dir(parent), name

    def _inode(self, path: str) -> _Inode:
        parent, name = self._split(path)
        node = parent.entries.get(name)
        if not isinstance(node, _Inode):
            raise FileNotFoundError(errno_codes.ENOENT, "no such file", path)
        return node

    def _crash(self, directory: _Dir) -> None:
        torn = self.mode == "torn"
        rng = self.random
        survivors: dict[str, _Inode | _Dir] = {}
        for name in {*directory.entries, *directory.durable}:
            old, new = directory.durable.get(name), directory.entries.get(name)
            keep = new if old is new or (torn and rng.random() < 0.5) else old
            if keep is not None:
                survivors[name] = keep
        directory.entries = survivors
        directory.durable = dict(survivors)
        for node in survivors.values():
            if isinstance(node, _Dir):
                self._crash(node)
            else:
                self._crash_file(node, torn)

    def _crash_file(self, inode: _Inode, torn: bool) -> None:
        data, durable = bytes(inode.data), inode.durable
        kept = durable
        if torn and len(data) >= len(durable) and data != durable:
            # Unsynced writes (appended, or over the zeros after the last record) reached the disk in
            # part, from the first changed byte on: a torn record, maybe with junk after it. (A file
            # that was cut and not synced keeps its durable bytes.)
            first = next((i for i, (a, b) in enumerate(zip(data, durable, strict=False)) if a != b), len(durable))
            cut = first + self.random.randrange(len(data) - first + 1)
            kept = data[:cut] + durable[cut:]
            if self.random.random() < 0.3:
                junk = self.random.randbytes(self.random.randrange(1, 64))
                kept = kept[:cut] + junk + kept[cut + len(junk) :]
        inode.data = bytearray(kept)
        inode.durable = kept

    # -- FileSystem ---------------------------------------------------------------------------

    def open_append(self, path: str, *, create: bool, direct: bool = False) -> FileHandle:
        with self._lock:
            if create:
                self._check("create", path, mutating=True)
                parent, name = self._split(path)
                if name in parent.entries:
                    raise FileExistsError(errno_codes.EEXIST, "file exists", path)
                inode = _Inode()
                parent.entries[name] = inode
            else:
                self._check("open", path, mutating=False)
                inode = self._inode(path)
            return _Handle(self, inode, path)

    def open_read(self, path: str, *, direct: bool = False) -> FileHandle:
        with self._lock:
            self._check("open", path, mutating=False)
            return _Handle(self, self._inode(path), path)

    def read_file(self, path: str) -> bytes:
        with self._lock:
            self._check("read", path, mutating=False)
            return bytes(self._inode(path).data)

    def replace_atomically(self, path: str, data: bytes, *, sync: bool, sync_dir: bool = True) -> None:
        tmp = path + TMP_SUFFIX
        with self._lock:
            parent, name = self._split(tmp)
            if name in parent.entries:
                self.unlink(tmp)
        handle = self.open_append(tmp, create=True)
        try:
            handle.write(data)
            if sync:
                handle.sync()
        finally:
            handle.close()
        self.rename(tmp, path)
        if sync and sync_dir:
            self.fsync_dir(path.rpartition("/")[0])

    def rename(self, src: str, dst: str) -> None:
        with self._lock:
            self._check("rename", src, mutating=True)
            src_parent, src_name = self._split(src)
            dst_parent, dst_name = self._split(dst)
            if src_name not in src_parent.entries:
                raise FileNotFoundError(errno_codes.ENOENT, "no such file", src)
            dst_parent.entries[dst_name] = src_parent.entries.pop(src_name)

    def unlink(self, path: str) -> None:
        with self._lock:
            self._check("unlink", path, mutating=True)
            parent, name = self._split(path)
            if not isinstance(parent.entries.get(name), _Inode):
                raise FileNotFoundError(errno_codes.ENOENT, "no such file", path)
            del parent.entries[name]

    def makedirs(self, path: str) -> None:
        with self._lock:
            node = self._root
            for part in _parts(path):
                child = node.entries.get(part)
                if child is None:
                    self._check("mkdir", path, mutating=True)
                    child = node.entries[part] = _Dir()
                if not isinstance(child, _Dir):
                    raise FileExistsError(errno_codes.EEXIST, "a file is in the way", path)
                node = child

    def remove_tree(self, path: str) -> None:
        with self._lock:
            self._check("unlink", path, mutating=True)
            parent, name = self._split(path)
            if name not in parent.entries:
                raise FileNotFoundError(errno_codes.ENOENT, "no such directory", path)
            del parent.entries[name]

    def listdir(self, path: str) -> list[str]:
        with self._lock:
            self._check("read", path, mutating=False)
            return list(self._dir(path).entries)

    def exists(self, path: str) -> bool:
        with self._lock:
            self._check("read", path, mutating=False)
            try:
                parent, name = self._split(path)
            except (FileNotFoundError, NotADirectoryError):
                return False
            return name in parent.entries or not name

    def is_dir(self, path: str) -> bool:
        with self._lock:
            try:
                self._dir(path)
            except OSError:
                return False
            return True

    def mtime_ms(self, path: str) -> int:
        """(No times are kept: 0 for whatever exists.)"""
        if not self.exists(path):
            raise FileNotFoundError(path)
        return 0

    def fsync_dir(self, path: str) -> None:
        with self._lock:
            self._check("fsync_dir", path, mutating=True)
            directory = self._dir(path)
            directory.durable = dict(directory.entries)


class _Handle:
    def __init__(self, fs: CrashFileSystem, inode: _Inode, path: str) -> None:
        self._fs = fs
        self._inode = inode
        self._path = path
        self._closed = False

    def write(self, data: bytes) -> None:
        with self._fs._lock:
            self._fs._check("write", self._path, mutating=True)
            self._inode.data += data

    def pwrite_parts(self, parts: Sequence[bytes | memoryview], offset: int, *, sync: bool = False) -> None:
        with self._fs._lock:
            self._fs._check("write", self._path, mutating=True)
            data = b"".join(parts)
            self._put(data, offset)
            if sync:
                # O_DSYNC for this write alone (a device with FUA): its bytes and the file's size
                # become durable, nothing written before it does (a gap before it reads as zeros).
                self._fs._check("sync", self._path, mutating=True)
                durable = bytearray(self._inode.durable)
                if len(durable) < offset:
                    durable += bytes(offset - len(durable))
                durable[offset : offset + len(data)] = data
                self._inode.durable = bytes(durable)
                self._fs.syncs += 1

    def _put(self, data: bytes, offset: int) -> None:
        inode = self._inode
        if len(inode.data) < offset:
            inode.data += bytes(offset - len(inode.data))
        inode.data[offset : offset + len(data)] = data

    def pread(self, size: int, offset: int) -> bytes:
        with self._fs._lock:
            self._fs._check("read", self._path, mutating=False)
            return bytes(self._inode.data[offset : offset + size])

    def pread_scratch(self, size: int, offset: int) -> bytes:
        return self.pread(size, offset)

    def sync(self) -> None:
        with self._fs._lock:
            self._fs._check("sync", self._path, mutating=True)
            self._inode.durable = bytes(self._inode.data)
            self._fs.syncs += 1

    def pread_cached(self, size: int, offset: int) -> bytearray | None:
        return None  # (reads always take the worker-thread path here)

    def truncate(self, size: int) -> None:
        with self._fs._lock:
            self._fs._check("truncate", self._path, mutating=True)
            del self._inode.data[size:]

    def size(self) -> int:
        with self._fs._lock:
            self._fs._check("read", self._path, mutating=False)
            return len(self._inode.data)

    def close(self) -> None:
        self._closed = True


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]
