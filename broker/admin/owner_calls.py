"""One admin operation made on many targets (partitions of a topic, bundles of a namespace), each by the broker that
owns the target: the bounded gather shared by every such fan-out.

Pulsar makes these calls through the broker's admin client, all started together and awaited with
``FutureUtil.waitForAll`` (``CompletableFuture.allOf``): partition calls in PersistentTopicsBase, the bundle calls
of NamespacesBase's internalClearNamespaceBacklog / ...ForSubscription / internalUnsubscribeNamespace, and
NonPersistentTopics.getList's getListInBundle of every bundle. allOf ends once every call has ended (a failure does
not stop the others) and fails with the first failure in list order. Here the same, with two bounds:

- at most ``FANOUT_CONCURRENCY`` targets under way at once;
- the calls to other brokers, and the lookups of the targets' owners before them, end by ``FANOUT_TIMEOUT_S`` after
  the fan-out started, all of them together (a 503 for those still waiting then), so a broker that does not answer,
  or a metadata store that does not, costs one bounded wait, not one per target. (Pulsar's owner lookup is part of
  the admin client's request, under the same 60 s.) A local call is never cut short (it may be loading or changing a
  topic).

``fan_out`` gives each target's answer or its ``CallFailure``, in target order; ``first_failure`` picks the answer
of the whole call from them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from broker.admin.common import HttpError, status_for
from broker.admin.peers import CALL_TIMEOUT_S
from broker.errors import BrokerError

if TYPE_CHECKING:
    from aiohttp import web

    from broker.admin.peers import PeerAdmin

T = TypeVar("T")

# How many targets' calls of one fan-out are under way at once. Pulsar starts them all (FutureUtil.waitForAll) and
# its admin client sends at most 16 at a time to one broker (PulsarAdminBuilderImpl: connectionsPerBroker 16), the
# others wait in its queue; the same bound here also keeps a topic of 1,000 partitions from loading them all at once.
FANOUT_CONCURRENCY = 16
# How long the calls of one fan-out to other brokers may take in all: a broker that does not answer (hung, cut off)
# fails its targets with a 503 by then (Pulsar's admin client gives a request 60 s: ClientConfigurationData's
# requestTimeoutMs and readTimeoutMs).
FANOUT_TIMEOUT_S = CALL_TIMEOUT_S


class PeerCall:
    """What one target's work waits for elsewhere, within its fan-out's bound: a call to another broker (the call
    itself: (method, url, JSON body or None) -> its JSON answer) and the lookup of the target's owner (``owner``)."""

    def __init__(self, peers: PeerAdmin, caller: web.Request, deadline: float, what: str) -> None:
        self._peers = peers
        self._caller = caller
        self._deadline = deadline
        self._what = what

    async def __call__(self, method: str, url: str, body: object) -> Any:
        async with self._bounded(f"{method} {url}"):
            return await self._peers.call(method, url, self._caller, body)

    async def owner(self, lookup: Awaitable[T], target: str) -> T:
        """The answer of ``lookup`` (who owns ``target``: the metadata store, or the leader, may have to be asked)."""
        async with self._bounded(f"looking up the owner of {target}"):
            return await lookup

    @contextlib.asynccontextmanager
    async def _bounded(self, doing: str) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout_at(self._deadline):
                yield
        except TimeoutError:
            raise HttpError(503, f"{doing}: no answer within {FANOUT_TIMEOUT_S:g} s ({self._what})") from None


class CallFailure:
    """A target's call that failed with an answer (an HTTP status, ``status``; the exception, ``error``)."""

    def __init__(self, error: HttpError | BrokerError) -> None:
        self.error = error
        self.status = error.status_code if isinstance(error, HttpError) else status_for(error)

    def as_http_error(self) -> HttpError:
        return self.error if isinstance(self.error, HttpError) else HttpError(self.status, self.error.message)


async def fan_out(peers: PeerAdmin, caller: web.Request, targets: Sequence[T],
                  one: Callable[[T, PeerCall], Awaitable[Any]], what: str) -> list[tuple[T, Any]]:
    """(target, its answer or its ``CallFailure``) for each of ``targets`` in order, once every call has ended.
    ``one(target, peer_call)`` does one target: locally, or through ``peer_call`` at its owner (with ``caller``'s
    credentials as ``PeerAdmin`` carries them), after ``peer_call.owner`` found the owner; both end with a 503 by the
    fan-out's deadline. ``what`` names the calls in that 503. A failure that is not an answer (a bug) is raised once
    all have ended."""
    peer_call = PeerCall(peers, caller, asyncio.get_running_loop().time() + FANOUT_TIMEOUT_S, what)
    gate = asyncio.Semaphore(FANOUT_CONCURRENCY)

    async def guarded(target: T) -> Any:
        async with gate:
            try:
                return await one(target, peer_call)
            except (HttpError, BrokerError) as exc:
                return CallFailure(exc)

    answers = await asyncio.gather(*(guarded(t) for t in targets), return_exceptions=True)
    for answer in answers:
        if isinstance(answer, BaseException):
            raise answer
    return list(zip(targets, answers, strict=True))


def first_failure(outcomes: list[tuple[T, Any]]) -> CallFailure | None:
    """The first failure in target order, as Pulsar's waitForAll answers (None: every call succeeded)."""
    return next((answer for _, answer in outcomes if isinstance(answer, CallFailure)), None)
