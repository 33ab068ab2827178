"""The offloader the broker's configuration names (broker.service.offload.offloader_of): Pulsar's keys and its
Hadoop profile, and the settings refused at start with the reason."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.service.offload import OffloadTiers, offloader_of
from broker.version import __version__
from managed_ledger.offload.blobstore import BlobStoreOffloader
from managed_ledger.offload.filesystem import FileSystemOffloader
from managed_ledger.offload.mapfile import Compression

PROFILE = """<?xml version="1.0"?>
<configuration>
  <property><name>hadoop.tmp.dir</name><value>{base}</value></property>
  <property><name>io.seqfile.compression.type</name><value>{kind}</value></property>
  <property><name>io.seqfile.compress.blocksize</name><value>500000</value></property>
  <property><name>io.map.index.interval</name><value>64</value></property>
</configuration>
"""


def test_none_without_a_driver(tmp_path: Path) -> None:
    assert offloader_of(BrokerConfig(), tmp_path) is None


def test_defaults_without_a_profile(tmp_path: Path) -> None:
    offloader = offloader_of(BrokerConfig(managedLedgerOffloadDriver="filesystem"), tmp_path)
    assert isinstance(offloader, FileSystemOffloader)
    assert (offloader.base, offloader.compression) == (tmp_path / "offloaded", Compression.BLOCK)
    assert offloader.driver_metadata() == {"storageBasePath": str(tmp_path / "offloaded")}


def test_pulsars_hadoop_profile(tmp_path: Path) -> None:
    profile = tmp_path / "core-site.xml"
    profile.write_text(PROFILE.format(base=tmp_path / "tier", kind="RECORD"))
    offloader = offloader_of(BrokerConfig(managedLedgerOffloadDriver="filesystem", fileSystemURI="file:///",
                                          fileSystemProfilePath=str(profile)), None)
    assert isinstance(offloader, FileSystemOffloader)
    assert (offloader.base, offloader.compression, offloader.block_size, offloader.index_interval) == (
        tmp_path / "tier", Compression.RECORD, 500_000, 64)


@pytest.mark.parametrize(("settings", "reason"), [
    ({"fileSystemURI": "hdfs://namenode:9000"}, "only local files"),
    ({"managedLedgerStorage": "memory"}, "needs managedLedgerStorage=file"),
    ({"fileSystemProfilePath": "/nonexistent/core-site.xml"}, "fileSystemProfilePath=/nonexistent"),
])
def test_refused_with_the_reason(tmp_path: Path, settings: dict[str, Any], reason: str) -> None:
    config = dataclasses.replace(BrokerConfig(managedLedgerOffloadDriver="filesystem"), **settings)
    with pytest.raises(ValueError, match=reason):
        offloader_of(config, tmp_path)


@pytest.mark.parametrize("profile", ["<configuration><property>", PROFILE.format(base="/x", kind="SNAPPY")])
def test_a_bad_profile_is_refused(tmp_path: Path, profile: str) -> None:
    path = tmp_path / "core-site.xml"
    path.write_text(profile)
    with pytest.raises(ValueError, match="fileSystemProfilePath"):
        offloader_of(BrokerConfig(managedLedgerOffloadDriver="filesystem", fileSystemProfilePath=str(path)), tmp_path)


def test_an_s3_driver_from_pulsars_keys() -> None:
    config = BrokerConfig(managedLedgerOffloadDriver="AWS-S3", s3ManagedLedgerOffloadBucket="bucket",
                          s3ManagedLedgerOffloadRegion="eu-west-1", clusterName="east",
                          s3ManagedLedgerOffloadMaxBlockSizeInBytes=8 << 20,
                          s3ManagedLedgerOffloadCredentialId="id", s3ManagedLedgerOffloadCredentialSecret="secret")
    offloader = offloader_of(config, None)
    assert isinstance(offloader, BlobStoreOffloader)
    assert (offloader.driver_name, offloader.max_block_size, offloader.read_buffer_size) == ("aws-s3", 8 << 20,
                                                                                           1 << 20)
    # what each ledger's OffloadContext records (Pulsar's getOffloadDriverMetadata)
    assert offloader.driver_metadata() == {"managedLedgerOffloadDriver": "AWS_S3", "bucket": "bucket",
                                           "region": "eu-west-1", "serviceEndpoint": ""}
    assert offloader.user_metadata == {"s3managedledgeroffloadersoftwareversion": __version__,
                                       "pulsarclustername": "east"}
    assert offloader.reads_driver("S3") and offloader.reads_driver("aws-s3") and not offloader.reads_driver(
        "filesystem")


def test_s3_settings_pulsar_refuses_stop_the_start() -> None:
    with pytest.raises(ValueError, match="managedLedgerOffloadDriver=S3: ServiceEndpoint must specified for S3 "
                                         "offload"):
        offloader_of(BrokerConfig(managedLedgerOffloadDriver="S3", managedLedgerOffloadBucket="b"), None)


def test_the_azure_driver_from_pulsars_keys_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    config = BrokerConfig(managedLedgerOffloadDriver="AzureBlob", managedLedgerOffloadBucket="container",
                          s3ManagedLedgerOffloadBucket="not-read", clusterName="east",
                          managedLedgerOffloadMaxBlockSizeInBytes=8 << 20)
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT", raising=False)
    with pytest.raises(ValueError, match=r"managedLedgerOffloadDriver=azureblob: Couldn't get the azure storage "
                                         r"account\."):
        offloader_of(config, None)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", "acct")
    monkeypatch.delenv("AZURE_STORAGE_ACCESS_KEY", raising=False)
    with pytest.raises(ValueError, match=r"Couldn't get the azure storage access key\."):
        offloader_of(config, None)
    monkeypatch.setenv("AZURE_STORAGE_ACCESS_KEY", "a2V5")
    offloader = offloader_of(config, None)
    assert isinstance(offloader, BlobStoreOffloader)
    assert (offloader.driver_name, offloader.bucket, offloader.max_block_size) == ("azureblob", "container", 8 << 20)
    assert offloader.driver_metadata() == {"managedLedgerOffloadDriver": "AZURE_BLOB", "bucket": "container",
                                           "region": "", "serviceEndpoint": ""}
    assert offloader.reads_driver("AZUREBLOB") and not offloader.reads_driver("aws-s3")
    with pytest.raises(ValueError, match="Bucket cannot be empty for azureblob offload"):
        offloader_of(dataclasses.replace(config, managedLedgerOffloadBucket=""), None)


def test_the_gcs_driver_from_pulsars_keys_and_a_service_account_key(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The service account's key file (a JSON key as Google issues them) makes the credentials; 128 MiB blocks by
    default; without a key file (and no emulator named) Pulsar's words."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    key = tmp_path / "key.json"
    key.write_text(json.dumps({"type": "service_account", "project_id": "p", "private_key_id": "1",
                               "private_key": pem, "client_email": "offload@p.iam.gserviceaccount.com",
                               "client_id": "1", "token_uri": "https://oauth2.googleapis.com/token"}))
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    config = BrokerConfig(managedLedgerOffloadDriver="Google-Cloud-Storage", gcsManagedLedgerOffloadBucket="g",
                          managedLedgerOffloadMaxBlockSizeInBytes=8 << 20, clusterName="east")
    with pytest.raises(ValueError, match="managedLedgerOffloadDriver=google-cloud-storage: Cannot read GCS service "
                                         "account credentials file"):
        offloader_of(config, None)
    offloader = offloader_of(dataclasses.replace(config, gcsManagedLedgerOffloadServiceAccountKeyFile=str(key)), None)
    assert isinstance(offloader, BlobStoreOffloader)
    assert (offloader.driver_name, offloader.bucket, offloader.max_block_size) == ("google-cloud-storage", "g",
                                                                                 128 << 20)
    assert offloader.driver_metadata() == {"managedLedgerOffloadDriver": "GOOGLE_CLOUD_STORAGE", "bucket": "g",
                                           "region": "", "serviceEndpoint": ""}
    key.write_text("{}")  # (not a key)
    with pytest.raises(ValueError, match="Cannot read GCS service account credentials file"):
        offloader_of(dataclasses.replace(config, gcsManagedLedgerOffloadServiceAccountKeyFile=str(key)), None)


def test_other_drivers_are_refused_by_the_configuration() -> None:
    config = BrokerConfig()
    with pytest.raises(ConfigError, match=r"managedLedgerOffloadDriver=swift: expected one of filesystem, aws-s3, S3, "
                                          r"aliyun-oss, azureblob, google-cloud-storage \(in any case\), or empty"):
        config.set("managedLedgerOffloadDriver", "swift")
    config.set("managedLedgerOffloadDriver", "Aliyun-OSS")  # (any case, as Pulsar matches it)
    assert config.managedLedgerOffloadDriver == "Aliyun-OSS"


def test_the_tiers_of_namespaces_and_topics(tmp_path: Path) -> None:
    """Pulsar merges topic > namespace > broker field by field; the broker's own settings are the broker's offloader
    (no tier); settings that make no offloader make a tier without one (Pulsar's NullLedgerOffloader)."""
    tiers = OffloadTiers(BrokerConfig(managedLedgerOffloadDriver="filesystem"), tmp_path)
    assert tiers.of(None, None) is None
    assert tiers.of(None, {"managedLedgerOffloadDriver": "filesystem", "managedLedgerOffloadThresholdInBytes": 0}) \
        is None
    s3_namespace = {"managedLedgerOffloadDriver": "aws-s3", "s3ManagedLedgerOffloadBucket": "ns",
                    "s3ManagedLedgerOffloadRegion": "eu-west-1"}
    tier = tiers.of(None, s3_namespace)
    assert tier is not None and isinstance(tier.offloader, BlobStoreOffloader)
    assert tier.offloader.bucket == "ns" and tiers.of(None, dict(s3_namespace)) is tier  # (one per settings)
    topic_tier = tiers.of({"s3ManagedLedgerOffloadBucket": "topic"}, s3_namespace)
    assert topic_tier is not None and isinstance(topic_tier.offloader, BlobStoreOffloader)
    assert (topic_tier.offloader.bucket, topic_tier.offloader.region) == ("topic", "eu-west-1")
    broken = tiers.of(None, {"managedLedgerOffloadDriver": "google-cloud-storage"})
    assert broken is not None and broken.offloader is None
    assert broken != tier
