"""A real Azure Blob Storage endpoint for tests: Azurite's blob service (npm, `make offload-deps`), its data in a temp
dir, on a free 127.0.0.1 port, always stopped by pid; with the emulator's own account (devstoreaccount1 and its
published development key, which Azurite accepts whatever the machine).

Pulsar's azureblob driver (jclouds) signs with Shared Key Lite, which Azurite does not check, and puts the account
in the path twice when given Azurite's path-style endpoint; it works with a shared access signature (its access
key may be one) and Azurite's production-style address ``http://devstoreaccount1.blob.localhost:<port>``, which
``jvm_options`` makes the JVM resolve to 127.0.0.1 (a hosts file of the test's own: nothing of the machine's)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cluster.local import free_port
from tests.needs import unavailable
from tests.offload.s3proxy import REPO_ROOT
from tests.offload.server import serving

AZURITE_BIN = REPO_ROOT / ".deps" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="  # (Azurite's)


@dataclass(frozen=True)
class AzureEndpoint:
    port: int
    hosts_file: Path

    @property
    def url(self) -> str:
        """Path-style, as the Azure SDKs address an emulator (managedLedgerOffloadServiceEndpoint here)."""
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def environ(self) -> dict[str, str]:
        return {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_ACCESS_KEY": KEY}

    @property
    def production_url(self) -> str:
        """The account's own host name (resolved by the JVM through ``jvm_options``)."""
        return f"http://{ACCOUNT}.blob.localhost:{self.port}"

    @property
    def jvm_options(self) -> list[str]:
        return [f"-Djdk.net.hosts.file={self.hosts_file}"]

    def sas(self) -> str:
        """An account shared access signature for an hour: blobs and containers, every permission."""
        from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

        return str(generate_account_sas(ACCOUNT, KEY, ResourceTypes(service=True, container=True, object=True),
                                        AccountSasPermissions(read=True, write=True, delete=True, list=True,
                                                              add=True, create=True),
                                        datetime.now(UTC) + timedelta(hours=1)))

    def client(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient(self.url, credential={"account_name": ACCOUNT, "account_key": KEY})

    def create_bucket(self, bucket: str) -> None:
        self.client().create_container(bucket)

    def keys(self, bucket: str) -> list[str]:
        return sorted(str(b.name) for b in self.client().get_container_client(bucket).list_blobs())


@contextmanager
def azurite(tmp_path: Path) -> Iterator[AzureEndpoint]:
    """Azurite's blob service; yields its endpoint once it answers."""
    if shutil.which("node") is None:
        unavailable("Azurite: no node on PATH")
    if not AZURITE_BIN.exists():
        unavailable(f"Azurite: no {AZURITE_BIN} (`make offload-deps`)")
    port = free_port()
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 {ACCOUNT}.blob.localhost\n")
    (tmp_path / "azurite").mkdir()
    command = [str(AZURITE_BIN), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location",
               str(tmp_path / "azurite"), "--skipApiVersionCheck", "--loose", "--disableTelemetry"]
    with serving("Azurite", command, f"http://127.0.0.1:{port}/{ACCOUNT}?comp=list", tmp_path / "azurite.log"):
        yield AzureEndpoint(port, hosts)
