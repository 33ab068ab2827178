"""The Azure side of the blob-store offloaders (offload.blobstore): driver ``azureblob``, ``AzureStore`` on the
azure-storage-blob SDK, and ``azure_offloader``, which reads a broker's offload settings as Pulsar's
TieredStorageConfiguration / JCloudBlobStoreProvider.AZURE_BLOB do.

- The container is ``managedLedgerOffloadBucket``; only the generic ``managedLedgerOffload*`` keys are read (bucket,
  region, service endpoint, block and read buffer sizes), as for Pulsar's ``S3`` driver. A container is needed.
- Credentials from the environment: AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_ACCESS_KEY (Pulsar's words when one is
  missing). The access key may be a shared access signature (``sv=...&sig=...``), which jclouds takes too.
- The endpoint: the account's (``https://<account>.blob.core.windows.net``), or ``managedLedgerOffloadServiceEndpoint``
  when set (an Azure Stack, a private endpoint, Azurite's ``http://127.0.0.1:10000/<account>``). Pulsar's azureblob
  driver records that key in the copy's driver metadata but does not use it (its jclouds context is given no
  endpoint: only a ``jclouds.endpoint`` JVM property moves it); here it is used.

The objects are the same as the S3 drivers' (a block blob each); the data object's upload parts are staged blocks
(ids: the part number as a 4-byte big-endian int, in base64, as jclouds names them) committed with the object's
metadata. An aborted copy commits nothing: Azure discards uncommitted blocks (after a week).
"""

from __future__ import annotations

import base64
import os
import struct
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from managed_ledger.offload.blobstore import (
    BlobMissingError,
    BlobStoreError,
    BlobStoreOffloader,
    Listed,
    OffloadConfigError,
    StoreKeys,
    first_line,
    next_page,
)

T = TypeVar("T")

DRIVER = "azureblob"
PROVIDER = "AZURE_BLOB"  # (Pulsar's JCloudBlobStoreProvider constant, as its driver metadata records it)
ACCOUNT_ENV, KEY_ENV = "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_ACCESS_KEY"
PREFIX = "managedLedgerOffload"
# Seconds: a call that hangs fails (Pulsar's jclouds so-timeout is 25 s), and is tried again by the SDK, at most
# RETRIES times, after 1, 3 and 5 s (+-1 s; the SDK's default waits 15 s and more between tries).
TIMEOUT_S = 25
RETRIES = 3


@dataclass(frozen=True)
class AzureSettings:
    container: str
    region: str
    endpoint: str  # (as configured: recorded in the driver metadata; "" for the account's)
    max_block_size: int
    read_buffer_size: int
    account: str
    key: str = ""  # an account key, or a shared access signature

    @property
    def account_url(self) -> str:
        return self.endpoint or f"https://{self.account}.blob.core.windows.net"

    @property
    def is_sas(self) -> bool:
        fields = self.key.removeprefix("?").split("&")
        return any(f.startswith("sig=") for f in fields) and any(f.startswith("sv=") for f in fields)


