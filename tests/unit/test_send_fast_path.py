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
from broker.protocol.entry import SendChecks, check_send_payload, parse_payload, plain_send_payloads
from broker.protocol.errors import ProtocolError
from broker.protocol.frames import Frame, FrameDecoder, SendFrame, _read_send, send_command
from broker.protocol.limits import DEFAULT_MAX_MESSAGE_SIZE, max_frame_size
from tests.metadata_strategies import U64, message_metadata

MAX_FRAME = max_frame_size(DEFAULT_MAX_MESSAGE_SIZE)


def reference_checks(payload: bytes) -> SendChecks:
    """The checks as protobuf reads them (the old path)."""
    parsed = parse_payload(payload)
    md = parsed.metadata
    if md.HasField("num_messages_in_batch"):
        # A batch's messages take 6 bytes at least (size, payload_size), of the body or of what it
        # uncompresses to.
        start = 6 if payload[:2] == b"\x0e\x01" else 0
        body = len(payload) - start - 4 - struct.unpack_from(">I", payload, start)[0]
        if not 0 <= md.num_messages_in_batch * 6 <= max(body, md.uncompressed_size):
            raise ProtocolError("batch count beyond the payload")
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
    assert outcome(check_send_payload, payload) == outcome(reference_checks, payload)


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


COMMON = SendChecks(True, None, False, False, True)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=30) | message_metadata.map(lambda md: md.SerializeToString()),
                          st.booleans(), st.booleans()), max_size=6),
       st.integers(0, 200))
@example([(b"\x0a\x01p\x10\x01\x18\x01", True, False)] * 3 + [(b"\x0a\x01p\x10\x01\x18\x01", True, True)], 200)
def test_a_run_of_plain_payloads_ends_at_the_first_that_is_not(
        metas: list[tuple[bytes, bool, bool]], max_size: int) -> None:
    """``plain_send_payloads`` counts the payloads at the head of a run that protobuf's reading gives
    the common checks, within the size; the first it does not count is one that needs a look (its
    CRC, its metadata, its size), so its SEND is checked alone."""
    payloads = [payload_of(meta, crc=crc) if not corrupt else with_crc(payload_of(meta, crc=False), True)
                for meta, crc, corrupt in metas]
    count = plain_send_payloads(payloads, max_size)
    assert 0 <= count <= len(payloads)
    for payload in payloads[:count]:
        assert len(payload) <= max_size and outcome(reference_checks, payload) == COMMON
    if count < len(payloads):
        first = payloads[count]
        assert plain_send_payloads([first], max_size) == 0
        assert plain_send_payloads(payloads[count:], max_size) == 0


@pytest.mark.parametrize("count, body, uncompressed_size, fits", [
    (10, 60, None, True), (11, 60, None, False),  # uncompressed: the body holds them
    (100, 60, 600, True), (101, 60, 600, False),  # compressed: what it uncompresses to holds them
    (0, 0, None, True), (1, 0, None, False),
    (2**27, 60, None, False),  # the fast path's longest count
    (2**31 - 1, 60, 2**32 - 1, False), (-1, 60, None, False),  # (protobuf reads these)
])
@pytest.mark.parametrize("crc", [True, False])
def test_a_batch_claiming_more_messages_than_its_payload_holds_is_refused(
        count: int, body: int, uncompressed_size: int | None, fits: bool, crc: bool) -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, num_messages_in_batch=count)
    if uncompressed_size is not None:
        md.compression, md.uncompressed_size = pb.LZ4, uncompressed_size
    payload = payload_of(md.SerializeToString(), b"x" * body, crc=crc)
    assert outcome(check_send_payload, payload) == (COMMON if fits else "ProtocolError")
    # (one whose count only its uncompressed bytes hold takes protobuf's path)
    assert plain_send_payloads([payload], len(payload)) == int(fits and count * 6 <= body)


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


# -- runs of SENDs (FrameDecoder.next_send_run) --------------------------------------------------------

def a_send_frame(send: pb.CommandSend, payload: bytes | None) -> bytes:
    cmd = pb.BaseCommand(type=pb.BaseCommand.SEND)
    cmd.send.CopyFrom(send)
    return commands.frame_with_payload(cmd, payload) if payload else commands.frame(cmd)


