"""Helpers for the admin REST / metrics tests: a small synchronous HTTP client (real HTTP calls
against an in-process broker), fresh namespaces, and Prometheus's tools."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pulsar
import pytest

from broker.embedded import BrokerThread

# Installing Debian's prometheus package on a fresh machine downloads ~100 MB.
INSTALL_TIMEOUT_S = 900


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str]

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def reason(self) -> str:
        return str(self.json["reason"])

    @property
    def unset(self) -> bool:
        """The answer to a GET of a value not set: 200 with no body (Pulsar's asynchronous resource methods)."""
        return self.status == 200 and self.body == b""


class Admin:
    """pulsar-admin over plain HTTP: every call is a real request to the broker's web port."""

    def __init__(self, web_url: str) -> None:
        self.web_url = web_url

    def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
             content_type: str = "application/json") -> Reply:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.web_url + path, data=data, method=method,
                                     headers={"Content-Type": content_type} if data is not None else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return Reply(r.status, r.read(), dict(r.headers))
        except urllib.error.HTTPError as e:
            return Reply(e.code, e.read(), dict(e.headers))

    def get(self, path: str) -> Reply:
        return self.call("GET", path)

    def put(self, path: str, body: Any = None) -> Reply:
        return self.call("PUT", path, body)

    def post(self, path: str, body: Any = None) -> Reply:
        return self.call("POST", path, body)

    def delete(self, path: str) -> Reply:
        return self.call("DELETE", path)

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        reply = self.call(method, path, body)
        assert 200 <= reply.status < 300, f"{method} {path}: {reply.status} {reply.body!r}"
        return reply.json if reply.headers.get("Content-Type", "").startswith("application/json") else reply.body

    def new_namespace(self, tenant: str = "public") -> str:
        ns = f"{tenant}/ns-{uuid.uuid4().hex[:8]}"
        self.ok("PUT", f"/admin/v2/namespaces/{ns}")
        return ns

    def stats(self, topic: str) -> Any:
        return self.ok("GET", f"/admin/v2/{rest_path(topic)}/stats")


def rest_path(topic: str) -> str:
    """persistent://t/ns/x -> persistent/t/ns/x (the admin API's path form)."""
    domain, _, rest = topic.partition("://")
    return f"{domain}/{rest}"


@pytest.fixture
def admin(pulsar_broker: BrokerThread) -> Admin:
    return Admin(pulsar_broker.web_url)


@pytest.fixture
def client(pulsar_broker: BrokerThread) -> Iterator[pulsar.Client]:
    c = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=10)
    yield c
    c.close()


def ensure_prometheus_tools() -> tuple[str | None, str]:
    """(directory holding promtool and prometheus, why not), installing Debian's package when missing.

    ``make test`` installs it first (target test-deps); this covers a bare ``pytest`` run. The
    directory is None only when installing is impossible here; the second item says why."""
    found = shutil.which("promtool")
    if found and shutil.which("prometheus"):
        return os.path.dirname(found), ""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, "installing it needs root and apt-get"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "prometheus"]):
        try:
            subprocess.run(command, check=True, env=env, capture_output=True, timeout=INSTALL_TIMEOUT_S)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            output = (exc.stderr or b"").decode(errors="replace")[-500:]
            return None, f"`{' '.join(command)}` failed: {output}"
    found = shutil.which("promtool")
    return (os.path.dirname(found), "") if found else (None, "the package installed no promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    directory, why = ensure_prometheus_tools()
    if directory is None:
        pytest.skip(f"Prometheus (Debian package prometheus) is not installed and cannot be installed: {why}; "
                    "run `make test-deps` as root")
    return directory
