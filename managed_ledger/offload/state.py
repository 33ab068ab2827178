"""What a managed ledger keeps of its ledgers' offloaded copies: per ledger, Pulsar's OffloadContext (the copy's uuid,
whether the copy is complete, whether the local copy is deleted, when the copy completed, the offloader's name and
properties), in Pulsar's format: a ManagedLedgerInfo protobuf (MLDataFormats.proto) whose LedgerInfo entries are the
ledgers with an offload context, each with its entry count, size and close time.

A file ledger keeps it in the file ``offloads`` of its directory (replaced atomically); the ledger list is otherwise
the segment files', so a ledger whose local copy is deleted is known from here alone. A BookKeeper ledger keeps each
context in its ledger list (the managed ledger's znode), as Pulsar does (``to_context`` / ``from_context``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from google.protobuf.message import DecodeError

from managed_ledger.bookkeeper.ml_data_formats_pb2 import ManagedLedgerInfo, OffloadContext
from managed_ledger.bookkeeper.ml_formats import signed64

OFFLOADS_FILE = "offloads"
_MASK64 = (1 << 64) - 1


class OffloadStateError(ValueError):
    pass


@dataclass
class LedgerOffload:
    ledger_id: int
    uuid: UUID
    entries: int
    size: int
    closed_at: float  # seconds (the ledger's close: its LedgerInfo timestamp)
    driver: str
    driver_properties: dict[str, str] = field(default_factory=dict)
    complete: bool = False
    local_deleted: bool = False  # (Pulsar's bookkeeperDeleted)
    completed_at_ms: int = 0  # (OffloadContext.timestamp)
    # The OffloadContext this record was read from (b"": none), whose other fields (a Pulsar broker's
    # offloadSegment list) are written back as they were.
    context: bytes = b""


def uuid_halves(uuid: UUID) -> tuple[int, int]:
    """(most, least) significant 64 bits as Java's UUID gives them (signed longs)."""
    return signed64(uuid.int >> 64), signed64(uuid.int & _MASK64)


def uuid_of(msb: int, lsb: int) -> UUID:
    return UUID(int=((msb & _MASK64) << 64) | (lsb & _MASK64))


def to_context(o: LedgerOffload) -> OffloadContext:
    """The record as an OffloadContext: the one it was read from, with the record's fields set (that one as it
    was when they did not change)."""
    context = OffloadContext()
    if o.context:
        context.ParseFromString(o.context)
        if from_context(o.ledger_id, o.entries, o.size, o.closed_at, context, o.context) == o:
            return context
    context.uidMsb, context.uidLsb = uuid_halves(o.uuid)
    context.complete = o.complete
    context.bookkeeperDeleted = o.local_deleted
    context.timestamp = o.completed_at_ms
    driver = context.driverMetadata
    driver.name = o.driver
    del driver.properties[:]
    for key, value in sorted(o.driver_properties.items()):
        driver.properties.add(key=key, value=value)
    return context


def from_context(ledger_id: int, entries: int, size: int, closed_at: float, context: OffloadContext,
                 raw: bytes = b"") -> LedgerOffload:
    return LedgerOffload(
        ledger_id, uuid_of(context.uidMsb, context.uidLsb), entries, size, closed_at, context.driverMetadata.name,
        {kv.key: kv.value for kv in context.driverMetadata.properties}, context.complete, context.bookkeeperDeleted,
        context.timestamp, raw)


def encode(offloads: list[LedgerOffload]) -> bytes:
    info = ManagedLedgerInfo()
    for o in sorted(offloads, key=lambda o: o.ledger_id):
        ledger = info.ledgerInfo.add(ledgerId=o.ledger_id, entries=o.entries, size=o.size,
                                     timestamp=int(o.closed_at * 1000))
        ledger.offloadContext.CopyFrom(to_context(o))
    return info.SerializeToString()


def decode(data: bytes) -> list[LedgerOffload]:
    info = ManagedLedgerInfo()
    try:
        info.ParseFromString(data)
    except DecodeError as exc:
        raise OffloadStateError(f"undecodable offload state: {exc}") from None
    return [from_context(ledger.ledgerId, ledger.entries, ledger.size, ledger.timestamp / 1000, ledger.offloadContext)
            for ledger in info.ledgerInfo]
