"""Re-stamping stored entries for geo-replication (pure: no broker)."""

from __future__ import annotations

import struct

from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.checksum import crc32c
from broker.protocol.frames import parse_payload
from broker.service.replication import restamp


def test_restamp_for_replication() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=3, publish_time=5, num_messages_in_batch=2)
    meta = md.SerializeToString()
    tail = struct.pack(">I", len(meta)) + meta + b"body"
    entry = b"\x0e\x01" + struct.pack(">I", crc32c(tail)) + tail
    stamped = restamp(entry, "east")
    assert stamped is not None
    payload, new_md = stamped
    parsed = parse_payload(payload)
    assert parsed.checksum_ok and parsed.metadata.replicated_from == "east"
    assert parsed.metadata.sequence_id == 3 and parsed.metadata.num_messages_in_batch == 2
    assert payload.endswith(b"body") and new_md.replicated_from == "east"
    # Already replicated here from elsewhere, or a marker: not sent on.
    assert restamp(payload, "west") is None
    marker = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=5, marker_type=1).SerializeToString()
    assert restamp(struct.pack(">I", len(marker)) + marker, "east") is None
    # An entry stored without a checksum gets one.
    plain = restamp(tail, "east")
    assert plain is not None and parse_payload(plain[0]).checksum_ok
