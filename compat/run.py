"""``make compat``: every official client's suite against brokers this script starts.

Starts two broker processes (``compat/broker_proc.py``) on free 127.0.0.1 ports, each with its own
temporary data directory: a plain one, and a secure one (TLS ports, token authentication and
authorization). Runs each client's suite (compat/java with Maven, compat/go with ``go test``,
compat/js with node's test runner, compat/rust with ``cargo test``) with
the brokers' addresses in the environment, maps each test to its scenario (compat/scenarios.py),
writes compat/results.json and renders docs/clients.md. Brokers are stopped by pid; their logs and
the clients' output stay under compat/.work/ (ignored by git) for a failed run.

Environment given to the client suites: PULSAR_URL, PULSAR_HTTP (plain broker); PULSAR_TLS_URL,
PULSAR_HTTPS, PULSAR_TOKEN (a super-user token), PULSAR_CA (the CA certificate) for the secure one.
For the Java and Go suites it also starts a cluster (scenario "cluster_lookup", cluster/local.py):
ZooKeeper, 2 bookies and 2 brokers in cluster mode; PULSAR_CLUSTER_URL, PULSAR_CLUSTER_HTTP are the
first broker's (the only address the clients are given), PULSAR_CLUSTER_URL2, PULSAR_CLUSTER_HTTP2 the
second's (for the assertion that both own topics). Without java or the BookKeeper jars the scenario
is "not covered" (CI=true: the run fails instead).
Exit status 1 when a scenario fails or has no test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt

from broker.version import __version__ as broker_version
from broker.vocabulary import BROKER_ENTRY_INTERCEPTORS
from cluster.local import broker_settings, missing_dependencies, running_cluster, start_broker
from compat import render
from compat.scenarios import ONLY, SCENARIOS, UNSUPPORTED
from tests.security.pki import HS256_SECRET, make_pki

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / "compat"
WORK = COMPAT / ".work"
RESULTS = COMPAT / "results.json"
BROKER_START_TIMEOUT_S = 60.0
CLIENT_TIMEOUT_S = 1200.0


@dataclass
class Outcome:
    # pass | fail | unsupported | n/a (the client has no such API) | not covered (no test written
    # for this client yet) | missing (no test at all: fails the run)
    status: str
    detail: str = ""
    seconds: float = 0.0


@dataclass
class ClientRun:
    client: str
    library: str
    version: str
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    seconds: float = 0.0
    log: str = ""


@contextmanager
def broker_process(name: str, settings: dict[str, Any]) -> Iterator[dict[str, str]]:
    """A broker in its own process; yields its URLs; stops it by pid (SIGTERM, then SIGKILL)."""
    data_dir = Path(tempfile.mkdtemp(prefix=f"compat-{name}-"))
    settings = {"bindAddress": "127.0.0.1", "brokerServicePort": 0, "webServicePort": 0,
                "dataDir": str(data_dir), **settings}
    settings_file = WORK / f"broker-{name}.json"
    urls_file = WORK / f"broker-{name}.urls.json"
    urls_file.unlink(missing_ok=True)
    settings_file.write_text(json.dumps(settings))
    log_path = WORK / "logs" / f"broker-{name}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "compat.broker_proc", str(settings_file), str(urls_file)],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + BROKER_START_TIMEOUT_S
        while not urls_file.exists():
            if proc.poll() is not None:
                raise SystemExit(f"broker {name} exited with {proc.returncode} at start; log: {log_path}")
            if time.monotonic() > deadline:
                raise SystemExit(f"broker {name} did not start in {BROKER_START_TIMEOUT_S:.0f} s; log: {log_path}")
            time.sleep(0.1)
        yield json.loads(urls_file.read_text())
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


# The clients that have a "cluster_lookup" test (the others show n/a).
CLUSTER_CLIENTS = {"java", "go"}


@contextmanager
def cluster_brokers(clients: list[str]) -> Iterator[dict[str, str]]:
    """ZooKeeper + 2 bookies + 2 brokers in cluster mode (cluster/local.py), all stopped by pid on exit; yields the
    PULSAR_CLUSTER_* environment, or nothing (the tests then skip as "not covered") when they cannot run here."""
    if not CLUSTER_CLIENTS & set(clients):
        yield {}
        return
    why = missing_dependencies()
    if why is not None:
        if os.environ.get("CI") == "true":
            raise SystemExit(f"compat: scenario cluster_lookup needs ZooKeeper and BookKeeper under CI: {why}")
        print(f"compat: no cluster for scenario cluster_lookup: {why}", file=sys.stderr)
        yield {}
        return
    state = WORK / "cluster"  # its logs stay for a failed run; cleared by the next one
    shutil.rmtree(state, ignore_errors=True)
    print(f"compat: starting ZooKeeper, 2 bookies and 2 brokers in cluster mode (logs under {state.relative_to(ROOT)})",
          flush=True)
    with running_cluster(state, bookies=2) as cluster:  # stops brokers, bookies and ZooKeeper by pid
        # (with the transaction coordinator: scenario cluster_transactions)
        settings = {**broker_settings(cluster, ensemble=2, write_quorum=2, ack_quorum=2),
                    "transactionCoordinatorEnabled": "true"}
        first, second = (start_broker(cluster, settings, f"broker-{i}") for i in (1, 2))
        yield {"PULSAR_CLUSTER_URL": first.service_url, "PULSAR_CLUSTER_HTTP": first.web_url,
               "PULSAR_CLUSTER_URL2": second.service_url, "PULSAR_CLUSTER_HTTP2": second.web_url}


def run_logged(cmd: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> int:
    print(f"compat: {' '.join(cmd)} (in {cwd.relative_to(ROOT)}; log {log_path.relative_to(ROOT)})", flush=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=CLIENT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return -9


def classify(scenario: str, passed: bool, detail: str, seconds: float) -> Outcome:
    if not passed:
        return Outcome("fail", detail, seconds)
    if scenario in UNSUPPORTED:
        return Outcome("unsupported", UNSUPPORTED[scenario], seconds)
    return Outcome("pass", "", seconds)


def skipped(detail: str) -> Outcome:
    """A skipped test: "n/a: why" (the client has no such API) or "not covered: why" (not written)."""
    if detail.startswith("not covered"):
        return Outcome("not covered", detail.removeprefix("not covered: "), 0.0)
    return Outcome("n/a", detail.removeprefix("n/a: "), 0.0)


def run_java(env: dict[str, str]) -> ClientRun:
    pom = (COMPAT / "java" / "pom.xml").read_text()
    m = re.search(r"<pulsar.version>([^<]+)</pulsar.version>", pom)
    run = ClientRun("Java", "org.apache.pulsar:pulsar-client + pulsar-client-admin", m.group(1) if m else "?")
    reports = COMPAT / "java" / "target" / "surefire-reports"
    shutil.rmtree(reports, ignore_errors=True)
    log = WORK / "logs" / "java.log"
    run.log = str(log.relative_to(ROOT))
    start = time.monotonic()
    cmd = ["mvn", "-B", "-q", "-f", str(COMPAT / "java" / "pom.xml"), "test", "-Dmaven.test.failure.ignore=true"]
    rc = run_logged(cmd, COMPAT / "java", env, log)
    run.seconds = time.monotonic() - start
    for xml in sorted(reports.glob("TEST-*.xml")) if reports.exists() else []:
        for case in ET.parse(xml).getroot().iter("testcase"):
            name = case.get("name", "").removesuffix("()")
            bad = case.find("failure")
            if bad is None:
                bad = case.find("error")
            detail = "" if bad is None else (bad.get("message") or bad.get("type") or "failed")[:300]
            skip = case.find("skipped")
            if skip is not None:
                run.outcomes[name] = skipped(skip.get("message") or "skipped")
            else:
                run.outcomes[name] = classify(name, bad is None, detail, float(case.get("time", "0")))
    if rc != 0 and not run.outcomes:
        print(f"compat: Maven failed ({rc}) before any test ran; see {run.log}", file=sys.stderr)
    return run


def run_go(env: dict[str, str]) -> ClientRun:
    gomod = (COMPAT / "go" / "go.mod").read_text()
    m = re.search(r"github.com/apache/pulsar-client-go (v\S+)", gomod)
    run = ClientRun("Go", "github.com/apache/pulsar-client-go", m.group(1) if m else "?")
    log = WORK / "logs" / "go.log"
    run.log = str(log.relative_to(ROOT))
    start = time.monotonic()
    rc = run_logged(["go", "test", "-count=1", "-json", "-timeout", "900s", "./..."], COMPAT / "go", env, log)
    run.seconds = time.monotonic() - start
    output: dict[str, list[str]] = {}
    for line in log.read_text(errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        test = ev.get("Test", "")
        if not test.startswith("Test_") or "/" in test:
            continue
        name = test.removeprefix("Test_")
        if ev.get("Action") == "output":
            output.setdefault(name, []).append(ev.get("Output", ""))
        elif ev.get("Action") in ("pass", "fail", "skip"):
            passed = ev["Action"] == "pass"
            lines = [x.strip() for x in output.get(name, []) if x.strip() and not x.startswith(("=== ", "--- "))]
            detail = "" if passed else (" | ".join(lines[-3:]) or ev["Action"])[:300]
            if ev["Action"] == "skip":
                run.outcomes[name] = skipped(re.sub(r"^\S+\.go:\d+: ", "", detail))
            else:
                run.outcomes[name] = classify(name, passed, detail, float(ev.get("Elapsed", 0.0)))
    if rc != 0 and not run.outcomes:
        print(f"compat: go test failed ({rc}) before any test ran; see {run.log}", file=sys.stderr)
    return run


def run_js(env: dict[str, str]) -> ClientRun:
    pkg = json.loads((COMPAT / "js" / "package.json").read_text())
    run = ClientRun("pulsar-flex", "npm pulsar-flex (pure JS)", pkg["dependencies"]["pulsar-flex"])
    log = WORK / "logs" / "js.log"
    run.log = str(log.relative_to(ROOT))
    start = time.monotonic()
    if run_logged(["npm", "ci", "--no-audit", "--no-fund"], COMPAT / "js", env, WORK / "logs" / "npm.log") != 0:
        print(f"compat: npm ci failed; see {WORK / 'logs' / 'npm.log'}", file=sys.stderr)
    # --test-force-exit: pulsar-flex keeps timers and sockets open after its consumers unsubscribe
    run_logged(["node", "--test", "--test-force-exit", "--test-reporter=tap", "compat.test.js"],
               COMPAT / "js", env, log)
    run.seconds = time.monotonic() - start
    # node's TAP: top-level results are unindented "ok N - name [# SKIP reason]" / "not ok N - name"
    lines = log.read_text(errors="replace").splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(ok|not ok) \d+ - (\w+)(?: # SKIP (.*))?$", line)
        if m is None:
            continue
        name = m.group(2)
        if m.group(3) is not None:
            run.outcomes[name] = skipped(m.group(3))
            continue
        passed = m.group(1) == "ok"
        detail = ""
        if not passed:
            block = [x.strip() for x in lines[i + 1:i + 30] if x.strip().startswith(("error:", "message:"))]
            detail = " | ".join(block)[:300] or "failed"
        run.outcomes[name] = classify(name, passed, detail, 0.0)
    return run


def run_rust(env: dict[str, str]) -> ClientRun:
    toml = (COMPAT / "rust" / "Cargo.toml").read_text()
    m = re.search(r'pulsar = \{ version = "=?([^"]+)"', toml)
    run = ClientRun("Rust", "crate pulsar (pulsar-rs)", m.group(1) if m else "?")
    log = WORK / "logs" / "rust.log"
    run.log = str(log.relative_to(ROOT))
    start = time.monotonic()
    # Build outputs outside the clone, so that CI's fresh clones reuse the compiled crates (the first
    # pulsar-rs build takes minutes); Maven (~/.m2) and Go (GOCACHE) cache outside the clone already.
    target = os.environ.get("CARGO_TARGET_DIR") or str(Path.home() / ".cache" / "pulsar-py-broker" / "compat-rust")
    run_logged(["cargo", "test", "--tests", "--", "--test-threads=4"], COMPAT / "rust",
               {**env, "CARGO_TARGET_DIR": target}, log)
    run.seconds = time.monotonic() - start
    text = log.read_text(errors="replace")
    for m2 in re.finditer(r"^test (\w+) \.\.\. (ok|FAILED|ignored)(?:, (.*))?$", text, re.M):
        name, result, reason = m2.group(1), m2.group(2), m2.group(3)
        if result == "ignored":
            run.outcomes[name] = skipped(reason or "ignored")
            continue
        detail = ""
        if result == "FAILED":
            block = re.search(rf"---- {name} stdout ----\n(.*?)(?:\n\n|\Z)", text, re.S)
            detail = " ".join(block.group(1).split())[:300] if block else "failed"
        run.outcomes[name] = classify(name, result == "ok", detail, 0.0)
    return run


RUNNERS = {"java": run_java, "go": run_go, "js": run_js, "rust": run_rust}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="java,go,js,rust", help="comma-separated: " + ",".join(RUNNERS))
    args = parser.parse_args()
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    for c in clients:
        if c not in RUNNERS:
            parser.error(f"unknown client {c!r}; known: {', '.join(RUNNERS)}")
    tools = {"java": ("mvn", "java"), "go": ("go",), "js": ("node", "npm"), "rust": ("cargo", "protoc")}
    missing = sorted({t for c in clients for t in tools[c] if shutil.which(t) is None})
    if missing:
        # never a silent skip: the suite exists to prove these clients
        raise SystemExit(f"compat: {', '.join(missing)} not found on PATH: install a JDK 17 + Maven and Go "
                         "(or run only some clients: make compat COMPAT_CLIENTS=go)")
    (WORK / "logs").mkdir(parents=True, exist_ok=True)
    pki = make_pki(Path(tempfile.mkdtemp(prefix="compat-pki-")))
    token = jwt.encode({"sub": "admin"}, HS256_SECRET, algorithm="HS256")
    secure = dict(
        brokerServicePortTls=0, webServicePortTls=0,
        tlsCertificateFilePath=str(pki.server_cert), tlsKeyFilePath=str(pki.server_key),
        tlsTrustCertsFilePath=str(pki.ca_cert),
        authenticationEnabled=True,
        authenticationProviders="org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        tokenSecretKey=f"file://{pki.secret_key}",
        authorizationEnabled=True, superUserRoles="admin",
    )
    started = time.monotonic()
    runs: list[ClientRun] = []
    try:
        # The plain broker runs the transaction coordinator (scenario "transactions") and stamps and
        # exposes broker entry metadata (scenario "broker_entry_metadata").
        plain_settings = {"transactionCoordinatorEnabled": True,
                          "brokerEntryMetadataInterceptors": list(BROKER_ENTRY_INTERCEPTORS),
                          "exposingBrokerEntryMetadataToClientEnabled": True}
        with (broker_process("plain", plain_settings) as plain, broker_process("secure", secure) as sec,
              cluster_brokers(clients) as cluster):
            env = {**os.environ, **cluster, "PULSAR_URL": plain["service_url"], "PULSAR_HTTP": plain["web_url"],
                   "PULSAR_TLS_URL": sec["service_url_tls"], "PULSAR_HTTPS": sec["web_url_tls"],
                   "PULSAR_TOKEN": token, "PULSAR_CA": str(pki.ca_cert)}
            for c in clients:
                runs.append(RUNNERS[c](env))
    finally:
        shutil.rmtree(pki.dir, ignore_errors=True)
    for run in runs:
        for sid in SCENARIOS:
            only = ONLY.get(sid)
            if only is not None and run.client not in only:
                run.outcomes.setdefault(sid, Outcome("n/a", f"only for {', '.join(sorted(only))}"))
            run.outcomes.setdefault(sid, Outcome("missing", "no test for this scenario"))
    result = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "broker_version": broker_version,
        "seconds": round(time.monotonic() - started, 1),
        "scenarios": SCENARIOS,
        "clients": [{"client": r.client, "library": r.library, "version": r.version, "seconds": round(r.seconds, 1),
                     "log": r.log,
                     "results": {sid: {"status": o.status, "detail": o.detail, "seconds": round(o.seconds, 2)}
                                 for sid, o in sorted(r.outcomes.items(), key=lambda kv: list(SCENARIOS).index(kv[0])
                                                      if kv[0] in SCENARIOS else 999)}}
                    for r in runs],
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    render.write(result)
    bad = 0
    for r in runs:
        counts: dict[str, int] = {}
        for o in r.outcomes.values():
            counts[o.status] = counts.get(o.status, 0) + 1
        print(f"compat: {r.client} {r.version}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
              + f" in {r.seconds:.0f} s")
        for sid, o in r.outcomes.items():
            if o.status in ("fail", "missing"):
                bad += 1
                print(f"  FAIL {sid}: {o.detail}  (log {r.log}; brokers: compat/.work/logs/)")
    print(f"compat: total {time.monotonic() - started:.0f} s; results in {RESULTS.relative_to(ROOT)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
