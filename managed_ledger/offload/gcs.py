"""The Google Cloud Storage side of the blob-store offloaders (offload.blobstore): driver ``google-cloud-storage``,
``GcsStore`` on the google-cloud-storage library, and ``gcs_offloader``, which reads a broker's offload settings as
Pulsar's TieredStorageConfiguration / JCloudBlobStoreProvider.GOOGLE_CLOUD_STORAGE do.

- Settings under ``gcsManagedLedgerOffload*`` win over ``managedLedgerOffload*`` (bucket, region, service endpoint,
  block and read buffer sizes); the block size's default is 128 MiB (Pulsar's offload policies always carry the gcs
  one, so the generic key never counts for it). A bucket is needed.
- Credentials: the service account key file ``gcsManagedLedgerOffloadServiceAccountKeyFile`` (JSON), as Pulsar's
  (which fails without one). Without one, but with the environment's STORAGE_EMULATOR_HOST (the Google libraries'
  switch to an emulator), the emulator, unauthenticated.
- The endpoint: Google's, or the service endpoint when set (Pulsar's driver gives it to jclouds too).

The objects are the same as the S3 drivers'. The data object is written as one resumable upload, its parts sent as
they fill (jclouds uploads each part as an object of its own and composes them); an aborted copy finishes nothing
(an unfinished upload leaves no object, and is dropped by Google after a week). Reads: the object's metadata, then a
ranged download (as jclouds does).
"""

from __future__ import annotations

