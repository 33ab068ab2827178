"""The offloader the broker's configuration names (broker.service.offload.offloader_of): Pulsar's keys and its
Hadoop profile, and the settings refused at start with the reason."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.service.offload import offloader_of
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
    assert offloader is not None
    assert (offloader.base, offloader.compression) == (tmp_path / "offloaded", Compression.BLOCK)
    assert offloader.driver_metadata() == {"storageBasePath": str(tmp_path / "offloaded")}


def test_pulsars_hadoop_profile(tmp_path: Path) -> None:
    profile = tmp_path / "core-site.xml"
    profile.write_text(PROFILE.format(base=tmp_path / "tier", kind="RECORD"))
    offloader = offloader_of(BrokerConfig(managedLedgerOffloadDriver="filesystem", fileSystemURI="file:///",
                                          fileSystemProfilePath=str(profile)), None)
    assert offloader is not None
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
