"""Apache Pulsar itself, run from the jars `make pulsar-deps` fetches (bench/pulsar/pom.xml -> .deps/pulsar/lib).

Two ways to start it, each a real JVM on free 127.0.0.1 ports, stopped by its pid:

- ``start_standalone``: ``org.apache.pulsar.PulsarStandaloneStarter`` (one JVM: broker, one embedded bookie, metadata
  in RocksDB), configured by bench/pulsar/standalone.conf; the benchmark's ``pulsar`` kind;
- ``start_broker``: ``org.apache.pulsar.PulsarBrokerStarter`` on a ZooKeeper and bookies that already run
  (cluster/local.py), after ``PulsarClusterMetadataSetup`` has written the cluster's metadata; the mixed-broker test;
- ``start_proxy``: Pulsar's proxy, ``org.apache.pulsar.proxy.server.ProxyServiceStarter`` (the pulsar-proxy jar),
  in front of one broker (ours or Pulsar's): tests/security/test_pulsar_proxy_answers.py.

Ready means the admin API answers with the namespace ``public/default`` listed (standalone) or the broker's
``/admin/v2/brokers/health`` answers ``ok``; the proxy's HTTP port answers (whatever the status) and its binary
port accepts connections.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cluster import processes
from cluster.local import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
# Where `make pulsar-deps` puts pulsar-broker and its dependencies (override with PULSAR_LIB).
DEFAULT_LIB = REPO_ROOT / ".deps" / "pulsar" / "lib"
CONF_DIR = REPO_ROOT / "bench" / "pulsar"
STANDALONE_CONF = CONF_DIR / "standalone.conf"
LOG4J_CONF = CONF_DIR / "log4j2.properties"

# A 1 GiB heap (G1) and 1 GiB of direct memory on this 2-core machine; Pulsar's conf/pulsar_env.sh gives
# -Xms2g -Xmx2g -XX:MaxDirectMemorySize=4g (and pre-touches the heap). No -Xms and no pre-touch here, so the RSS
# shows what it uses.
HEAP_OPTS = ["-Xmx1g", "-XX:MaxDirectMemorySize=1g", "-XX:+UseG1GC"]
# What Pulsar's own launch script would give the standalone (conf/pulsar_env.sh PULSAR_MEM, and G1 as its PULSAR_GC):
# for a bench that wants Pulsar as it ships rather than sized for this machine.
PULSAR_ENV_HEAP_OPTS = ["-Xms2g", "-Xmx2g", "-XX:MaxDirectMemorySize=4g", "-XX:+UseG1GC"]
# What Pulsar's launch scripts open up on Java 17 (Netty, the load manager's /proc readings, DbLedgerStorage).
JVM_OPTS = [
    "-Djava.net.preferIPv4Stack=true", "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens", "java.base/java.io=ALL-UNNAMED", "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens", "java.base/sun.net=ALL-UNNAMED", "--add-opens", "java.management/sun.management=ALL-UNNAMED",
    "--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED", "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.platform=ALL-UNNAMED",
]
START_TIMEOUT_S = 180.0  # a cold JVM with ~300 jars on a busy 2-core machine: 30-90 s
STOP_TIMEOUT_S = 20.0


def pulsar_lib() -> Path:
    return Path(os.environ.get("PULSAR_LIB", str(DEFAULT_LIB)))


def pulsar_version() -> str:
    for jar in pulsar_lib().glob("pulsar-broker-[0-9]*.jar"):
        return jar.stem.removeprefix("pulsar-broker-")
    return "?"


def missing_dependencies(proxy: bool = False) -> str | None:
    """Why Apache Pulsar (and with ``proxy``, its proxy too) cannot be started here, or None."""
    if shutil.which("java") is None:
        return "no `java` on PATH"
    for jar in ("pulsar-broker", *(["pulsar-proxy"] if proxy else [])):
        if not any(pulsar_lib().glob(f"{jar}-[0-9]*.jar")):
            return f"no {jar} jar in {pulsar_lib()} (run `make pulsar-deps`)"
    return None


def java_command(main_class: str, *args: str, heap: list[str] | None = None) -> list[str]:
    return ["java", *(HEAP_OPTS if heap is None else heap), *JVM_OPTS,
            f"-Dlog4j.configurationFile={LOG4J_CONF}", "-cp", f"{pulsar_lib()}/*", main_class, *args]


@dataclass
class PulsarProcess:
    """One Apache Pulsar JVM: its pid, binary-protocol and HTTP ports, and its log."""

    proc: subprocess.Popen[bytes]
    port: int
    web_port: int
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def stop(self) -> None:
        """SIGTERM (Pulsar's shutdown hook closes the broker and its bookie), SIGKILL after STOP_TIMEOUT_S."""
        processes.stop(self.proc.pid, STOP_TIMEOUT_S)
        self.proc.poll()  # (reaped by the stop: the Popen learns its return code)


def http_get(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> str | None:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as resp:
            return str(resp.read().decode())
    except (urllib.error.URLError, OSError):
        return None


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _wait_ready(process: PulsarProcess, ready: str | Callable[[], bool], timeout: float,
                headers: dict[str, str] | None = None) -> None:
    """Until ``ready`` answers (a path whose body lists public/default or says ok; or a condition)."""
    def answered() -> bool:
        if callable(ready):
            return ready()
        body = http_get(process.web_url + ready, timeout=2.0, headers=headers)
        return body is not None and ("public/default" in body or body.strip() == "ok")

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.proc.poll() is not None:
            raise RuntimeError(f"Apache Pulsar exited with {process.proc.returncode}; "
                               f"log {process.log_path}:\n{_log_tail(process.log_path)}")
        if answered():
            return
        time.sleep(0.5)
    process.stop()
    raise RuntimeError(f"Apache Pulsar was not ready within {timeout:.0f} s; log {process.log_path}:\n"
                       f"{_log_tail(process.log_path)}")


def start_standalone(workdir: Path, timeout: float = START_TIMEOUT_S, heap: list[str] | None = None,
                     settings: str = "", ready_headers: dict[str, str] | None = None) -> PulsarProcess:
    """PulsarStandaloneStarter with bench/pulsar/standalone.conf, no functions worker, no stream storage; ``heap``:
    the JVM's memory options (default HEAP_OPTS); ``settings``: lines that override the file's; ``ready_headers``:
    the readiness check's HTTP headers (with authentication on: a super user's credentials)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port, web_port, bookie_port = free_port(), free_port(), free_port()
    config = workdir / "standalone.conf"
    config.write_text(STANDALONE_CONF.read_text()
                      + f"\nbrokerServicePort={port}\nwebServicePort={web_port}\nbrokerShutdownTimeoutMs=5000\n"
                      + settings)
    # cwd = workdir: the standalone picks ZooKeeper mode if ./data/standalone/zookeeper exists, RocksDB otherwise.
    command = java_command("org.apache.pulsar.PulsarStandaloneStarter", "--config", str(config),
                           "--metadata-dir", str(workdir / "metadata"), "--bookkeeper-dir", str(workdir / "bookie"),
                           "--bookkeeper-port", str(bookie_port), "--no-functions-worker", "--no-stream-storage",
                           heap=heap)
    return _start(command, workdir, workdir / "pulsar-standalone.log", port, web_port,
                  "/admin/v2/namespaces/public", timeout, ready_headers)


def _start(command: list[str], workdir: Path, log_path: Path, port: int, web_port: int,
           ready: str | Callable[[], bool], timeout: float,
           ready_headers: dict[str, str] | None = None) -> PulsarProcess:
    """Start the JVM in a session of its own (recorded in cluster/processes.py), its output to ``log_path``, and
    wait until ``ready`` answers."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True)
    processes.track(proc.pid, f"Apache Pulsar ({log_path})", group=True)
    process = PulsarProcess(proc, port, web_port, log_path)
    _wait_ready(process, ready, timeout, ready_headers)
    return process


def run_cluster_metadata_setup(cluster_name: str, zk: str, web_url: str, service_url: str, log_path: Path,
                               timeout: float = 180.0) -> None:
    """PulsarClusterMetadataSetup: the cluster, tenant `public`, namespace `public/default` in ZooKeeper."""
    with open(log_path, "wb") as log:
        subprocess.run(
            java_command("org.apache.pulsar.PulsarClusterMetadataSetup", "--cluster", cluster_name,
                         "--metadata-store", f"zk:{zk}", "--configuration-metadata-store", f"zk:{zk}",
                         "--web-service-url", web_url, "--broker-service-url", service_url,
                         heap=["-Xmx256m", "-XX:+UseSerialGC"]),
            stdout=log, stderr=subprocess.STDOUT, check=True, timeout=timeout,
        )


def start_broker(workdir: Path, settings: dict[str, str], timeout: float = START_TIMEOUT_S) -> PulsarProcess:
    """PulsarBrokerStarter with ``settings`` (Pulsar keys: metadataStoreUrl, clusterName, ...) on free ports."""
    workdir.mkdir(parents=True, exist_ok=True)
    port, web_port = free_port(), free_port()
    base = {
        "bindAddress": "127.0.0.1", "advertisedAddress": "127.0.0.1", "brokerServicePort": str(port),
        "webServicePort": str(web_port), "functionsWorkerEnabled": "false", "brokerShutdownTimeoutMs": "5000",
        "numIOThreads": "2", "numOrderedExecutorThreads": "2", "numHttpServerThreads": "4",
        "numExecutorThreadPoolSize": "2", "numCacheExecutorThreadPoolSize": "2",
        "brokerDeleteInactiveTopicsEnabled": "false", "managedLedgerCacheSizeMB": "32",
    }
    config = workdir / "broker.conf"
    config.write_text("".join(f"{k}={v}\n" for k, v in {**base, **settings}.items()))
    command = java_command("org.apache.pulsar.PulsarBrokerStarter", "--broker-conf", str(config),
                           heap=["-Xmx512m", "-XX:MaxDirectMemorySize=512m", "-XX:+UseSerialGC"])
    return _start(command, workdir, workdir / "pulsar-broker.log", port, web_port, "/admin/v2/brokers/health", timeout)


def start_proxy(workdir: Path, settings: dict[str, str], timeout: float = START_TIMEOUT_S) -> PulsarProcess:
    """Pulsar's proxy with ``settings`` (proxy.conf keys: brokerServiceURL, brokerWebServiceURL, the authentication
    keys...) on free 127.0.0.1 ports: ``port`` is its binary port (servicePort), ``web_port`` its HTTP one. Its
    proxy.conf is written to ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    port, web_port = free_port(), free_port()
    base = {
        "bindAddress": "127.0.0.1", "advertisedAddress": "127.0.0.1", "servicePort": str(port),
        "webServicePort": str(web_port), "clusterName": "standalone",
        # The proxy connects only to the brokers' ports it is told (default 6650,6651); here they are free ports.
        "brokerProxyAllowedTargetPorts": "*",
        # (Jetty needs more than 4 threads for its connector and the admin proxy's client: it refuses to start)
        "numIOThreads": "2", "numAcceptorThreads": "1", "httpNumThreads": "8",
    }
    config = workdir / "proxy.conf"
    config.write_text("".join(f"{k}={v}\n" for k, v in {**base, **settings}.items()))
    command = java_command("org.apache.pulsar.proxy.server.ProxyServiceStarter", "--config", str(config),
                           heap=["-Xmx256m", "-XX:+UseSerialGC"])

    def ready() -> bool:  # (its HTTP port answers once it has started, with 401 where credentials are wanted)
        return _http_answers(f"http://127.0.0.1:{web_port}/metrics/") and _port_open(port)

    return _start(command, workdir, workdir / "pulsar-proxy.log", port, web_port, ready, timeout)


def _http_answers(url: str) -> bool:
    """Whether an HTTP server answers ``url`` with any status."""
    try:
        with urllib.request.urlopen(url, timeout=2.0):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def admin(process: PulsarProcess, method: str, path: str, body: object | None = None, timeout: float = 30.0) -> str:
    """One admin REST call; raises on an HTTP error."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(process.web_url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data is not None else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return str(resp.read().decode())
