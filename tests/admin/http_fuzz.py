"""The admin-REST fuzz engine shared by tests/admin/test_http_fuzz.py (one embedded broker) and
tests/cluster/test_http_fuzz_cluster.py (two broker processes of one cluster): every route of the broker's router,
called with names that exist and names that do not, odd query values and random or malformed bodies. A call fails
the fuzz when it is answered with a 5xx other than 503 (but for the answers Pulsar gives on purpose), when it is not
answered in time, or when the broker logs an error or a traceback meanwhile. Seeded: PULSAR_FUZZ_SEED=<n> runs
another seed, PULSAR_FUZZ_ROUNDS=<n> more or fewer rounds."""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import aiohttp
from aiohttp import web

SEED = int(os.environ.get("PULSAR_FUZZ_SEED", "1"))


def rounds(default: int) -> int:
    return int(os.environ.get("PULSAR_FUZZ_ROUNDS", str(default)))


# Values for the routes' path parameters: mostly the fixtures below (so calls get past the existence checks),
# then names that do not exist or are not valid.
EXISTING = {"tenant": "public", "ns": "default", "namespace": "default", "topic": "fuzz-0", "subName": "s",
            "subscription": "s", "cluster": "standalone", "bundle": "0x00000000_0xffffffff"}
OTHERS = {
    "tenant": ["t-fuzz", "pulsar", "nope", "a" * 300, "%20", "_"],
    "ns": ["ns-fuzz", "nope", "functions", "a%20b"],
    "namespace": ["ns-fuzz", "nope"],
    "topic": ["fuzz-p", "fuzz-p-partition-0", "fuzz-p-partition-7", "missing", "fuzz-0-partition-x",
              "__change_events", "a" * 300, "%C3%A9", "fuzz-0%2Fx"],
    "subName": ["missing", "__compaction", "%24", "a" * 300],
    "subscription": ["missing"],
    "cluster": ["nope", "c2"],
    "bundle": ["0x00000000_0x80000000", "bad", "0xffffffff_0x00000000"],
}
NUMBERS = ["0", "1", "-1", "x", "99999999999999999999999", "1.5"]
ODD = ["x", "0", "-1", "%00", "a" * 100, "1.5"]
QUERY = ["authoritative", "force", "deleteSchema", "applied", "isGlobal", "perPartition", "getPreciseBacklog",
         "subscriptionBacklogSize", "getEarliestTimeInBacklog", "messagePosition", "createIfMissing", "bundle",
         "unload", "splitAlgorithmName", "isMessageIdInclusive", "replicated", "mode", "includeSystemTopic",
         "metadata", "batchIndex", "destinationBroker", "lowerBound"]
BODY_KEYS = ["retentionTimeInMinutes", "retentionSizeInMB", "limitSize", "limitTime", "policy", "ttl",
             "dispatchThrottlingRateInMsg", "dispatchThrottlingRateInByte", "ratePeriodInSecond",
             "publishThrottlingRateInMsg", "publishThrottlingRateInByte", "maxProducersPerTopic", "adminRoles",
             "allowedClusters", "numBundles", "boundaries", "type", "schema", "properties", "deleteWhileInactive",
             "inactiveTopicDeleteMode", "maxInactiveDurationSeconds", "allowAutoTopicCreation", "topicType",
             "defaultNumPartitions", "ledgerId", "entryId", "partitionIndex", "batchIndex", "serviceUrl",
             "brokerServiceUrl", "subscriptionTypesEnabled", "enabled", "bookkeeperEnsemble",
             "bookkeeperWriteQuorum", "bookkeeperAckQuorum", "managedLedgerMaxMarkDeleteRate", "partitions",
             "isMessageIdInclusive", "namespaces", "primary", "secondary", "parameters", "policyType",
             "relativeToPublish", "messageTTLInSeconds"]
