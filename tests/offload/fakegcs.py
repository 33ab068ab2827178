"""A Google Cloud Storage endpoint for tests: fake-gcs-server (fsouza's emulator of GCS's JSON API, built from the Go
module proxy: `make offload-deps`), in memory, on a free 127.0.0.1 port, always stopped by pid.

Ours reaches it as the Google libraries reach an emulator (STORAGE_EMULATOR_HOST, no credentials). Pulsar's
google-cloud-storage driver (jclouds) asks Google's OAuth server for a token with the service account's key; it has
no such server here, so its JVM gets jclouds' ``jclouds.oauth.credential-type=bearerTokenCredentials`` (Pulsar hands
every ``jclouds.*`` system property to jclouds): the key file's ``private_key`` is then sent as the bearer token,
which the emulator does not check. The key file is otherwise the shape Pulsar reads (client_email, private_key)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.local import free_port
from tests.needs import unavailable
from tests.offload.s3proxy import REPO_ROOT
from tests.offload.server import serving

FAKE_GCS_BIN = REPO_ROOT / ".deps" / "fake-gcs-server" / "fake-gcs-server"


@dataclass(frozen=True)
class GcsEndpoint:
    url: str
    key_file: Path  # (for Pulsar's driver)

    @property
    def environ(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.url}

    @property
    def jvm_options(self) -> list[str]:
        return ["-Djclouds.oauth.credential-type=bearerTokenCredentials"]

    def client(self) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(project="test", credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
                              client_options={"api_endpoint": self.url})

    def create_bucket(self, bucket: str) -> None:
        self.client().create_bucket(bucket)

    def keys(self, bucket: str) -> list[str]:
        return sorted(str(b.name) for b in self.client().list_blobs(bucket))


@contextmanager
def fake_gcs(tmp_path: Path) -> Iterator[GcsEndpoint]:
    """fake-gcs-server; yields its endpoint once it answers."""
    if not FAKE_GCS_BIN.exists():
        unavailable(f"fake-gcs-server: no {FAKE_GCS_BIN} (`make offload-deps`)")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    key_file = tmp_path / "service-account.json"
    key_file.write_text(json.dumps({"type": "service_account", "client_email": "offload@test.iam.gserviceaccount.com",
                                    "private_key": "not-checked-by-the-emulator"}))
    command = [str(FAKE_GCS_BIN), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "memory",
               "-public-host", f"127.0.0.1:{port}", "-log-level", "warn"]
    with serving("fake-gcs-server", command, f"{url}/storage/v1/b", tmp_path / "fake-gcs-server.log"):
        yield GcsEndpoint(url, key_file)
