"""The SEND hot path reads the common encodings without protobuf (frames.py ``_read_send``,
entry.py ``check_send_payload``); for every input it must say what protobuf would: the same
fields, the same checks, the same errors."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.checksum import crc32c
from broker.protocol.entry import SendChecks, check_send_payload, parse_payload
from broker.protocol.errors import ProtocolError
from broker.protocol.frames import FrameDecoder, SendFrame, _read_send, send_command
from broker.protocol.limits import DEFAULT_MAX_MESSAGE_SIZE, max_frame_size
from tests.metadata_strategies import U64, message_metadata

MAX_FRAME = max_frame_size(DEFAULT_MAX_MESSAGE_SIZE)


def reference_checks(payload: bytes) -> SendChecks:
    """The checks as protobuf reads them (the old path)."""
    parsed = parse_payload(payload)
    md = parsed.metadata
    return SendChecks(parsed.checksum_ok,
                      md.deliver_at_time - md.publish_time if md.HasField("deliver_at_time") else None,
                      len(md.encryption_keys) > 0, md.HasField("txnid_most_bits"),
                      not md.HasField("chunk_id") or md.chunk_id == md.num_chunks_from_msg - 1)


def outcome(fn: Callable[[bytes], object], arg: bytes) -> object:
    try:
        return fn(arg)
    except ProtocolError:
        return "ProtocolError"


def with_crc(tail: bytes, corrupt: bool = False) -> bytes:
    return b"\x0e\x01" + struct.pack(">I", crc32c(tail) ^ int(corrupt)) + tail


def payload_of(meta: bytes, body: bytes = b"x" * 10, crc: bool = True) -> bytes:
    tail = struct.pack(">I", len(meta)) + meta + body
    return with_crc(tail) if crc else tail


@settings(max_examples=400, deadline=None)
@given(message_metadata, st.booleans(), st.booleans())
def test_checks_agree_with_protobuf_on_valid_metadata(md: pb.MessageMetadata, crc: bool, corrupt: bool) -> None:
    tail_payload = payload_of(md.SerializeToString(), crc=False)
    payload = with_crc(tail_payload, corrupt) if crc else tail_payload
    assert check_send_payload(payload) == reference_checks(payload)


@settings(max_examples=600, deadline=None)
@given(st.binary(max_size=60), st.booleans())
@example(b"\x0a\x01p\x10\x01\x18\x01", True)  # the common shape itself
@example(b"\x0a\x01p\x10\x01", True)  # publish_time missing
@example(b"\x0a\x01\xff\x10\x01\x18\x01", True)  # a producer name that is not UTF-8
@example(b"\x0a\x01p\x10\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01\x18\x01", True)  # a 10-byte varint
@example(b"\x0a\x01p\x10\x01\x18\x01\x40\x07", True)  # an unknown compression value
@example(b"\x0a\x01p\x10\x01\x18\x01\x58\x80", True)  # a varint cut short
def test_checks_agree_with_protobuf_on_any_bytes(meta: bytes, crc: bool) -> None:
    payload = payload_of(meta, crc=crc)
    assert outcome(check_send_payload, payload) == outcome(reference_checks, payload)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_checks_agree_with_protobuf_on_truncated_payloads(payload: bytes) -> None:
    assert outcome(check_send_payload, payload) == outcome(reference_checks, payload)


def test_the_clients_metadata_takes_the_fast_path() -> None:
    """What the official client sends (unbatched; batched) is the shape the pattern knows."""
    from broker.protocol.entry import _COMMON_METADATA_TAIL, _common_match

    for md in (pb.MessageMetadata(producer_name="standalone-0-0", sequence_id=5, publish_time=1764633600000),
               pb.MessageMetadata(producer_name="standalone-0-1", sequence_id=0, publish_time=1764633600000,
                                  num_messages_in_batch=5)):
        meta = md.SerializeToString()
        assert _common_match(_COMMON_METADATA_TAIL, meta, 0, len(meta)) is not None


def decoder_of(frame: bytes) -> FrameDecoder:
    dec = FrameDecoder(MAX_FRAME)
    dec.feed(frame)
    return dec


def decode_send(frame: bytes) -> SendFrame:
    got = decoder_of(frame).next_frame_or_send()
    assert isinstance(got, SendFrame)
    return got


def reference_send(frame: bytes) -> SendFrame:
    got = decoder_of(frame).next_frame()
    assert got is not None
    return SendFrame(send_command(got.command.send), got.payload)


sends = st.builds(
    pb.CommandSend, producer_id=U64, sequence_id=U64,
    num_messages=st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
    highest_sequence_id=st.one_of(st.none(), U64),
    is_chunk=st.one_of(st.none(), st.booleans()),
    txnid_least_bits=st.one_of(st.none(), U64),
    txnid_most_bits=st.one_of(st.none(), U64),
    marker=st.one_of(st.none(), st.booleans()),
)


@settings(max_examples=400, deadline=None)
@given(sends)
def test_send_command_agrees_with_protobuf(send: pb.CommandSend) -> None:
    cmd = pb.BaseCommand(type=pb.BaseCommand.SEND)
    cmd.send.CopyFrom(send)
    frame = commands.frame_with_payload(cmd, b"payload")
    assert outcome(decode_send, frame) == outcome(reference_send, frame)


@settings(max_examples=600, deadline=None)
@given(st.binary(max_size=30))
@example(b"\x08\x01\x10\x02")
@example(b"\x08\x01\x10\x02\x10\x03")  # a field twice: protobuf keeps the last
@example(b"\x08\x01")  # sequence_id missing
@example(b"\x08\x01\x10\x02\x18\xff\xff\xff\xff\x0f")  # num_messages -1 as 5 bytes (int32 wraps)
@example(b"\x08\x01\x10\x02\x38\x02")  # is_chunk = 2
@example(b"\x08\x7f\x10\xff\x7f")  # the unbatched shape (_read_unbatched_send): 2-byte sequence id
@example(b"\x08\x01\x10\x80\x80\x01")  # 3 bytes
@example(b"\x08\x01\x10\x80")  # a sequence id that does not end
@example(b"\x08\x01\x10\x05\x05")  # one byte, then a stray one
@example(b"\x08\x01\x10\x85\x80\x80")  # 3 bytes that do not end
@example(b"\x08\x80\x01\x10\x05")  # a 2-byte producer id
def test_send_body_agrees_with_protobuf_on_any_bytes(body: bytes) -> None:
    if len(body) >= 0x80:
        return
    command = b"\x08\x06\x32" + bytes([len(body)]) + body
    frame = struct.pack(">II", 4 + len(command) + 3, len(command)) + command + b"abc"
    assert outcome(decode_send, frame) == outcome(reference_send, frame)


@pytest.mark.parametrize("body", [b"\x08\x01\x10\x02", b"\x08\x01\x10\x02\x18\x05",
                                  b"\x08\x01\x10\xe8\x07\x30\xf0\x07"])
def test_common_send_bodies_take_the_fast_path(body: bytes) -> None:
    assert _read_send(body, 0, len(body)) is not None


@settings(max_examples=200, deadline=None)
@given(U64, st.lists(st.tuples(U64, U64), min_size=1, max_size=5), U64, st.integers(0, 2**40),
       st.sampled_from([0, 1]))
def test_receipts_of_a_stored_batch_are_protobufs(producer_id: int, sends: list[tuple[int, int]], ledger_id: int,
                                                  first: int, step: int) -> None:
    encoder = commands.ReceiptEncoder(producer_id)
    got = encoder.encode_many(sends, ledger_id, first, step)
    assert got == [commands.send_receipt_protobuf(producer_id, seq, ledger_id, first + i * step, highest)
                   for i, (seq, highest) in enumerate(sends)]


@pytest.mark.parametrize("first", [0, 126, 127, 128, 16382, 16383, 16384, 2**21 - 2, 2**21 - 1, 2**21])
def test_receipts_at_the_varint_length_boundaries_are_protobufs(first: int) -> None:
    """encode_many writes varints of up to three bytes inline: each length and each boundary."""
    sends = [(first + i, first + i + (i % 2)) for i in range(3)]
    got = commands.ReceiptEncoder(5).encode_many(sends, first + 1, first, 1)
    assert got == [commands.send_receipt_protobuf(5, seq, first + 1, first + i, highest)
                   for i, (seq, highest) in enumerate(sends)]