# 5xx answers Pulsar 4.0.7 gives on purpose, with its message, and ours copies (broker/admin/transactions.py): an
# unknown or finished transaction, a coordinator id past an int.
PULSAR_500 = {("POST", "/admin/v3/transactions/abortTransaction/{most}/{least}")}
# Calls not answered in time after which the fuzz stops (a broker that stopped answering: the rest would only wait).
UNANSWERED_LIMIT = 3
MALFORMED = [b"{", b"nul", b"\xff\xfe", b"[1,", b"1e999", b'{"a": 1}{']

Route = tuple[str, str]  # (method, canonical path)
# One admin call: (method, path with its query, body) -> (status, the answer's start); status 0: no answer in time.
Call = Callable[[str, str, bytes | None], Awaitable[tuple[int, str]]]


class Fuzz:
    """The seeded choices: path values, query, body. ``others`` adds values for path parameters (e.g. the brokers'
    ids of a cluster); ``existing`` is how often a path parameter names a fixture."""

    def __init__(self, seed: int, others: Mapping[str, Sequence[str]] | None = None, existing: float = 0.6) -> None:
        self.rng = random.Random(seed)
        self.others = {**OTHERS, **(others or {})}
        self.existing = existing

    def path(self, canonical: str) -> str:
        rng = self.rng

        def value(m: re.Match[str]) -> str:
            name = m.group(1).split(":")[0]
            r = rng.random()
            if name in EXISTING and r < self.existing:
                return EXISTING[name]
            if name in self.others and r < self.existing + (1 - self.existing) * 0.75:
                return rng.choice(self.others[name])
            return rng.choice(NUMBERS if name not in self.others and r < 0.95 else ODD)
        return re.sub(r"\{([^}]+)\}", value, canonical)

    def query(self) -> str:
        rng = self.rng
        return "&".join(f"{k}={rng.choice(['true', 'false', '1', 'x', ''])}"
                        for k in rng.sample(QUERY, rng.randrange(3)))

    def value(self, depth: int = 0) -> object:
        rng = self.rng
        r = rng.random()
        if r < 0.1:
            return None
        if r < 0.3:
            return rng.choice([0, 1, -1, 2**63, 3, 100, -2**40, 10**30, 1.5])
        if r < 0.4:
            return rng.choice(["", "x", "standalone", "public/default", "persistent://public/default/fuzz-0", "PT1S"])
        if r < 0.5:
            return rng.random() < 0.5
        if r < 0.6 or depth > 2:
            return [self.value(depth + 1) for _ in range(rng.randrange(3))] if depth <= 2 else []
        return {rng.choice(BODY_KEYS): self.value(depth + 1) for _ in range(rng.randrange(4))}

    def body(self) -> bytes | None:
        r = self.rng.random()
        if r < 0.2:
            return None
        if r < 0.3:
            return self.rng.choice(MALFORMED)
        return json.dumps(self.value()).encode()


# Routes not fuzzed: the one that stops the broker by design (tests/component/test_standalone_process.py has it).
NOT_FUZZED = {("POST", "/admin/v2/brokers/shutdown")}


def admin_routes(app: web.Application) -> list[Route]:
    """Every (method, path) of the broker's router (a route added later is covered too), but ``NOT_FUZZED``."""
    routes = sorted({(r.method, info.get("path") or info.get("formatter") or "")
                     for r in app.router.routes() if r.method != "HEAD"
                     for info in [r.resource.get_info() if r.resource else {}]} - {("*", "")} - NOT_FUZZED)
    assert len(routes) > 300  # (the router was read: Pulsar's v2 admin API and ours)
    return routes