import functools
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from managed_ledger.offload.blobstore import (
    MIB,
    PART_SIZE,
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

DRIVER = "google-cloud-storage"
PROVIDER = "GOOGLE_CLOUD_STORAGE"  # (Pulsar's JCloudBlobStoreProvider constant, as its driver metadata records it)
DEFAULT_MAX_BLOCK_SIZE = 128 * MIB  # (Pulsar's DEFAULT_GCS_MAX_BLOCK_SIZE_IN_BYTES)
KEY_FILE = "gcsManagedLedgerOffloadServiceAccountKeyFile"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
PREFIXES = ("gcsManagedLedgerOffload", "managedLedgerOffload")
# Seconds: a call that hangs fails (Pulsar's jclouds so-timeout is 25 s); a failed call is tried again for up to
# RETRY_S (the library's default: 120 s).
TIMEOUT_S = 25
RETRY_S = 10


@dataclass(frozen=True)
class GcsSettings:
    bucket: str
    region: str
    endpoint: str
    max_block_size: int
    read_buffer_size: int
    key_file: str  # ("": the emulator's, unauthenticated)


def gcs_settings(settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> GcsSettings:
    """The google-cloud-storage driver's settings from a broker's (or an offload policy's) keys; OffloadConfigError with
    Pulsar's words for what it would refuse."""
    environ = os.environ if environ is None else environ
    keys = StoreKeys.of(settings, PREFIXES, DEFAULT_MAX_BLOCK_SIZE)
    keys.check(DRIVER)
    key_file = str(settings.get(KEY_FILE) or "")
    if key_file:
        try:
            with open(key_file, "rb"):
                pass
        except OSError as exc:
            raise OffloadConfigError(f"Cannot read GCS service account credentials file: {key_file} "
                                     f"({exc.strerror})") from None
    elif not environ.get(EMULATOR_ENV):
        raise OffloadConfigError(f"Cannot read GCS service account credentials file: {KEY_FILE} is not set (nor "
                                 f"{EMULATOR_ENV}, for an emulator)")
    return GcsSettings(keys.bucket, keys.region, keys.endpoint, keys.max_block_size, keys.read_buffer_size, key_file)


def gcs_offloader(settings: GcsSettings, user_metadata: Mapping[str, str]) -> BlobStoreOffloader:
    return BlobStoreOffloader(GcsStore(settings), DRIVER, PROVIDER, settings.bucket, settings.region,
                              settings.endpoint, settings.max_block_size, settings.read_buffer_size,
                              dict(user_metadata), family=(DRIVER,))


class GcsStore:
    """offload.blobstore.BlobStore on google-cloud-storage (its client is thread-safe; its calls block). An upload
    is a resumable upload (the library's BlobWriter), each part sent as it comes (parts are multiples of 256 KiB, as
    resumable uploads want, but the last)."""

    def __init__(self, settings: GcsSettings) -> None:
        from google.api_core.retry import Retry  # (imported when the driver is configured)
        from google.cloud import storage

        kwargs: dict[str, Any] = {}
        if settings.endpoint:
            kwargs["client_options"] = {"api_endpoint": settings.endpoint}
        if settings.key_file:
            from google.oauth2 import service_account

            try:
                credentials = service_account.Credentials.from_service_account_file(settings.key_file)
            except (OSError, ValueError) as exc:
                raise OffloadConfigError(f"Cannot read GCS service account credentials file: {settings.key_file} "
                                         f"({exc})") from None
            self._client = storage.Client(project=credentials.project_id, credentials=credentials, **kwargs)
        else:  # (STORAGE_EMULATOR_HOST: the library goes to the emulator, unauthenticated)
            from google.auth.credentials import AnonymousCredentials

            self._client = storage.Client(project="<none>", credentials=AnonymousCredentials(), **kwargs)
        self._retry = Retry(initial=0.5, maximum=4, multiplier=2, timeout=RETRY_S)
        self._lock = threading.Lock()
        self._uploads: dict[str, Any] = {}  # upload id -> its BlobWriter

    def _blob(self, bucket: str, key: str) -> Any:
        return self._client.bucket(bucket).blob(key)

    def _call(self, what: str, bucket: str, key: str, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        from google.api_core.exceptions import GoogleAPIError, NotFound
        from google.auth.exceptions import GoogleAuthError
        from requests.exceptions import RequestException

        try:
            return call(*args, **kwargs)
        except NotFound as exc:
            raise BlobMissingError(f"GCS {what} of {bucket}/{key}: {first_line(exc)}") from None
        except (GoogleAPIError, GoogleAuthError, RequestException) as exc:
            raise BlobStoreError(f"GCS {what} of {bucket}/{key}: {first_line(exc)}") from None

    def start_upload(self, bucket: str, key: str, metadata: Mapping[str, str]) -> str:
        blob = self._blob(bucket, key)
        blob.metadata = dict(metadata)
        writer = _writer_class()(blob, chunk_size=PART_SIZE, content_type="application/octet-stream",
                                 timeout=TIMEOUT_S, retry=self._retry)
        upload_id = str(uuid.uuid4())
        with self._lock:
            self._uploads[upload_id] = writer
        return upload_id

    def _writer(self, upload_id: str) -> Any:
        with self._lock:
            return self._uploads[upload_id]

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, data: bytes) -> str:
        self._call("upload", bucket, key, self._writer(upload_id).write, data)
        return str(number)

    def complete_upload(self, bucket: str, key: str, upload_id: str, etags: list[str]) -> None:
        with self._lock:
            writer = self._uploads.pop(upload_id)
        try:
            self._call("upload", bucket, key, writer.close)
        finally:
            writer.aborted = True  # (done, or failed: not tried again when the writer is collected)

    def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        with self._lock:
            writer = self._uploads.pop(upload_id, None)
        if writer is not None:
            writer.aborted = True  # (never finished: no object; Google drops the session)

    def put(self, bucket: str, key: str, data: bytes, metadata: Mapping[str, str]) -> None:
        blob = self._blob(bucket, key)
        blob.metadata = dict(metadata)
        self._call("upload", bucket, key, blob.upload_from_string, data, content_type="application/octet-stream",
                   timeout=TIMEOUT_S, retry=self._retry)

    def get(self, bucket: str, key: str, start: int | None = None,
            end: int | None = None) -> tuple[bytes, dict[str, str]]:
        def read() -> tuple[bytes, dict[str, str]]:
            blob = self._client.bucket(bucket).get_blob(key, timeout=TIMEOUT_S, retry=self._retry)
            if blob is None:
                from google.api_core.exceptions import NotFound

                raise NotFound("no such object")
            data = blob.download_as_bytes(start=start, end=end, timeout=TIMEOUT_S, retry=self._retry,
                                          checksum=None if start is not None else "auto")
            return data, dict(blob.metadata or {})

        data, metadata = self._call("read", bucket, key, read)
        return data, {k.lower(): v for k, v in metadata.items()}

    def delete(self, bucket: str, key: str) -> None:
        try:
            self._call("delete", bucket, key, self._blob(bucket, key).delete, timeout=TIMEOUT_S, retry=self._retry)
        except BlobMissingError:
            pass

    def list_objects(self, bucket: str) -> Iterator[Listed]:
        pages = self._call("listing", bucket, "", lambda: self._client.list_blobs(
            bucket, timeout=TIMEOUT_S, retry=self._retry).pages)
        while (page := self._call("listing", bucket, "", next_page, pages)) is not None:
            for blob in page:
                modified = blob.updated.timestamp() if blob.updated is not None else 0
                yield Listed(str(blob.name), int(blob.size or 0), int(modified * 1000),
                             f"gs://{bucket}/{blob.name}", {k.lower(): v for k, v in (blob.metadata or {}).items()})

    def metadata(self, bucket: str, key: str) -> dict[str, str]:
        blob = self._call("metadata read", bucket, key, self._client.bucket(bucket).get_blob, key,
                          timeout=TIMEOUT_S, retry=self._retry)
        if blob is None:
            raise BlobMissingError(f"GCS metadata read of {bucket}/{key}: no such object")
        return {k.lower(): v for k, v in (blob.metadata or {}).items()}


@functools.cache
def _writer_class() -> Any:
    """The library's BlobWriter, but one that is aborted finishes nothing when closed (an io object is closed when
    collected: the plain one would then complete the upload with the parts sent)."""
    from google.cloud.storage.fileio import BlobWriter

    class AbortableWriter(BlobWriter):  # type: ignore[misc]
        aborted = False

        def close(self) -> None:
            if not self.aborted:
                super().close()

    return AbortableWriter

