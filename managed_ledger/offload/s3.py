"""The S3 side of the blob-store offloaders (offload.blobstore): ``S3Store`` on boto3, and ``s3_offloader``, which reads
a broker's offload settings as Pulsar's TieredStorageConfiguration / JCloudBlobStoreProvider do.

Drivers (matched without regard to case, recorded in Pulsar's spelling):

- ``aws-s3``: AWS S3, or any S3 with a service endpoint (then path-style addressing). Settings under
  ``s3ManagedLedgerOffload*`` win over ``managedLedgerOffload*``. A region or an endpoint is needed. Credentials:
  ``s3ManagedLedgerOffloadCredentialId`` / ``...Secret``, else boto3's default chain (the environment's
  AWS_ACCESS_KEY_ID..., the shared profile, the instance's role), as the AWS Java SDK's default chain.
- ``S3`` (any S3-compatible store) and ``aliyun-oss``: ``managedLedgerOffload*`` settings only, an endpoint needed;
  credentials from the environment's ACCESS_KEY_ID / ACCESS_KEY_SECRET (or ALIYUN_OSS_ACCESS_KEY_ID / ...SECRET).
  aliyun-oss uses virtual-host addressing, as Pulsar forces for it.

Each needs a bucket, as in Pulsar (its words in the errors). The maximum block size is not held to S3's 5 MiB
parts here (offload.blobstore: parts are not blocks).
"""

from __future__ import annotations

import os
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
)

T = TypeVar("T")

# driver (lower case) -> (Pulsar's spelling of the driver, its provider's name in the driver metadata)
S3_DRIVERS = {"aws-s3": ("aws-s3", "AWS_S3"), "s3": ("S3", "S3"), "aliyun-oss": ("aliyun-oss", "ALIYUN_OSS")}
GENERIC_PREFIX = "managedLedgerOffload"
AWS_PREFIX = "s3ManagedLedgerOffload"
# Seconds: an S3 call that hangs fails (Pulsar's jclouds so-timeout is 25 s), and is tried again by boto3.
TIMEOUT_S = 25
RETRIES = 5
LIST_PAGE = 1000  # (objects per listing request: S3's most)


@dataclass(frozen=True)
class S3Settings:
    driver: str  # (Pulsar's spelling)
    provider: str
    bucket: str
    region: str
    endpoint: str
    max_block_size: int
    read_buffer_size: int
    access_key: str
    secret_key: str
    virtual_host: bool


