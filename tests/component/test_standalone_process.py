"""The `python -m broker standalone` process: ports 0, health, graceful SIGTERM/SIGINT."""

from __future__ import annotations

import re
import resource
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pulsar
import pytest

from broker.embedded import BrokerThread
from cluster import processes
from tests.reliability.broker_process import await_ready
from tests.waiting import wait_for


def start_broker(tmp_path: Path, *extra: str, wrapper: tuple[str, ...] = ()) -> tuple[subprocess.Popen[str], int, int]:
    proc = subprocess.Popen(
        [*wrapper, sys.executable, "-m", "broker", "standalone", "--port", "0", "--web-port", "0",
         "--data-dir", str(tmp_path / "data"), "--bind-address", "127.0.0.1", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    processes.track(proc.pid, f"broker ({tmp_path})")
    port, web_port = await_ready(proc)
    return proc, port, web_port


def assert_stopped_cleanly(proc: subprocess.Popen[str]) -> None:
    assert proc.wait(timeout=30) == 0
    out = proc.stdout.read() if proc.stdout else ""
    assert "broker stopped" in out


def kill_if_running(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_process_serves_and_stops_gracefully(tmp_path: Path, sig: signal.Signals) -> None:
    proc, port, web_port = start_broker(tmp_path)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/admin/v2/brokers/health", timeout=5) as r:
            assert r.read() == b"ok"
        client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=10)
        consumer = client.subscribe("proc-topic", "sub")
        client.create_producer("proc-topic").send(b"hi")
        assert consumer.receive(10_000).data() == b"hi"
        client.close()
        proc.send_signal(sig)
        assert_stopped_cleanly(proc)
    finally:
        kill_if_running(proc)


def post(web_port: int, path: str) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{web_port}{path}", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_admin_api_shuts_the_process_down_gracefully(tmp_path: Path) -> None:
    """pulsar-admin brokers shutdown (POST /admin/v2/brokers/shutdown): 204, then the process stops as on SIGTERM,
    status 0, what it stored kept. A parameter Pulsar could not read is a 404 and stops nothing."""
    proc, port, web_port = start_broker(tmp_path)
    try:
        client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=10)
        client.subscribe("kept", "sub").close()
        client.create_producer("kept").send(b"stored")
        client.close()
        assert post(web_port, "/admin/v2/brokers/shutdown?maxConcurrentUnloadPerSec=x") == 404
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/admin/v2/brokers/health", timeout=5) as r:
            assert r.read() == b"ok"
        assert post(web_port, "/admin/v2/brokers/shutdown?maxConcurrentUnloadPerSec=5&forcedTerminateTopic=true") == 204
        assert_stopped_cleanly(proc)
    finally:
        kill_if_running(proc)
    proc, port, _ = start_broker(tmp_path)
    try:
        client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=10)
        assert client.subscribe("kept", "sub").receive(10_000).data() == b"stored"
        client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_admin_api_stops_an_embedded_broker(tmp_path: Path) -> None:
    broker = BrokerThread(data_dir=tmp_path).start()
    try:
        web_port = int(broker.web_url.rsplit(":", 1)[1])
        assert post(web_port, "/admin/v2/brokers/shutdown") == 204
        wait_for(lambda: not broker.running, what="the broker's thread to end")
    finally:
        broker.stop()  # (stopped already: nothing to do, no error)


def test_bad_config_file_is_a_clear_error(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("brokerServicePort=not-a-number\n")
    r = subprocess.run([sys.executable, "-m", "broker", "standalone", "--config", str(conf)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "brokerServicePort" in r.stderr


@pytest.mark.parametrize(("settings", "flags", "line"), [
    ("brokerServicePort=70000\n", (),
     "brokerServicePort=70000: expected a port 0-65535 (0 picks a free port; empty disables the listener) ({conf}:1)"),
    ("clusterName=c\nmanagedLedgerCacheSizeMB=-5\n", (),
     "managedLedgerCacheSizeMB=-5: expected an integer >= 0 (0 = no read cache) ({conf}:2)"),
    ("", ("--port", "70000"),
     "brokerServicePort=70000: expected a port 0-65535 (0 picks a free port; empty disables the listener)"),
])
def test_a_bad_value_stops_the_process_with_one_line(tmp_path: Path, settings: str, flags: tuple[str, ...],
                                                     line: str) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text(settings)
    r = subprocess.run([sys.executable, "-m", "broker", "standalone", "--config", str(conf),
                        "--data-dir", str(tmp_path / "data"), *flags],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["configuration error: " + line.format(conf=conf)]
    assert r.stdout == ""


def test_a_value_refused_at_start_stops_the_process_with_one_line(tmp_path: Path) -> None:
    """Checks that need the listeners parsed (broker.listeners) run as the broker starts."""
    conf = tmp_path / "bad.conf"
    conf.write_text("advertisedListeners=internal:http://127.0.0.1:6650\n")
    r = subprocess.run([sys.executable, "-m", "broker", "standalone", "--config", str(conf), "--port", "0",
                        "--web-port", "0", "--data-dir", str(tmp_path / "data"), "--bind-address", "127.0.0.1"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.splitlines()[-1].startswith("configuration error: advertisedListeners: ")
    assert sum("configuration error" in x for x in r.stderr.splitlines()) == 1


def test_process_raises_its_open_file_limit_to_the_hard_limit(tmp_path: Path) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard limit ({hard}) leaves nothing to raise")

    # The shell lowers the soft limit, then becomes the broker (exec keeps the pid).
    proc, _, _ = start_broker(tmp_path, wrapper=("bash", "-c", 'ulimit -Sn 256 && exec "$0" "$@"'))
    try:
        limits = Path(f"/proc/{proc.pid}/limits").read_text()
        soft_now, hard_now = re.search(r"Max open files\s+(\S+)\s+(\S+)", limits).groups()  # type: ignore[union-attr]
        assert soft_now == hard_now != "256"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
