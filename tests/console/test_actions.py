"""Actions in the console change the broker's state (checked through the admin REST): create and
delete a namespace, set a policy, clear a backlog and reset a cursor, terminate a topic, peek
messages decoded with their schema. Destructive actions ask first; a refusal shows the broker's
reason."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

from broker.embedded import BrokerThread
from tests.admin.conftest import Admin
from tests.console.cdp import Page
from tests.console.conftest import screenshot_path
from tests.console.test_pages import open_page, text
from tests.waiting import eventually


async def until(condition: Callable[[], object], what: str) -> None:
    await eventually(condition, what, interval=0.1)  # (each check is an HTTP call)


class Order(Record):  # type: ignore[misc]  # pulsar.schema.Record is untyped (no stubs)
    item = String()
    quantity = Integer()


def namespaces(admin: Admin) -> list[str]:
    return list(admin.ok("GET", "/admin/v2/namespaces/public"))


async def confirm(page: Page, ok: bool = True, value: str | None = None) -> None:
    await page.wait_for("document.getElementById('ask').open", what="the confirmation dialog")
    # The input is shown only when the question asks for a value.
    shown = await page.eval("document.getElementById('ask-input').getClientRects().length > 0")
    assert shown is (value is not None)
    if value is not None:
        await page.fill("#ask-input", value)
    await page.click("#ask-ok" if ok else "#ask-cancel")
    await page.wait_for("!document.getElementById('ask').open", what="the dialog closed")


async def click_row_button(page: Page, table: str, row_text: str, button: str) -> None:
    js = (f"(() => {{ const row = [...document.querySelectorAll('[data-testid={table}] tbody tr')]"
          f".find(r => r.textContent.includes({json.dumps(row_text)}));"
          f" const b = row && [...row.querySelectorAll('button')].find(b => b.textContent === {json.dumps(button)});"
          f" if (b) b.click(); return !!b; }})()")
    await page.wait_for(js, what=f"{button} in the row of {row_text}")


async def test_create_set_policy_and_delete_a_namespace(page: Page, console_broker: BrokerThread,
                                                        admin: Admin) -> None:
    url = console_broker.web_url
    name = f"ui-{uuid.uuid4().hex[:6]}"
    await open_page(page, url, "/namespaces")
    await page.fill("#new-ns-tenant", "public")
    await page.fill("#new-ns-name", name)
    await page.click("#create-namespace")
    await until(lambda: f"public/{name}" in namespaces(admin), "the namespace created")

    await open_page(page, url, f"/namespace/public/{name}")
    await page.fill("#policy-name", "messageTTL")
    await page.fill("#policy-value", "120")
    await page.click("#set-policy")
    await until(lambda: admin.get(f"/admin/v2/namespaces/public/{name}/messageTTL").json == 120, "the TTL set")
    await page.wait_for(f"{text('[data-testid=policies]')}.includes('message_ttl_in_seconds')")
    assert page.problems == []

    # Refused by the broker: the console shows its reason (a second namespace of the same name).
    await open_page(page, url, "/namespaces")
    await page.fill("#new-ns-tenant", "public")
    await page.fill("#new-ns-name", name)
    await page.click("#create-namespace")
    reason = admin.put(f"/admin/v2/namespaces/public/{name}").reason
    notice = await page.wait_for("document.querySelector('#notice[data-kind=error]')?.textContent")
    assert notice.startswith("Create public/") and "409" in notice and reason in notice
    assert all("409" in p for p in page.problems), page.problems  # (the refused request itself)
    page.problems.clear()

    # Deleting asks first: cancelled, nothing happens; confirmed, the namespace goes.
    await open_page(page, url, f"/namespace/public/{name}")
    await page.click_text("button", "Delete namespace")
    await confirm(page, ok=False, value="")
    assert f"public/{name}" in namespaces(admin)
    await page.click_text("button", "Delete namespace")
    await confirm(page, value="")
    await until(lambda: f"public/{name}" not in namespaces(admin), "the namespace deleted")
    assert page.problems == []


async def test_clear_backlog_reset_cursor_and_terminate(page: Page, console_broker: BrokerThread,
                                                        admin: Admin) -> None:
    url = console_broker.web_url
    topic = f"persistent://public/default/quiet-{uuid.uuid4().hex[:6]}"
    client = pulsar.Client(console_broker.service_url)
    try:
        client.subscribe(topic, "idle").close()
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            producer.send(f"message {i}".encode())
        producer.close()
    finally:
        client.close()

    def backlog() -> int:
        return int(admin.stats(topic)["subscriptions"]["idle"]["msgBacklog"])

    assert backlog() == 20
    await open_page(page, url, f"/topic/persistent/public/default/{topic.rsplit('/', 1)[1]}")
    await page.wait_for(f"{text('[data-testid=backlog-idle]')} === '20'", what="backlog 20 shown")
    await click_row_button(page, "subscriptions", "idle", "Clear backlog")
    await confirm(page)
    await until(lambda: backlog() == 0, "backlog 0")
    await page.wait_for(f"{text('[data-testid=backlog-idle]')} === '0'", what="backlog 0 shown")

    await click_row_button(page, "subscriptions", "idle", "Reset cursor")
    await confirm(page, value="60")
    await until(lambda: backlog() == 20, "backlog 20 again")

    await click_row_button(page, "subscriptions", "idle", "Skip")
    await confirm(page, value="5")
    await until(lambda: backlog() == 15, "backlog 15")

    await page.click_text("button", "Terminate")
    await confirm(page)
    await page.wait_for("document.querySelector('#notice[data-kind=ok]')?.textContent.startsWith('Terminated')")
    client = pulsar.Client(console_broker.service_url, operation_timeout_seconds=5)
    try:
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(topic)
    finally:
        client.close()
    await page.screenshot(screenshot_path("topic-actions"))
    assert page.problems == []


async def test_subscription_actions_on_a_name_with_a_space_and_a_plus(page: Page, console_broker: BrokerThread,
                                                                     admin: Admin) -> None:
    """The console names a subscription in .../subscription/{sub} as Pulsar's admin client does (encoded twice:
    Pulsar's PersistentTopics decodes it twice), so its actions reach ``s b+ü`` itself: encoded once, the broker
    read ``s b ü`` (404)."""
    url = console_broker.web_url
    topic = f"persistent://public/default/names-{uuid.uuid4().hex[:6]}"
    sub = "s b+ü"
    client = pulsar.Client(console_broker.service_url)
    try:
        client.subscribe(topic, sub).close()
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            producer.send(f"message {i}".encode())
        producer.close()
    finally:
        client.close()

    def subscriptions() -> dict[str, int]:
        return {name: int(s["msgBacklog"]) for name, s in admin.stats(topic)["subscriptions"].items()}

    assert subscriptions() == {sub: 3}
    await open_page(page, url, f"/topic/persistent/public/default/{topic.rsplit('/', 1)[1]}")
    await click_row_button(page, "subscriptions", sub, "Clear backlog")
    await confirm(page)
    await until(lambda: subscriptions() == {sub: 0}, "backlog 0")
    await click_row_button(page, "subscriptions", sub, "Delete")
    await confirm(page)
    await until(lambda: subscriptions() == {}, "the subscription deleted")
    assert page.problems == []


async def test_peek_decodes_json_and_avro(page: Page, console_broker: BrokerThread) -> None:
    url = console_broker.web_url
    client = pulsar.Client(console_broker.service_url)
    locals_ = {}
    try:
        for kind, schema in (("json", JsonSchema(Order)), ("avro", AvroSchema(Order))):
            topic = f"persistent://public/default/{kind}-{uuid.uuid4().hex[:6]}"
            client.subscribe(topic, "reader", schema=schema).close()
            # Batched, as clients send by default: the console splits the batch.
            producer = client.create_producer(topic, schema=schema, batching_enabled=True,
                                              batching_max_publish_delay_ms=50)
            for i in range(3):
                producer.send_async(Order(item=f"{kind}-item-{i}", quantity=i + 1), None)
            producer.flush()
            producer.close()
            locals_[kind] = topic.rsplit("/", 1)[1]
    finally:
        client.close()

    for kind, local in locals_.items():
        await open_page(page, url, f"/topic/persistent/public/default/{local}")
        await click_row_button(page, "subscriptions", "reader", "Peek")
        await confirm(page, value="5")
        await page.wait_for("document.querySelectorAll('[data-testid=peeked-message]').length === 3",
                            what="three peeked messages")
        payloads = await page.eval("[...document.querySelectorAll('[data-testid=payload]')].map(e => e.textContent)")
        assert [json.loads(p) for p in payloads] == [{"item": f"{kind}-item-{i}", "quantity": i + 1}
                                                     for i in range(3)]
        meta = await page.eval(text("[data-testid=peeked-message] .meta"))
        assert f"schema {kind.upper()}" in meta
        await page.fill("#peek-mode", "hex")
        assert (await page.eval(text("[data-testid=payload]"))).startswith("00000000  ")
        await page.screenshot(screenshot_path(f"peek-{kind}"))
    assert page.problems == []


async def test_create_unload_compact_and_delete_topics(page: Page, console_broker: BrokerThread,
                                                       admin: Admin) -> None:
    url = console_broker.web_url
    ns = admin.new_namespace()
    tenant, local_ns = ns.split("/")
    await open_page(page, url, f"/topics/{tenant}/{local_ns}")
    await page.fill("#new-topic-name", "made-here")
    await page.click("#create-topic")
    await until(lambda: admin.get(f"/admin/v2/persistent/{ns}").json == [f"persistent://{ns}/made-here"],
                "the topic created")
    # (The console clears the name after the broker answered: wait for that before typing the next.)
    await page.wait_for("document.querySelector('#notice[data-kind=ok]')?.textContent.endsWith('/made-here') && "
                        "document.getElementById('new-topic-name').value === ''", what="the create finished")
    await page.fill("#new-topic-name", "parted")
    await page.fill("#new-topic-partitions", "2")
    await page.click("#create-topic")
    await until(lambda: admin.get(f"/admin/v2/persistent/{ns}/parted/partitions").json
                == {"partitions": 2, "deleted": False},
                "the partitioned topic created")
    await page.wait_for(f"{text('[data-testid=topics]')}.includes('2 partitions')", what="the new row")

    def loaded() -> bool:
        rows = admin.ok("GET", f"/admin/v2/namespaces/{ns}/topicsPage?search=made-here")["topics"]
        return bool(rows[0]["loaded"])

    assert loaded()
    await open_page(page, url, f"/topic/persistent/{tenant}/{local_ns}/made-here")
    await page.click_text("button", "Unload")
    await confirm(page)
    await until(lambda: not loaded(), "the topic unloaded")
    # (The console went back to the topic list, so that its own refresh does not load the topic again.)
    await page.wait_for(f"document.getElementById('main').dataset.ready === '/topics/{tenant}/{local_ns}'",
                        what="back on the topic list after the unload")
    await open_page(page, url, f"/topic/persistent/{tenant}/{local_ns}/made-here")
    await page.click_text("button", "Compact")
    await confirm(page)
    await until(lambda: admin.ok("GET", f"/admin/v2/persistent/{ns}/made-here/compaction")["status"]
                in ("RUNNING", "SUCCESS"), "compaction started")
    await page.click_text("button", "Delete")
    await confirm(page)
    await until(lambda: admin.get(f"/admin/v2/persistent/{ns}").json == [
        f"persistent://{ns}/parted-partition-0", f"persistent://{ns}/parted-partition-1"], "the topic deleted")
    await page.wait_for(f"document.getElementById('main').dataset.ready === '/topics/{tenant}/{local_ns}'",
                        what="back on the topic list")
    await click_row_button(page, "topics", "parted", "Delete")
    await confirm(page)
    await until(lambda: admin.get(f"/admin/v2/persistent/{ns}/parted/partitions").status == 404,
                "the partitioned topic deleted")
    assert page.problems == []


async def test_settings_change_and_reset_a_dynamic_setting(page: Page, console_broker: BrokerThread,
                                                           admin: Admin) -> None:
    """The Settings page lists the dynamic configuration with the values in force; Change stores one (the broker
    applies it at once), Reset takes it out; a value the setting does not accept shows the broker's reason."""
    url = console_broker.web_url
    values = "/admin/v2/brokers/configuration/values"
    await open_page(page, url, "/settings")
    row = ("[...document.querySelectorAll('[data-testid=settings] tbody tr')]"
           ".find(r => r.cells[0].textContent === 'maxTopicsPerNamespace')")
    assert await page.eval(f"{row}.cells[1].textContent") == "0"
    await click_row_button(page, "settings", "maxTopicsPerNamespace", "Change")
    await confirm(page, value="250")
    await until(lambda: admin.ok("GET", values) == {"maxTopicsPerNamespace": "250"}, "the setting stored")
    await page.wait_for(f"{row}?.cells[2].textContent === '250' && {row}.cells[1].textContent === '250'",
                        what="the row showing the stored value in force")
    await click_row_button(page, "settings", "maxTopicsPerNamespace", "Change")
    await confirm(page, value="lots")
    notice = await page.wait_for("document.querySelector('#notice[data-kind=error]')?.textContent")
    assert "412" in notice and "Invalid dynamic-config value" in notice, notice
    assert all("412" in p for p in page.problems), page.problems  # (the refused request itself)
    page.problems.clear()
    await click_row_button(page, "settings", "maxTopicsPerNamespace", "Reset")
    await confirm(page)
    await until(lambda: admin.ok("GET", values) == {}, "the setting reset")
    await page.wait_for(f"{row}?.cells[2].textContent === '-' && {row}.cells[1].textContent === '0'",
                        what="the row back at the file's value")
    await page.screenshot(screenshot_path("settings"))
    assert page.problems == []
