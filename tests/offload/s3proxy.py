"""A real S3 endpoint for tests: S3Proxy (gaul/s3proxy, from Maven Central: `make offload-deps`), in memory (jclouds'
transient store), on a free 127.0.0.1 port, always stopped by pid (tests/offload/server.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.local import free_port
from tests.needs import unavailable
from tests.offload.server import serving

REPO_ROOT = Path(__file__).resolve().parents[2]
S3PROXY_DIR = REPO_ROOT / ".deps" / "s3proxy"
IDENTITY, CREDENTIAL = "local-identity", "local-credential"


@dataclass(frozen=True)
class S3Endpoint:
    url: str
    identity: str = IDENTITY
    credential: str = CREDENTIAL

    @property
    def environ(self) -> dict[str, str]:
        """Credentials as the environment gives them (AWS's default chain; the S3 driver's ACCESS_KEY_*)."""
        return {"AWS_ACCESS_KEY_ID": self.identity, "AWS_SECRET_ACCESS_KEY": self.credential,
                "ACCESS_KEY_ID": self.identity, "ACCESS_KEY_SECRET": self.credential}

    def client(self) -> Any:
        """A boto3 S3 client of the endpoint, for the tests' own calls (making buckets, listing them)."""
        import boto3
        from botocore.config import Config

        # (checksums only where S3 requires them: S3Proxy refuses boto3's newer checksum headers)
        config = Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                        response_checksum_validation="when_required")
        return boto3.session.Session().client("s3", endpoint_url=self.url, region_name="us-east-1", config=config,
                                              aws_access_key_id=self.identity,
                                              aws_secret_access_key=self.credential)

    def create_bucket(self, bucket: str) -> None:
        """(Pulsar expects the bucket to be there.)"""
        self.client().create_bucket(Bucket=bucket)

    def keys(self, bucket: str) -> list[str]:
        """The bucket's objects (up to a thousand)."""
        answer = self.client().list_objects_v2(Bucket=bucket)
        return sorted(str(o["Key"]) for o in answer.get("Contents", []))


def s3proxy_jar() -> Path:
    jars = sorted(S3PROXY_DIR.glob("s3proxy-*-jar-with-dependencies.jar"))
    if shutil.which("java") is None:
        unavailable("S3Proxy: no java on PATH")
    if not jars:
        unavailable(f"S3Proxy: no s3proxy-*-jar-with-dependencies.jar in {S3PROXY_DIR} (`make offload-deps`)")
    return jars[-1]


@contextmanager
def s3proxy(tmp_path: Path) -> Iterator[S3Endpoint]:
    """S3Proxy with signature v2/v4 authentication; yields its endpoint once it answers."""
    jar = s3proxy_jar()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    conf = tmp_path / "s3proxy.conf"
    conf.write_text(f"s3proxy.endpoint={url}\ns3proxy.authorization=aws-v2-or-v4\ns3proxy.identity={IDENTITY}\n"
                    f"s3proxy.credential={CREDENTIAL}\njclouds.provider=transient\njclouds.identity=unused\n"
                    "jclouds.credential=unused\n")
    with serving("S3Proxy", ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-jar", str(jar),
                             "--properties", str(conf)], url, tmp_path / "s3proxy.log"):
        yield S3Endpoint(url)
