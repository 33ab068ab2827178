"""The file-system operations the file ledger uses, behind one small interface.

Everything the file ledger reads or writes goes through a ``FileSystem``, so tests can put a
fault-injecting one underneath (tests/managed_ledger/crashfs.py: lose unsynced writes on a
simulated power cut, fail writes with ENOSPC/EIO). ``OsFileSystem`` is the real one.

Durability vocabulary (POSIX/Linux): bytes written to a file are durable after ``sync()`` of that
file (fdatasync); the bytes of a ``pwrite_parts(..., sync=True)`` are durable when it returns
(O_DSYNC for one write: in one system call where the kernel can); a created, renamed or removed
directory entry is durable after ``fsync_dir`` of its directory. Nothing else is promised, and the
file ledger assumes nothing else.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import mmap
import os
import shutil
import threading
from collections.abc import Sequence
from typing import Protocol

log = logging.getLogger(__name__)


class FileHandle(Protocol):
    """An open file. Methods may raise OSError."""

    def write(self, data: bytes) -> None:
        """Write all of data at the handle's position, which starts at 0 and moves past what is
        written: for filling a new file."""

    def pwrite_parts(self, parts: Sequence[bytes | memoryview], offset: int, *, sync: bool = False) -> None:
        """Write the concatenation of parts at offset (one gathering write: nothing is joined in
        memory); the file grows if it ends before that. sync: return once this write's bytes (and
        the file's size) are durable, as a ``sync()`` right after it would make them; bytes written
        before it need a sync of their own (a device with FUA writes only these to stable storage)."""

    def pread(self, size: int, offset: int) -> bytes:
        """Up to size bytes from offset (fewer at the end of the file)."""

    def pread_scratch(self, size: int, offset: int) -> bytes | memoryview:
        """``pread``, possibly as a view of this thread's reusable read buffer, so no new memory is filled: valid
        only until this thread's next read. For a caller that copies out of it at once and then releases it."""

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

    def open_append(self, path: str, *, create: bool, direct: bool = False) -> FileHandle:
        """Open for writing (and reading); create=True makes a new file and fails if one exists.
        (Not O_APPEND: segments are written at offsets, block by block.) direct: bypass the page
        cache (O_DIRECT) where the file system allows it; writes must then be whole ``BLOCK``s from
        block-aligned memory (an ``mmap``) at block-aligned offsets."""

    def open_read(self, path: str, *, direct: bool = False) -> FileHandle:
        """Open for reading; direct: bypass the page cache where the file system allows it."""

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

    def mtime_ms(self, path: str) -> int:
        """When the file's content (a directory's: its list of names) last changed, epoch milliseconds."""

    def fsync_dir(self, path: str) -> None: ...


# Buffers per writev call (the kernel's limit, usually 1024).
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024

# preadv2's "fail rather than wait for the disk" (Linux 4.14+; None elsewhere).
_RWF_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None) if hasattr(os, "preadv") else None

# The block that direct writes are made of (offsets, lengths and buffer addresses are multiples of
# it; 4 KiB satisfies every device's logical block size).
BLOCK = 4096

_O_DIRECT: int = getattr(os, "O_DIRECT", 0)  # (Linux; 0 elsewhere: buffered)

# pwritev2's "this write is durable when it returns", O_DSYNC for one write (Linux 4.7+; None elsewhere).
_RWF_DSYNC: int | None = getattr(os, "RWF_DSYNC", None) if hasattr(os, "pwritev") else None

# Each reading thread's block-aligned buffer for direct reads and pread_scratch (grown as needed, kept:
# its pages are faulted in once, not at every read).
_read_buffers = threading.local()


