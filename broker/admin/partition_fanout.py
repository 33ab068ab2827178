"""Admin calls made on each partition of a partitioned topic, each by the broker that owns the partition.

Pulsar's PersistentTopicsBase applies many operations on a partitioned topic to each of its partitions through the
broker's admin client (``pulsar().getAdminClient().topics().xxxAsync(partition)``): the call goes to the partition's
owner, whichever broker that is. Here the same: a partition this broker serves is done locally (``local``), any other
by the same call at its owner (``PeerAdmin.call``, broker/admin/peers.py). Standalone, every partition is local.

The interface:

- ``partitions_to_ask(name)``: which partitions an operation over a partitioned topic visits.
- ``on_owners(...)``: a given call (method, action, query, body) on a given list of partitions.
- ``on_each_partition(...)``: the request's own call (method, rest of path, query, body) on each partition.
- ``tally(...)``: ``on_each_partition`` for an operation a partition may refuse (409) without failing the others.
- ``each(...)``: a topic, or each partition of a partitioned one.

A partition that is not found (404) is left out of the answers, or with ``missing_ok=False`` answers the whole call
(404) once the others are done.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlencode

from aiohttp import web

from broker.admin.cluster import topic_owner_url
from broker.admin.common import HttpError, status_for
from broker.admin.peers import path_segment, topic_path
from broker.errors import BrokerError
from broker.topic_name import TopicName

if TYPE_CHECKING:
    from broker.admin.context import AdminContext
    from broker.admin.peers import PeerAdmin


class PartitionFanout:
    """The calls on each partition of a partitioned topic; ``partitions`` and ``exists`` say how many partitions a
    topic has and whether a topic was created (TopicsResource's)."""

    def __init__(self, ctx: AdminContext, peers: PeerAdmin, partitions: Callable[[TopicName], int],
                 exists: Callable[[TopicName], bool]) -> None:
        self.ctx = ctx
        self.peers = peers
        self.partitions = partitions
        self.exists = exists

    def existing_partitions(self, name: TopicName) -> list[TopicName]:
        """The partitions of a partitioned topic that were created (written to or subscribed)."""
        return [p for p in (name.partition(i) for i in range(self.partitions(name))) if self.exists(p)]

    def partitions_to_ask(self, name: TopicName) -> list[TopicName]:
        """The partitions an operation over a partitioned topic visits: the created ones; in cluster mode every
        non-persistent partition (live on its owner only: this broker cannot tell which exist)."""
        if self.ctx.service.ownership.distributed and not name.persistent:
            return [name.partition(i) for i in range(self.partitions(name))]
        return self.existing_partitions(name)

    async def on_owners(self, request: web.Request, partitions: list[TopicName], method: str, action: str,
                        local: Callable[[TopicName], Awaitable[Any]], query: str = "", body: object = None, *,
                        missing_ok: bool = True) -> dict[TopicName, Any]:
        """Each partition's answer, from the broker that owns it (Pulsar's admin calls per partition through the
        broker's admin client): ``local`` for the ones this broker serves (taking an unowned bundle when the lookup
        picks this broker), else ``method`` on the partition's ``action`` at the owner (``peers``), with ``body``.
        A partition that is not found (404) is left out; unless ``missing_ok`` is false: then the others are still
        done, and the first 404 is the answer (Pulsar answers the per-partition NotFound of a subscription
        operation so, once every partition's call has ended)."""
        answers: dict[TopicName, Any] = {}
        missing: HttpError | None = None
        for p in partitions:
            try:
                base = await topic_owner_url(self.ctx, p, request.secure)
                if base is None:
                    answers[p] = await local(p)
                else:
                    suffix = f"/{action}" if action else ""
                    answers[p] = await self.peers.call(method, f"{base}{topic_path(p)}{suffix}{query}", request, body)
            except HttpError as exc:
                if exc.status_code != 404:
                    raise
                missing = missing or exc
            except BrokerError as exc:
                if status_for(exc) != 404:
                    raise
                missing = missing or HttpError(404, exc.message)
        if missing is not None and not missing_ok:
            raise missing
        return answers

    async def on_each_partition(self, request: web.Request, name: TopicName,
                                local: Callable[[TopicName], Awaitable[Any]], *, body: object = None,
                                missing_ok: bool = True, partitions: list[TopicName] | None = None
                                ) -> dict[TopicName, Any]:
        """The request's own call made on each partition of the partitioned topic ``name`` (by default the ones
        ``partitions_to_ask`` names), by the partition's owner: ``on_owners`` with the request's method, the rest
        of its path after the topic (each segment URL-encoded) and its query (less ``authoritative``: that one was about
        the partitioned name, the call at the owner looks the partition up afresh). ``body``: the request's body
        as read (JSON), sent on."""
        # The segments after the topic ("", admin, v2, domain, tenant, ns, topic), each decoded and encoded again
        # as one segment: a subscription named ".." stays one (sent as %2E%2E), not a step up to another route.
        action = "/".join(path_segment(unquote(s)) for s in request.rel_url.raw_path.split("/")[7:])
        kept = [(k, v) for k, v in request.query.items() if k != "authoritative"]
        query = f"?{urlencode(kept)}" if kept else ""
        return await self.on_owners(request, self.partitions_to_ask(name) if partitions is None else partitions,
                                    request.method, action, local, query, body, missing_ok=missing_ok)

    async def tally(self, request: web.Request, name: TopicName, partitions: list[TopicName],
                    local: Callable[[TopicName], Awaitable[None]], *, body: object = None,
                    refused: int = 409) -> tuple[int, int]:
        """``on_each_partition`` for an operation that a partition may refuse with ``refused`` (it is running
        already, the subscription exists already) without failing the others: (how many partitions did it, how
        many refused). Any other error is the answer at once."""
        done = refusals = 0
        for p in partitions:
            try:
                done += len(await self.on_each_partition(request, name, local, body=body, partitions=[p]))
            except HttpError as exc:
                if exc.status_code != refused:
                    raise
                refusals += 1
            except BrokerError as exc:
                if status_for(exc) != refused:
                    raise
                refusals += 1
        return done, refusals

    async def each(self, request: web.Request, name: TopicName, one: Callable[[TopicName], Awaitable[Any]], *,
                   body: object = None, missing_ok: bool = True) -> list[Any]:
        """``one`` on the topic itself; on a partitioned topic, on each of its partitions by the partition's owner
        (``on_each_partition``, with ``body`` and ``missing_ok``): the answers."""
        if self.partitions(name) == 0:
            return [await one(name)]
        answers = await self.on_each_partition(request, name, one, body=body, missing_ok=missing_ok)
        return list(answers.values())
