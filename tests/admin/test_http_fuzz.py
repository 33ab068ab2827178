"""Every admin route, called with names that exist and names that do not, odd query values and random or malformed
bodies: the broker answers each with a clear status (never a 5xx other than 503, never an error logged), and the
next call still works. The routes are read from the broker's own router, so a route added later is covered too.
Seeded, so a failure repeats: PULSAR_FUZZ_SEED=<n> runs another seed, PULSAR_FUZZ_ROUNDS=<n> more rounds. The
engine (tests/admin/http_fuzz.py) is shared with the cluster-mode fuzz (tests/cluster/test_http_fuzz_cluster.py)."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import aiohttp
import pytest

from broker.embedded import Broker
from tests.admin.http_fuzz import SEED, Fuzz, admin_routes, fuzz_routes, http_call, make_fixtures, rounds

ROUNDS = rounds(20)


async def test_every_admin_route_answers_bad_input_clearly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)

    def errors_logged() -> list[str]:
        logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        caplog.clear()
        return logged

    async with Broker(data_dir=tmp_path, transactionCoordinatorEnabled=True, topicLevelPoliciesEnabled=True) as b, \
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        assert b.server is not None
        call = http_call(http, b.web_url)
        failures = await fuzz_routes(Fuzz(SEED), admin_routes(b.server.web.app), ROUNDS, call,
                                     partial(make_fixtures, call), errors_logged)
        await make_fixtures(call)  # (and the broker still does what it is asked)
        assert (await call("PUT", "/admin/v2/namespaces/public/after-fuzz", None))[0] == 204  # (no policy the fuzz set)
        assert (await call("PUT", "/admin/v2/persistent/public/after-fuzz/t", None))[0] == 204
        status, text = await call("GET", "/admin/v2/persistent/public/after-fuzz/t/stats", None)
        assert status == 200, text
    assert not failures, f"seed {SEED}:\n" + "\n".join(failures[:20])
