"""The sans-IO codec: golden frames, any chunking, and random bytes only raise ProtocolError."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.checksum import crc32c
from broker.protocol.entry import parse_payload
from broker.protocol.errors import ProtocolError
from broker.protocol.frames import Frame, FrameDecoder
from broker.protocol.limits import DEFAULT_MAX_MESSAGE_SIZE, max_frame_size

MAX_FRAME = max_frame_size(DEFAULT_MAX_MESSAGE_SIZE)

# PING: BaseCommand{type=18 (field 1 varint), ping (field 18, empty)} framed as totalSize=9, cmdSize=5.
GOLDEN_PING = b"\x00\x00\x00\x09\x00\x00\x00\x05\x08\x12\x92\x01\x00"
# PONG: type=19, pong field 19.
GOLDEN_PONG = b"\x00\x00\x00\x09\x00\x00\x00\x05\x08\x13\x9a\x01\x00"


def make_send(producer_id: int = 1, sequence_id: int = 0, body: bytes = b"hello",
              checksum: bool = True, corrupt: bool = False) -> bytes:
    cmd = pb.BaseCommand(type=pb.BaseCommand.SEND)
    cmd.send.producer_id = producer_id
    cmd.send.sequence_id = sequence_id
    md = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1700000000000)
    meta = md.SerializeToString()
    tail = struct.pack(">I", len(meta)) + meta + body
    if checksum:
        crc = crc32c(tail) ^ (1 if corrupt else 0)
        payload = b"\x0e\x01" + struct.pack(">I", crc) + tail
    else:
        payload = tail
    return commands.frame_with_payload(cmd, payload)


def decode_all(data: bytes, chunk: int | None = None) -> list[Frame]:
    dec = FrameDecoder(MAX_FRAME)
    out: list[Frame] = []
    step = chunk or max(len(data), 1)
    for i in range(0, len(data), step):
        dec.feed(data[i:i + step])
        while (f := dec.next_frame()) is not None:
            out.append(f)
    return out


def test_golden_ping_pong_encoding() -> None:
    assert commands.ping() == GOLDEN_PING
    assert commands.pong() == GOLDEN_PONG


def test_golden_ping_decoding() -> None:
    [frame] = decode_all(GOLDEN_PING)
    assert frame.command.type == pb.BaseCommand.PING
    assert frame.payload is None


def test_send_frame_roundtrip_and_checksum() -> None:
    data = make_send(sequence_id=7)
    [frame] = decode_all(data)
    assert frame.command.send.sequence_id == 7
    assert frame.payload is not None
    parsed = parse_payload(frame.payload)
    assert parsed.checksum_ok
    assert parsed.metadata.producer_name == "p"
    assert parsed.entry == frame.payload  # stored verbatim


def test_bad_checksum_is_detected_not_fatal() -> None:
    [frame] = decode_all(make_send(corrupt=True))
    assert frame.payload is not None
    assert not parse_payload(frame.payload).checksum_ok


def test_missing_checksum_is_accepted() -> None:
    [frame] = decode_all(make_send(checksum=False))
    assert frame.payload is not None
    assert parse_payload(frame.payload).checksum_ok


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_any_chunking_gives_the_same_frames(chunk: int) -> None:
    stream = GOLDEN_PING + make_send(sequence_id=1) + GOLDEN_PONG + make_send(sequence_id=2, body=b"x" * 5000)
    whole = decode_all(stream)
    pieces = decode_all(stream, chunk)
    assert [f.command for f in pieces] == [f.command for f in whole]
    assert [f.payload for f in pieces] == [f.payload for f in whole]
    assert len(whole) == 4


def test_large_frame_in_small_reads() -> None:
    body = b"y" * (1024 * 1024)
    frames = decode_all(make_send(body=body), 65536)
    assert len(frames) == 1 and frames[0].payload is not None and frames[0].payload.endswith(body)


def test_a_frame_dripped_in_tiny_reads_is_held_in_about_its_own_size() -> None:
    # A client sending 2 bytes a read: the pieces are held back to back, not as a list of tiny objects
    # (which cost ~20 times the bytes they held).
    data = make_send(body=b"z" * (256 * 1024))
    decoder = FrameDecoder(max_frame_size(DEFAULT_MAX_MESSAGE_SIZE))
    tracemalloc.start()
    try:
        for i in range(0, len(data) - 2, 2):
            decoder.feed(data[i : i + 2])  # (a new bytes object each read, as the transport gives them)
            assert decoder.next_frame() is None  # (as the connection asks after each read)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 3 * len(data)
    decoder.feed(data[i + 2 :])
    frame = decoder.next_frame()
    assert frame is not None and frame.payload is not None and frame.payload.endswith(b"z" * 1024)


def test_oversize_frame_is_refused_before_buffering() -> None:
    dec = FrameDecoder(MAX_FRAME)
    dec.feed(struct.pack(">I", MAX_FRAME))  # totalSize + 4 > limit
    with pytest.raises(ProtocolError):
        dec.next_frame()


def test_frame_at_the_limit_is_accepted() -> None:
    cmd = pb.BaseCommand(type=pb.BaseCommand.SEND)
    cmd.send.producer_id = 1
    cmd.send.sequence_id = 1
    body = cmd.SerializeToString()
    filler = b"\0" * (MAX_FRAME - 8 - len(body))
    data = struct.pack(">II", MAX_FRAME - 4, len(body)) + body + filler
    [frame] = decode_all(data, 1 << 20)
    assert frame.payload is not None and len(frame.payload) == len(filler)


@pytest.mark.parametrize("bad", [
    b"\x00\x00\x00\x02\x00\x00",  # totalSize below the command size field
    b"\x00\x00\x00\x05\x00\x00\x00\x09\x08",  # commandSize larger than the frame
    b"\x00\x00\x00\x05\x00\x00\x00\x00\x00",  # empty command
    b"\x00\x00\x00\x06\x00\x00\x00\x02\xff\xff",  # undecodable protobuf
    b"\x00\x00\x00\x06\x00\x00\x00\x02\x08\x06",  # SEND type without the required send field
])
def test_malformed_frames_raise_protocol_error(bad: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_all(bad)


def test_truncated_frame_waits_for_more() -> None:
    dec = FrameDecoder(MAX_FRAME)
    dec.feed(GOLDEN_PING[:-1])
    assert dec.next_frame() is None
    dec.feed(GOLDEN_PING[-1:])
    assert dec.next_frame() is not None


def test_u64_helpers() -> None:
    assert commands.to_u64(-1) == 2**64 - 1
    assert commands.from_u64(2**64 - 1) == -1
    assert commands.from_u64(2**63 - 1) == 2**63 - 1


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=512), st.integers(min_value=1, max_value=64))
def test_random_bytes_only_raise_protocol_error(data: bytes, chunk: int) -> None:
    try:
        frames = decode_all(data, chunk)
    except ProtocolError:
        return
    for f in frames:
        if f.payload is not None:
            try:
                parse_payload(f.payload)
            except ProtocolError:
                pass


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=200), st.integers(min_value=0, max_value=255),
       st.integers(min_value=1, max_value=16))
def test_mutated_valid_frames_only_raise_protocol_error(index: int, value: int, chunk: int) -> None:
    data = bytearray(make_send(sequence_id=3) + GOLDEN_PING)
    data[index % len(data)] = value
    try:
        whole = decode_all(bytes(data))
    except ProtocolError:
        with pytest.raises(ProtocolError):
            decode_all(bytes(data), chunk)
        return
    split = decode_all(bytes(data), chunk)
    assert [f.command for f in split] == [f.command for f in whole]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(-1, 2**63 - 1),
       st.integers(-1, 2**63 - 1), st.one_of(st.none(), st.integers(0, 2**64 - 1)))
def test_hand_encoded_receipt_matches_protobuf(pid: int, seq: int, ledger: int, entry: int,
                                                highest: int | None) -> None:
    # ids are uint64 on the wire; ledger/entry -1 is the deduplication receipt (-1,-1)
    expected = commands.send_receipt_protobuf(pid, seq, ledger, entry, highest)
    assert commands.send_receipt(pid, seq, ledger, entry, highest) == expected


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**64 - 1),
       st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(-1, 2**63 - 1), st.integers(-1, 2**63 - 1),
                          st.booleans()), min_size=1, max_size=5))
def test_receipt_encoder_matches_protobuf(pid: int, receipts: list[tuple[int, int, int, bool]]) -> None:
    encoder = commands.ReceiptEncoder(pid)  # one per producer, reused across ledgers
    for seq, ledger, entry, same_highest in receipts:
        highest = seq if same_highest else (seq + 7) % 2**64
        expected = commands.send_receipt_protobuf(pid, seq, ledger, entry, highest)
        assert encoder.encode(seq, ledger, entry, highest) == expected


@settings(max_examples=200, deadline=None)
@given(st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_send_required_fields_fast_check_agrees_with_is_initialized(
        has_producer: bool, has_seq: bool, has_highest: bool, has_mid: bool, mid_ledger: bool, mid_entry: bool) -> None:
    cmd = pb.BaseCommand(type=pb.BaseCommand.SEND)
    send = cmd.send
    send.SetInParent()
    if has_producer:
        send.producer_id = 1
    if has_seq:
        send.sequence_id = 2
    if has_highest:
        send.highest_sequence_id = 3
    if has_mid:
        send.message_id.SetInParent()
        if mid_ledger:
            send.message_id.ledgerId = 4
        if mid_entry:
            send.message_id.entryId = 5
    body = cmd.SerializePartialToString()  # may lack required fields on purpose
    data = struct.pack(">II", 4 + len(body) + 7, len(body)) + body + b"payload"
    decoder = FrameDecoder(1 << 20)
    decoder.feed(data)
    if cmd.IsInitialized():
        frame = decoder.next_frame()
        assert frame is not None and frame.command == cmd
    else:
        with pytest.raises(ProtocolError):
            decoder.next_frame()


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**64 - 1), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), st.integers(-1, 2**31 - 1),
       st.integers(0, 2**32 - 1), st.binary(max_size=64),
       st.one_of(st.none(), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3)))
def test_hand_encoded_message_matches_protobuf(consumer_id: int, ledger: int, entry: int, partition: int,
                                               redelivery: int, payload: bytes, ack_set: list[int] | None) -> None:
    expected = commands.message_protobuf(consumer_id, ledger, entry, partition, redelivery, payload, ack_set)
    assert commands.message(consumer_id, ledger, entry, partition, redelivery, payload, ack_set) == expected
    header = commands.message_header(consumer_id, ledger, entry, partition, redelivery, len(payload), ack_set)
    assert header + payload == expected
    encoder = commands.MessageHeaderEncoder(consumer_id, partition)
    for _ in range(2):  # the prepared parts, made by the first call, then reused
        assert encoder.header(ledger, entry, redelivery, len(payload), ack_set) + payload == expected


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**64 - 1), st.integers(-1, 2**31 - 1),
       st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**63 - 1), st.integers(0, 2)), max_size=20))
def test_message_header_encoder_across_ledgers_and_entries(consumer_id: int, partition: int,
                                                           entries: list[tuple[int, int, int]]) -> None:
    """One consumer's encoder, fed entries of changing ledgers, entry id sizes and redelivery counts."""
    encoder = commands.MessageHeaderEncoder(consumer_id, partition)
    for ledger, entry, redelivery in entries:
        assert encoder.header(ledger, entry, redelivery, 14_000) == commands.message_header(
            consumer_id, ledger, entry, partition, redelivery, 14_000)


