"""A local ZooKeeper + BookKeeper cluster of real Java processes, for tests and `make cluster-up`.

ZooKeeper is Debian's `zookeeper` package (standalone `ZooKeeperServerMain`, falling back to the ZooKeeper jars
that come with BookKeeper); the bookies are `org.apache.bookkeeper.server.Main` from the jars `make cluster-deps`
copies into `.deps/bookkeeper/lib`. Every process gets a free 127.0.0.1 port and its own directory under the
cluster's state directory, and is stopped by its pid. Readiness is a condition polled with a deadline: ZooKeeper
answers a session, a bookie's registration znode `/ledgers/available/127.0.0.1:<port>` exists.

The metadata is formatted the way BookKeeper does it, by its own shell (`BookieShell initnewcluster`), before the
first bookie starts: that writes `/ledgers`, `/ledgers/available`, `/ledgers/available/readonly`,
`/ledgers/INSTANCEID` and `/ledgers/LAYOUT`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kazoo.client import KazooClient

from cluster import processes

REPO_ROOT = Path(__file__).resolve().parent.parent
# Where `make cluster-deps` puts bookkeeper-server and its dependencies (override with BOOKKEEPER_LIB).
DEFAULT_LIB = REPO_ROOT / ".deps" / "bookkeeper" / "lib"
# Debian's zookeeper package: its jar lists its own dependencies in the manifest's Class-Path.
DEBIAN_ZK_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
LEDGERS_ROOT = "/ledgers"

# Small JVMs: a test machine has 2 cores shared with other work. The script defaults (1 GiB heap, 2 GiB direct) are
# for production bookies.
BOOKIE_JVM_OPTS = [
    "-Xms64m", "-Xmx256m", "-XX:MaxDirectMemorySize=256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
    "-Djava.net.preferIPv4Stack=true", "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/java.io=ALL-UNNAMED", "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
]
# (srvr, ZooKeeper's default four-letter word, and wchs: its watch count, which tests read)
ZK_JVM_OPTS = ["-Xms32m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Dzookeeper.admin.enableServer=false", "-Djava.net.preferIPv4Stack=true",
               "-Dzookeeper.4lw.commands.whitelist=srvr,wchs"]
TOOL_JVM_OPTS = ["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *BOOKIE_JVM_OPTS[5:]]

# How long a process may take to become ready: JVM start-up on a busy 2-core machine can take several seconds.
START_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.1


class ClusterError(RuntimeError):
    """The local cluster could not be started (missing dependencies, a process died or was not ready in time)."""


@dataclass(frozen=True)
class ProcessInfo:
    role: str  # "zookeeper" | "bookie"
    pid: int
    address: str  # host:port
    directory: str
    log: str


@dataclass(frozen=True)
class BrokerInfo:
    """One of our brokers (`python -m broker standalone`) on the cluster's BookKeeper and ZooKeeper."""

    role: str  # "broker"
    pid: int
    service_url: str  # pulsar://127.0.0.1:<port>
    web_url: str  # http://127.0.0.1:<port>
    directory: str
    log: str


