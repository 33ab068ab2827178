"""Admin REST: anti-affinity groups (LocalPolicies.namespaceAntiAffinityGroup) on a single broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.embedded import BrokerThread
from tests.admin.conftest import Admin


@pytest.fixture(scope="module")
def pulsar_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with BrokerThread(data_dir=tmp_path_factory.mktemp("load-policies")) as b:
        yield b


def test_anti_affinity_group_set_read_listed_removed(admin: Admin) -> None:
    ns = admin.new_namespace()
    path = f"/admin/v2/namespaces/{ns}/antiAffinity"
    assert admin.get(path).status == 204  # none yet
    # Pulsar's admin client sends the bare text; a JSON string is taken too.
    assert admin.call("POST", path, raw=b"group-1").status == 204
    reply = admin.get(path)
    assert reply.status == 200 and reply.body == b"group-1"
    other = admin.new_namespace()
    assert admin.post(f"/admin/v2/namespaces/{other}/antiAffinity", "GROUP-1").status == 204
    # (Kept in LocalPolicies, created with the namespace's bundles: they stay as they were.)
    assert admin.ok("GET", f"/admin/v2/namespaces/{ns}/bundles")["numBundles"] == 4
    listed = admin.ok("GET", "/admin/v2/namespaces/standalone/antiAffinity/group-1?tenant=public")
    assert listed == sorted([ns, other])  # (groups compare case-insensitively, as in Pulsar)
    assert admin.delete(path).status == 204
    assert admin.get(path).status == 204
    assert admin.ok("GET", "/admin/v2/namespaces/standalone/antiAffinity/group-1?tenant=public") == [other]


def test_anti_affinity_bad_input(admin: Admin) -> None:
    ns = admin.new_namespace()
    path = f"/admin/v2/namespaces/{ns}/antiAffinity"
    blank = admin.call("POST", path, raw=b"  ")
    assert blank.status == 412 and "can't be empty" in blank.reason
    assert admin.call("POST", path, raw=b'"unterminated').status == 400
    assert admin.get("/admin/v2/namespaces/public/no-such-ns/antiAffinity").status == 404
    assert admin.call("POST", "/admin/v2/namespaces/no-tenant/x/antiAffinity", raw=b"g").status == 404
    assert admin.get("/admin/v2/namespaces/standalone/antiAffinity/g").status == 412  # no tenant
    assert admin.get("/admin/v2/namespaces/nowhere/antiAffinity/g?tenant=public").status == 412