def _read_buffer(size: int) -> mmap.mmap:
    buf: mmap.mmap | None = getattr(_read_buffers, "buf", None)
    if buf is None or len(buf) < size:
        if buf is not None:
            try:
                buf.close()
            except BufferError:  # a view of it still held somewhere: leave it to the collector
                pass
        buf = _read_buffers.buf = mmap.mmap(-1, -(-size // (256 * 1024)) * 256 * 1024)
    return buf

TMP_SUFFIX = ".tmp"  # replace_atomically's temporary files: leftovers are garbage after a crash


def _short_direct_write(written: int, expected: int) -> OSError:
    """A direct write that wrote less than asked (a full disk): the rest would not be block-aligned, so it is
    not finished but failed."""
    return OSError(errno.ENOSPC, f"short direct write ({written} of {expected} bytes)")


class _OsFile:
    __slots__ = ("_direct", "_fd", "_fs")

    def __init__(self, fd: int, direct: bool = False, fs: OsFileSystem | None = None) -> None:
        self._fd = fd
        self._direct = direct
        self._fs = fs  # told when the file system refuses a direct read or write

    def _refused(self, exc: OSError) -> None:
        """A direct read or write failed with EINVAL although the open took O_DIRECT (a file system
        with other alignment rules, say): this file goes on through the page cache (Linux lets
        fcntl clear O_DIRECT), and so do the files opened after it."""
        log.warning("direct I/O refused (%s): reading and writing through the page cache", exc)
        fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~_O_DIRECT)
        self._direct = False
        if self._fs is not None:
            self._fs._no_direct = True

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:  # os.write may write less than asked (e.g. just before the disk is full)
            written = os.write(self._fd, view)
            view = view[written:]

    def pwrite_parts(self, parts: Sequence[bytes | memoryview], offset: int, *, sync: bool = False) -> None:
        # A direct write that is to be synced carries RWF_DSYNC: the kernel makes its bytes durable
        # (a FUA write, or the write and a cache flush) and commits the file's size if it grew
        # before the write returns. One system call instead of write + fdatasync: the writer thread
        # gives up the GIL and takes it back once per round, not twice. Buffered writes are synced
        # after them (fdatasync), as before.
        if sync and self._direct and len(parts) <= _IOV_MAX and _RWF_DSYNC is not None and self._dsync():
            if self._pwrite_dsync(parts, offset):
                return
        for start in range(0, len(parts), _IOV_MAX):
            chunk = parts[start : start + _IOV_MAX]
            try:
                written = os.pwritev(self._fd, chunk, offset)
            except OSError as exc:
                if exc.errno != errno.EINVAL or not self._direct:
                    raise
                self._refused(exc)
                written = os.pwritev(self._fd, chunk, offset)
            expected = sum(map(len, chunk))
            if written < expected:  # a short write (rare: a full disk): finish this chunk
                if self._direct:
                    raise _short_direct_write(written, expected)
                self._pwrite_all(memoryview(b"".join(chunk))[written:], offset + written)
            offset += expected
        if sync:
            os.fdatasync(self._fd)

    def _dsync(self) -> bool:
        return self._fs is None or not self._fs._no_dsync

    def _pwrite_dsync(self, parts: Sequence[bytes | memoryview], offset: int) -> bool:
        """One direct write with RWF_DSYNC; False (nothing written) when the kernel refuses the flag
        or the file refuses direct I/O: the caller writes and syncs the other way."""
        assert _RWF_DSYNC is not None
        try:
            written = os.pwritev(self._fd, parts, offset, _RWF_DSYNC)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.ENOSYS):  # a kernel before 4.7, or a file system without it
                log.info("writes with RWF_DSYNC refused (%s): writing, then syncing", exc)
                if self._fs is not None:
                    self._fs._no_dsync = True
                return False
            if exc.errno == errno.EINVAL:  # (direct I/O refused: the other way handles it)
                return False
            raise
        expected = sum(map(len, parts))
        if written < expected:
            raise _short_direct_write(written, expected)
        return True

    def _pwrite_all(self, view: memoryview, offset: int) -> None:
        while view:
            written = os.pwrite(self._fd, view, offset)
            view = view[written:]
            offset += written

    def pread(self, size: int, offset: int) -> bytes:
        if not self._direct:
            return os.pread(self._fd, size, offset)
        with self.pread_scratch(size, offset) as view:  # (a memoryview: released on the way out)
            return bytes(view)

    def pread_scratch(self, size: int, offset: int) -> memoryview:
        # Whole blocks (direct I/O) into this thread's block-aligned buffer; a view of the bytes asked for.
        start = offset - offset % BLOCK if self._direct else offset
        length = -(-(offset + size - start) // BLOCK) * BLOCK
        buf = _read_buffer(length)
        view = memoryview(buf)[:length]
        try:
            n = os.preadv(self._fd, [view], start)
        except OSError as exc:
            view.release()  # (as the writer's: the buffer must stay growable after a failed read)
            if exc.errno != errno.EINVAL or not self._direct:
                raise
            self._refused(exc)
            return memoryview(os.pread(self._fd, size, offset))
        skip = offset - start
        try:
            return view[skip : max(skip, min(skip + size, n))]
        finally:
            view.release()

    def pread_cached(self, size: int, offset: int) -> bytearray | None:
        if _RWF_NOWAIT is None or self._direct:
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

    def __init__(self) -> None:
        self._no_direct = False  # a direct open failed: this file system has no direct I/O
        self._no_dsync = False  # a write with RWF_DSYNC was refused: writes are synced after them

    def open_append(self, path: str, *, create: bool, direct: bool = False) -> FileHandle:
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
        if create:
            flags |= os.O_CREAT | os.O_EXCL
        if direct and _O_DIRECT and not self._no_direct:
            try:
                return _OsFile(os.open(path, flags | _O_DIRECT, 0o644), direct=True, fs=self)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # This file system has no direct I/O (older tmpfs). Linux refuses O_DIRECT after
                # creating the file, so it is ours already: open it without O_EXCL.
                log.info("no direct I/O for %s (%s): writing through the page cache", path, exc)
                self._no_direct = True
                flags &= ~os.O_EXCL
        return _OsFile(os.open(path, flags, 0o644))

    def open_read(self, path: str, *, direct: bool = False) -> FileHandle:
        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
        if direct and _O_DIRECT and not self._no_direct:
            try:
                return _OsFile(os.open(path, flags | _O_DIRECT), direct=True, fs=self)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._no_direct = True
        return _OsFile(os.open(path, flags))

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

    def mtime_ms(self, path: str) -> int:
        return os.stat(path).st_mtime_ns // 1_000_000

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
