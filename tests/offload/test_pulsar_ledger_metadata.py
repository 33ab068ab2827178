"""The ledger metadata an offloaded copy carries under key -1, against Apache Pulsar's own code (OffloadUtils of
managed-ledger 4.0.7, tests/offload/java/LedgerMetadataCheck.java): Pulsar reads what ours writes, ours reads what
Pulsar writes, and writes it back byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.apache_pulsar import REPO_ROOT
from managed_ledger.bookkeeper import metadata as bk
from managed_ledger.bookkeeper.digest import DigestType
from managed_ledger.offload.ledger_metadata import FILE_LEDGER_BOOKIE, OffloadedLedgerMetadata
from tests.offload.java_tool import compiled, run

pytestmark = pytest.mark.apache_pulsar

PULSAR_LIB = REPO_ROOT / ".deps" / "pulsar" / "lib"
ML = "public/default/persistent/x"


@pytest.fixture(scope="module")
def pulsar_check(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return compiled("LedgerMetadataCheck", PULSAR_LIB, "managed-ledger-*.jar",
                    tmp_path_factory.mktemp("ledger-metadata-check"), "make pulsar-deps")


def test_pulsar_reads_ours(pulsar_check: list[str], tmp_path: Path) -> None:
    path = tmp_path / "ours"
    path.write_bytes(OffloadedLedgerMetadata.of_managed_ledger(ML, 41, 4242, 1_700_000_000_123).serialize())
    assert run([*pulsar_check, "parse", "9", str(path)]).splitlines() == [
        "id 9", "closed true", "lastEntryId 41", "length 4242", "ensembleSize 1", "writeQuorumSize 1",
        "ackQuorumSize 1", "ctime 1700000000123", "digestType CRC32C", f"ensemble 0 [{FILE_LEDGER_BOOKIE}]",
        "custom application pulsar", "custom component managed-ledger", f"custom pulsar/managed-ledger {ML}"]


def test_ours_reads_pulsars(pulsar_check: list[str], tmp_path: Path) -> None:
    path = tmp_path / "pulsars"
    run([*pulsar_check, "build", str(path)])
    data = path.read_bytes()
    metadata = OffloadedLedgerMetadata.parse(data)
    assert (metadata.last_entry_id, metadata.length, metadata.ctime) == (41, 4242, 1_700_000_000_123)
    assert (metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum) == (3, 2, 2)
    assert metadata.digest_type is DigestType.CRC32C
    assert metadata.segments == ((0, ("10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181")),
                                 (20, ("10.0.0.1:3181", "10.0.0.4:3181", "10.0.0.3:3181")))
    assert dict(metadata.custom_metadata) == {"application": b"pulsar", "component": b"managed-ledger",
                                              "pulsar/managed-ledger": ML.encode()}
    assert metadata.serialize() == data


@pytest.mark.parametrize("stored_ctime", [1_700_000_000_123, None], ids=["ctime stored", "the znode's ctime"])
def test_a_bookkeeper_ledgers_metadata_as_pulsars_offloader_copies_it(pulsar_check: list[str], tmp_path: Path,
                                                                      stored_ctime: int | None) -> None:
    """A ledger offloaded from BookKeeper storage carries its own metadata: for the same znode, ours writes the bytes
    Pulsar's offloader writes (BookKeeper's parse, then OffloadUtils.buildLedgerMetadataFormat): the password left
    out, the custom metadata in the order of BookKeeper's Java HashMap, the znode's ctime where none is stored."""
    znode_ctime = 1_700_000_555_000
    # (stored in an order other than the HashMap's: BookKeeper's parse puts them in its order)
    custom = (("application", b"pulsar"), ("component", b"managed-ledger"), ("pulsar/managed-ledger", ML.encode()),
              ("pulsar/storage", b"x" * 3))
    metadata = bk.LedgerMetadata(
        3, 2, 2, (bk.Segment(0, ("10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181")),
                  bk.Segment(20, ("10.0.0.1:3181", "10.0.0.4:3181", "10.0.0.3:3181"))),
        state=bk.LedgerState.CLOSED, last_entry_id=41, length=4242, digest_type=DigestType.CRC32C,
        password=b"secret", custom_metadata=custom, ctime=stored_ctime)
    znode = tmp_path / "znode"
    znode.write_bytes(bk.serialize(metadata))
    out = tmp_path / "pulsars"
    run([*pulsar_check, "frombk", "9", str(znode_ctime), str(znode), str(out)])
    ours = OffloadedLedgerMetadata.of_bookkeeper(bk.parse(znode.read_bytes(), znode_ctime))
    assert ours.serialize() == out.read_bytes()
    assert ours.ctime == (stored_ctime or znode_ctime)
