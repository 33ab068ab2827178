"""The v2 bookie protocol codec and the entry digests: golden bytes, any chunking, round trips, malformed input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from managed_ledger.bookkeeper.digest import Digester, DigestError, DigestType, master_key
from managed_ledger.bookkeeper.protocol import (
    MAX_FRAME_SIZE,
    AddRequest,
    AddResponse,
    Flag,
    ProtocolError,
    ReadRequest,
    ReadResponse,
    RequestDecoder,
    ResponseDecoder,
    StatusCode,
    encode_request,
    encode_response,
)

EMPTY_KEY = bytes.fromhex("850bf1071c5e3d8c24235676f8816ae0cbe2f14f")  # SHA1(b"ledger"), Pulsar's password ""
HELLO_HEADER = "0000000000000001" "0000000000000000" "ffffffffffffffff" "0000000000000005"
HELLO_CRC32C_ENTRY = bytes.fromhex(HELLO_HEADER + "e3a5f74d" + "68656c6c6f")


# ---- digests -----------------------------------------------------------------------------------------------------


def test_master_key_of_the_empty_password() -> None:
    assert master_key(b"") == EMPTY_KEY


@pytest.mark.parametrize(
    ("digest_type", "digest_hex"),
    [
        (DigestType.CRC32C, "e3a5f74d"),  # 4-byte big-endian int
        (DigestType.CRC32, "0000000030a56872"),  # 8-byte big-endian long, upper half zero
        (DigestType.DUMMY, ""),
    ],
)
def test_entry_golden_bytes(digest_type: DigestType, digest_hex: str) -> None:
    entry = Digester(digest_type).package(1, 0, -1, 5, b"hello")
    assert entry == bytes.fromhex(HELLO_HEADER + digest_hex + "68656c6c6f")


def test_hmac_digest_is_keyed_by_the_password() -> None:
    a = Digester(DigestType.HMAC, b"secret").package(1, 0, -1, 5, b"hello")
    b = Digester(DigestType.HMAC, b"other").package(1, 0, -1, 5, b"hello")
    assert len(a) == 32 + 20 + 5 and a != b
    assert Digester(DigestType.HMAC, b"secret").verify(a, 1, 0).payload == b"hello"
    with pytest.raises(DigestError):
        Digester(DigestType.HMAC, b"other").verify(a, 1, 0)


def test_verify_checks_digest_and_ids() -> None:
    d = Digester(DigestType.CRC32C)
    frame = d.verify(HELLO_CRC32C_ENTRY, 1, 0)
    assert (frame.ledger_id, frame.entry_id, frame.last_add_confirmed, frame.length) == (1, 0, -1, 5)
    assert frame.payload == b"hello"
    corrupt = HELLO_CRC32C_ENTRY[:-1] + b"O"
    with pytest.raises(DigestError, match="digest mismatch"):
        d.verify(corrupt, 1, 0)
    with pytest.raises(DigestError, match="ledger 1 where ledger 2"):
        d.verify(HELLO_CRC32C_ENTRY, 2, 0)
    with pytest.raises(DigestError, match="entry 0 where entry 3"):
        d.verify(HELLO_CRC32C_ENTRY, 1, 3)
    assert d.verify(HELLO_CRC32C_ENTRY, 1, None).entry_id == 0  # LAC reads do not know the entry id
    with pytest.raises(DigestError, match="shorter"):
        d.verify(HELLO_CRC32C_ENTRY[:35], 1, 0)


@given(
    st.sampled_from(list(DigestType)),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(-1, 2**63 - 1),
    st.binary(max_size=300),
)
def test_entry_round_trip(digest_type: DigestType, ledger_id: int, entry_id: int, lac: int, payload: bytes) -> None:
    d = Digester(digest_type, b"pw")
    frame = d.verify(d.package(ledger_id, entry_id, lac, len(payload), payload), ledger_id, entry_id)
    assert (frame.last_add_confirmed, frame.length, frame.payload) == (lac, len(payload), payload)


# ---- frames ------------------------------------------------------------------------------------------------------

# v2 ADD of the "hello" entry: u32 length 0x41 = 4 (header) + 20 (master key) + 41 (entry), header 0x02010000.
ADD_FRAME = bytes.fromhex("00000041" "02010000") + EMPTY_KEY + HELLO_CRC32C_ENTRY


def test_add_request_golden() -> None:
    assert encode_request(AddRequest(EMPTY_KEY, HELLO_CRC32C_ENTRY)) == ADD_FRAME
    recovery = encode_request(AddRequest(EMPTY_KEY, HELLO_CRC32C_ENTRY, Flag.RECOVERY_ADD | Flag.HIGH_PRIORITY))
    assert recovery[4:8] == bytes.fromhex("02010006")


def test_read_request_golden() -> None:
    plain = encode_request(ReadRequest(7, 3))
    assert plain == bytes.fromhex("00000014" "02020000" "0000000000000007" "0000000000000003")
    fencing = encode_request(ReadRequest(7, -1, Flag.DO_FENCING, EMPTY_KEY))
    assert fencing == bytes.fromhex("00000028" "02020001" "0000000000000007" "ffffffffffffffff") + EMPTY_KEY
    with pytest.raises(ValueError, match="master key"):
        encode_request(ReadRequest(7, -1, Flag.DO_FENCING))


def test_responses_golden() -> None:
    add = bytes.fromhex("00000018" "02010000" "00000000" "0000000000000001" "0000000000000000")
    assert encode_response(AddResponse(StatusCode.EOK, 1, 0)) == add
    fenced = bytes.fromhex("00000018" "02010000" "00000068" "0000000000000001" "0000000000000004")
    read_missing = bytes.fromhex("00000018" "02020000" "00000002" "0000000000000001" "0000000000000009")
    read_ok = (struct.pack(">I", 24 + len(HELLO_CRC32C_ENTRY)) + bytes.fromhex("02020000" "00000000")
               + bytes.fromhex("0000000000000001" "0000000000000000") + HELLO_CRC32C_ENTRY)
    decoded = ResponseDecoder().feed(add + fenced + read_missing + read_ok)
    assert decoded == [
        AddResponse(StatusCode.EOK, 1, 0),
        AddResponse(StatusCode.EFENCED, 1, 4),
        ReadResponse(StatusCode.ENOENTRY, 1, 9, b""),
        ReadResponse(StatusCode.EOK, 1, 0, HELLO_CRC32C_ENTRY),
    ]


def test_byte_at_a_time() -> None:
    stream = (encode_response(AddResponse(StatusCode.EOK, 5, 6))
              + encode_response(ReadResponse(StatusCode.EOK, 1, 0, HELLO_CRC32C_ENTRY)))
    decoder = ResponseDecoder()
    got = []
    for i in range(len(stream)):
        got += decoder.feed(stream[i : i + 1])
    assert got == [AddResponse(StatusCode.EOK, 5, 6), ReadResponse(StatusCode.EOK, 1, 0, HELLO_CRC32C_ENTRY)]
    assert decoder.buffered == 0
    requests = RequestDecoder()
    got_requests = []
    for b in ADD_FRAME:
        got_requests += requests.feed(bytes([b]))
    assert got_requests == [AddRequest(EMPTY_KEY, HELLO_CRC32C_ENTRY)]
    assert got_requests[0].ledger_id == 1 and got_requests[0].entry_id == 0


def test_whole_add_responses_and_look_alikes_decode_alike() -> None:
    """A read of whole ADD responses only is decoded in one pass; anything else in it (here a READ response, making
    the read 3 x 28 bytes long as two ADD responses and it) takes the general path from the start."""
    adds = [AddResponse(StatusCode.EOK, 7, e) for e in range(3)] + [AddResponse(StatusCode.EFENCED, 7, 3)]
    assert ResponseDecoder().feed(b"".join(encode_response(r) for r in adds)) == adds
    read = ReadResponse(StatusCode.EOK, 7, 0, b"x" * 4)
    assert len(encode_response(read)) == 32
    mixed: list[AddResponse | ReadResponse] = [adds[0], read]
    stream = b"".join(encode_response(r) for r in mixed) + encode_response(adds[1])[:24]
    decoder = ResponseDecoder()
    assert decoder.feed(stream) == mixed and decoder.buffered == 24
    assert decoder.feed(encode_response(adds[1])[24:]) == [adds[1]]


def test_unknown_status_code_is_kept() -> None:
    frame = encode_response(AddResponse(999, 1, 0))
    assert ResponseDecoder().feed(frame) == [AddResponse(999, 1, 0)]


requests = st.one_of(
    st.builds(AddRequest, st.binary(min_size=20, max_size=20), st.binary(min_size=16, max_size=200),
              st.sampled_from([Flag.NONE, Flag.RECOVERY_ADD, Flag.RECOVERY_ADD | Flag.HIGH_PRIORITY])),
    st.builds(ReadRequest, st.integers(0, 2**63 - 1), st.integers(-1, 2**63 - 1), st.just(Flag.NONE)),
    st.builds(ReadRequest, st.integers(0, 2**63 - 1), st.integers(-1, 2**63 - 1),
              st.sampled_from([Flag.DO_FENCING, Flag.DO_FENCING | Flag.HIGH_PRIORITY]),
              st.binary(min_size=20, max_size=20)),
)
responses = st.one_of(
    st.builds(AddResponse, st.sampled_from(list(StatusCode)), st.integers(0, 2**63 - 1), st.integers(-1, 2**63 - 1)),
    st.builds(ReadResponse, st.sampled_from(list(StatusCode)), st.integers(0, 2**63 - 1), st.integers(-1, 2**63 - 1),
              st.binary(max_size=200)),
)


@given(st.lists(requests, max_size=8), st.data())
def test_requests_round_trip_in_any_chunks(items: list[AddRequest | ReadRequest], data: st.DataObject) -> None:
    stream = b"".join(encode_request(r) for r in items)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = RequestDecoder()
    got: list[object] = []
    for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += decoder.feed(stream[a:b])
    assert got == items


@given(st.lists(responses, max_size=8), st.data())
def test_responses_round_trip_in_any_chunks(items: list[AddResponse | ReadResponse], data: st.DataObject) -> None:
    stream = b"".join(encode_response(r) for r in items)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = ResponseDecoder()
    got: list[object] = []
    for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += decoder.feed(stream[a:b])
    assert got == items


# ---- malformed input: the connection is closed by the caller ----------------------------------------------------


def test_oversized_frame_is_refused_before_buffering() -> None:
    decoder = ResponseDecoder()
    with pytest.raises(ProtocolError, match="exceeds"):
        decoder.feed(struct.pack(">I", MAX_FRAME_SIZE + 1))
    with pytest.raises(ValueError, match="exceeds"):
        encode_request(AddRequest(EMPTY_KEY, bytes(MAX_FRAME_SIZE)))


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        (bytes.fromhex("00000002" "0201"), "no packet header"),
        (bytes.fromhex("00000018" "03010000") + bytes(20), "protocol version 3"),
        (bytes.fromhex("00000010" "02010000") + bytes(12), "shorter"),
        (bytes.fromhex("00000019" "02010000") + bytes(21), "ADD response of 25 bytes"),
        (bytes.fromhex("00000018" "02060000") + bytes(20), "unexpected response op 6"),
    ],
)
def test_malformed_responses(frame: bytes, error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        ResponseDecoder().feed(frame)


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        (bytes.fromhex("00000015" "02020000") + bytes(17), "READ request of 21 bytes"),
        (bytes.fromhex("00000014" "02020001") + bytes(16), "READ request of 20 bytes, expected 40"),
        (bytes.fromhex("00000010" "02010000") + bytes(12), "shorter"),
        (bytes.fromhex("00000004" "02040000"), "unsupported request op 4"),
    ],
)
def test_malformed_requests(frame: bytes, error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        RequestDecoder().feed(frame)
