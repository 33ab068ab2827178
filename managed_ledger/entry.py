"""Entries: the unit of storage in a managed ledger."""

from __future__ import annotations

from typing import NamedTuple

from managed_ledger.position import Position


class Entry(NamedTuple):
    """One stored entry.

    ``data`` is kept verbatim as the producer sent it (magic + crc + metadata + payload) and
    sent back verbatim in MESSAGE frames: the storage layer never parses or re-encodes it.
    """

    position: Position
    data: bytes
