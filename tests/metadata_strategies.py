"""Hypothesis strategies for the property tests that hold the hand-written MessageMetadata readers
(entry.py: the SEND checks, the consume path's EntryMeta) to protobuf's answers."""

from __future__ import annotations

from hypothesis import strategies as st

from broker.protocol import pulsar_api_pb2 as pb

U64 = st.integers(0, 2**64 - 1)

# Valid MessageMetadata: the fields of the common shape the readers recognise by hand, with values at
# their varint length edges, and the fields that take a metadata out of that shape (delivery time,
# transaction, chunk, keys, marker), each present or not.
message_metadata = st.builds(
    pb.MessageMetadata,
    producer_name=st.one_of(st.just("standalone-0-0"), st.text(max_size=140)),
    sequence_id=U64, publish_time=U64,
    compression=st.sampled_from([None, 0, 1, 4]),
    uncompressed_size=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    num_messages_in_batch=st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1), st.integers(0, 2000)),
    event_time=st.one_of(st.none(), U64),
    highest_sequence_id=st.one_of(st.none(), U64),
    deliver_at_time=st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    txnid_most_bits=st.one_of(st.none(), U64),
    chunk_id=st.one_of(st.none(), st.integers(0, 5)),
    num_chunks_from_msg=st.one_of(st.none(), st.integers(0, 5)),
    partition_key=st.one_of(st.none(), st.text(max_size=5)),
    ordering_key=st.one_of(st.none(), st.binary(max_size=3)),
    marker_type=st.one_of(st.none(), st.integers(0, 3)),
)
