"""The blob-store offloaders against emulators of the stores, S3 (S3Proxy), Azure Blob Storage (Azurite) and Google
Cloud Storage (fake-gcs-server), and against Apache Pulsar's own blob-store offloader
(tests/offload/java/JCloudCheck.java runs tiered-storage-jcloud's BlobStoreManagedLedgerOffloader with its "S3",
"azureblob" or "google-cloud-storage" driver): what ours writes Pulsar's reads, entry for entry, and the other way
round; a copy of several upload parts; aborted copies leave nothing; deleted copies are gone; missing, foreign and
damaged objects are clear errors; the settings as Pulsar reads them."""

from __future__ import annotations

import dataclasses
import random
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest

from managed_ledger.offload import azure, gcs
from managed_ledger.offload.api import OffloadedLedgerError
from managed_ledger.offload.azure import azure_offloader, azure_settings, block_id
from managed_ledger.offload.blobstore import BlobStoreOffloader, OffloadConfigError, data_key, index_key
from managed_ledger.offload.gcs import gcs_offloader, gcs_settings
from managed_ledger.offload.ledger_metadata import OffloadedLedgerMetadata
from managed_ledger.offload.s3 import s3_offloader, s3_settings
from tests.offload.azurite import AzureEndpoint, azurite
from tests.offload.fakegcs import GcsEndpoint, fake_gcs
from tests.offload.java_tool import compiled, run
from tests.offload.s3proxy import REPO_ROOT, s3proxy

JCLOUD_LIB = REPO_ROOT / ".deps" / "jcloud" / "lib"
ML = "public/default/persistent/offloaded"  # (Pulsar's offloader wants a topic's managed ledger name)


class Endpoint(Protocol):
    def create_bucket(self, bucket: str) -> None: ...

    def keys(self, bucket: str) -> list[str]: ...


@dataclass(frozen=True)
class Store:
    """An endpoint and what ours and Pulsar's offloaders are given to use it."""

    kind: str  # "s3", "azure"
    endpoint: Endpoint
    url: str  # (ours: managedLedgerOffloadServiceEndpoint)
    environ: dict[str, str]

    def offloader(self, bucket: str, max_block: int = 5 << 20, url: str | None = None) -> BlobStoreOffloader:
        given = {"managedLedgerOffloadBucket": bucket, "managedLedgerOffloadServiceEndpoint": url or self.url,
                 "managedLedgerOffloadMaxBlockSizeInBytes": max_block,
                 "managedLedgerOffloadReadBufferSizeInBytes": 4096}
        metadata = {"pulsarclustername": "test"}
        if self.kind == "s3":
            return s3_offloader(s3_settings("S3", given, self.environ), metadata)
        if self.kind == "gcs":
            return gcs_offloader(gcs_settings({**given, "gcsManagedLedgerOffloadMaxBlockSizeInBytes": max_block},
                                              self.environ), metadata)
        return azure_offloader(azure_settings(given, self.environ), metadata)

    def keys(self, bucket: str) -> list[str]:
        return self.endpoint.keys(bucket)

    def pulsar(self, check: list[str], *args: str) -> str:
        """JCloudCheck's output (Pulsar's offloader with this store's driver)."""
        endpoint = self.endpoint
        if isinstance(endpoint, AzureEndpoint):  # (a SAS, the account's host name: tests/offload/azurite.py)
            command = [check[0], *endpoint.jvm_options, *check[1:]]
            return run([*command, args[0], endpoint.production_url, *args[1:]],
                       {**endpoint.environ, "JCLOUD_DRIVER": "azureblob", "AZURE_STORAGE_ACCESS_KEY": endpoint.sas()})
        if isinstance(endpoint, GcsEndpoint):  # (a bearer token: tests/offload/fakegcs.py)
            command = [check[0], *endpoint.jvm_options, *check[1:]]
            return run([*command, args[0], self.url, *args[1:]],
                       {"JCLOUD_DRIVER": "google-cloud-storage", "GCS_KEY_FILE": str(endpoint.key_file)})
        return run([*check, args[0], self.url, *args[1:]], {"JCLOUD_DRIVER": "S3", **self.environ})


