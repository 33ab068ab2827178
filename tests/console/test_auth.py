"""The console with authentication and authorization on: it asks for credentials (token or
basic), keeps them in sessionStorage and sends them as an Authorization header only, shows a
refused sign-in with the broker's reason, and shows a role only what it may see (refusals of a signed-in
role, 403 or Pulsar's 401 other than "Authentication required", are said, not failures)."""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Iterator

import pytest

from broker.embedded import BrokerThread
from broker.version import __version__
from tests.console.cdp import Page
from tests.console.conftest import screenshot_path
from tests.console.test_pages import text
from tests.security.conftest import SecureAdmin, token
from tests.security.pki import USERS, Pki, make_pki

SUPER_USER = "admin"
READER = "reader"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("console-pki"))


@pytest.fixture(scope="module")
def secure_broker(pki: Pki) -> Iterator[BrokerThread]:
    with BrokerThread(managedLedgerStorage="memory", brokerServicePort=0, webServicePort=0,
                      authenticationEnabled=True, authenticationProviders="token,basic",
                      tokenSecretKey=f"file://{pki.secret_key}", basicAuthConf=str(pki.htpasswd),
                      authorizationEnabled=True, superUserRoles=SUPER_USER) as broker:
        yield broker


async def sign_in_with_token(page: Page, value: str) -> None:
    await page.wait_for("document.getElementById('login').open", what="the sign-in dialog")
    await page.click("input[name=method][value=token]")
    await page.fill("#login-token", value)
    await page.click("#login-submit")


async def test_sign_in_and_roles(page: Page, secure_broker: BrokerThread, pki: Pki,
                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = secure_broker.web_url
    admin_token = token(SUPER_USER)
    admin = SecureAdmin.bearer(url, pki, SUPER_USER)
    admin.ok("POST", f"/admin/v2/namespaces/public/default/permissions/{READER}", ["consume"])
    topic = f"persistent://public/default/secured-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}")

    # No credentials: the console asks for them, and shows nothing else.
    await page.goto(url + "/")
    await page.wait_for("document.getElementById('login').open", what="the sign-in dialog")
    await page.screenshot(screenshot_path("sign-in"))
    # Only the chosen method's fields are shown.
    visible = "(id) => { const el = document.getElementById(id); return !!el && el.getClientRects().length > 0; }"
    assert await page.eval(f"[({visible})('login-token'), ({visible})('login-user')]") == [True, False]
    await page.click("input[name=method][value=basic]")
    assert await page.eval(f"[({visible})('login-token'), ({visible})('login-password')]") == [False, True]

    # A bad token: refused, with the broker's reason; nothing kept.
    await sign_in_with_token(page, "not-a-token")
    error = await page.wait_for("!document.getElementById('login-error').hidden && "
                                "document.getElementById('login-error').textContent")
    assert error.startswith("Not signed in: ")
    assert len(error) > len("Not signed in: ")
    assert await page.eval("sessionStorage.length") == 0

    # The super user's token: the overview.
    await sign_in_with_token(page, admin_token)
    assert await page.wait_for(text("[data-testid=version]")) == __version__
    assert await page.eval("document.getElementById('login').open") is False
    assert await page.eval("Object.values(sessionStorage)") == [f"Bearer {admin_token}"]
    assert await page.eval("localStorage.length") == 0 and await page.eval("document.cookie") == ""
    api_calls = [r for r in page.requests if "/admin/v2/" in r[1]]
    assert api_calls and all(admin_token not in r[1] for r in page.requests)
    assert any(r[2].get("Authorization") == f"Bearer {admin_token}" for r in api_calls)

    # Basic credentials of a role that is neither super user nor tenant admin: the overview and the
    # tenant list say it may not see them.
    await page.click("#logout")
    await page.goto(url + "/#/tenants")
    await page.wait_for("document.getElementById('login').open", what="the sign-in dialog again")
    await page.click("input[name=method][value=basic]")
    await page.fill("#login-user", "alice")
    await page.fill("#login-password", USERS["alice"])
    await page.click("#login-submit")
    denied = await page.wait_for(text("[data-testid=denied]"))
    assert "Not allowed for this role" in denied and "alice" in denied

    # A role with consume permission on public/default sees its topics, and may not create one.
    await page.click("#logout")
    await page.goto(url + "/#/topics/public/default")
    await sign_in_with_token(page, token(READER))
    assert topic.rsplit("/", 1)[1] in await page.wait_for(text("[data-testid=topics]"))
    await page.fill("#new-topic-name", "not-allowed")
    await page.click("#create-topic")
    notice = await page.wait_for("document.querySelector('#notice[data-kind=error]')?.textContent")
    # (Pulsar's validateNamespaceOperation refuses a topic's creation: 403)
    assert "403" in notice and "CREATE_TOPIC" in notice
    await page.screenshot(screenshot_path("reader-refused"))
    assert admin.ok("GET", "/admin/v2/persistent/public/default") == [topic]
    # The broker's settings are for super users: this role is told it may not see them.
    await page.goto(url + "/#/settings")
    denied = await page.wait_for(text("[data-testid=denied]"))
    assert "Not allowed for this role" in denied and "LIST_DYNAMIC_CONFIGURATIONS" in denied

    # The tokens never reach the broker's log.
    for secret in (admin_token, token(READER), base64.b64encode(f"alice:{USERS['alice']}".encode()).decode()):
        assert secret not in caplog.text
    # Any refusal seen by the page was an expected 401 / 403.
    assert all(p.startswith(("HTTP 401", "HTTP 403", "log (network)")) and ("401" in p or "403" in p)
               for p in page.problems), page.problems

