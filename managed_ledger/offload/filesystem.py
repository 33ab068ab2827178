"""The ``filesystem`` offloader: a closed ledger copied to a directory tree, as Apache Pulsar 4.0's
FileSystemManagedLedgerOffloader stores it (so either can read what the other wrote, given the same base path).

Each ledger is a Hadoop MapFile (``mapfile``) at ``<base>/<managed ledger name>/<ledger id>-<uuid>``: key -1 holds
the ledger's metadata (BookKeeper's LedgerMetadataFormat protobuf: ``ledger_metadata``), keys 0 to the last entry id
each entry's bytes as stored (the Pulsar entry: magic 0x0e01, checksum, metadata, payload). Pulsar's shipped profile
(conf/filesystem_offload_core_site.xml) writes BLOCK-compressed files of 1,000,000-byte blocks; any of the three
kinds is read.

Unlike Pulsar's, a copy is written under a temporary name, flushed to the disk, and renamed into place: a crash
mid-copy leaves no directory a reader could take for a whole ledger (the temporary one is removed when the same
ledger is offloaded again, or deleted).

Blocking file I/O throughout: the managed ledger runs these calls in its pool.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from managed_ledger.offload.api import OffloadedLedgerError, StoredObject, check_range
from managed_ledger.offload.ledger_metadata import LedgerMetadataError, OffloadedLedgerMetadata
from managed_ledger.offload.mapfile import (
    DEFAULT_BLOCK_SIZE,
    INDEX_INTERVAL,
    Compression,
    MapFileError,
    MapFileReader,
    MapFileWriter,
)

DRIVER_NAME = "filesystem"
METADATA_KEY = -1
TEMPORARY_SUFFIX = ".offloading"
COPY_NAME = re.compile(r"(\d+)-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?:\.offloading)?")


@dataclass(frozen=True)
class FileSystemOffloader:
    """Offloads to (and reads from) ``base``, as Pulsar's filesystem offloader with ``hadoop.tmp.dir`` = ``base``."""

    base: Path
    compression: Compression = Compression.BLOCK
    block_size: int = DEFAULT_BLOCK_SIZE
    index_interval: int = INDEX_INTERVAL

    driver_name = DRIVER_NAME

    def reads_driver(self, driver: str) -> bool:
        return driver.lower() == DRIVER_NAME

    def driver_metadata(self) -> dict[str, str]:
        """What the managed ledger's OffloadContext records of this offloader (Pulsar's: the base path)."""
        return {"storageBasePath": str(self.base)}

    def ledger_path(self, managed_ledger: str, ledger_id: int, uuid: UUID) -> Path:
        return self.base / managed_ledger / f"{ledger_id}-{uuid}"

    def offload(self, managed_ledger: str, ledger_id: int, uuid: UUID, metadata: OffloadedLedgerMetadata,
                entries: Iterable[bytes]) -> None:
        """Copy a closed ledger: ``entries`` are its entries 0 to ``metadata.last_entry_id``, in order."""
        writer = self.begin(managed_ledger, ledger_id, uuid, metadata)
        try:
            writer.append(list(entries))
            writer.finish()
        except BaseException:
            writer.abort()
            raise

    def begin(self, managed_ledger: str, ledger_id: int, uuid: UUID,
              metadata: OffloadedLedgerMetadata) -> OffloadWriter:
        """Start a copy of a closed ledger, to be given its entries in order (``OffloadWriter``)."""
        final = self.ledger_path(managed_ledger, ledger_id, uuid)
        temporary = final.with_name(final.name + TEMPORARY_SUFFIX)
        shutil.rmtree(temporary, ignore_errors=True)
        temporary.parent.mkdir(parents=True, exist_ok=True)
        writer = MapFileWriter(temporary, self.compression, self.block_size, self.index_interval)
        try:
            writer.append(METADATA_KEY, metadata.serialize())
        except BaseException:
            writer.close_quietly()
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        return OffloadWriter(ledger_id, metadata.last_entry_id, writer, temporary, final)

    def open(self, managed_ledger: str, ledger_id: int, uuid: UUID,
             driver_metadata: Mapping[str, str] | None = None) -> OffloadedLedger:
        """The copy, open for reads (from this offloader's base, as Pulsar's reads it whatever the context's
        storageBasePath says)."""
        path = self.ledger_path(managed_ledger, ledger_id, uuid)
        try:
            reader = MapFileReader(path)
        except FileNotFoundError:
            raise OffloadedLedgerError(f"ledger {ledger_id}: no offloaded copy at {path}") from None
        except (MapFileError, OSError) as exc:
            raise OffloadedLedgerError(f"ledger {ledger_id}: {exc}") from None
        try:
            raw = reader.get(METADATA_KEY)
            if raw is None:
                raise OffloadedLedgerError(f"ledger {ledger_id}: the offloaded copy at {path} has no metadata")
            return OffloadedLedger(ledger_id, OffloadedLedgerMetadata.parse(raw), reader)
        except (MapFileError, LedgerMetadataError, OSError) as exc:
            reader.close()
            raise OffloadedLedgerError(f"ledger {ledger_id}: {exc}") from None
        except BaseException:
            reader.close()
            raise

    def delete(self, managed_ledger: str, ledger_id: int, uuid: UUID,
               driver_metadata: Mapping[str, str] | None = None) -> None:
        """Remove the copy (and what an interrupted copy left); nothing there is no error."""
        final = self.ledger_path(managed_ledger, ledger_id, uuid)
        for path in (final, final.with_name(final.name + TEMPORARY_SUFFIX)):
            shutil.rmtree(path, ignore_errors=True)

    def scan(self) -> Iterator[StoredObject]:
        """Every copy's directory under the base (and what interrupted copies left), with the managed ledger its
        path names (Pulsar's filesystem offloader cannot scan)."""
        if not self.base.is_dir():
            return
        for root, directories, _ in os.walk(self.base):
            for name in sorted(directories):
                found = COPY_NAME.fullmatch(name)
                if found is None:
                    continue
                directories.remove(name)  # (not walked into)
                path = Path(root) / name
                files = [f.stat() for f in path.iterdir() if f.is_file()]
                modified = max((f.st_mtime for f in files), default=path.stat().st_mtime)
                yield StoredObject(str(path.relative_to(self.base)), str(self.base), path.as_uri(),
                                   sum(f.st_size for f in files), int(modified * 1000), {}, int(found[1]), found[2],
                                   managed_ledger=str(Path(root).relative_to(self.base)))