def s3_settings(driver: str, settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> S3Settings:
    """The settings of an S3 driver from a broker's (or an offload policy's) keys; OffloadConfigError with Pulsar's
    words for what it would refuse."""
    environ = os.environ if environ is None else environ
    lower = driver.lower()
    if lower not in S3_DRIVERS:
        raise OffloadConfigError(f"managedLedgerOffloadDriver={driver}: not an S3 driver ({', '.join(S3_DRIVERS)})")
    name, provider = S3_DRIVERS[lower]
    keys = StoreKeys.of(settings, (AWS_PREFIX, GENERIC_PREFIX) if lower == "aws-s3" else (GENERIC_PREFIX,))
    if lower == "aws-s3":
        if not keys.region and not keys.endpoint:
            raise OffloadConfigError(f"Either Region or ServiceEndpoint must specified for {name} offload")
    elif not keys.endpoint:
        raise OffloadConfigError(f"ServiceEndpoint must specified for {name} offload")
    keys.check(name)
    if lower == "aws-s3":
        if settings.get("s3ManagedLedgerOffloadRole"):
            raise OffloadConfigError("s3ManagedLedgerOffloadRole (assuming an IAM role) is not supported here: give "
                                     "s3ManagedLedgerOffloadCredentialId/Secret, or credentials in the environment")
        access = settings.get("s3ManagedLedgerOffloadCredentialId") or ""
        secret = settings.get("s3ManagedLedgerOffloadCredentialSecret") or ""
        if not (access and secret):
            access = secret = ""  # (boto3's default chain)
    else:
        access = (environ.get("ACCESS_KEY_ID", "").strip() or environ.get("ALIYUN_OSS_ACCESS_KEY_ID", "").strip())
        if not access:
            raise OffloadConfigError("Couldn't get the access key id.")
        secret = (environ.get("ACCESS_KEY_SECRET", "").strip()
                  or environ.get("ALIYUN_OSS_ACCESS_KEY_SECRET", "").strip())
        if not secret:
            raise OffloadConfigError("Couldn't get the access key secret.")
    return S3Settings(name, provider, keys.bucket, keys.region, keys.endpoint, keys.max_block_size,
                      keys.read_buffer_size, access, secret, virtual_host=lower == "aliyun-oss" or not keys.endpoint)


def s3_offloader(settings: S3Settings, user_metadata: Mapping[str, str]) -> BlobStoreOffloader:
    return BlobStoreOffloader(S3Store(settings), settings.driver, settings.provider, settings.bucket,
                              settings.region, settings.endpoint, settings.max_block_size,
                              settings.read_buffer_size, dict(user_metadata))


class S3Store:
    """offload.blobstore.BlobStore on boto3's S3 client (thread-safe; its calls block). Checksums only where S3
    requires them (the S3-compatible stores that do not know boto3's newer checksum headers refuse them)."""

    def __init__(self, settings: S3Settings) -> None:
        import boto3  # (imported when an S3 driver is configured: it takes a while)
        from botocore.config import Config

        config = Config(s3={"addressing_style": "virtual" if settings.virtual_host else "path"},
                        request_checksum_calculation="when_required", response_checksum_validation="when_required",
                        connect_timeout=TIMEOUT_S, read_timeout=TIMEOUT_S,
                        retries={"max_attempts": RETRIES, "mode": "standard"})
        kwargs: dict[str, Any] = {"config": config, "region_name": settings.region or "us-east-1"}
        if settings.endpoint:
            kwargs["endpoint_url"] = settings.endpoint
        if settings.access_key:
            kwargs["aws_access_key_id"] = settings.access_key
            kwargs["aws_secret_access_key"] = settings.secret_key
        self._client = boto3.session.Session().client("s3", **kwargs)

    def _call(self, what: str, call: Callable[..., T], **kwargs: Any) -> T:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return call(**kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            message = f"S3 {what} of {kwargs.get('Bucket')}/{kwargs.get('Key')}: {code} {error.get('Message', '')}"
            if code in ("NoSuchKey", "NoSuchBucket", "404"):
                raise BlobMissingError(message.strip()) from None
            raise BlobStoreError(message.strip()) from None
        except BotoCoreError as exc:
            raise BlobStoreError(f"S3 {what} of {kwargs.get('Bucket')}/{kwargs.get('Key')}: {exc}") from None

    def start_upload(self, bucket: str, key: str, metadata: Mapping[str, str]) -> str:
        answer = self._call("multipart upload start", self._client.create_multipart_upload, Bucket=bucket, Key=key,
                            Metadata=dict(metadata), ContentType="application/octet-stream")
        return str(answer["UploadId"])

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, data: bytes) -> str:
        answer = self._call("part upload", self._client.upload_part, Bucket=bucket, Key=key, UploadId=upload_id,
                            PartNumber=number, Body=data)
        return str(answer["ETag"])

    def complete_upload(self, bucket: str, key: str, upload_id: str, etags: list[str]) -> None:
        parts = [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(etags, 1)]
        self._call("multipart upload completion", self._client.complete_multipart_upload, Bucket=bucket, Key=key,
                   UploadId=upload_id, MultipartUpload={"Parts": parts})

    def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        self._call("multipart upload abort", self._client.abort_multipart_upload, Bucket=bucket, Key=key,
                   UploadId=upload_id)

    def put(self, bucket: str, key: str, data: bytes, metadata: Mapping[str, str]) -> None:
        self._call("upload", self._client.put_object, Bucket=bucket, Key=key, Body=data, Metadata=dict(metadata),
                   ContentType="application/octet-stream")

    def get(self, bucket: str, key: str, start: int | None = None,
            end: int | None = None) -> tuple[bytes, dict[str, str]]:
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if start is not None:
            kwargs["Range"] = f"bytes={start}-{'' if end is None else end}"
        client = self._client

        def read(**kwargs: Any) -> tuple[bytes, dict[str, str]]:
            answer = client.get_object(**kwargs)
            with answer["Body"] as body:
                return body.read(), answer.get("Metadata", {})

        data, metadata = self._call("read", read, **kwargs)
        return data, {k.lower(): v for k, v in metadata.items()}

    def delete(self, bucket: str, key: str) -> None:
        self._call("delete", self._client.delete_object, Bucket=bucket, Key=key)

    def list_objects(self, bucket: str) -> Iterator[Listed]:
        base = f"{self._client.meta.endpoint_url.rstrip('/')}/{bucket}"
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": bucket, "MaxKeys": LIST_PAGE}
            if token:
                kwargs["ContinuationToken"] = token
            page = self._call("listing", self._client.list_objects_v2, **kwargs)
            for o in page.get("Contents", []):
                yield Listed(str(o["Key"]), int(o["Size"]), int(o["LastModified"].timestamp() * 1000),
                             f"{base}/{o['Key']}", None)  # (S3's listing has no user metadata)
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def metadata(self, bucket: str, key: str) -> dict[str, str]:
        answer = self._call("metadata read", self._client.head_object, Bucket=bucket, Key=key)
        return {k.lower(): v for k, v in answer.get("Metadata", {}).items()}
