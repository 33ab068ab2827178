"""The file-system operations the file ledger uses, behind one small interface.

Everything the file ledger reads or writes goes through a ``FileSystem``, so tests can put a
fault-injecting one underneath (tests/managed_ledger/crashfs.py: lose unsynced writes on a
simulated power cut, fail writes with ENOSPC/EIO). ``OsFileSystem`` is the real one.

Durability vocabulary (POSIX/Linux): bytes written to a file are durable after ``sync()`` of
that file (fdatasync); a created, renamed or removed directory entry is durable after
``fsync_dir`` of its directory. Nothing else is promised, and the file ledger assumes nothing else.
"""

from __future__ import annotations

import os
import shutil
from typing import Protocol


class FileHandle(Protocol):
    """An open file. Methods may raise OSError."""

    def write(self, data: bytes) -> None:
        """Append all of data at the end of the file (handles are append-only)."""

    def write_parts(self, parts: list[bytes]) -> None:
        """Append the concatenation of parts (one gathering write: nothing is joined in memory)."""

    def pread(self, size: int, offset: int) -> bytes:
        """Up to size bytes from offset (fewer at the end of the file)."""

    def pread_cached(self, size: int, offset: int) -> bytearray | None:
        """size bytes from offset if they can be had without waiting for the disk (all in the
        page cache), else None (also at the end of the file, or where this is not supported)."""

    def sync(self) -> None:
        """Make written data durable (fdatasync)."""

    def truncate(self, size: int) -> None: ...

    def size(self) -> int: ...

    def close(self) -> None: ...


class FileSystem(Protocol):
    """Paths are strings. Methods may raise OSError."""

    def open_append(self, path: str, *, create: bool) -> FileHandle:
        """Open for appending (and reading); create=True makes a new file and fails if one exists."""

    def open_read(self, path: str) -> FileHandle: ...

    def read_file(self, path: str) -> bytes: ...

    def replace_atomically(self, path: str, data: bytes, *, sync: bool, sync_dir: bool = True) -> None:
        """Replace path's content all-or-nothing: write a temporary file, sync it, rename it over
        path and sync the directory (with sync=False: the same without the syncs). With
        sync_dir=False the directory is not synced: the caller does it (grouped) before anything
        relies on the new content."""

    def rename(self, src: str, dst: str) -> None: ...

    def unlink(self, path: str) -> None: ...

    def makedirs(self, path: str) -> None:
        """Create path and missing parents (no error if it exists)."""

    def remove_tree(self, path: str) -> None: ...

    def listdir(self, path: str) -> list[str]: ...

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def fsync_dir(self, path: str) -> None: ...


# Buffers per writev call (the kernel's limit, usually 1024).
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024

# preadv2's "fail rather than wait for the disk" (Linux 4.14+; None elsewhere).
_RWF_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None) if hasattr(os, "preadv") else None

TMP_SUFFIX = ".tmp"  # replace_atomically's temporary files: leftovers are garbage after a crash


class _OsFile:
    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:  # os.write may write less than asked (e.g. just before the disk is full)
            written = os.write(self._fd, view)
            view = view[written:]

    def write_parts(self, parts: list[bytes]) -> None:
        for start in range(0, len(parts), _IOV_MAX):
            chunk = parts[start : start + _IOV_MAX]
            written = os.writev(self._fd, chunk)
            expected = sum(map(len, chunk))
            if written < expected:  # a short write (rare): finish this chunk byte-wise
                self.write(b"".join(chunk)[written:])

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self._fd, size, offset)

    def pread_cached(self, size: int, offset: int) -> bytearray | None:
        if _RWF_NOWAIT is None:
            return None
        buf = bytearray(size)
        try:
            n = os.preadv(self._fd, [buf], offset, _RWF_NOWAIT)
        except OSError:  # EAGAIN: some of it is not cached; EOPNOTSUPP: not on this file system
            return None
        return buf if n == size else None

    def sync(self) -> None:
        os.fdatasync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        os.close(self._fd)


class OsFileSystem:
    """The real file system (Linux/macOS)."""

    def open_append(self, path: str, *, create: bool) -> FileHandle:
        flags = os.O_RDWR | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        if create:
            flags |= os.O_CREAT | os.O_EXCL
        return _OsFile(os.open(path, flags, 0o644))

    def open_read(self, path: str) -> FileHandle:
        return _OsFile(os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))

    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def replace_atomically(self, path: str, data: bytes, *, sync: bool, sync_dir: bool = True) -> None:
        tmp = path + TMP_SUFFIX
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            try:
                _OsFile(fd).write(data)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError:
            # (A full disk: the old content stays; a half-written temporary must not hold space.)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        if sync and sync_dir:
            self.fsync_dir(os.path.dirname(path))

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