def http_call(http: aiohttp.ClientSession, web_url: str | Callable[[], str], follow: bool = False) -> Call:
    """A ``Call`` to one broker (``web_url``), or to the one a function picks for each call; redirects (a 307 to
    the owner) are answers, unless ``follow``. A call not answered within the session's timeout, or whose connection
    fails, answers 0."""
    async def call(method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
        base = web_url if isinstance(web_url, str) else web_url()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        try:
            async with http.request(method, f"{base}{path}", data=body, headers=headers,
                                    allow_redirects=follow) as answer:
                return answer.status, f"{(await answer.text())[:300]} (from {base})"
        except TimeoutError:
            return 0, f"no answer from {base}"
        except aiohttp.ClientError as exc:
            return 0, f"no answer from {base}: {exc!r}"
    return call


async def make_fixtures(call: Call, partitions: int = 2) -> None:
    """What the routes' names refer to, made again each round (a round may delete them, tenants too)."""
    for tenant in ("public", "t-fuzz"):
        await call("PUT", f"/admin/v2/tenants/{tenant}", b'{"allowedClusters": ["standalone"]}')
    await call("PUT", "/admin/v2/namespaces/public/default", None)
    await call("PUT", "/admin/v2/namespaces/t-fuzz/ns-fuzz", None)
    await call("PUT", "/admin/v2/persistent/public/default/fuzz-0", None)
    await call("PUT", "/admin/v2/non-persistent/public/default/fuzz-0", None)  # (a namesake in the other domain)
    await call("PUT", "/admin/v2/persistent/public/default/fuzz-0/subscription/s", None)
    await call("PUT", "/admin/v2/persistent/public/default/fuzz-p/partitions", str(partitions).encode())


async def fuzz_routes(fuzz: Fuzz, routes: list[Route], round_count: int, call: Call,
                      fixtures: Callable[[], Awaitable[None]], errors_logged: Callable[[], list[str]]) -> list[str]:
    """Call every route ``round_count`` times (the fixtures made again before each round, the routes shuffled);
    the failures, one line each. ``errors_logged`` returns the errors the brokers logged since it was last called
    (an error logged a moment after an answer shows on the next call: the line names the call before too)."""
    failures: list[str] = []
    previous = ""
    unanswered = 0
    for _ in range(round_count):
        await fixtures()
        if logged := errors_logged():  # (a fixture may be refused after what the round before did, not log errors)
            failures.append(f"making the fixtures (after {previous}): {logged}")
        fuzz.rng.shuffle(routes)
        for method, canonical in routes:
            query = fuzz.query()
            path = fuzz.path(canonical) + (f"?{query}" if query else "")
            body = fuzz.body() if method in ("PUT", "POST") else None
            status, text = await call(method, path, body)
            logged = errors_logged()
            this = f"{method} {path} body={body!r:.200}"
            if status == 0 or (status >= 500 and status != 503 and (method, canonical) not in PULSAR_500) or logged:
                failures.append(f"{this} -> {status} {text} {logged} (after {previous})")
            previous = this
            unanswered += status == 0
            if unanswered == UNANSWERED_LIMIT:
                failures.append(f"stopped: {unanswered} calls not answered")
                return failures
    return failures


# A line of a broker process's log (broker/__main__.py's format) at ERROR or above; the first line of a traceback.
ERROR_LINE = re.compile(r"^\S+ \S+ (ERROR|CRITICAL) ")
TRACEBACK = "Traceback (most recent call last)"


class LogTail:
    """A broker process's log, read incrementally: ``errors()`` is what it logged since the last call at ERROR or
    above, or with a traceback (the line, and the traceback's exception)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = self.path.stat().st_size

    def errors(self) -> list[str]:
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1  # (whole lines only: the rest is read next time)
        self.offset += end
        lines = chunk[:end].decode(errors="replace").splitlines()
        found: list[str] = []
        for i, line in enumerate(lines):
            if line.startswith(TRACEBACK):  # (its exception: the first line after it that is not the stack)
                exception = next((r for r in lines[i + 1:] if r and not r.startswith((" ", "Traceback"))), "")
                if found and i > 0 and ERROR_LINE.search(lines[i - 1]):
                    found[-1] += f" ... {exception[:300]}"
                else:
                    found.append(f"{self.path.parent.name}: traceback ... {exception[:300]}")
            elif ERROR_LINE.search(line):
                found.append(f"{self.path.parent.name}: {line[:300]}")
        return found