# Mostly one producer's plain SENDs (runs), now and then another producer, a chunk, a transaction.
run_sends = st.builds(
    pb.CommandSend, producer_id=st.sampled_from([1] * 6 + [0, 127, 128, 300]),
    sequence_id=st.one_of(st.integers(0, 2**22), U64),
    num_messages=st.one_of(st.none(), st.integers(-1, 200)),
    highest_sequence_id=st.one_of(st.none(), st.none(), U64),
    is_chunk=st.sampled_from([None] * 6 + [False, True]),
    txnid_most_bits=st.sampled_from([None] * 8 + [7]),
)
frames_in_a_read = st.lists(st.one_of(
    st.tuples(run_sends, st.binary(max_size=40)),  # an empty payload: a SEND without one
    st.just((None, None)),  # another command
), max_size=40)


def frame_of(item: tuple[pb.CommandSend | None, bytes | None]) -> bytes:
    send, payload = item
    return commands.PING if send is None else a_send_frame(send, payload)


def row_of(frame: Frame | SendFrame) -> object:
    """A frame as the run test compares it: a SEND as (producer id, sequence id, highest or
    sequence id, messages, payload, chunk, transaction), another command as its type."""
    if not isinstance(frame, SendFrame):
        return frame.command.type
    s = frame.send
    highest = s.sequence_id if s.highest_sequence_id is None else s.highest_sequence_id
    return s.producer_id, s.sequence_id, highest, s.num_messages, frame.payload, s.is_chunk, s.txn


def one_at_a_time(data: bytes) -> tuple[list[object], int]:
    """The reference: each frame on its own (next_frame_or_send); and the bytes left buffered."""
    dec = FrameDecoder(MAX_FRAME)
    dec.feed(data)
    out: list[object] = []
    while (frame := dec.next_frame_or_send()) is not None:
        out.append(row_of(frame))
    return out, dec.buffered


@settings(max_examples=400, deadline=None)
@given(frames_in_a_read, st.integers(1, 6), st.integers(1, 200), st.integers(0, 30))
def test_runs_read_what_one_frame_at_a_time_reads(items: list[tuple[pb.CommandSend | None, bytes | None]],
                                                  limit: int, budget: int, cut: int) -> None:
    """Runs and single frames taken in turn give the frames one at a time would, in order; a run
    is one producer's SENDs with a payload, no chunk, no transaction, at most ``limit`` of them and
    none after the one whose payload reaches ``budget`` bytes; an incomplete last frame waits."""
    data = b"".join(map(frame_of, items))
    data = data[: len(data) - cut] if cut < len(data) else data
    dec = FrameDecoder(MAX_FRAME)
    dec.feed(data)
    got: list[object] = []
    while True:
        run = dec.next_send_run(limit, budget)
        if run is not None:
            producer_id, sends = run
            assert 1 <= len(sends) <= limit
            assert all(sum(len(s[3]) for s in sends[:i]) < budget for i in range(1, len(sends)))
            got += [(producer_id, seq, highest, num, payload, False, None) for seq, highest, num, payload in sends]
            continue
        # What a run leaves to the single reader: another command, a chunk, a transaction, no
        # payload, another shape.
        frame = dec.next_frame_or_send()
        if frame is None:
            break
        got.append(row_of(frame))
    assert (got, dec.buffered) == one_at_a_time(data)


def test_a_run_is_one_producers_sends_in_a_row() -> None:
    frames = [a_send_frame(pb.CommandSend(producer_id=p, sequence_id=s), b"x") for p, s in
              ((1, 0), (1, 1), (1, 200), (2, 0), (1, 2))]
    dec = FrameDecoder(MAX_FRAME)
    dec.feed(b"".join(frames))
    assert dec.next_send_run(10, 1000) == (1, [(0, 0, 1, b"x"), (1, 1, 1, b"x"), (200, 200, 1, b"x")])
    assert dec.next_send_run(10, 1000) == (2, [(0, 0, 1, b"x")])
    assert dec.next_send_run(10, 1000) == (1, [(2, 2, 1, b"x")])
    assert dec.next_send_run(10, 1000) is None and dec.buffered == 0


def test_receipts_of_a_long_batch_of_consecutive_ids_are_protobufs() -> None:
    """encode_many encodes a varint's tail once per 128 consecutive ids: across its changes."""
    for first in (0, 16000, 2**21 - 300, 2**63 - 200):
        sends = [(first + i, first + i) for i in range(600)]
        for step in (0, 1):
            got = commands.ReceiptEncoder(3).encode_many(sends, 9, first, step)
            assert got == [commands.send_receipt_protobuf(3, seq, 9, first + i * step, highest)
                           for i, (seq, highest) in enumerate(sends)]