def azure_settings(settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> AzureSettings:
    """The azureblob driver's settings from a broker's (or an offload policy's) keys; OffloadConfigError with Pulsar's
    words for what it would refuse."""
    environ = os.environ if environ is None else environ
    keys = StoreKeys.of(settings, (PREFIX,))
    keys.check(DRIVER)
    account = environ.get(ACCOUNT_ENV, "").strip()
    if not account:
        raise OffloadConfigError("Couldn't get the azure storage account.")
    secret = environ.get(KEY_ENV, "").strip()
    if not secret:
        raise OffloadConfigError("Couldn't get the azure storage access key.")
    return AzureSettings(keys.bucket, keys.region, keys.endpoint, keys.max_block_size, keys.read_buffer_size, account,
                         secret)


def azure_offloader(settings: AzureSettings, user_metadata: Mapping[str, str]) -> BlobStoreOffloader:
    return BlobStoreOffloader(AzureStore(settings), DRIVER, PROVIDER, settings.container, settings.region,
                              settings.endpoint, settings.max_block_size, settings.read_buffer_size,
                              dict(user_metadata), family=(DRIVER,))


def block_id(number: int) -> str:
    return base64.b64encode(struct.pack(">i", number)).decode()


class AzureStore:
    """offload.blobstore.BlobStore on the azure-storage-blob SDK (thread-safe; its calls block). An upload is blocks
    staged under the blob's name, committed at ``complete_upload`` with the metadata given at its start."""

    def __init__(self, settings: AzureSettings) -> None:
        from azure.storage.blob import BlobServiceClient, ExponentialRetry  # (imported when the driver is configured)

        credential: Any = (settings.key.removeprefix("?") if settings.is_sas
                           else {"account_name": settings.account, "account_key": settings.key})
        retry = ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=RETRIES, random_jitter_range=1)
        self._service = BlobServiceClient(settings.account_url, credential=credential, connection_timeout=TIMEOUT_S,
                                          read_timeout=TIMEOUT_S, retry_policy=retry)
        self._lock = threading.Lock()
        self._uploads: dict[str, Mapping[str, str]] = {}  # upload id -> the object's metadata

    def _blob(self, bucket: str, key: str) -> Any:
        return self._service.get_blob_client(bucket, key)

    def _call(self, what: str, bucket: str, key: str, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError

        try:
            return call(*args, **kwargs)
        except ResourceNotFoundError as exc:
            raise BlobMissingError(f"Azure {what} of {bucket}/{key}: {first_line(exc)}") from None
        except HttpResponseError as exc:
            raise BlobStoreError(f"Azure {what} of {bucket}/{key}: {exc.status_code} {first_line(exc)}") from None
        except AzureError as exc:
            raise BlobStoreError(f"Azure {what} of {bucket}/{key}: {first_line(exc)}") from None

    def start_upload(self, bucket: str, key: str, metadata: Mapping[str, str]) -> str:
        upload_id = str(uuid.uuid4())
        with self._lock:
            self._uploads[upload_id] = dict(metadata)
        return upload_id

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, data: bytes) -> str:
        name = block_id(number)
        self._call("block upload", bucket, key, self._blob(bucket, key).stage_block, name, data, length=len(data))
        return name

    def complete_upload(self, bucket: str, key: str, upload_id: str, etags: list[str]) -> None:
        from azure.storage.blob import BlobBlock, ContentSettings

        with self._lock:
            metadata = self._uploads.pop(upload_id)
        self._call("block list commit", bucket, key, self._blob(bucket, key).commit_block_list,
                   [BlobBlock(block_id=name) for name in etags], metadata=dict(metadata),
                   content_settings=ContentSettings(content_type="application/octet-stream"))

    def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        with self._lock:
            self._uploads.pop(upload_id, None)  # (the staged blocks: Azure discards them uncommitted)

    def put(self, bucket: str, key: str, data: bytes, metadata: Mapping[str, str]) -> None:
        from azure.storage.blob import ContentSettings

        self._call("upload", bucket, key, self._blob(bucket, key).upload_blob, data, overwrite=True,
                   metadata=dict(metadata), content_settings=ContentSettings(content_type="application/octet-stream"))

    def get(self, bucket: str, key: str, start: int | None = None,
            end: int | None = None) -> tuple[bytes, dict[str, str]]:
        blob = self._blob(bucket, key)

        def read() -> tuple[bytes, dict[str, str]]:
            length = None if start is None or end is None else end - start + 1
            download = blob.download_blob(offset=start, length=length, max_concurrency=1)
            return download.readall(), dict(download.properties.metadata or {})

        data, metadata = self._call("read", bucket, key, read)
        return data, {k.lower(): v for k, v in metadata.items()}

    def delete(self, bucket: str, key: str) -> None:
        try:
            self._call("delete", bucket, key, self._blob(bucket, key).delete_blob)
        except BlobMissingError:
            pass

    def list_objects(self, bucket: str) -> Iterator[Listed]:
        container = self._service.get_container_client(bucket)
        pages = self._call("listing", bucket, "", lambda: container.list_blobs(include=["metadata"]).by_page())
        while (page := self._call("listing", bucket, "", next_page, pages)) is not None:
            for blob in page:
                yield Listed(str(blob.name), int(blob.size), int(blob.last_modified.timestamp() * 1000),
                             f"{container.url}/{blob.name}", {k.lower(): v for k, v in (blob.metadata or {}).items()})

    def metadata(self, bucket: str, key: str) -> dict[str, str]:
        properties = self._call("metadata read", bucket, key, self._blob(bucket, key).get_blob_properties)
        return {k.lower(): v for k, v in (properties.metadata or {}).items()}

