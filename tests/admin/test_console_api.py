"""What the web console needs of the HTTP server, without a browser: its files with a strict
Content-Security-Policy, webConsoleEnabled=false, the overview and paged topic list endpoints
(10,000 topics), and the refusal of cross-origin state-changing requests (CSRF)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from broker.admin.console import CONTENT_SECURITY_POLICY
from broker.embedded import BrokerThread
from broker.topic_name import TopicName
from broker.version import __version__
from tests.admin.conftest import Admin

MANY = 10_000


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    with BrokerThread(managedLedgerStorage="memory", brokerServicePort=0, webServicePort=0) as b:
        yield b


@pytest.fixture
def admin(broker: BrokerThread) -> Admin:
    return Admin(broker.web_url)


def test_console_files_are_served_with_a_strict_policy(admin: Admin) -> None:
    for path in ("/", "/console/", "/console/app.js", "/console/console.css"):
        reply = admin.get(path)
        assert reply.status == 200, path
        assert reply.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        assert reply.headers["X-Content-Type-Options"] == "nosniff"
        assert reply.headers["X-Frame-Options"] == "DENY"
    assert admin.get("/console/app.js").headers["Content-Type"].startswith("text/javascript")
    assert b'<script type="module" src="/console/app.js">' in admin.get("/").body
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY and "unsafe" not in CONTENT_SECURITY_POLICY
    missing = admin.get("/console/nothing.js")
    assert missing.status == 404 and "nothing.js" in missing.reason
    assert admin.get("/console/../pyproject.toml").status == 404


def test_console_off_answers_404_and_the_admin_rest_stays() -> None:
    with BrokerThread(managedLedgerStorage="memory", brokerServicePort=0, webServicePort=0,
                      webConsoleEnabled=False) as b:
        admin = Admin(b.web_url)
        assert admin.get("/").status == 404
        assert admin.get("/console/app.js").status == 404
        assert admin.get("/admin/v2/broker-stats/overview").status == 200
        assert admin.get("/admin/v2/tenants").status == 200


def test_overview(admin: Admin) -> None:
    ns = admin.new_namespace()
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/a")
    doc = admin.ok("GET", "/admin/v2/broker-stats/overview")
    assert doc["version"] == __version__
    assert doc["topics"] >= 1 and doc["namespaces"] >= 2 and doc["tenants"] >= 1
    assert doc["uptimeSeconds"] >= 0 and doc["time"] >= doc["startTime"]
    for key in ("connections", "msgInCounter", "msgOutCounter", "storageSize", "msgBacklog", "msgRateIn"):
        assert isinstance(doc[key], int | float), key


def test_topics_page_filters_and_pages(admin: Admin) -> None:
    ns = admin.new_namespace()
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/orders-eu")
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/orders-us")
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/parts/partitions", 3)
    admin.ok("PUT", f"/admin/v2/non-persistent/{ns}/live")
    page = admin.ok("GET", f"/admin/v2/namespaces/{ns}/topicsPage")
    # The partitioned topic is one row (its partitions are not listed); the non-persistent one is there.
    assert [(t["localName"], t["partitions"]) for t in page["topics"]] == [
        ("live", 0), ("orders-eu", 0), ("orders-us", 0), ("parts", 3)]
    assert page["total"] == 4
    assert admin.ok("GET", f"/admin/v2/namespaces/{ns}/topicsPage?search=ORDERS&limit=1&offset=1")["topics"][0][
        "localName"] == "orders-us"
    assert [t["localName"] for t in admin.ok("GET", f"/admin/v2/namespaces/{ns}/topicsPage?kind=partitioned")[
        "topics"]] == ["parts"]
    assert [t["localName"] for t in admin.ok("GET", f"/admin/v2/namespaces/{ns}/topicsPage?kind=non-persistent")[
        "topics"]] == ["live"]
    for bad in ("kind=nope", "limit=0", "limit=501", "offset=-1", "offset=x"):
        assert admin.get(f"/admin/v2/namespaces/{ns}/topicsPage?{bad}").status == 400, bad
    assert admin.get("/admin/v2/namespaces/public/nowhere/topicsPage").status == 404


def test_topics_page_with_ten_thousand_topics() -> None:
    # A broker of its own (10,000 loaded topics would slow the others' tests), that keeps them.
    with BrokerThread(managedLedgerStorage="memory", brokerServicePort=0, webServicePort=0,
                      brokerDeleteInactiveTopicsEnabled=False) as broker:
        check_ten_thousand_topics(broker, Admin(broker.web_url))


def check_ten_thousand_topics(broker: BrokerThread, admin: Admin) -> None:
    ns = admin.new_namespace()

    async def create() -> None:
        service = broker.server.service
        for i in range(MANY):
            await service.get_topic(TopicName.parse(f"persistent://{ns}/t-{i:05d}"), create=True, explicit=True)

    broker.run_coroutine(create(), timeout=600)
    first = admin.ok("GET", f"/admin/v2/namespaces/{ns}/topicsPage?limit=50")
    assert first["total"] == MANY and len(first["topics"]) == 50
    assert first["topics"][0]["localName"] == "t-00000"
    last = admin.ok("GET", f"/admin/v2/namespaces/{ns}/topicsPage?offset={MANY - 10}&limit=50")
    assert [t["localName"] for t in last["topics"]] == [f"t-{i:05d}" for i in range(MANY - 10, MANY)]
    found = admin.ok("GET", f"/admin/v2/namespaces/{ns}/topicsPage?search=T-0999")
    assert [t["localName"] for t in found["topics"]] == [f"t-{i:05d}" for i in range(9990, MANY)]


def post_with_origin(web_url: str, path: str, origin: str | None, forwarded: str | None = None) -> int:
    headers = {"Origin": origin} if origin is not None else {}
    if forwarded is not None:
        headers["X-Forwarded-Host"] = forwarded
    req = urllib.request.Request(web_url + path, method="PUT", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_cross_origin_state_changes_are_refused(broker: BrokerThread, admin: Admin) -> None:
    """A page of another site cannot make the browser change the broker (CSRF); the console (same
    origin) and clients that send no Origin can."""
    url = broker.web_url
    host = url.split("://", 1)[1]
    assert post_with_origin(url, "/admin/v2/namespaces/public/csrf-a", "http://evil.example") == 403
    assert post_with_origin(url, "/admin/v2/namespaces/public/csrf-a", "null") == 403
    assert "csrf-a" not in str(admin.ok("GET", "/admin/v2/namespaces/public"))
    assert post_with_origin(url, "/admin/v2/namespaces/public/csrf-b", f"http://{host}") == 204
    assert post_with_origin(url, "/admin/v2/namespaces/public/csrf-c", None) == 204
    # Behind a reverse proxy: the host the browser saw is in X-Forwarded-Host.
    assert post_with_origin(url, "/admin/v2/namespaces/public/csrf-d", "https://pulsar.example.com",
                            forwarded="pulsar.example.com") == 204
    # Reads are not refused (a cross-origin page cannot read the answers anyway: no CORS headers).
    req = urllib.request.Request(url + "/admin/v2/tenants", headers={"Origin": "http://evil.example"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers

