"""The official Java client (pulsar-client 4.0.13, the version `make compat` proves) with a token supplier whose tokens
expire, against Apache Pulsar 4.0.7 and against ours: tests/security/java/TokenRefresh.java.

Both brokers get the settings of tests/security/test_pulsar_auth_answers.py (token provider, authorization, ``admin``
the super user) and ``authenticationRefreshCheckSeconds=1``, as tests/security/test_pulsar_refresh_answers.py (which
asks the same of raw connections and of the Python client). The Java program runs two clients at once:

- ``fresh``: the supplier makes a new token each time it is asked; a producer and a consumer live through two expiries
  (each an AUTH_CHALLENGE the client answers from the supplier), producing after each: everything sent arrives and
  neither reconnects;
- ``stale``: the supplier keeps giving its first token; after it expires: whether the producer and the consumer lose
  their connection, what a send and a new producer then get (the exception's type); then the supplier makes fresh
  tokens again: whether both come back by themselves, and which messages the consumer gets.

``DIFFERENCES`` lists where ours answers otherwise on purpose (none now). Timing is never compared: each wait only
bounds how long the program watches for something.

Needs java, javac and mvn: the client's jars are those Maven resolves for compat/java/pom.xml (the cache `make compat`
fills; fetched from Maven Central when missing). Cost: one Pulsar standalone start, then about 50 s per broker.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from cluster.apache_pulsar import REPO_ROOT
from tests.needs import unavailable
from tests.security.conftest import SUPER_USER
from tests.security.pki import Pki
from tests.security.test_pulsar_auth_answers import Answers, Endpoints, admin, ask_both

pytestmark = [pytest.mark.apache_pulsar, pytest.mark.timeout(900)]

JAVA_SOURCE = Path(__file__).parent / "java" / "TokenRefresh.java"
COMPAT_POM = REPO_ROOT / "compat" / "java" / "pom.xml"
REFRESH_CHECK_S = 1  # authenticationRefreshCheckSeconds on both
TOKEN_LIFE_S = 10  # a token's life: the producer and consumer are open well before it ends (topics made first)
BUILD_TIMEOUT_S = 300  # Maven and javac, cold, on a busy 2-core machine
RUN_TIMEOUT_S = 300  # the program's own waits end well before (TokenRefresh.WAIT_S per step)


def java_client_classpath(workdir: Path) -> str:
    """The classpath of the Java client of compat/java/pom.xml (pulsar-client 4.0.13 and what it needs), from the local
    Maven repository, or fetched by Maven when it is not there yet."""
    out = workdir / "classpath.txt"
    base = ["mvn", "-q", "-B", "-f", str(COMPAT_POM), "dependency:build-classpath", f"-Dmdep.outputFile={out}",
            "-Dmdep.includeScope=test"]
    for offline in (["-o"], []):
        if subprocess.run(base + offline, capture_output=True, timeout=BUILD_TIMEOUT_S).returncode == 0:
            return out.read_text().strip()
    unavailable("Java client test: Maven could not resolve compat/java/pom.xml's dependencies")


@pytest.fixture(scope="module")
def token_refresh(tmp_path_factory: pytest.TempPathFactory) -> str:
    """TokenRefresh compiled against the Java client: the classpath to run it with."""
    missing = [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]
    if missing:
        unavailable(f"Java client test: no {', '.join(missing)} on PATH")
    work = tmp_path_factory.mktemp("java-refresh")
    classpath = java_client_classpath(work)
    classes = work / "classes"
    subprocess.run(["javac", "-nowarn", "-cp", classpath, "-d", str(classes), str(JAVA_SOURCE)],
                   check=True, capture_output=True, timeout=BUILD_TIMEOUT_S)
    return f"{classes}:{classpath}"


def ask_java(classpath: str, e: Endpoints) -> Answers:
    topics = {name: f"persistent://public/default/java-refresh-{name}-{uuid.uuid4().hex[:8]}"
              for name in ("fresh", "stale")}
    for topic in topics.values():  # (made first: the clients' first requests are quick on both)
        admin(e, "PUT", f"/admin/v2/{topic.replace('://', '/')}")
    run = subprocess.run(
        ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
         "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath, "TokenRefresh",
         f"pulsar://127.0.0.1:{e.port}", str(e.pki.secret_key), SUPER_USER, str(TOKEN_LIFE_S),
         topics["fresh"], topics["stale"]],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out: Answers = {}
    for scenario in topics:
        lines = [line.removeprefix(f"{scenario} ") for line in run.stdout.splitlines()
                 if line.startswith(f"{scenario} ")]
        seen = tuple(line for line in lines if not line.startswith("note "))
        out[scenario] = (seen, " | ".join(line for line in lines if line.startswith("note ")))
    return out


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory, pki: Pki, token_refresh: str) -> dict[str, Answers]:
    return ask_both(tmp_path_factory.mktemp("pulsar-java-refresh"), pki, lambda e: ask_java(token_refresh, e),
                    {"authenticationRefreshCheckSeconds": REFRESH_CHECK_S})


# Where ours answers otherwise on purpose: scenario -> why.
DIFFERENCES: dict[str, str] = {}


@pytest.mark.parametrize("scenario", ["fresh", "stale"])
def test_java_client_sees_what_it_sees_with_pulsar(answers: dict[str, Answers], scenario: str) -> None:
    (ours, our_notes), (theirs, their_notes) = answers["ours"][scenario], answers["pulsar"][scenario]
    if scenario in DIFFERENCES:
        assert ours != theirs, f"ours now answers as Pulsar: {ours}; remove it from DIFFERENCES"
        return
    assert ours == theirs, f"ours {ours} ({our_notes}); Pulsar's {theirs} ({their_notes})"


def test_the_java_client_kept_producing_across_the_expiries(answers: dict[str, Answers]) -> None:
    """Pulsar's side really refreshed (a run whose tokens never expired, or whose client reconnected, compares
    little)."""
    seen = answers["pulsar"]["fresh"][0]
    assert seen == ("expiry 1: supplier asked again true", "expiry 2: supplier asked again true", "sent 3",
                    "received [0, 1, 2]", "producer reconnected false", "consumer reconnected false"), seen
