"""The console in headless Chromium against a broker with traffic from the official client: each
page loads with no console error and no failed request, shows the broker's real data, and the
live charts move."""

from __future__ import annotations

import json

from broker.embedded import BrokerThread
from broker.version import __version__
from tests.admin.conftest import Admin
from tests.console.cdp import Page
from tests.console.conftest import Traffic, screenshot_path
from tests.waiting import eventually


def text(selector: str) -> str:
    return f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent"


def points(testid: str) -> str:
    return f"Number((document.querySelector('[data-testid={testid}]') || {{dataset: {{}}}}).dataset.points || 0)"


async def open_page(page: Page, url: str, hash_path: str) -> None:
    await page.goto(f"{url}/#{hash_path}")
    try:
        await page.wait_for(f"document.getElementById('main').dataset.ready === {json.dumps(hash_path)}",
                            what=f"page {hash_path} rendered")
    except AssertionError:
        state = await page.eval("JSON.stringify([location.href, document.getElementById('main').dataset.ready, "
                                "document.getElementById('main').textContent.slice(0, 300)])")
        raise AssertionError(f"page {hash_path} not rendered: {state}") from None


async def test_overview_shows_the_broker_and_its_charts_move(page: Page, console_broker: BrokerThread,
                                                             traffic: Traffic) -> None:
    url = console_broker.web_url
    await open_page(page, url, "/")
    assert await page.wait_for(text("[data-testid=version]")) == __version__
    assert int(await page.wait_for(text("[data-testid=connections]"))) >= 1
    # The charts get a point per sample: the count grows while the page is open.
    first = await page.wait_for(points("chart-rates"))
    await page.wait_for(f"{points('chart-rates')} >= {first + 2}", what="the rate chart got two more points")
    # Messages are flowing: the in-rate card shows a non-zero rate at some sample.
    await page.wait_for(f"parseFloat({text('[data-testid=rate-in]')}) > 0", what="a non-zero msg/s in")
    await page.screenshot(screenshot_path("overview"))
    assert page.problems == []

    # The Content-Security-Policy is in force: an injected inline script does not run.
    await page.eval("document.body.append(Object.assign(document.createElement('script'), "
                    "{textContent: 'window.injected = true'}))")
    await eventually(lambda: any("Content Security Policy" in p for p in page.problems),
                     "the browser's report of the refused inline script", interval=0.05)
    assert await page.eval("window.injected === undefined") is True


async def test_lists_and_topic_page_show_real_data(page: Page, console_broker: BrokerThread,
                                                   traffic: Traffic, admin: Admin) -> None:
    url = console_broker.web_url
    local = traffic.topic.rsplit("/", 1)[1]
    await open_page(page, url, "/tenants")
    assert "public" in await page.wait_for(text("[data-testid=tenants]"))
    await page.screenshot(screenshot_path("tenants"))
    await open_page(page, url, "/namespaces")
    assert "public/default" in await page.wait_for(text("[data-testid=namespaces]"))
    await open_page(page, url, "/namespace/public/default")
    await page.wait_for("!!document.querySelector('[data-testid=policies], [data-testid=policies-empty]')")
    await open_page(page, url, "/topics/public/default")
    assert local in await page.wait_for(text("[data-testid=topics]"))
    await page.screenshot(screenshot_path("topics"))

    await open_page(page, url, f"/topic/persistent/public/default/{local}")
    # The backlog of the subscription that never acknowledges: a real number from the broker.
    shown = int(await page.wait_for(text("[data-testid=backlog-slow]")))
    assert shown > 0
    assert "slow" in await page.eval(text("[data-testid=consumers]"))
    assert "standalone" in await page.eval(text("[data-testid=producers]")) or \
        traffic.producer.producer_name() in await page.eval(text("[data-testid=producers]"))
    assert int(await page.wait_for(text("[data-testid=internal-entries]"))) > 0
    first = await page.wait_for(points("chart-subscription-backlog"))
    await page.wait_for(f"{points('chart-subscription-backlog')} >= {first + 2}",
                        what="the backlog chart got two more points")
    backlog = admin.stats(traffic.topic)["subscriptions"]["slow"]["msgBacklog"]
    assert backlog >= shown  # (the producer keeps sending: the broker's figure only grows)
    await page.screenshot(screenshot_path("topic"))
    assert page.problems == []


async def test_topic_search_paging_and_every_kind_of_topic(page: Page, console_broker: BrokerThread,
                                                           admin: Admin) -> None:
    url = console_broker.web_url
    ns = admin.new_namespace()
    tenant, local_ns = ns.split("/")
    for i in range(120):
        admin.ok("PUT", f"/admin/v2/persistent/{ns}/item-{i:03d}")
    admin.ok("PUT", f"/admin/v2/persistent/{ns}/parted/partitions", 3)
    admin.ok("PUT", f"/admin/v2/non-persistent/{ns}/live")
    await open_page(page, url, f"/topics/{tenant}/{local_ns}")
    await page.wait_for(f"{text('[data-testid=page-info]')} === '1-50 of 122'", what="the first page of 122")
    await page.click("#page-next")
    await page.wait_for(f"{text('[data-testid=page-info]')} === '51-100 of 122'", what="the second page")
    assert "item-050" in await page.eval(text("[data-testid=topics]"))
    await page.fill("#topic-search", "item-11")
    await page.wait_for(f"{text('[data-testid=page-info]')} === '1-10 of 10'", what="10 matches")
    await page.fill("#topic-search", "")
    await page.fill("#topic-kind", "partitioned")
    await page.wait_for(f"{text('[data-testid=page-info]')} === '1-1 of 1'", what="one partitioned topic")
    assert "3 partitions" in await page.eval(text("[data-testid=topics]"))
    await page.screenshot(screenshot_path("topics-paged"))

    # A partitioned topic's page (its partitions linked) and a non-persistent topic's.
    await open_page(page, url, f"/topic/persistent/{tenant}/{local_ns}/parted")
    assert "partition-2" in await page.wait_for("document.getElementById('main').textContent")
    await open_page(page, url, f"/topic/persistent/{tenant}/{local_ns}/parted-partition-1")
    await page.wait_for("!!document.querySelector('[data-testid=ledgers], [data-testid=ledgers-empty]')")
    await open_page(page, url, f"/topic/non-persistent/{tenant}/{local_ns}/live")
    await page.wait_for("!!document.querySelector('[data-testid=subscriptions-empty]')")
    assert page.problems == []
