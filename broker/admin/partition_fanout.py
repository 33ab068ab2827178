"""Admin calls made on each partition of a partitioned topic, each by the broker that owns the partition.

Pulsar's PersistentTopicsBase applies many operations on a partitioned topic to each of its partitions through the
broker's admin client (``pulsar().getAdminClient().topics().xxxAsync(partition)``): the call goes to the partition's
owner, whichever broker that is. Here the same: a partition this broker serves is done locally (``local``), any other
by the same call at its owner (``PeerAdmin.call``, broker/admin/peers.py). Standalone, every partition is local.

The interface:

- ``partitions_to_ask(name)``: which partitions an operation over a partitioned topic visits.
- ``outcomes(...)``: a given call (method, action, query, body) on a given list of partitions: each one's answer or
  ``CallFailure``, once all have ended. The calls are made side by side (as Pulsar's waitForAll), at most
  ``FANOUT_CONCURRENCY`` at once, those to other brokers within ``FANOUT_TIMEOUT_S`` in all: the bounded gather of
  broker/admin/owner_calls.py, shared with the fan-outs over a namespace's bundles.
- ``on_owners(...)``: ``outcomes``, the answers; the first failure in partition order other than a 404 is raised.
- ``on_each_partition(...)``: the request's own call (method, rest of path, query, body) on each partition.
- ``tally(...)``: ``on_each_partition`` for an operation a partition may refuse (409) without failing the others.
- ``each(...)``: a topic, or each partition of a partitioned one.

A partition that is not found (404) is left out of the answers, or with ``missing_ok=False`` answers the whole call
(404) once the others are done. Every partition's call is made even when one fails (Pulsar waits for all of them
too); the answer is then the first failure in partition order, whatever order they ended in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlencode

from aiohttp import web

from broker.admin.cluster import topic_owner_url
from broker.admin.common import HttpError
from broker.admin.owner_calls import CallFailure, PeerCall, fan_out
from broker.admin.peers import path_segment, topic_path
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
        """The partitions of a partitioned topic that exist: a persistent one's stored ones (made with it, see
        ``BrokerService.create_partitions``, unless deleted since; of an auto-created partitioned topic, those used)."""
        return [p for p in (name.partition(i) for i in range(self.partitions(name))) if self.exists(p)]

    def partitions_to_ask(self, name: TopicName) -> list[TopicName]:
        """The partitions an operation over a partitioned topic visits: the existing ones; in cluster mode every
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
        Every partition's call is made (side by side, ``outcomes``); then the first failure other than a 404, in
        partition order, is the answer. A partition that is not found (404) is left out; unless ``missing_ok`` is
        false: then the first 404 is the answer (Pulsar answers the per-partition NotFound of a subscription
        operation so, once every partition's call has ended)."""
        answers: dict[TopicName, Any] = {}
        missing: HttpError | None = None
        for p, answer in await self.outcomes(request, partitions, method, action, local, query, body):
            if isinstance(answer, CallFailure):
                if answer.status != 404:
                    raise answer.error
                missing = missing or answer.as_http_error()
            else:
                answers[p] = answer
        if missing is not None and not missing_ok:
            raise missing
        return answers

    async def outcomes(self, request: web.Request, partitions: list[TopicName], method: str, action: str,
                       local: Callable[[TopicName], Awaitable[Any]], query: str = "", body: object = None
                       ) -> list[tuple[TopicName, Any]]:
        """(partition, its answer or its ``CallFailure``) for each partition in order, once every call has
        ended, as Pulsar's FutureUtil.waitForAll over the admin client's calls: ``owner_calls.fan_out``, with its
        bounds (``FANOUT_CONCURRENCY`` at a time, the calls to other brokers within ``FANOUT_TIMEOUT_S`` in all)."""
        suffix = f"/{action}" if action else ""

        async def one(p: TopicName, peer_call: PeerCall) -> Any:
            base = await peer_call.owner(topic_owner_url(self.ctx, p, request.secure), p.full)
            if base is None:
                return await local(p)
            return await peer_call(method, f"{base}{topic_path(p)}{suffix}{query}", body)

        return await fan_out(self.peers, request, partitions, one, "the calls on every partition")

    async def on_each_partition(self, request: web.Request, name: TopicName,
                                local: Callable[[TopicName], Awaitable[Any]], *, body: object = None,
                                missing_ok: bool = True, partitions: list[TopicName] | None = None
                                ) -> dict[TopicName, Any]:
        """The request's own call made on each partition of the partitioned topic ``name`` (by default the ones
        ``partitions_to_ask`` names), by the partition's owner: ``on_owners`` with the request's method, the rest
        of its path after the topic (each segment URL-encoded) and its query (less ``authoritative``: that one was about
        the partitioned name, the call at the owner looks the partition up afresh). ``body``: the request's body
        as read (JSON), sent on."""
        action, query = self._request_call(request)
        return await self.on_owners(request, self.partitions_to_ask(name) if partitions is None else partitions,
                                    request.method, action, local, query, body, missing_ok=missing_ok)

    @staticmethod
    def _request_call(request: web.Request) -> tuple[str, str]:
        """(the request's path after the topic, its query less ``authoritative``), as sent to a partition's owner."""
        # The segments after the topic ("", admin, v2, domain, tenant, ns, topic), each decoded and encoded again
        # as one segment: a subscription named ".." stays one (sent as %2E%2E), not a step up to another route.
        action = "/".join(path_segment(unquote(s)) for s in request.rel_url.raw_path.split("/")[7:])
        kept = [(k, v) for k, v in request.query.items() if k != "authoritative"]
        return action, f"?{urlencode(kept)}" if kept else ""

    async def tally(self, request: web.Request, partitions: list[TopicName],
                    local: Callable[[TopicName], Awaitable[Any]], *, body: object = None,
                    refused: int = 409) -> tuple[int, int]:
        """``on_each_partition`` on ``partitions`` for an operation that a partition may refuse with ``refused``
        (it is running already, the subscription exists already) without failing the others: (how many partitions
        did it, how many refused). A partition not found (404) is neither; any other failure is the answer (the
        first, in partition order, once every partition's call has ended)."""
        action, query = self._request_call(request)
        done = refusals = 0
        for _, answer in await self.outcomes(request, partitions, request.method, action, local, query, body):
            if not isinstance(answer, CallFailure):
                done += 1
            elif answer.status == refused:
                refusals += 1
            elif answer.status != 404:
                raise answer.error
        return done, refusals

    async def each(self, request: web.Request, name: TopicName, one: Callable[[TopicName], Awaitable[Any]], *,
                   body: object = None, missing_ok: bool = True) -> list[Any]:
        """``one`` on the topic itself; on a partitioned topic, on each of its partitions by the partition's owner
        (``on_each_partition``, with ``body`` and ``missing_ok``): the answers."""
        if self.partitions(name) == 0:
            return [await one(name)]
        answers = await self.on_each_partition(request, name, one, body=body, missing_ok=missing_ok)
        return list(answers.values())

