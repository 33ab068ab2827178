"""The ledger metadata an offloaded copy carries: BookKeeper's LedgerMetadataFormat protobuf, plain (no
BookieMetadataFormatVersion header), with the fields Apache Pulsar's OffloadUtils.buildLedgerMetadataFormat writes:
quorums, length, last entry id, state (always CLOSED), the ensembles, the digest type, ctime and the custom metadata
(Pulsar's three keys: application, component, and the managed ledger's name). A reader takes the last entry id and
the length from it."""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from managed_ledger.bookkeeper.bookkeeper_data_formats_pb2 import LedgerMetadataFormat
from managed_ledger.bookkeeper.digest import DigestType
from managed_ledger.bookkeeper.metadata import LedgerMetadata, LedgerState, java_hash_map_order

# A file ledger has no bookie: its one-member ensemble names this (a valid BookKeeper bookie id, never contacted:
# reads of an offloaded copy go to the offloader).
FILE_LEDGER_BOOKIE = "file-ledger:0"


class LedgerMetadataError(ValueError):
    pass


@dataclass(frozen=True)
class OffloadedLedgerMetadata:
    last_entry_id: int
    length: int
    ctime: int  # ms
    ensemble_size: int = 1
    write_quorum: int = 1
    ack_quorum: int = 1
    segments: tuple[tuple[int, tuple[str, ...]], ...] = ((0, (FILE_LEDGER_BOOKIE,)),)
    digest_type: DigestType = DigestType.CRC32C
    custom_metadata: tuple[tuple[str, bytes], ...] = field(default=())

    @classmethod
    def of_managed_ledger(cls, managed_ledger: str, last_entry_id: int, length: int,
                          ctime_ms: int) -> OffloadedLedgerMetadata:
        """The metadata of a managed ledger's closed ledger, with Pulsar's custom metadata keys."""
        custom = (("application", b"pulsar"), ("component", b"managed-ledger"),
                  ("pulsar/managed-ledger", managed_ledger.encode()))
        return cls(last_entry_id, length, ctime_ms, custom_metadata=custom)

    @classmethod
    def of_bookkeeper(cls, metadata: LedgerMetadata) -> OffloadedLedgerMetadata:
        """A closed BookKeeper ledger's metadata as Pulsar's OffloadUtils.buildLedgerMetadataFormat copies it from
        the ledger's read handle: no password; the custom metadata in the order of the Java HashMap BookKeeper
        parses it into; the creation time stored, else the znode's (BookKeeper's getCtime)."""
        return cls(metadata.last_entry_id, metadata.length, metadata.creation_time or 0, metadata.ensemble_size,
                   metadata.write_quorum, metadata.ack_quorum,
                   tuple((s.first_entry_id, s.ensemble) for s in metadata.segments), metadata.digest_type,
                   tuple(java_hash_map_order(metadata.custom_metadata)))

    def serialize(self) -> bytes:
        msg = LedgerMetadataFormat(
            quorumSize=self.write_quorum, ensembleSize=self.ensemble_size, length=self.length,
            lastEntryId=self.last_entry_id, state=int(LedgerState.CLOSED),  # type: ignore[arg-type]
            digestType=int(self.digest_type),  # type: ignore[arg-type]
            ackQuorumSize=self.ack_quorum, ctime=self.ctime)
        for first, members in self.segments:
            msg.segment.add(ensembleMember=list(members), firstEntryId=first)
        for key, value in self.custom_metadata:
            msg.customMetadata.add(key=key, value=value)
        return msg.SerializeToString()

    @classmethod
    def parse(cls, data: bytes) -> OffloadedLedgerMetadata:
        msg = LedgerMetadataFormat()
        try:
            msg.ParseFromString(data)
        except DecodeError as exc:
            raise LedgerMetadataError(f"undecodable ledger metadata: {exc}") from None
        if int(msg.state) != int(LedgerState.CLOSED) or not msg.HasField("lastEntryId"):
            raise LedgerMetadataError("the metadata of an offloaded ledger that is not closed")
        return cls(
            last_entry_id=msg.lastEntryId, length=msg.length, ctime=msg.ctime,
            ensemble_size=msg.ensembleSize, write_quorum=msg.quorumSize,
            ack_quorum=msg.ackQuorumSize if msg.HasField("ackQuorumSize") else msg.quorumSize,
            segments=tuple((s.firstEntryId, tuple(s.ensembleMember)) for s in msg.segment),
            digest_type=DigestType(msg.digestType) if msg.HasField("digestType") else DigestType.CRC32,
            custom_metadata=tuple((kv.key, kv.value) for kv in msg.customMetadata))