@dataclass
class LocalCluster:
    """What runs, and how to reach it; `cluster.json` is this, serialized."""

    state_dir: str
    zookeeper: ProcessInfo
    bookies: list[ProcessInfo] = field(default_factory=list)
    brokers: list[BrokerInfo] = field(default_factory=list)

    @property
    def zk_address(self) -> str:
        return self.zookeeper.address

    @property
    def metadata_store_url(self) -> str:
        """Pulsar's `metadataStoreUrl` for this ZooKeeper (the root; the ledgers live under /ledgers)."""
        return f"zk:{self.zk_address}"

    @property
    def metadata_service_uri(self) -> str:
        """BookKeeper's `metadataServiceUri` (bookies and BK clients)."""
        return f"zk://{self.zk_address}{LEDGERS_ROOT}"

    def bookie_conf(self, address: str) -> Path:
        return Path(self.state_dir) / f"bookie-{address.rsplit(':', 1)[1]}" / "bk_server.conf"

    def to_json(self) -> str:
        body = {
            "zookeeper": asdict(self.zookeeper),
            "bookies": [asdict(b) for b in self.bookies],
            "metadataStoreUrl": self.metadata_store_url,
            "bookkeeperMetadataServiceUri": self.metadata_service_uri,
            "ledgersRootPath": LEDGERS_ROOT,
            "brokers": [asdict(b) for b in self.brokers],
            "stateDir": self.state_dir,
        }
        return json.dumps(body, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> LocalCluster:
        body = json.loads(text)
        return cls(
            state_dir=body["stateDir"],
            zookeeper=ProcessInfo(**body["zookeeper"]),
            bookies=[ProcessInfo(**b) for b in body["bookies"]],
            brokers=[BrokerInfo(**b) for b in body.get("brokers", [])],
        )

    def pids(self) -> list[int]:
        """Everything that runs, in stopping order: brokers, bookies, ZooKeeper."""
        return [b.pid for b in self.brokers] + [b.pid for b in self.bookies] + [self.zookeeper.pid]


# ---- dependencies ------------------------------------------------------------------------------------------------


def bookkeeper_lib() -> Path:
    return Path(os.environ.get("BOOKKEEPER_LIB", str(DEFAULT_LIB)))


def missing_dependencies() -> str | None:
    """Why a cluster cannot start here, or None when it can."""
    if shutil.which("java") is None:
        return "no `java` on PATH"
    lib = bookkeeper_lib()
    if not list(lib.glob("bookkeeper-server-*.jar")):
        return f"no bookkeeper-server jar in {lib} (run `make cluster-deps`)"
    return None


def _bk_classpath() -> str:
    return str(bookkeeper_lib() / "*")


def _zk_classpath() -> str:
    if Path("/usr/share/java/zookeeper.jar").exists():
        return DEBIAN_ZK_CLASSPATH
    return _bk_classpath()  # BookKeeper depends on the ZooKeeper jars, server classes included


# ---- small helpers -----------------------------------------------------------------------------------------------


def free_port() -> int:
    """A port free on 127.0.0.1 now (the kernel's choice for port 0); the caller binds it soon after."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(condition: Callable[[], bool], what: str, timeout: float = START_TIMEOUT_S,
               alive: subprocess.Popen[bytes] | None = None, log: Path | None = None) -> None:
    """Poll `condition` until true; fail early if the process we wait for has exited."""
    deadline = time.monotonic() + timeout
    while not condition():
        if alive is not None and alive.poll() is not None:
            raise ClusterError(f"{what}: the process exited with {alive.returncode}{_log_tail(log)}")
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}{_log_tail(log)}")
        time.sleep(POLL_INTERVAL_S)


def _log_tail(log: Path | None, lines: int = 30) -> str:
    if log is None or not log.exists():
        return ""
    tail = log.read_text(errors="replace").splitlines()[-lines:]
    return f"\n--- last lines of {log} ---\n" + "\n".join(tail)


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _zk_ready(port: int) -> bool:
    """ZooKeeper answers the `srvr` four-letter word (whitelisted by default) with its mode once it serves."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"srvr")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
    except OSError:
        return False
    return b"Mode:" in reply


def _spawn(cmd: list[str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        # A session of its own: `make cluster-up` returns while the cluster runs, and a Ctrl-C in the caller's
        # terminal does not reach the JVMs; they are stopped by pid only.
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cwd, start_new_session=True)
    processes.track(proc.pid, str(log), group=True)
    return proc


# ---- the cluster -------------------------------------------------------------------------------------------------


def _bookie_conf_text(port: int, zk: str, directory: Path, overrides: dict[str, str] | None = None) -> str:
    settings = dict(line.split("=", 1) for line in _bookie_conf_lines(port, zk, directory))
    settings.update(overrides or {})  # (a key twice would be a list to BookKeeper's configuration: replace it)
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def _bookie_conf_lines(port: int, zk: str, directory: Path) -> list[str]:
    return [
        f"bookiePort={port}",
        "advertisedAddress=127.0.0.1",
        "listeningInterface=lo",
        "allowLoopback=true",
        f"metadataServiceUri=zk://{zk}{LEDGERS_ROOT}",
        f"journalDirectories={directory / 'journal'}",
        f"ledgerDirectories={directory / 'ledgers'}",
        # A nearly full test disk must not turn the bookies read-only.
        "diskUsageThreshold=0.99",
        "diskUsageWarnThreshold=0.98",
        # Tests only: acknowledge adds before the journal fsync.
        "journalSyncData=false",
        # Pulsar's bookkeeper.conf value (5 MiB + 10 KiB).
        "nettyMaxFrameSizeBytes=5253120",
        "httpServerEnabled=false",
    ]


def missing_zookeeper() -> str | None:
    """Why a ZooKeeper server cannot start here (needs only java and ZooKeeper's jars), or None."""
    if shutil.which("java") is None:
        return "no `java` on PATH"
    if not Path("/usr/share/java/zookeeper.jar").exists() and not list(bookkeeper_lib().glob("zookeeper-*.jar")):
        return f"no Debian zookeeper package, no ZooKeeper jars in {bookkeeper_lib()} (run `make cluster-deps`)"
    return None


def start_zookeeper(state: Path, port: int | None = None, tick_ms: int | None = None) -> ProcessInfo:
    """A standalone ZooKeeper in ``state/zookeeper`` (on ``port``, default a free one). Starting it again with the
    same state and port is a restart: it keeps its data and its sessions. ``tick_ms`` (ZooKeeper's tickTime,
    default 3000) bounds the session timeouts it grants: from 2 to 20 ticks."""
    port = free_port() if port is None else port
    directory = state / "zookeeper"
    directory.mkdir(parents=True, exist_ok=True)
    log = state / "zookeeper.log"
    cmd = ["java", *ZK_JVM_OPTS, "-cp", _zk_classpath(),
           "org.apache.zookeeper.server.ZooKeeperServerMain", str(port), str(directory)]
    if tick_ms is not None:
        cmd.append(str(tick_ms))
    proc = _spawn(cmd, log, state)
    info = ProcessInfo("zookeeper", proc.pid, f"127.0.0.1:{port}", str(directory), str(log))
    try:
        wait_until(lambda: _zk_ready(port), f"ZooKeeper on port {port}", alive=proc, log=log)
    except BaseException:
        processes.stop(proc.pid)
        raise
    return info


def run_bookkeeper_tool(
    state: Path, conf: Path, *args: str, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run a BookKeeper command-line tool (BookieShell by default) with the given bookie configuration."""
    cmd = ["java", *TOOL_JVM_OPTS, "-cp", _bk_classpath(),
           "org.apache.bookkeeper.bookie.BookieShell", "-conf", str(conf), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=state, timeout=timeout, check=False)


def format_metadata(state: Path, zk: str) -> None:
    """`bookkeeper shell initnewcluster`: BookKeeper's own layout of /ledgers in a fresh ZooKeeper."""
    conf = state / "tool.conf"
    conf.write_text(f"metadataServiceUri=zk://{zk}{LEDGERS_ROOT}\n")
    done = run_bookkeeper_tool(state, conf, "initnewcluster")
    if done.returncode != 0:
        raise ClusterError(f"initnewcluster failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def start_bookie(state: Path, zk: str, conf_overrides: dict[str, str] | None = None,
                 wrapper: list[str] | None = None) -> tuple[ProcessInfo, subprocess.Popen[bytes]]:
    """Start one bookie (not waiting for it). ``conf_overrides``: bk_server.conf keys to set (e.g. ledger
    directories, disk thresholds); ``wrapper``: a command line the java command is appended to, which must exec it
    (so the pid is the bookie's), e.g. one that mounts a small tmpfs in a private mount namespace first."""
    port = free_port()
    directory = state / f"bookie-{port}"
    directory.mkdir(parents=True, exist_ok=True)
    conf = directory / "bk_server.conf"
    conf.write_text(_bookie_conf_text(port, zk, directory, conf_overrides))
    log = directory / "bookie.log"
    cmd = [*(wrapper or []), "java", *BOOKIE_JVM_OPTS, "-cp", _bk_classpath(), "org.apache.bookkeeper.server.Main",
           "--conf", str(conf)]
    proc = _spawn(cmd, log, directory)
    return ProcessInfo("bookie", proc.pid, f"127.0.0.1:{port}", str(directory), str(log)), proc


@contextlib.contextmanager
def _zk_client(zk: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk, timeout=5.0)
    client.start(timeout=10.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _wait_registered(zk: str, info: ProcessInfo, proc: subprocess.Popen[bytes]) -> None:
    """Wait until the bookie's writable registration znode exists (what clients discover bookies by)."""
    with _zk_client(zk) as client:
        wait_until(lambda: client.exists(f"{LEDGERS_ROOT}/available/{info.address}") is not None,
                   f"bookie {info.address} to register", alive=proc, log=Path(info.log))


def start_cluster(state_dir: Path | str, bookies: int = 3) -> LocalCluster:
    """ZooKeeper, formatted metadata, then `bookies` bookies, all ready. On failure, stops what it started."""
    why = missing_dependencies()
    if why is not None:
        raise ClusterError(f"cannot start a BookKeeper cluster: {why}")
    state = Path(state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    zk = start_zookeeper(state)
    cluster = LocalCluster(str(state), zk)
    try:
        format_metadata(state, zk.address)
        started = [start_bookie(state, zk.address) for _ in range(bookies)]
        cluster.bookies = [info for info, _ in started]
        for info, proc in started:
            _wait_registered(zk.address, info, proc)
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def add_bookie(cluster: LocalCluster, conf_overrides: dict[str, str] | None = None,
               wrapper: list[str] | None = None) -> ProcessInfo:
    """Start one more bookie in a running cluster (e.g. to replace a killed one) and wait until it registers
    (``start_bookie`` for the arguments)."""
    info, proc = start_bookie(Path(cluster.state_dir), cluster.zk_address, conf_overrides, wrapper)
    cluster.bookies.append(info)
    _wait_registered(cluster.zk_address, info, proc)
    return info


def restart_bookie(cluster: LocalCluster, info: ProcessInfo) -> ProcessInfo:
    """Start again a bookie stopped by ``kill_bookie`` (same address, same directory, so same data) and wait until
    it registers."""
    directory = Path(info.directory)
    cmd = ["java", *BOOKIE_JVM_OPTS, "-cp", _bk_classpath(), "org.apache.bookkeeper.server.Main", "--conf",
           str(directory / "bk_server.conf")]
    proc = _spawn(cmd, Path(info.log), directory)
    again = ProcessInfo("bookie", proc.pid, info.address, info.directory, info.log)
    cluster.bookies.append(again)
    _wait_registered(cluster.zk_address, again, proc)
    return again


def kill_bookie(cluster: LocalCluster, address: str, hard: bool = True) -> None:
    """Stop one bookie: SIGKILL (a crash) by default, else a graceful stop."""
    info = next(b for b in cluster.bookies if b.address == address)
    if hard:
        with contextlib.suppress(ProcessLookupError):
            os.kill(info.pid, signal.SIGKILL)
    processes.stop(info.pid)
    cluster.bookies.remove(info)


# ---- brokers -----------------------------------------------------------------------------------------------------

# The line the broker logs once it serves (broker/server.py): its plain URLs first.
BROKER_READY_RE = re.compile(r"broker ready in [\d.]+ s: (pulsar://\S+)\s+(http://\S+)")
BROKER_START_TIMEOUT_S = 60.0


def broker_settings(cluster: LocalCluster, chroot: str = "", ensemble: int = 2, write_quorum: int = 2,
                    ack_quorum: int = 2) -> dict[str, str]:
    """Pulsar's keys for a broker on this cluster: topics on BookKeeper, metadata in ZooKeeper (under `chroot`,
    e.g. "/test-1", when given; BookKeeper's ledgers stay under /ledgers at the root)."""
    return {
        "managedLedgerStorage": "bookkeeper",
        "metadataStoreUrl": f"zk:{cluster.zk_address}{chroot}",
        "bookkeeperMetadataServiceUri": f"zk+hierarchical://{cluster.zk_address}{LEDGERS_ROOT}",
        "managedLedgerDefaultEnsembleSize": str(ensemble),
        "managedLedgerDefaultWriteQuorum": str(write_quorum),
        "managedLedgerDefaultAckQuorum": str(ack_quorum),
    }


def start_broker(cluster: LocalCluster, settings: dict[str, str] | None = None, name: str | None = None,
                 port: int | None = None, timeout: float = BROKER_START_TIMEOUT_S,
                 web_port: int | None = None, bind_address: str = "127.0.0.1",
                 command_prefix: Sequence[str] = ()) -> BrokerInfo:
    """Start `python -m broker standalone` on free ports with `settings` (default: `broker_settings(cluster)`)
    written to its config file, wait for its ready line in its log, and record it in `cluster.brokers`.
    Starting one again with the same `name` reuses its directory (its log is appended to); `port` (default a free
    one) lets a restarted broker take its predecessor's binary port, so clients reconnect to it; with `web_port` too
    it is the same broker to the cluster (Pulsar's broker id is host:webport), which takes back at once the bundles
    its previous run owned. ``bind_address`` (another 127.0.0.x) makes it a broker of another host to the others
    (isolation policies match hosts); with ``command_prefix`` (e.g. ``ip netns exec <ns>``) it runs in a network
    namespace of a test's own (tests/cluster/netns.py); its ``advertisedAddress`` comes with ``settings``."""
    settings = broker_settings(cluster) if settings is None else settings
    state = Path(cluster.state_dir)
    directory = state / (name or f"broker-{len(cluster.brokers) + 1}")
    directory.mkdir(parents=True, exist_ok=True)
    conf = directory / "broker.conf"
    conf.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    log = directory / "broker.log"
    offset = log.stat().st_size if log.exists() else 0
    cmd = [*command_prefix, sys.executable, "-m", "broker", "standalone", "--config", str(conf),
           "--port", str(port or 0), "--web-port", str(web_port or 0), "--data-dir", str(directory / "data"),
           "--bind-address", bind_address]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO_ROOT,
                                env=env, start_new_session=True)
    processes.track(proc.pid, f"broker {directory.name}", group=True)
    urls: list[str] = []

    def ready() -> bool:
        with open(log, "rb") as f:
            f.seek(offset)
            m = BROKER_READY_RE.search(f.read().decode(errors="replace"))
        if m:
            urls[:] = [m.group(1), m.group(2)]
        return m is not None

    try:
        wait_until(ready, f"broker {directory.name}", timeout=timeout, alive=proc, log=log)
    except BaseException:
        processes.stop(proc.pid)
        raise
    info = BrokerInfo("broker", proc.pid, urls[0], urls[1], str(directory), str(log))
    cluster.brokers.append(info)
    return info


def kill_broker(cluster: LocalCluster, info: BrokerInfo) -> None:
    """kill -9 one broker (a crash) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGKILL)
    processes.stop(info.pid)
    cluster.brokers.remove(info)


def stop_process(pid: int) -> None:
    """Stop one process of ours by pid: SIGTERM, then SIGKILL after a grace period."""
    processes.stop(pid)


def stop_cluster(cluster: LocalCluster) -> None:
    """Stop every process of the cluster by pid (bookies first, then ZooKeeper)."""
    for pid in cluster.pids():
        processes.stop(pid)


@contextlib.contextmanager
def running_cluster(state_dir: Path | str, bookies: int = 3) -> Iterator[LocalCluster]:
    cluster = start_cluster(state_dir, bookies)
    try:
        yield cluster
    finally:
        stop_cluster(cluster)
