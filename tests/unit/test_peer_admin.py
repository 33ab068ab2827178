"""broker/admin/peers.py: the broker-to-broker admin client, against real aiohttp servers on loopback: the
credentials it sends (the broker's own, else the caller's), 307s followed with them kept (aiohttp itself drops the
Authorization header on a redirect to another port), the other broker's refusal passed on, an unreachable broker."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from yarl import URL

from broker.admin import peers
from broker.admin.cluster import redirect_url, topic_of
from broker.admin.common import HttpError
from broker.admin.peers import MAX_REDIRECTS, PeerAdmin, path_segment, subscription_segment, topic_path
from broker.config import BrokerConfig
from broker.topic_name import TopicName
from tests.security.pki import make_pki, serve_https_hello


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def owner() -> AsyncIterator[str]:
    """An 'owner' answering with the Authorization it got; a 'non-owner' redirecting there; a loop; a refusal."""
    async def seen(request: web.Request) -> web.Response:
        return web.json_response({"authorization": request.headers.get("Authorization"), "method": request.method,
                                  "body": await request.text()})

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"reason": "Topic not found"}, status=404)

    async def path(request: web.Request) -> web.Response:
        return web.json_response({"raw": request.rel_url.raw_path, "tail": request.match_info["tail"]})

    app = web.Application()
    app.router.add_route("*", "/seen", seen)
    app.router.add_get("/path/{tail:.*}", path)
    app.router.add_get("/refuse", refuse)
    runner, url = await serve(app)

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(f"{url}/seen")

    async def loop(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect("/loop")

    async def redirect_path(request: web.Request) -> web.Response:
        # (a URL: its text would be decoded and normalized by aiohttp itself)
        tail = request.rel_url.raw_path.removeprefix("/moved-path")
        raise web.HTTPTemporaryRedirect(URL(f"{url}/path{tail}", encoded=True))

    other = web.Application()
    other.router.add_route("*", "/moved", redirect)
    other.router.add_get("/moved-path/{tail:.*}", redirect_path)
    other.router.add_get("/loop", loop)
    other_runner, other_url = await serve(other)
    try:
        yield f"{url}|{other_url}"
    finally:
        await other_runner.cleanup()
        await runner.cleanup()


def caller(authorization: str | None) -> web.Request:
    return make_mocked_request("GET", "/", headers={"Authorization": authorization} if authorization else {})


async def test_the_broker_credentials_go_through_a_redirect(owner: str) -> None:
    _, other = owner.split("|")
    peers = PeerAdmin(BrokerConfig(
        brokerClientAuthenticationPlugin="org.apache.pulsar.client.impl.auth.AuthenticationToken",
        brokerClientAuthenticationParameters="token:broker-token"))
    try:
        got = await peers.call("POST", f"{other}/moved", caller("Bearer user-token"), body={"x": 1})
    finally:
        await peers.close()
    assert got == {"authorization": "Bearer broker-token", "method": "POST", "body": '{"x": 1}'}


async def test_the_broker_credentials_are_read_for_each_call(owner: str, tmp_path: Path) -> None:
    """A token file rotated, then the setting itself changed (update-dynamic-config): each call sends the token as it
    is then (before: the one read at start, until the broker restarted)."""
    url, _ = owner.split("|")
    token = tmp_path / "token"
    token.write_text("first")
    config = BrokerConfig(brokerClientAuthenticationPlugin="token",
                          brokerClientAuthenticationParameters=f"file://{token}")
    peers = PeerAdmin(config)
    seen = []
    try:
        seen.append((await peers.call("GET", f"{url}/seen"))["authorization"])
        token.write_text("second")
        seen.append((await peers.call("GET", f"{url}/seen"))["authorization"])
        config.brokerClientAuthenticationParameters = "token:third"
        seen.append((await peers.call("GET", f"{url}/seen"))["authorization"])
        token.unlink()
        config.brokerClientAuthenticationParameters = f"file://{token}"
        with pytest.raises(HttpError) as refused:
            await peers.call("GET", f"{url}/seen")
    finally:
        await peers.close()
    assert seen == ["Bearer first", "Bearer second", "Bearer third"]
    assert refused.value.status == 500 and "credentials cannot be used" in str(refused.value.text)


async def test_without_broker_credentials_the_callers_are_carried(owner: str) -> None:
    _, other = owner.split("|")
    peers = PeerAdmin(BrokerConfig())
    try:
        assert (await peers.call("DELETE", f"{other}/moved", caller("Bearer user-token")))["authorization"] == \
            "Bearer user-token"
        assert (await peers.call("GET", f"{other}/moved", caller(None)))["authorization"] is None
    finally:
        await peers.close()


async def test_refusals_loops_and_unreachable_brokers(owner: str) -> None:
    url, other = owner.split("|")
    peers = PeerAdmin(BrokerConfig())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]  # (nothing listens there once closed)
    try:
        with pytest.raises(HttpError) as refused:
            await peers.call("GET", f"{url}/refuse")
        assert refused.value.status_code == 404 and "Topic not found" in str(refused.value.text)
        with pytest.raises(HttpError) as looping:
            await peers.call("GET", f"{other}/loop")
        assert looping.value.status_code == 503 and f"more than {MAX_REDIRECTS} redirects" in str(looping.value.text)
        with pytest.raises(HttpError) as unreachable:
            await peers.call("GET", f"http://127.0.0.1:{closed_port}/x")
        assert unreachable.value.status_code == 503
    finally:
        await peers.close()


def test_topic_paths_encode_the_local_name() -> None:
    assert topic_path(TopicName.parse("persistent://t/ns/a b-partition-3")) == \
        "/admin/v2/persistent/t/ns/a%20b-partition-3"
    assert topic_path(TopicName.parse("non-persistent://t/ns/x")) == "/admin/v2/non-persistent/t/ns/x"


async def test_a_dot_segment_is_sent_as_given_not_climbed(owner: str) -> None:
    """A subscription (or topic) named ".." is one segment, %2E%2E: sent so, also after a redirect, not decoded and
    normalized away with the segment before it (the call, made with the broker's credentials, then reached another
    route: .../subscription/%2E%2E/properties became the topic's .../properties)."""
    url, other = owner.split("|")
    peers = PeerAdmin(BrokerConfig())
    try:
        got = await peers.call("GET", f"{url}/path/t/subscription/%2E%2E/properties")
        assert got == {"raw": "/path/t/subscription/%2E%2E/properties", "tail": "t/subscription/../properties"}
        got = await peers.call("GET", f"{other}/moved-path/t/subscription/%2E%2E/properties")
        assert got["raw"] == "/path/t/subscription/%2E%2E/properties"
    finally:
        await peers.close()
    assert [path_segment(s) for s in ("..", ".", "a.b", "a/b", "%")] == ["%2E%2E", "%2E", "a.b", "a%2Fb", "%25"]


async def test_a_redirect_to_the_owner_keeps_a_dot_segment() -> None:
    """The 307 to a topic's owner keeps the path as the request encoded it: Location's text was parsed again by
    aiohttp, which climbed over %2E%2E (DELETE .../subscription/%2E%2E sent to the owner as DELETE .../x/)."""
    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(redirect_url(request, "http://owner:8080", False))

    app = web.Application()
    app.router.add_delete("/admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}", moved)
    runner, url = await serve(app)
    try:
        async with aiohttp.ClientSession() as session, session.delete(
                URL(f"{url}/admin/v2/persistent/t/ns/x/subscription/%2E%2E?authoritative=true&a=b", encoded=True),
                allow_redirects=False) as answer:
            assert answer.status == 307
            assert answer.headers["Location"] == \
                "http://owner:8080/admin/v2/persistent/t/ns/x/subscription/%2E%2E?authoritative=false&a=b"
    finally:
        await runner.cleanup()


async def test_a_call_with_redirects_has_one_timeout_in_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Five 307s, each answered within CALL_TIMEOUT_S but not all of them: 503. Each hop had the whole time
    before (six hops, six times CALL_TIMEOUT_S)."""
    monkeypatch.setattr(peers, "CALL_TIMEOUT_S", 1.0)
    hops: list[int] = []

    async def slow_redirect(request: web.Request) -> web.Response:
        hop = int(request.match_info["hop"])
        hops.append(hop)
        await asyncio.sleep(0.4)  # (a slow broker: the latency is what is tested)
        if hop < peers.MAX_REDIRECTS:
            raise web.HTTPTemporaryRedirect(f"/hop/{hop + 1}")
        return web.json_response({"hop": hop})

    app = web.Application()
    app.router.add_get("/hop/{hop}", slow_redirect)
    runner, url = await serve(app)
    admin = PeerAdmin(BrokerConfig())
    try:
        with pytest.raises(HttpError) as failed:
            await admin.call("GET", f"{url}/hop/0")
    finally:
        await admin.close()
        await runner.cleanup()
    assert failed.value.status_code == 503 and "no answer within 1 s" in str(failed.value.text)
    assert hops[-1] < peers.MAX_REDIRECTS


@pytest.mark.parametrize("status", [301, 302, 303])
async def test_a_moved_or_see_other_redirect_is_followed_as_a_get(owner: str, status: int) -> None:
    """301, 302 and 303 are followed as Pulsar's admin client follows them (AsyncHttpConnector.executeRedirect): a
    POST (any method but GET, HEAD, OPTIONS) becomes a GET without its body, the credentials kept. They were taken
    as the other broker's success (an empty answer), the call made nowhere."""
    url, _ = owner.split("|")
    seen: list[str] = []

    async def moved(request: web.Request) -> web.Response:
        seen.append(request.method)
        return web.Response(status=status, headers={"Location": f"{url}/seen"})

    app = web.Application()
    app.router.add_route("*", "/moved", moved)
    runner, other = await serve(app)
    admin = PeerAdmin(BrokerConfig())
    try:
        got = await admin.call("POST", f"{other}/moved", caller("Bearer user-token"), body={"x": 1})
        assert got == {"authorization": "Bearer user-token", "method": "GET", "body": ""}
        assert (await admin.call("GET", f"{other}/moved"))["method"] == "GET"
    finally:
        await admin.close()
        await runner.cleanup()
    assert seen == ["POST", "GET"]


async def test_a_permanent_redirect_keeps_the_method_and_body(owner: str) -> None:
    url, _ = owner.split("|")

    async def moved(request: web.Request) -> web.Response:
        return web.Response(status=308, headers={"Location": f"{url}/seen"})

    app = web.Application()
    app.router.add_route("*", "/moved", moved)
    runner, other = await serve(app)
    admin = PeerAdmin(BrokerConfig())
    try:
        got = await admin.call("PUT", f"{other}/moved", body=[1])
    finally:
        await admin.close()
        await runner.cleanup()
    assert got == {"authorization": None, "method": "PUT", "body": "[1]"}


@pytest.mark.parametrize(("status", "location"), [(300, "/elsewhere"), (304, None), (302, None), (307, None)])
async def test_a_3xx_that_is_not_followed_is_a_failure(status: int, location: str | None) -> None:
    """A 3xx that is not a redirect Pulsar's admin client follows, or a redirect without a Location, fails the call
    (503): it was taken as the other broker's success."""
    async def odd(request: web.Request) -> web.Response:
        return web.Response(status=status, headers={"Location": location} if location else {})

    app = web.Application()
    app.router.add_route("*", "/odd", odd)
    runner, url = await serve(app)
    admin = PeerAdmin(BrokerConfig())
    try:
        with pytest.raises(HttpError) as failed:
            await admin.call("POST", f"{url}/odd")
    finally:
        await admin.close()
        await runner.cleanup()
    assert failed.value.status_code == 503 and str(status) in str(failed.value.text)


async def test_the_tls_context_is_built_once_and_again_when_its_files_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls over https share one TLS context (it was built, the trust file read and parsed, at every call); a trust
    file replaced on disk is used from the next call on (the context built again), as Pulsar's admin client
    refreshes its SSL context when its files change."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    pki, other_ca = make_pki(tmp_path / "a"), make_pki(tmp_path / "b")
    trust = tmp_path / "trust.pem"
    trust.write_bytes(pki.ca_cert.read_bytes())
    runner, port = await serve_https_hello(pki)
    built = 0
    create = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        nonlocal built
        built += 1
        return create(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counting)
    admin = PeerAdmin(BrokerConfig(brokerClientTrustCertsFilePath=str(trust)))
    stamp = trust.stat().st_mtime_ns

    def replace_trust(source: Path) -> None:
        nonlocal stamp
        trust.write_bytes(source.read_bytes())
        stamp += 1_000_000_000  # (a later modification time, whatever the file system's clock granularity)
        os.utime(trust, ns=(stamp, stamp))

    try:
        for _ in range(3):
            assert await admin.call("GET", f"https://127.0.0.1:{port}/hello") == {"ok": True}
        assert built == 1
        replace_trust(other_ca.ca_cert)  # (a CA that did not sign the server's certificate)
        with pytest.raises(HttpError) as untrusted:
            await admin.call("GET", f"https://127.0.0.1:{port}/hello")
        assert untrusted.value.status_code == 503 and built == 2
        replace_trust(pki.ca_cert)
        assert await admin.call("GET", f"https://127.0.0.1:{port}/hello") == {"ok": True}
        assert built == 3
    finally:
        await admin.close()
        await runner.cleanup()


def test_the_topic_of_an_admin_path_is_decoded_as_pulsar_decodes_it() -> None:
    """The ownership middleware's topic (the one whose owner serves the call) is the handler's: each segment of the
    path as sent decoded, the topic's by Pulsar's Codec.decode ("+" a space, "%2B" a "+", "%2F" a "/")."""
    assert topic_of("/admin/v2/persistent/t/ns/a+b%2Bc%2Fd%3A%C3%BC/stats") == (
        TopicName.parse("persistent://t/ns/a b+c/d:ü"), "stats")
    assert topic_of("/admin/v2/non-persistent/t/ns/x") == (TopicName.parse("non-persistent://t/ns/x"), "")
    assert topic_of("/admin/v2/namespaces/t/ns/x") is None


def test_a_subscription_segment_is_encoded_as_pulsars_admin_client_encodes_it() -> None:
    """Twice, as TopicsImpl does (Codec.encode, then the path segment's percent-encoding), since Pulsar's
    PersistentTopics decodes .../subscription/{subName} twice; the wire forms captured from pulsar-client-admin."""
    assert subscription_segment("s b+c") == "s%2Bb%252Bc"
    assert subscription_segment("ü:x") == "%25C3%25BC%253Ax"
    assert [subscription_segment(s) for s in ("s", "a.b-c_d*", "..")] == ["s", "a.b-c_d%2A", "%2E%2E"]