def test_lookup_redirect_frame() -> None:
    """Cluster mode's Redirect: response type 1, the other broker's URLs, and the authoritative flag as given."""
    data = commands.lookup_redirect(7, "pulsar://b2:6650", None, authoritative=False)
    decoder = FrameDecoder(max_frame_size(DEFAULT_MAX_MESSAGE_SIZE))
    decoder.feed(data)
    frame = decoder.next_frame()
    assert frame is not None
    r = frame.command.lookupTopicResponse
    assert frame.command.type == pb.BaseCommand.LOOKUP_RESPONSE
    assert (r.request_id, r.response, r.brokerServiceUrl) == (7, pb.CommandLookupTopicResponse.Redirect,
                                                              "pulsar://b2:6650")
    assert r.HasField("authoritative") and not r.authoritative and not r.HasField("brokerServiceUrlTls")
    # (proxy_through_service_url set, to false, as Pulsar's Commands.newLookupResponse sets it)
    assert r.HasField("proxy_through_service_url") and not r.proxy_through_service_url
    # Golden: the whole frame, so an encoder change is seen.
    expected = pb.BaseCommand(type=pb.BaseCommand.LOOKUP_RESPONSE)
    expected.lookupTopicResponse.request_id = 7
    expected.lookupTopicResponse.response = pb.CommandLookupTopicResponse.Redirect
    expected.lookupTopicResponse.brokerServiceUrl = "pulsar://b2:6650"
    expected.lookupTopicResponse.authoritative = False
    expected.lookupTopicResponse.proxy_through_service_url = False
    body = expected.SerializeToString()
    assert data == struct.pack(">II", len(body) + 4, len(body)) + body
