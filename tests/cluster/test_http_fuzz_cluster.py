"""Cluster mode: the admin-REST fuzz (tests/admin/http_fuzz.py) against two broker processes of one cluster. Each
call goes to either broker at random and its redirects are not followed (a 307 to the owner is an answer), so the
non-owner paths run: the ownership middleware's redirects, the partition fan-outs and namespace operations through
broker-to-broker calls, bundles owned by the other broker. A call fails the fuzz when it is answered with a 5xx
other than 503, not answered in time, or when either broker logs an error or a traceback meanwhile (their log files,
read after each call). The routes come from an embedded broker's router: the processes run the same code.
PULSAR_FUZZ_SEED=<n> runs another seed, PULSAR_FUZZ_ROUNDS=<n> more or fewer rounds."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import aiohttp

from broker.embedded import Broker
from tests.admin.http_fuzz import (
    OTHERS,
    SEED,
    Fuzz,
    LogTail,
    admin_routes,
    fuzz_routes,
    http_call,
    make_fixtures,
    rounds,
)
from tests.cluster.conftest import Brokers

ROUNDS = rounds(20)
# A call not answered in this is a hang: both brokers answer, each call here takes well under a second. (A fan-out
# to a broker that does not answer would wait up to peers.CALL_TIMEOUT_S, 60 s.)
CALL_TIMEOUT_S = 20
# More calls past the existence checks than the single-broker fuzz (they reach the owner's checks), and a
# partitioned topic of more partitions (spread over both brokers' bundles).
EXISTING = 0.8
PARTITIONS = 4
SETTINGS = {"transactionCoordinatorEnabled": "true", "topicLevelPoliciesEnabled": "true"}


async def test_every_admin_route_answers_bad_input_clearly_on_either_broker(brokers: Brokers, tmp_path: Path) -> None:
    brokers.settings.update(SETTINGS)
    started = brokers.start(2)
    logs = [LogTail(b.log) for b in started]
    async with Broker(data_dir=tmp_path, transactionCoordinatorEnabled=True, topicLevelPoliciesEnabled=True) as one:
        assert one.server is not None
        routes = admin_routes(one.server.web.app)
    fuzz = Fuzz(SEED, {"broker": [b.web_url.removeprefix("http://") for b in started] + ["127.0.0.1:1"],
                       "topic": OTHERS["topic"]}, EXISTING)
    urls = [b.web_url for b in started]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)) as http:
        call = http_call(http, lambda: fuzz.rng.choice(urls))
        following = http_call(http, lambda: fuzz.rng.choice(urls), follow=True)  # (the fixtures: made on the owner)
        failures = await fuzz_routes(fuzz, routes, ROUNDS, call, partial(make_fixtures, following, PARTITIONS),
                                     lambda: [line for log in logs for line in log.errors()])
        failures += await still_serving(http, urls)
    failures += [f"logged at the end: {line}" for log in logs for line in log.errors()]
    assert not failures, f"seed {SEED}: {len(failures)} failures\n" + "\n".join(failures[:20])


async def still_serving(http: aiohttp.ClientSession, urls: list[str]) -> list[str]:
    """What both brokers fail to do after the fuzz: answer, make a namespace and topics through either broker, and
    tell their stats (the owner's, through the other broker)."""
    b1, b2 = (http_call(http, url, follow=True) for url in urls)
    await make_fixtures(b1)
    checks = [(http_call(http, url), "GET", "/admin/v2/brokers/health", None, 200) for url in urls] + [
        (b1, "PUT", "/admin/v2/namespaces/public/after-fuzz", None, 204),  # (no policy the fuzz set)
        (b2, "PUT", "/admin/v2/persistent/public/after-fuzz/t", None, 204),
        (b1, "GET", "/admin/v2/persistent/public/after-fuzz/t/stats", None, 200),
        (b2, "PUT", "/admin/v2/persistent/public/after-fuzz/p/partitions", b"4", 204),
        (b1, "GET", "/admin/v2/persistent/public/after-fuzz/p/partitioned-stats", None, 200),
        # Topic "a b:ü" as Pulsar's Java admin client names it in a path ("+" a space: Codec.encode), and as most
        # clients do: whichever broker is asked, the owner serves that one topic.
        (b2, "PUT", "/admin/v2/persistent/public/after-fuzz/a+b%3A%C3%BC", None, 204),
        (b1, "GET", "/admin/v2/persistent/public/after-fuzz/a%20b%3A%C3%BC/stats", None, 200),
        (b2, "PUT", "/admin/v2/persistent/public/after-fuzz/a+b%3A%C3%BC/unload", None, 204),
        (b1, "DELETE", "/admin/v2/persistent/public/after-fuzz/a+b%3A%C3%BC", None, 204),
        (b2, "GET", "/admin/v2/persistent/public/after-fuzz/a%20b%3A%C3%BC/stats", None, 404),
    ]
    failures = []
    for call, method, path, body, expected in checks:
        status, text = await call(method, path, body)
        if status != expected:
            failures.append(f"after the fuzz: {method} {path} -> {status} {text}")
    return failures
