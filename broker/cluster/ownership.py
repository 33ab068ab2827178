"""Bundle ownership on a single broker: ``SingleBrokerOwnership``, a stand-in for the cluster's
ownership (ephemeral nodes, lookups, redirects), which replaces it in cluster mode.

What the bundle operations need of ownership (``BundleOwnership``):

- ``bundle_split(parent, children)``: the owner of the parent owns the children (Pulsar's
  ``splitAndOwnBundle``: the children are acquired, the parent released); its topics keep being
  served where they are;
- ``unload_bundle(bundle)``: the bundle's loaded topics are closed (their clients reconnect and
  look the topics up again); the bundle is released. Returns how many topics were closed.

The one broker owns every bundle, so here a split changes nothing that is served, and an unload
closes the bundle's topics (they are loaded again on the next lookup, on this broker).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from broker.metadata.bundles import NamespaceBundle
from broker.topic_name import TopicName


class BundleOwnership(Protocol):
    async def bundle_split(self, parent: NamespaceBundle, children: Sequence[NamespaceBundle]) -> None: ...

    async def unload_bundle(self, bundle: NamespaceBundle) -> int: ...


class _LoadedTopic(Protocol):
    @property
    def name(self) -> TopicName: ...


class TopicHost(Protocol):
    """What ownership needs of the broker service: its loaded topics, and unloading one."""

    def all_topics(self) -> Iterable[_LoadedTopic]: ...

    async def unload_topic(self, name: TopicName) -> bool: ...


class SingleBrokerOwnership:
    """This broker owns every bundle (standalone). Cluster mode swaps in the real ownership."""

    def __init__(self, host: TopicHost) -> None:
        self._host = host

    async def bundle_split(self, parent: NamespaceBundle, children: Sequence[NamespaceBundle]) -> None:
        """Nothing to move: the children's topics stay loaded and served here."""

    async def unload_bundle(self, bundle: NamespaceBundle) -> int:
        names = [t.name for t in self._host.all_topics()
                 if t.name.namespace == bundle.namespace and bundle.includes(t.name.full)]
        closed = 0
        for name in names:
            closed += await self._host.unload_topic(name)
        return closed
