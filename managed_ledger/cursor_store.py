"""Durable cursor state on disk: one small file per durable cursor, replaced atomically.

File ``cursors/<encoded name>.cur`` in the managed ledger's directory::

    0  4  magic b"PMLC"
    4  4  CRC32C of the body
    8  .  body: UTF-8 JSON {"name", "markDelete": [ledger, entry], "properties": {..},
          "deleted": [[ledger, first, last], ...], "deletedTruncated": bool,
          "batchAcks": [[ledger, entry, [ack_set words]], ...],   (absent in older files)
          "lastActive": epoch milliseconds,                       (absent in older files)
          "cursorProperties": {name: value}}                      (absent when empty)

Written with temp file + fsync + rename + fsync(dir), so a reader sees the old state or the new
one, never a mix. The individually deleted ranges written are bounded (Pulsar's
managedLedgerMaxUnackedRangesToPersist, the managed ledger's ``max_unacked_ranges_to_persist``): past
the bound, the ranges furthest from the mark-delete are left out, which only means those
acknowledged entries may be delivered again after a restart - never that an unacknowledged one is
skipped. The partly acknowledged batches are bounded apart (Pulsar's
managedLedgerMaxBatchDeletedIndexToPersist default).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

from crc32c import crc32c

from managed_ledger.api import MAX_BATCH_DELETED_INDEX_TO_PERSIST, MAX_UNACKED_RANGES_TO_PERSIST
from managed_ledger.cursor_base import CursorRecord
from managed_ledger.position import Position
from managed_ledger.range_set import PositionRangeSet

MAGIC = b"PMLC"
SUFFIX = ".cur"
_HEAD = struct.Struct(">4sI")


def encode(name: str, record: CursorRecord, max_ranges: int = MAX_UNACKED_RANGES_TO_PERSIST) -> bytes:
    """Serialize on the loop (the record is loop-owned); the bytes then go to the writer."""
    ranges: list[list[int]] = []
    truncated = False
    for first, last in record.individually_deleted:
        if len(ranges) == max_ranges:
            truncated = True
            break
        ranges.append([first.ledger_id, first.entry_id, last.entry_id])
    body = json.dumps(
        {
            "name": name,
            "markDelete": list(record.mark_delete),
            "properties": record.properties,
            "deleted": ranges,
            "deletedTruncated": truncated,
            # Bounded too; a batch left out is redelivered whole after a restart.
            "batchAcks": [[p.ledger_id, p.entry_id, words]
                          for p, words in sorted(record.batch_acks.items())[:MAX_BATCH_DELETED_INDEX_TO_PERSIST]],
            **({"lastActive": int(record.last_active * 1000)} if record.last_active is not None else {}),
            **({"cursorProperties": record.cursor_properties} if record.cursor_properties else {}),
        },
        separators=(",", ":"),
    ).encode()
    return _HEAD.pack(MAGIC, crc32c(body)) + body


@dataclass(frozen=True)
class StoredCursor:
    name: str
    record: CursorRecord


def decode(data: bytes) -> StoredCursor:
    """Parse a cursor state file; ValueError if it is damaged."""
    if len(data) < _HEAD.size:
        raise ValueError("cursor state file too short")
    magic, crc = _HEAD.unpack_from(data)
    body = data[_HEAD.size :]
    if magic != MAGIC or crc32c(body) != crc:
        raise ValueError("cursor state file fails its checksum")
    doc = json.loads(body)
    mark_delete = Position(int(doc["markDelete"][0]), int(doc["markDelete"][1]))
    deleted = PositionRangeSet()
    for ledger_id, first, last in doc["deleted"]:
        deleted.add_range(int(ledger_id), int(first), int(last))
    properties = {str(k): int(v) for k, v in doc["properties"].items()}
    batch_acks = {Position(int(ledger_id), int(entry_id)): [int(w) for w in words]
                  for ledger_id, entry_id, words in doc.get("batchAcks", [])}
    last_active = doc.get("lastActive")
    cursor_properties = {str(k): str(v) for k, v in doc.get("cursorProperties", {}).items()}
    return StoredCursor(str(doc["name"]), CursorRecord(mark_delete, deleted, properties, batch_acks,
                                                       None if last_active is None else int(last_active) / 1000,
                                                       cursor_properties))
