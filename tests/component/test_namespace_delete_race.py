"""Deleting a namespace while topics are being created in it: either the delete is refused (409, the topics
stay) or it succeeds and nothing of the namespace is left (a topic created between the emptiness check and the
delete was an orphan: its data stayed, and came back with a namespace of the same name)."""

from __future__ import annotations

import asyncio

import aiohttp

from broker.embedded import Broker


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
