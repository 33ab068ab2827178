"""Ledger metadata in BookKeeper's own format, and the znode layout: golden bytes, round trips, paths."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from managed_ledger.bookkeeper.digest import DigestType
from managed_ledger.bookkeeper.metadata import (
    LedgerMetadata,
    LedgerState,
    MetadataFormatError,
    Segment,
    ledger_id_from_path,
    ledger_path,
    parse,
    sequential_suffix,
    serialize,
)

OPEN_3_2_2 = LedgerMetadata(3, 2, 2, (Segment(0, ("b1:1", "b2:1", "b3:1")),))

# Written out by hand from DataFormats.proto's field numbers (not from our generated module).
OPEN_3_2_2_BYTES = (
    b"BookieMetadataFormatVersion\t3\n"
    + bytes([49])  # varint length of the message
    + bytes.fromhex("0802")  # 1 quorumSize = 2
    + bytes.fromhex("1003")  # 2 ensembleSize = 3
    + bytes.fromhex("1800")  # 3 length = 0
    + bytes.fromhex("20ffffffffffffffffff01")  # 4 lastEntryId = -1
    + bytes.fromhex("2801")  # 5 state = OPEN
    + bytes.fromhex("3214") + b"\x0a\x04b1:1\x0a\x04b2:1\x0a\x04b3:1" + bytes.fromhex("1000")  # 6 segment
    + bytes.fromhex("3803")  # 7 digestType = CRC32C
    + bytes.fromhex("4200")  # 8 password = "" (present, empty)
    + bytes.fromhex("4802")  # 9 ackQuorumSize = 2
    + bytes.fromhex("6000")  # 12 cToken = 0
)


def test_golden_open_ledger() -> None:
    assert serialize(OPEN_3_2_2) == OPEN_3_2_2_BYTES
    assert parse(OPEN_3_2_2_BYTES) == OPEN_3_2_2


def test_closed_ledger_with_custom_metadata() -> None:
    md = OPEN_3_2_2.closed(41, 4200)
    md = LedgerMetadata(3, 2, 2, md.segments, LedgerState.CLOSED, 41, 4200,
                        custom_metadata=(("application", b"pulsar"), ("component", b"managed-ledger")))
    data = serialize(md)
    assert b"\x5a\x15\x0a\x0bapplication\x12\x06pulsar" in data  # 11 customMetadata {1 key, 2 value}
    back = parse(data)
    assert back == md and back.is_closed and back.last_entry_id == 41 and back.length == 4200


def test_non_closed_ledgers_report_no_last_entry() -> None:
    md = parse(serialize(OPEN_3_2_2.with_state(LedgerState.IN_RECOVERY)))
    assert md.state == LedgerState.IN_RECOVERY and md.last_entry_id == -1 and md.length == 0


def test_version_2_text_format_and_defaults() -> None:
    text = (b"BookieMetadataFormatVersion\t2\n"
            b'quorumSize: 2\nensembleSize: 2\nlength: 10\nlastEntryId: 1\nstate: CLOSED\n'
            b'segment {\n  ensembleMember: "a:1"\n  ensembleMember: "b:1"\n  firstEntryId: 0\n}\n')
    md = parse(text, znode_ctime=1234)
    assert (md.write_quorum, md.ack_quorum, md.last_entry_id, md.length) == (2, 2, 1, 10)  # Qa defaults to Qw
    assert md.digest_type == DigestType.CRC32 and md.format_version == 2
    assert md.ctime is None and md.creation_time == 1234 and b"\x50" not in serialize(md)  # 10 ctime not stored


@pytest.mark.parametrize(
    "data",
    [b"garbage", b"BookieMetadataFormatVersion\tx\n", b"BookieMetadataFormatVersion\t1\nabc",
     b"BookieMetadataFormatVersion\t3\n\x05\x08", b"BookieMetadataFormatVersion\t3\n\x02\xff\xff"],
)
def test_bad_metadata(data: bytes) -> None:
    with pytest.raises(MetadataFormatError):
        parse(data)


def test_invariants() -> None:
    with pytest.raises(ValueError, match="E >= Qw >= Qa"):
        LedgerMetadata(2, 3, 2, (Segment(0, ("a", "b")),))
    with pytest.raises(ValueError, match="2 bookies, expected 3"):
        LedgerMetadata(3, 2, 2, (Segment(0, ("a", "b")),))


def test_write_sets_and_segments() -> None:
    md = LedgerMetadata(4, 3, 2, (Segment(0, ("B1", "B2", "B3", "B4")),))
    # BookKeeper's protocol doc example: e0 -> B1,B2,B3; e1 -> B2,B3,B4; e2 -> B3,B4,B1.
    assert [md.write_set(e) for e in range(3)] == [["B1", "B2", "B3"], ["B2", "B3", "B4"], ["B3", "B4", "B1"]]
    changed = md.with_ensemble_from(10, ("B1", "B5", "B3", "B4"))
    assert changed.ensemble_at(9) == ("B1", "B2", "B3", "B4")
    assert changed.write_set(10) == ["B3", "B4", "B1"]  # absolute entry id, not relative to the segment
    assert changed.write_set(13) == ["B5", "B3", "B4"]
    again = changed.with_ensemble_from(10, ("B6", "B5", "B3", "B4"))  # replaces the segment starting there
    assert [s.first_entry_id for s in again.segments] == [0, 10]


@pytest.mark.parametrize(
    ("ledger_id", "path"),
    [
        (0, "/ledgers/00/0000/L0000"),
        (12345, "/ledgers/00/0001/L2345"),
        (2**31 - 2, "/ledgers/21/4748/L3646"),
        (2**31 - 1, "/ledgers/000/0000/0021/4748/L3647"),  # Integer.MAX_VALUE itself takes the long form
        (2**32, "/ledgers/000/0000/0042/9496/L7296"),
    ],
)
def test_ledger_paths(ledger_id: int, path: str) -> None:
    assert ledger_path(ledger_id) == path
    assert ledger_id_from_path(path) == ledger_id


@given(st.integers(0, 2**63 - 1))
def test_ledger_path_round_trip(ledger_id: int) -> None:
    assert ledger_id_from_path(ledger_path(ledger_id)) == ledger_id


def test_sequential_suffix() -> None:
    assert sequential_suffix("/ledgers/idgen/ID-0000000042") == 42
    assert sequential_suffix("HOB-0000000001", "HOB-") == 1
    with pytest.raises(ValueError):
        sequential_suffix("ID-x")


segments = st.lists(st.text("abc:0123456789", min_size=1, max_size=12), min_size=3, max_size=3, unique=True)


@given(segments, st.sampled_from(list(LedgerState)), st.integers(-1, 2**40), st.integers(0, 2**40),
       st.sampled_from(list(DigestType)), st.binary(max_size=8),
       st.lists(st.tuples(st.text(max_size=10), st.binary(max_size=10)), max_size=3),
       st.one_of(st.none(), st.integers(0, 2**41)))
def test_metadata_round_trip(ensemble: list[str], state: LedgerState, last: int, length: int, digest: DigestType,
                             password: bytes, custom: list[tuple[str, bytes]], ctime: int | None) -> None:
    closed = state == LedgerState.CLOSED
    md = LedgerMetadata(3, 2, 1, (Segment(0, tuple(ensemble)),), state, last if closed else -1,
                        length if closed else 0, digest, password, tuple(custom), ctime, 7)
    assert parse(serialize(md)) == md
