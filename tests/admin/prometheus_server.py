"""A real Prometheus server for tests: started on a free port scraping given targets, always stopped."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cluster import processes
from tests.waiting import wait_for

# Prometheus 2.42 applies discovered targets after a fixed 5 s, then scrapes every 500 ms; a rate
# needs two scrapes in its window.
PROMETHEUS_WAIT_S = 30.0
STOP_TIMEOUT_S = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def prometheus_server(prometheus_bin: str, target: str, tmp_path: Path) -> Iterator[str]:
    """Prometheus scraping ``target`` (host:port) every 500 ms; yields its base URL once ready."""
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 500ms\n  evaluation_interval: 500ms\n"
        "scrape_configs:\n  - job_name: pulsar\n    metrics_path: /metrics\n"
        f"    static_configs:\n      - targets: ['{target}']\n")
    port = free_port()
    log_path = tmp_path / "prometheus.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [f"{prometheus_bin}/prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    processes.track(proc.pid, "prometheus")
    url = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        wait_for(ready, PROMETHEUS_WAIT_S, "prometheus ready")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)
        log.close()


def query(url: str, promql: str) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}", timeout=5) as r:
        reply = json.loads(r.read())
    assert reply["status"] == "success", reply
    return list(reply["data"]["result"])


def metric_names(url: str) -> set[str]:
    """Every metric name Prometheus has stored."""
    with urllib.request.urlopen(f"{url}/api/v1/label/__name__/values", timeout=5) as r:
        reply = json.loads(r.read())
    assert reply["status"] == "success", reply
    return set(reply["data"])
