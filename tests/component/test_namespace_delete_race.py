"""Deleting a namespace while topics are being created in it: either the delete is refused (409, the topics
stay) or it succeeds and nothing of the namespace is left (a topic created between the emptiness check and the
delete was an orphan: its data stayed, and came back with a namespace of the same name)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from broker.embedded import Broker
from broker.errors import NotAllowedError
from broker.topic_name import TopicName


async def test_a_namespace_deleted_while_topics_are_created_leaves_no_orphan() -> None:
    async with Broker() as broker, aiohttp.ClientSession() as http:
        base = broker.web_url + "/admin/v2"

        async def call(method: str, path: str, body: object = None) -> int:
            async with http.request(method, base + path, json=body) as reply:
                await reply.read()
                return reply.status

        for i in range(6):
            ns = f"public/race-{i}"
            assert await call("PUT", f"/namespaces/{ns}") == 204
            deleted, *created = await asyncio.gather(
                call("DELETE", f"/namespaces/{ns}"), call("PUT", f"/persistent/{ns}/t"),
                call("PUT", f"/persistent/{ns}/p/partitions", 2), call("PUT", f"/persistent/{ns}/t2/subscription/s"))
            assert all(status < 500 for status in (deleted, *created)), (deleted, created)
            if deleted == 204:
                assert await call("PUT", f"/namespaces/{ns}") == 204  # a namespace of the same name: empty
                async with http.get(f"{base}/persistent/{ns}") as reply:
                    assert await reply.json() == []
                async with http.get(f"{base}/persistent/{ns}/partitioned") as reply:
                    assert await reply.json() == []
            else:
                assert deleted == 409


async def test_a_namespace_another_broker_is_deleting_takes_no_topic() -> None:
    """In a cluster the delete runs on one broker and creates arrive at others: the namespace's
    policies say ``deleted`` (Pulsar's mark, here written as another broker's delete writes it) and
    every broker refuses new topics in it, by admin call or by client."""
    async with Broker() as broker, aiohttp.ClientSession() as http:
        base = broker.web_url + "/admin/v2"
        assert broker.server is not None
        service = broker.server.service
        async with http.put(f"{base}/namespaces/public/elsewhere") as reply:
            assert reply.status == 204

        def mark(policies: dict[str, Any]) -> None:
            policies["deleted"] = True

        await service.metadata.modify_policies("public/elsewhere", mark)
        # (Pulsar 4.0.7's createNonPartitionedTopic and createPartitionedTopic both call
        # validateGlobalNamespaceOwnership right after the namespace's name: checkLocalOrGetPeerReplicationCluster
        # answers first, 404 "Namespace is deleted".)
        for path, body in (("/persistent/public/elsewhere/t", None), ("/persistent/public/elsewhere/p/partitions", 2)):
            async with http.put(base + path, json=body) as reply:
                assert (reply.status, await reply.json()) == (404, {"reason": "Namespace is deleted"}), path
        with pytest.raises(NotAllowedError):
            await service.get_topic(TopicName.parse("persistent://public/elsewhere/auto"), create=True)
        async with http.get(f"{base}/persistent/public/elsewhere") as reply:
            assert await reply.json() == []


async def test_a_delete_that_fails_takes_its_mark_back() -> None:
    async with Broker() as broker, aiohttp.ClientSession() as http:
        base = broker.web_url + "/admin/v2"
        assert broker.server is not None
        server = broker.server
        async with http.put(f"{base}/namespaces/public/half") as reply:
            assert reply.status == 204
        async with http.put(f"{base}/persistent/public/half/t") as reply:
            assert reply.status == 204

        async def fail(name: TopicName, force: bool = False) -> None:
            raise RuntimeError("a topic that cannot be deleted")

        server.web.topics.delete_one = fail  # type: ignore[method-assign]
        async with http.delete(f"{base}/namespaces/public/half?force=true") as reply:
            assert reply.status == 500
        assert not server.service.namespace_being_deleted("public/half")
        async with http.get(f"{base}/namespaces/public/half") as reply:
            assert (await reply.json())["deleted"] is False
        async with http.put(f"{base}/persistent/public/half/t2") as reply:
            assert reply.status == 204
