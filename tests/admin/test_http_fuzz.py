"""Every admin route, called with names that exist and names that do not, odd query values and random or malformed
bodies: the broker answers each with a clear status (never a 5xx other than 503, never an error logged), and the
next call still works. The routes are read from the broker's own router, so a route added later is covered too.
Seeded, so a failure repeats: PULSAR_FUZZ_SEED=<n> runs another seed, PULSAR_FUZZ_ROUNDS=<n> more rounds."""

from __future__ import annotations

import json
import logging
import os
import random
import re
from pathlib import Path

import aiohttp
import pytest

from broker.embedded import Broker

SEED = int(os.environ.get("PULSAR_FUZZ_SEED", "1"))
ROUNDS = int(os.environ.get("PULSAR_FUZZ_ROUNDS", "20"))

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
MALFORMED = [b"{", b"nul", b"\xff\xfe", b"[1,", b"1e999", b'{"a": 1}{']


class Fuzz:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def path(self, canonical: str) -> str:
        rng = self.rng

        def value(m: re.Match[str]) -> str:
            name = m.group(1).split(":")[0]
            r = rng.random()
            if name in EXISTING and r < 0.6:
                return EXISTING[name]
            if name in OTHERS and r < 0.9:
                return rng.choice(OTHERS[name])
            return rng.choice(NUMBERS if name not in OTHERS and r < 0.95 else ODD)
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


async def test_every_admin_route_answers_bad_input_clearly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    fuzz = Fuzz(SEED)
    failures: list[str] = []
    async with Broker(data_dir=tmp_path, transactionCoordinatorEnabled=True, topicLevelPoliciesEnabled=True) as b, \
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        assert b.server is not None
        routes = sorted({(r.method, info.get("path") or info.get("formatter") or "")
                         for r in b.server.web.app.router.routes() if r.method != "HEAD"
                         for info in [r.resource.get_info() if r.resource else {}]} - {("*", "")})
        assert len(routes) > 300  # (the router was read: Pulsar's v2 admin API and ours)

        async def call(method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            async with http.request(method, f"{b.web_url}{path}", data=body, headers=headers,
                                    allow_redirects=False) as answer:
                return answer.status, (await answer.text())[:300]

        async def fixtures() -> None:
            """What the routes' names refer to, made again each round (a round may delete them, tenants too)."""
            for tenant in ("public", "t-fuzz"):
                await call("PUT", f"/admin/v2/tenants/{tenant}", b'{"allowedClusters": ["standalone"]}')
            await call("PUT", "/admin/v2/namespaces/public/default")
            await call("PUT", "/admin/v2/namespaces/t-fuzz/ns-fuzz")
            await call("PUT", "/admin/v2/persistent/public/default/fuzz-0")
            await call("PUT", "/admin/v2/non-persistent/public/default/fuzz-0")  # (a namesake in the other domain)
            await call("PUT", "/admin/v2/persistent/public/default/fuzz-0/subscription/s")
            await call("PUT", "/admin/v2/persistent/public/default/fuzz-p/partitions", b"2")

        for _ in range(ROUNDS):
            await fixtures()
            fuzz.rng.shuffle(routes)
            for method, canonical in routes:
                query = fuzz.query()
                path = fuzz.path(canonical) + (f"?{query}" if query else "")
                body = fuzz.body() if method in ("PUT", "POST") else None
                status, text = await call(method, path, body)
                logged = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
                if (status >= 500 and status != 503 and (method, canonical) not in PULSAR_500) or logged:
                    failures.append(f"{method} {path} body={body!r:.200} -> {status} {text} "
                                    f"{[r.getMessage() for r in logged]}")
                    caplog.clear()
        await fixtures()  # (and the broker still does what it is asked)
        assert (await call("PUT", "/admin/v2/namespaces/public/after-fuzz"))[0] == 204  # (no policy the fuzz set)
        assert (await call("PUT", "/admin/v2/persistent/public/after-fuzz/t"))[0] == 204
        status, text = await call("GET", "/admin/v2/persistent/public/after-fuzz/t/stats")
        assert status == 200, text
    assert not failures, f"seed {SEED}:\n" + "\n".join(failures[:20])