class OffloadWriter:
    """One ledger's copy under way: ``append`` its entries in order (as many calls as wanted), then ``finish``
    (the copy is in place, durable) or ``abort`` (nothing is left of it)."""

    def __init__(self, ledger_id: int, last_entry_id: int, writer: MapFileWriter, temporary: Path,
                 final: Path) -> None:
        self._ledger_id = ledger_id
        self._last_entry_id = last_entry_id
        self._writer = writer
        self._temporary = temporary
        self._final = final
        self._count = 0

    def append(self, entries: Iterable[bytes]) -> None:
        writer, entry_id = self._writer, self._count
        for data in entries:
            writer.append(entry_id, data)
            entry_id += 1
        self._count = entry_id

    def finish(self) -> None:
        self._writer.close()
        if self._count != self._last_entry_id + 1:
            raise OffloadedLedgerError(f"ledger {self._ledger_id}: {self._count} entries read of "
                                       f"{self._last_entry_id + 1}")
        temporary, final = self._temporary, self._final
        for name in (temporary / "data", temporary / "index"):
            _fsync(name)
        _fsync_dir(temporary)
        os.replace(temporary, final)
        _fsync_dir(final.parent)

    def abort(self) -> None:
        self._writer.close_quietly()
        shutil.rmtree(self._temporary, ignore_errors=True)


class OffloadedLedger:
    """One offloaded ledger, open for reads (``read``)."""

    def __init__(self, ledger_id: int, metadata: OffloadedLedgerMetadata, reader: MapFileReader) -> None:
        self.ledger_id = ledger_id
        self.metadata = metadata
        self._reader = reader

    @property
    def last_entry_id(self) -> int:
        return self.metadata.last_entry_id

    def read(self, first: int, last: int) -> list[bytes]:
        """Entries ``first`` to ``last`` (inclusive), as Pulsar's read handle refuses a range outside the ledger."""
        check_range(self.ledger_id, first, last, self.last_entry_id)
        out: list[bytes] = []
        try:
            for key, value in self._entries_from(first):
                if key != first + len(out):
                    raise OffloadedLedgerError(f"ledger {self.ledger_id}: entry {first + len(out)} missing "
                                               f"(found {key})")
                out.append(value)
                if key == last:
                    return out
        except (MapFileError, OSError) as exc:
            raise OffloadedLedgerError(f"ledger {self.ledger_id}: {exc}") from None
        raise OffloadedLedgerError(f"ledger {self.ledger_id}: entries from {first + len(out)} missing")

    def _entries_from(self, first: int) -> Iterator[tuple[int, bytes]]:
        return self._reader.from_key(first)

    def close(self) -> None:
        self._reader.close()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    _fsync(path)