@pytest.fixture(scope="module", params=["s3", "azure", "gcs"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    where = tmp_path_factory.mktemp(request.param)
    if request.param == "s3":
        with s3proxy(where) as s3:
            yield Store("s3", s3, s3.url, s3.environ)
    elif request.param == "azure":
        with azurite(where) as azure:
            yield Store("azure", azure, azure.url, azure.environ)
    else:
        with fake_gcs(where) as gcs:
            yield Store("gcs", gcs, gcs.url, gcs.environ)


@pytest.fixture(scope="module")
def pulsar_check(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return compiled("JCloudCheck", JCLOUD_LIB, "tiered-storage-jcloud-*.jar", tmp_path_factory.mktemp("jcloud-check"),
                    "make offload-deps")


@pytest.fixture
def bucket(store: Store) -> str:
    name = f"b-{uuid.uuid4().hex[:12]}"
    store.endpoint.create_bucket(name)
    return name


def ledger(count: int, seed: int) -> list[bytes]:
    """Entries of mixed sizes (some empty, some of a few KiB)."""
    rng = random.Random(seed)
    return [rng.randbytes(rng.choice((0, 1, 50, 700, 3000))) for _ in range(count)]


def metadata_of(entries: list[bytes]) -> OffloadedLedgerMetadata:
    return OffloadedLedgerMetadata.of_managed_ledger(ML, len(entries) - 1, sum(map(len, entries)),
                                                     1_700_000_000_000)


def offload(off: BlobStoreOffloader, ledger_id: int, copy: uuid.UUID, entries: list[bytes]) -> None:
    writer = off.begin(ML, ledger_id, copy, metadata_of(entries))
    try:
        for start in range(0, len(entries), 17):  # (in runs, as the managed ledger gives them)
            writer.append(entries[start:start + 17])
        writer.finish()
    except BaseException:
        writer.abort()
        raise


def pulsar_reads(check: list[str], store: Store, bucket: str, ledger_id: int,
                 copy: uuid.UUID) -> tuple[str, list[tuple[int, bytes]]]:
    lines = store.pulsar(check, "read", bucket, str(ledger_id), str(copy), ML).splitlines()
    read = []
    for line in lines[1:]:
        entry_id, _, data = line.partition(" ")
        read.append((int(entry_id), bytes.fromhex(data)))
    return lines[0], read


# -- ours and Pulsar's ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("max_block", [5 << 20, 8192], ids=["one block", "many blocks"])
def test_pulsar_reads_what_ours_offloaded(store: Store, bucket: str, pulsar_check: list[str], max_block: int) -> None:
    entries = ledger(120, seed=max_block)
    copy = uuid.uuid4()
    offload(store.offloader(bucket, max_block), 11, copy, entries)
    assert store.keys(bucket) == sorted([data_key(11, copy), index_key(11, copy)])
    header, read = pulsar_reads(pulsar_check, store, bucket, 11, copy)
    assert header == f"metadata 119 {sum(map(len, entries))} 1700000000000 1 application,component," \
                     "pulsar/managed-ledger"
    # every entry in runs of 7, then the second half again (a seek by the index)
    assert read == list(enumerate(entries)) + [(i, entries[i]) for i in range(59, 120)]


def test_ours_reads_what_pulsar_offloaded(store: Store, bucket: str, pulsar_check: list[str],
                                          tmp_path: Path) -> None:
    rng = random.Random(7)
    # ~12 MiB: three of Pulsar's blocks of 5 MiB (each block is one part of its upload, and S3 takes no part under
    # 5 MiB but the last: with smaller blocks Pulsar's copy fails with EntityTooSmall)
    entries = [rng.randbytes(rng.choice((0, 1, 700, 150_000, 300_000))) for _ in range(150)]
    given = tmp_path / "entries"
    given.write_bytes(b"".join(struct.pack(">i", len(e)) + e for e in entries))
    copy = uuid.uuid4()
    out = store.pulsar(pulsar_check, "write", bucket, "12", str(copy), ML, str(5 << 20), str(given))
    assert out.strip() == "offloaded 150"
    ours = store.offloader(bucket).open(ML, 12, copy, {"bucket": bucket})
    try:
        assert ours.metadata.last_entry_id == 149 and ours.metadata.length == sum(map(len, entries))
        assert dict(ours.metadata.custom_metadata)["component"] == b"managed-ledger"
        assert len(ours._index.blocks) >= 3
        assert ours.read(0, 149) == entries
        assert ours.read(77, 80) == entries[77:81]  # (by the index, from a block's start)
        assert ours.read(81, 149) == entries[81:]  # (on from where the last read ended)
        assert ours.read(3, 3) == [entries[3]]
    finally:
        ours.close()


# -- ours alone ----------------------------------------------------------------------------------------------------

def test_an_aborted_copy_leaves_nothing(store: Store, bucket: str) -> None:
    off = store.offloader(bucket)
    entries = ledger(30, seed=3)
    writer = off.begin(ML, 13, uuid.uuid4(), metadata_of(entries))
    writer.append(entries[:10])
    writer.abort()
    assert store.keys(bucket) == []
    # one entry short: refused at finish, and nothing is left once aborted
    writer = off.begin(ML, 13, uuid.uuid4(), metadata_of(entries))
    writer.append(entries[:29])
    with pytest.raises(OffloadedLedgerError, match="29 entries read of 30"):
        writer.finish()
    writer.abort()
    assert store.keys(bucket) == []


def test_an_entry_larger_than_a_block_is_refused(store: Store, bucket: str) -> None:
    """(Pulsar's offloader ends the data object before such an entry and completes the copy without the rest.)"""
    off = store.offloader(bucket, max_block=2048)
    entries = [b"x" * 100, b"y" * 3000, b"z"]
    writer = off.begin(ML, 14, uuid.uuid4(), metadata_of(entries))
    with pytest.raises(OffloadedLedgerError, match=r"entry 1 \(3012 bytes with its header\) does not fit in a block of "
                                                   r"2048 bytes"):
        writer.append(entries)
    writer.abort()
    assert store.keys(bucket) == []


def test_deleted_and_missing_copies(store: Store, bucket: str) -> None:
    off = store.offloader(bucket)
    copy = uuid.uuid4()
    offload(off, 15, copy, ledger(5, seed=1))
    off.delete(ML, 15, copy, off.driver_metadata())
    assert store.keys(bucket) == []
    off.delete(ML, 15, copy, off.driver_metadata())  # (nothing there: no error)
    with pytest.raises(OffloadedLedgerError, match=f"ledger 15: no offloaded copy .{index_key(15, copy)} not in "
                                                   f"bucket {bucket}"):
        off.open(ML, 15, copy, {})


def test_the_copy_is_read_from_the_bucket_its_context_names(store: Store, bucket: str) -> None:
    entries = ledger(8, seed=2)
    copy = uuid.uuid4()
    offload(store.offloader(bucket), 16, copy, entries)
    other = f"b-{uuid.uuid4().hex[:12]}"
    now = store.offloader(other)  # (the broker's bucket changed since)
    copy_read = now.open(ML, 16, copy, {"bucket": bucket})
    assert copy_read.read(0, 7) == entries
    copy_read.close()
    now.delete(ML, 16, copy, {"bucket": bucket})
    assert store.keys(bucket) == []


def test_objects_of_another_format_version_are_refused(store: Store, bucket: str) -> None:
    off = store.offloader(bucket)
    copy = uuid.uuid4()
    offload(off, 17, copy, ledger(3, seed=4))
    raw, metadata = off.store.get(bucket, index_key(17, copy))
    off.store.put(bucket, index_key(17, copy), raw, {**metadata, "s3managedledgeroffloaderformatversion": "2"})
    with pytest.raises(OffloadedLedgerError, match=r"invalid object version 2 for .*-index, expect 1"):
        off.open(ML, 17, copy, {})
    off.store.put(bucket, index_key(17, copy), b"\xde\x47\xde\x47 not an index",
                  {"s3managedledgeroffloaderformatversion": "1"})
    with pytest.raises(OffloadedLedgerError, match=r"too short|damaged"):
        off.open(ML, 17, copy, {})


def test_reads_outside_the_ledger_are_refused(store: Store, bucket: str) -> None:
    off = store.offloader(bucket)
    copy = uuid.uuid4()
    offload(off, 18, copy, ledger(4, seed=5))
    opened = off.open(ML, 18, copy, {})
    for first, last in ((0, 4), (-1, 2), (3, 2)):
        with pytest.raises(OffloadedLedgerError, match=f"entries {first}..{last} are not in 0..3"):
            opened.read(first, last)
    opened.close()


def test_an_unreachable_endpoint_is_an_error_of_the_store(bucket: str, store: Store,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # (Retried briefly, not for Azure's three tries after 1, 3 and 5 s or GCS's 10 s: the same error, sooner.)
    monkeypatch.setattr(azure, "RETRIES", 1)
    monkeypatch.setattr(gcs, "RETRY_S", 1.0)
    dead = store.url.replace(store.url.split("/")[2], "127.0.0.1:1")
    off = store.offloader(bucket, url=dead)
    with pytest.raises(OSError, match=r"(S3 multipart upload start|Azure block upload|GCS upload) of "
                                      r".*/.*-ledger-19"):
        offload(off, 19, uuid.uuid4(), [b"a"])


def test_a_scan_lists_every_object_with_its_metadata(store: Store, bucket: str) -> None:
    """(Pulsar's scanLedgers; for S3, whose listing has no user metadata, each object's is read: Pulsar's has none.)"""
    off = store.offloader(bucket)
    copy = uuid.uuid4()
    offload(off, 22, copy, ledger(5, seed=3))
    off.store.put(bucket, "notes.txt", b"not a copy", {})
    found = {o.name: o for o in off.scan()}
    assert set(found) == {data_key(22, copy), index_key(22, copy), "notes.txt"}
    data, index = found[data_key(22, copy)], found[index_key(22, copy)]
    assert (data.ledger_id, data.uuid, data.bucket, index.ledger_id, index.uuid) == (22, str(copy), bucket, 22,
                                                                                    str(copy))
    assert {k: data.user_metadata[k] for k in ("managedledgername", "pulsarclustername", "role")} == {
        "managedledgername": ML, "pulsarclustername": "test", "role": "data"}
    assert data.size > index.size > 0 and data.last_modified_ms > 0 and data.uri.endswith(f"/{data.name}")
    assert (found["notes.txt"].ledger_id, found["notes.txt"].uuid) == (None, None)


# -- settings ------------------------------------------------------------------------------------------------------

ENV = {"ACCESS_KEY_ID": "id", "ACCESS_KEY_SECRET": "secret"}


def test_settings_as_pulsar_reads_them() -> None:
    aws = s3_settings("AWS-S3", {"s3ManagedLedgerOffloadBucket": "s3b", "managedLedgerOffloadBucket": "generic",
                                 "s3ManagedLedgerOffloadRegion": "eu-west-1",
                                 "s3ManagedLedgerOffloadMaxBlockSizeInBytes": 64 << 20,
                                 "managedLedgerOffloadMaxBlockSizeInBytes": 8 << 20}, {})
    assert (aws.driver, aws.provider, aws.bucket, aws.region, aws.max_block_size) == ("aws-s3", "AWS_S3", "s3b",
                                                                                      "eu-west-1", 64 << 20)
    assert (aws.access_key, aws.endpoint, aws.virtual_host) == ("", "", True)  # (boto3's chain; AWS's addressing)
    # the generic keys when the s3 ones are not set
    assert s3_settings("aws-s3", {"managedLedgerOffloadBucket": "g", "managedLedgerOffloadServiceEndpoint": "http://x",
                                  "s3ManagedLedgerOffloadCredentialId": "i",
                                  "s3ManagedLedgerOffloadCredentialSecret": "s"}, {}).bucket == "g"
    # S3: only the generic keys; credentials from the environment
    s3 = s3_settings("s3", {"s3ManagedLedgerOffloadBucket": "ignored", "managedLedgerOffloadBucket": "b",
                            "managedLedgerOffloadServiceEndpoint": "http://x"}, ENV)
    assert (s3.driver, s3.provider, s3.bucket, s3.access_key, s3.virtual_host) == ("S3", "S3", "b", "id", False)
    oss = s3_settings("aliyun-oss", {"managedLedgerOffloadBucket": "b", "managedLedgerOffloadServiceEndpoint": "x"},
                      {"ALIYUN_OSS_ACCESS_KEY_ID": "a", "ALIYUN_OSS_ACCESS_KEY_SECRET": "b"})
    assert (oss.provider, oss.access_key, oss.virtual_host) == ("ALIYUN_OSS", "a", True)


@pytest.mark.parametrize(("driver", "given", "environ", "words"), [
    ("aws-s3", {"s3ManagedLedgerOffloadBucket": "b"}, {},
     "Either Region or ServiceEndpoint must specified for aws-s3 offload"),
    ("aws-s3", {"s3ManagedLedgerOffloadRegion": "r"}, {}, "Bucket cannot be empty for aws-s3 offload"),
    ("S3", {"managedLedgerOffloadBucket": "b"}, ENV, "ServiceEndpoint must specified for S3 offload"),
    ("S3", {"s3ManagedLedgerOffloadServiceEndpoint": "http://x", "managedLedgerOffloadServiceEndpoint": "http://x"},
     ENV, "Bucket cannot be empty for S3 offload"),
    ("S3", {"managedLedgerOffloadBucket": "b", "managedLedgerOffloadServiceEndpoint": "http://x"}, {},
     "Couldn't get the access key id."),
    ("S3", {"managedLedgerOffloadBucket": "b", "managedLedgerOffloadServiceEndpoint": "http://x"},
     {"ACCESS_KEY_ID": "i"}, "Couldn't get the access key secret."),
    ("aws-s3", {"s3ManagedLedgerOffloadBucket": "b", "s3ManagedLedgerOffloadRegion": "r",
                "s3ManagedLedgerOffloadMaxBlockSizeInBytes": 1000}, {}, "cannot be less than 1024 bytes"),
    ("aws-s3", {"s3ManagedLedgerOffloadBucket": "b", "s3ManagedLedgerOffloadRegion": "r",
                "s3ManagedLedgerOffloadRole": "arn:aws:iam::1:role/x"}, {},
     r"s3ManagedLedgerOffloadRole .* not supported"),
    ("google-cloud-storage", {}, {}, "not an S3 driver"),
])
def test_settings_pulsar_refuses(driver: str, given: dict[str, object], environ: dict[str, str], words: str) -> None:
    with pytest.raises(OffloadConfigError, match=words):
        s3_settings(driver, given, environ)


AZURE_ENV = {"AZURE_STORAGE_ACCOUNT": "acct", "AZURE_STORAGE_ACCESS_KEY": "a2V5"}


def test_azure_settings_as_pulsar_reads_them() -> None:
    """The generic keys only (Pulsar has no azure-specific ones); the account's endpoint unless one is given; the
    access key may be a shared access signature."""
    given = {"managedLedgerOffloadBucket": "c", "s3ManagedLedgerOffloadBucket": "ignored",
             "managedLedgerOffloadRegion": "westeurope", "managedLedgerOffloadMaxBlockSizeInBytes": 8 << 20}
    azure = azure_settings(given, AZURE_ENV)
    assert (azure.container, azure.region, azure.max_block_size, azure.read_buffer_size) == ("c", "westeurope",
                                                                                            8 << 20, 1 << 20)
    assert (azure.account_url, azure.is_sas) == ("https://acct.blob.core.windows.net", False)
    private = azure_settings({**given, "managedLedgerOffloadServiceEndpoint": "https://x.example/acct"},
                             {**AZURE_ENV, "AZURE_STORAGE_ACCESS_KEY": "?sv=2024-08-04&ss=b&sig=abc%3D"})
    assert (private.account_url, private.is_sas) == ("https://x.example/acct", True)
    assert [block_id(n) for n in (1, 2, 256)] == ["AAAAAQ==", "AAAAAg==", "AAABAA=="]  # (jclouds' block ids)


@pytest.mark.parametrize(("given", "environ", "words"), [
    ({}, AZURE_ENV, "Bucket cannot be empty for azureblob offload"),
    ({"managedLedgerOffloadBucket": "c"}, {}, r"Couldn't get the azure storage account\."),
    ({"managedLedgerOffloadBucket": "c"}, {"AZURE_STORAGE_ACCOUNT": "a"}, r"Couldn't get the azure storage access key"),
    ({"managedLedgerOffloadBucket": "c", "managedLedgerOffloadMaxBlockSizeInBytes": 100}, AZURE_ENV,
     "cannot be less than 1024 bytes"),
])
def test_azure_settings_pulsar_refuses(given: dict[str, object], environ: dict[str, str], words: str) -> None:
    with pytest.raises(OffloadConfigError, match=words):
        azure_settings(given, environ)


GCS_ENV = {"STORAGE_EMULATOR_HOST": "http://127.0.0.1:1"}


def test_gcs_settings_as_pulsar_reads_them(tmp_path: Path) -> None:
    """The gcs keys before the generic ones; 128 MiB blocks by default; the service account's key file."""
    key = tmp_path / "key.json"
    key.write_text("{}")
    gcs = gcs_settings({"gcsManagedLedgerOffloadBucket": "g", "managedLedgerOffloadBucket": "generic",
                        "managedLedgerOffloadRegion": "europe-west1",
                        "managedLedgerOffloadMaxBlockSizeInBytes": 8 << 20,
                        "gcsManagedLedgerOffloadServiceAccountKeyFile": str(key)}, {})
    assert (gcs.bucket, gcs.region, gcs.max_block_size, gcs.key_file) == ("g", "europe-west1", 8 << 20, str(key))
    # (the broker's configuration always has the gcs block size, 128 MiB by default, as Pulsar's offload policies)
    assert gcs_settings({"managedLedgerOffloadBucket": "b", "managedLedgerOffloadMaxBlockSizeInBytes": 8 << 20,
                         "gcsManagedLedgerOffloadMaxBlockSizeInBytes": 128 << 20}, GCS_ENV).max_block_size == 128 << 20
    emulated = gcs_settings({"managedLedgerOffloadBucket": "b"}, GCS_ENV)
    assert (emulated.bucket, emulated.key_file, emulated.endpoint) == ("b", "", "")


@pytest.mark.parametrize(("given", "environ", "words"), [
    ({}, GCS_ENV, "Bucket cannot be empty for google-cloud-storage offload"),
    ({"gcsManagedLedgerOffloadBucket": "b"}, {}, "Cannot read GCS service account credentials file: "
                                                 "gcsManagedLedgerOffloadServiceAccountKeyFile is not set"),
    ({"gcsManagedLedgerOffloadBucket": "b", "gcsManagedLedgerOffloadServiceAccountKeyFile": "/nonexistent/key.json"},
     GCS_ENV, r"Cannot read GCS service account credentials file: /nonexistent/key.json \(No such file"),
])
def test_gcs_settings_pulsar_refuses(given: dict[str, object], environ: dict[str, str], words: str) -> None:
    with pytest.raises(OffloadConfigError, match=words):
        gcs_settings(given, environ)


def test_a_copy_of_several_upload_parts(store: Store, bucket: str) -> None:
    """~11 MiB in parts of 5 MiB (S3's smallest; a multiple of GCS's 256 KiB): each store puts them together."""
    rng = random.Random(9)
    entries = [rng.randbytes(rng.choice((10, 90_000, 200_000))) for _ in range(110)]
    off = dataclasses.replace(store.offloader(bucket, max_block=1 << 20), part_size=5 << 20)
    copy = uuid.uuid4()
    offload(off, 21, copy, entries)
    assert store.keys(bucket) == sorted([data_key(21, copy), index_key(21, copy)])
    opened = off.open(ML, 21, copy, {})
    try:
        assert opened._index.data_length > 10 << 20
        assert opened.read(0, 109) == entries
    finally:
        opened.close()


def test_reading_on_across_blocks(store: Store, bucket: str) -> None:
    """Reads that go on from where the last one ended, whichever block boundary that was (in runs of every length, so
    some end on a block's last entry, before its padding or the next block's header)."""
    entries = ledger(200, seed=11)
    copy = uuid.uuid4()
    off = store.offloader(bucket, max_block=8192)
    offload(off, 20, copy, entries)
    opened = off.open(ML, 20, copy, {})
    try:
        blocks = opened._index.blocks
        assert len(blocks) > 10
        for run in range(1, 9):
            got: list[bytes] = []
            for first in range(0, 200, run):
                got.extend(opened.read(first, min(first + run, 200) - 1))
            assert got == entries, run
        # each block's first entry right after its previous block's last
        for block in blocks[1:]:
            first = block.first_entry_id
            assert opened.read(first - 1, first - 1) == [entries[first - 1]]
            assert opened.read(first, first) == [entries[first]]
    finally:
        opened.close()
