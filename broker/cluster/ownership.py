"""Bundle ownership: which broker serves the topics of a namespace bundle (Pulsar's ``OwnershipCache``).

Two implementations of one ``Ownership`` protocol, chosen by the metadata store:

- ``StandaloneOwnership`` (a ``local:`` or ``memory:`` store: one broker): this broker owns every bundle; nothing is
  written, lookups answer Connect to this broker, and unloading a bundle closes its topics (they load again on
  their next use).
- ``ClusterOwnership`` (ZooKeeper: several brokers): a bundle is owned through the ephemeral node
  ``/namespace/<tenant>/<ns>/<0xlower_0xupper>`` holding the owner's ``NamespaceEphemeralData``; the broker keeps
  the bundles it owns in memory, so ``is_owned`` and ``check_serving`` (called when a topic loads, never per
  message) cost a dict look-up.

Cluster states of a bundle on this broker:

    (not owned) --acquire: create the node--> ACTIVE --unload: node disabled, topics closed, node deleted--> (not owned)
    ACTIVE --session lost--> (not owned)        (every topic closed and every client disconnected at once)

A bundle is taken only while it is one of the namespace's bundles in the metadata store, checked once its node is
created (``_check_current``). A split (``bundle_split``) owns the children, writes the new boundaries, then deletes the
parent's node; the other brokers learn the boundaries when their metadata cache re-reads them on the notification, and
until then map the split range's topics to the parent, which nobody holds any more. Taken, the parent would give the
range two owners (the parent's and the child's), each serving its topics. A node created after the parent's deletion
is created after the new boundaries were written, so the read that follows it sees them (a ZooKeeper session reads at
least what its own writes saw): the node is released, and ``lookup`` answers for the child, which that read put in the
cache. Only an acquisition reads the store for this: looking up an owned bundle costs what it did. (Pulsar 4.0.7's
OwnershipCache.tryAcquiringOwnership takes the bundle it is given: it has the same window.)

A lost metadata session (``SESSION_LOST``: the store gave up on the session, at 5/6 of its timeout when cut off, so
before ZooKeeper deletes the nodes) makes this broker stop serving everything it owned, at once: another broker may
own those bundles soon. BookKeeper's fencing covers the rest (a paused broker that wakes up after that cannot
acknowledge a write into a ledger the new owner recovered).

Lookups (``lookup``) follow Pulsar's ``NamespaceService.findBrokerServiceUrl`` and ``searchForCandidateBroker``:
owned by anyone (not being unloaded): Connect to the owner; owned by nobody: an authoritative request makes this
broker take it; otherwise the leader (or any broker when the leader is gone) picks a broker with
``broker.cluster.placement`` and this broker takes the bundle itself when picked, else it answers Redirect to the
one picked (authoritative, since the leader decided); a broker that is not the leader redirects to the leader (not
authoritative). A broker's heartbeat namespace (``pulsar/<brokerId>``) goes to the broker it names, whoever asks;
that broker takes its full bundle at start (Pulsar's registerBootstrapNamespaces). A metadata store that fails the
lookup (a timeout, a lost connection) is a ``MetadataError``, as Pulsar's handleLookupError answers a
MetadataStoreException; the other refusals are ``ServiceNotReady``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from broker.cluster import placement
from broker.cluster.bundles import NamespaceBundle, NamespaceBundles
from broker.cluster.data import (
    OWNERSHIP_ROOT,
    BrokerUrls,
    ClusterDataError,
    ListenerUrls,
    NamespaceEphemeralData,
)
from broker.cluster.registry import BrokerRegistry
from broker.errors import MetadataError, ServiceNotReadyError
from broker.tasks import OwnedTasks, SingleFlight
from broker.topic_name import TopicName, heartbeat_broker
from metadata_store.api import BadVersionError, MetadataStore, MetadataStoreError, NotFoundError, SessionEvent

log = logging.getLogger(__name__)

# A failed release of a node left by a session taken as lost is tried again after this long (the store may be
# reconnecting).
RELEASE_RETRY_S = 1.0


class TopicHost(Protocol):
    """What ownership needs of the broker service: its loaded topics, and closing them."""

    def served_topic_names(self) -> list[str]: ...  # loaded topics (persistent and non-persistent), full names

    async def unload_topics(self, names: list[str]) -> int: ...  # close them (how many); their clients look up again

    def stop_serving_now(self) -> None: ...  # disconnect every client and close every topic (in the background)

    def bundle_acquired(self, bundle: NamespaceBundle) -> None: ...  # (Pulsar loads a bundle's topics then)


@dataclass(frozen=True)
class LookupAnswer:
    """Where a client goes: Connect to ``urls`` (the owner) or Redirect there (look up again, at that broker)."""

    redirect: bool
    authoritative: bool
    urls: ListenerUrls  # pulsar:// and pulsar+ssl:// for the client's listener
    http_url: str | None
    http_url_tls: str | None


class Ownership(Protocol):
    @property
    def distributed(self) -> bool: ...  # False: one broker owns everything

    def bundles(self, namespace: str) -> NamespaceBundles: ...

    def bundle_of(self, name: TopicName) -> NamespaceBundle: ...

    def is_owned(self, bundle: NamespaceBundle) -> bool: ...

    def check_serving(self, name: TopicName) -> None: ...  # ServiceNotReadyError unless this broker serves it

    async def wait_serving(self, name: TopicName) -> None: ...  # check_serving, after a pending acquisition ends

    async def lookup(self, name: TopicName, authoritative: bool, listener: str | None) -> LookupAnswer: ...

    async def owner_of(self, bundle: NamespaceBundle) -> NamespaceEphemeralData | None: ...

    # A lookup of a bundle (an admin call on a bundle nobody owns is placed as a topic's lookup would place it).
    async def lookup_bundle(self, bundle: NamespaceBundle, authoritative: bool, listener: str | None) -> LookupAnswer:
        ...

    async def unload_bundle(self, bundle: NamespaceBundle) -> int: ...  # how many topics were closed

    async def bundle_split(self, parent: NamespaceBundle, children: Sequence[NamespaceBundle],
                           write_bundles: WriteBundles = None) -> None: ...

    def owned_bundles(self) -> list[NamespaceBundle]: ...

    @property
    def is_leader(self) -> bool: ...

    async def close(self) -> None: ...


class BundleNotCurrentError(ServiceNotReadyError):
    """The bundle is no longer one of its namespace's bundles in the metadata store (split meanwhile); not taken."""


def _topics_in(host: TopicHost, bundle: NamespaceBundle) -> list[str]:
    """The loaded topics whose names hash into ``bundle``."""
    return [full for full in host.served_topic_names()
            if TopicName.parse(full).namespace == bundle.namespace and bundle.includes(full)]


# A split's write of the namespace's new boundaries, run by bundle_split once the children are owned.
WriteBundles = Callable[[], Awaitable[object]] | None

# A namespace's bundles read from the metadata store now (None: the namespace is gone), for the check before a bundle
# is taken.
StoredBundles = Callable[[str], Awaitable[NamespaceBundles | None]]

# What the bundle operations (broker.cluster.operations) need: the same protocol.
BundleOwnership = Ownership


class _NamespaceBundlesView:
    """Which bundles a namespace has and which one a topic falls in: the same for every kind of ownership."""

    _bundles_of: Callable[[str], NamespaceBundles]

    def bundles(self, namespace: str) -> NamespaceBundles:
        return self._bundles_of(namespace)

    def bundle_of(self, name: TopicName) -> NamespaceBundle:
        return self._bundles_of(name.namespace).find(name.full)

    def check_serving(self, name: TopicName) -> None:
        raise NotImplementedError

    async def wait_serving(self, name: TopicName) -> None:
        self.check_serving(name)


class StandaloneOwnership(_NamespaceBundlesView):
    """One broker: it owns every bundle of every namespace."""

    distributed = False
    is_leader = True

    def __init__(self, host: TopicHost, bundles_of: Callable[[str], NamespaceBundles]) -> None:
        self.host = host
        self._bundles_of = bundles_of

    def is_owned(self, bundle: NamespaceBundle) -> bool:
        return True

    def check_serving(self, name: TopicName) -> None:
        return None

    async def lookup(self, name: TopicName, authoritative: bool, listener: str | None) -> LookupAnswer:
        raise NotImplementedError("a standalone broker answers lookups itself")  # (server_cnx, admin lookup)

    async def owner_of(self, bundle: NamespaceBundle) -> NamespaceEphemeralData | None:
        return None

    async def lookup_bundle(self, bundle: NamespaceBundle, authoritative: bool, listener: str | None) -> LookupAnswer:
        raise NotImplementedError("a standalone broker owns every bundle")

    async def unload_bundle(self, bundle: NamespaceBundle) -> int:
        return await self.host.unload_topics(_topics_in(self.host, bundle))

    async def bundle_split(self, parent: NamespaceBundle, children: Sequence[NamespaceBundle],
                           write_bundles: WriteBundles = None) -> None:
        if write_bundles is not None:  # (the broker keeps owning everything: its topics stay loaded)
            await write_bundles()

    def owned_bundles(self) -> list[NamespaceBundle]:
        return []

    async def close(self) -> None:
        return None


class PendingOwnership(_NamespaceBundlesView):
    """Cluster mode before the broker has registered (its ports are bound, its session is not in use yet): it owns
    nothing and answers every lookup ServiceNotReady, which clients retry."""

    distributed = True
    is_leader = False

    def __init__(self, bundles_of: Callable[[str], NamespaceBundles]) -> None:
        self._bundles_of = bundles_of

    def is_owned(self, bundle: NamespaceBundle) -> bool:
        return False

    def check_serving(self, name: TopicName) -> None:
        raise ServiceNotReadyError("The broker is starting: it serves no bundle yet")

    async def lookup(self, name: TopicName, authoritative: bool, listener: str | None) -> LookupAnswer:
        raise ServiceNotReadyError("The broker is starting: look up again")

    async def owner_of(self, bundle: NamespaceBundle) -> NamespaceEphemeralData | None:
        raise ServiceNotReadyError("The broker is starting")

    async def lookup_bundle(self, bundle: NamespaceBundle, authoritative: bool, listener: str | None) -> LookupAnswer:
        raise ServiceNotReadyError("The broker is starting: look up again")

    async def unload_bundle(self, bundle: NamespaceBundle) -> int:
        return 0

    async def bundle_split(self, parent: NamespaceBundle, children: Sequence[NamespaceBundle],
                           write_bundles: WriteBundles = None) -> None:
        raise ServiceNotReadyError("The broker is starting")

    def owned_bundles(self) -> list[NamespaceBundle]:
        return []

    async def close(self) -> None:
        return None


class BundleState(enum.Enum):
    ACTIVE = "active"
    UNLOADING = "unloading"  # the node says disabled; the topics are being closed


def ownership_path(bundle: NamespaceBundle) -> str:
    return f"{OWNERSHIP_ROOT}/{bundle.namespace}/{bundle.range_name}"


class ClusterOwnership(_NamespaceBundlesView):
    distributed = True

    def __init__(self, store: MetadataStore, urls: BrokerUrls, registry: BrokerRegistry, host: TopicHost,
                 bundles_of: Callable[[str], NamespaceBundles], stored_bundles_of: StoredBundles) -> None:
        self.store = store
        self.urls = urls
        self.registry = registry
        self.host = host
        self._bundles_of = bundles_of  # (the metadata cache's: may not know of a split yet)
        self._stored_bundles_of = stored_bundles_of
        self.mine = NamespaceEphemeralData.of(urls)
        self._owned: dict[NamespaceBundle, BundleState] = {}
        self._dropped: set[NamespaceBundle] = set()  # bundles given up at a session loss (their nodes to release)
        self._acquiring: SingleFlight[NamespaceBundle, NamespaceEphemeralData] = SingleFlight("bundle acquisition")
        self.placement = placement.Placement()
        self._tasks = OwnedTasks("bundle ownership")
        self._closed = False
        store.register_session_listener(self._session_event)

    @property
    def is_leader(self) -> bool:
        return self.registry.is_leader

    def is_owned(self, bundle: NamespaceBundle) -> bool:
        return self._owned.get(bundle) is BundleState.ACTIVE

    def owned_bundles(self) -> list[NamespaceBundle]:
        return [b for b, s in self._owned.items() if s is BundleState.ACTIVE]

    async def wait_serving(self, name: TopicName) -> None:
        """check_serving once a pending acquisition of the topic's bundle has ended: the ownership node is
        visible to other brokers' lookups before this broker has heard back from the store, so a client they
        sent here may come first (Pulsar's ownership cache hands out the pending future the same way)."""
        pending = self._acquiring.get(self.bundle_of(name))
        if pending is not None:
            with contextlib.suppress(Exception):
                await pending
        self.check_serving(name)

    def check_serving(self, name: TopicName) -> None:
        if self._closed or not self.is_owned(self.bundle_of(name)):
            raise ServiceNotReadyError(
                f"Namespace bundle for topic ({name.full}) not served by this instance:{self.urls.broker_id}. "
                f"Please redo the lookup. Request is denied: namespace={name.namespace}")

    # -- session ---------------------------------------------------------------------------------------
    def _session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.SESSION_LOST and self._owned:
            lost = list(self._owned)
            self._owned.clear()
            self._dropped.update(lost)
            log.warning("metadata session lost: no longer serving %d bundles (%s)", len(lost),
                        ", ".join(map(str, lost[:8])))
            self.host.stop_serving_now()
            self.registry.report_changed()
        elif event is SessionEvent.SESSION_REESTABLISHED and self._dropped and not self._closed:
            self._tasks.spawn(self._release_dropped(), name="release dropped bundles")

    async def _release_dropped(self) -> None:
        """After a session taken as lost (5/6 of its timeout without a connection) the store may reconnect to the
        same session after all: ZooKeeper kept it, and with it the ownership nodes of the bundles this broker
        stopped serving. Left there they would send every lookup, from any broker, to this broker, which refuses
        the clients: they are deleted, so the bundles go to whichever broker a lookup picks. (After a real expiry
        they are gone already.) Until its node is dealt with, a dropped bundle is not taken again (``_acquire``):
        the release would delete the new node of this same session."""
        while self._dropped and not self._closed:
            for bundle in sorted(self._dropped, key=str):
                try:
                    await self._release_node(bundle)
                    self._dropped.discard(bundle)
                except MetadataStoreError as exc:
                    log.warning("releasing %s after the lost session failed (%s); retrying", bundle, exc)
            if self._dropped:
                await asyncio.sleep(RELEASE_RETRY_S)

    # -- acquire and release -------------------------------------------------------------------------------
    async def acquire(self, bundle: NamespaceBundle, *, check_current: bool = True) -> NamespaceEphemeralData:
        """Take the bundle unless another broker holds it; the owner's data either way (Pulsar's
        tryAcquiringOwnership). ``BundleNotCurrentError`` when it is no longer one of the namespace's bundles
        (``check_current=False``: a split's children, not written yet)."""
        state = self._owned.get(bundle)
        if state is not None:
            return self.mine.with_disabled(state is BundleState.UNLOADING)
        return await self._acquiring.run(bundle, lambda: self._acquire(bundle, check_current))

    async def _acquire(self, bundle: NamespaceBundle, check_current: bool) -> NamespaceEphemeralData:
        if self._closed:
            raise ServiceNotReadyError("Broker is shutting down")
        if bundle in self._dropped:
            raise ServiceNotReadyError(f"Namespace bundle {bundle} is being released after a lost metadata session")
        path = ownership_path(bundle)
        value = self.mine.to_bytes()
        for _ in range(3):
            try:
                await self.store.put(path, value, -1, ephemeral=True)
            except BadVersionError:
                got = await self.store.get(path)
                if got is None:
                    continue  # released meanwhile
                try:
                    owner = NamespaceEphemeralData.from_bytes(got.value)
                except ClusterDataError as exc:
                    raise ServiceNotReadyError(f"unreadable owner of {bundle}: {exc}") from None
                if not owner.same_owner(self.mine):
                    return owner  # (another broker's)
                if not got.stat.created_by_self:
                    # This broker's node from before a restart (its old session not expired yet): take it back, as
                    # Pulsar's resource locks do when they find their own value.
                    with contextlib.suppress(NotFoundError, BadVersionError):
                        await self.store.delete(path, got.stat.version)
                    continue
                # Else this session's own node (a create that timed out but was applied): it is ours, owned below.
            if check_current:
                await self._check_current(bundle)
            if bundle in self._dropped:  # (a session lost while the node was created)
                raise ServiceNotReadyError(f"Namespace bundle {bundle} is being released after a lost metadata session")
            self._owned[bundle] = BundleState.ACTIVE
            log.info("bundle %s now owned by this broker", bundle)
            self.registry.report_changed()
            self.host.bundle_acquired(bundle)
            return self.mine
        raise ServiceNotReadyError(f"could not acquire the ownership of {bundle}")

    async def _check_current(self, bundle: NamespaceBundle) -> None:
        """With its node this broker's, the bundle must still be one of the namespace's bundles as the store has them
        (see the module docstring); else (or when they cannot be read) the node is released."""
        try:
            stored = await self._stored_bundles_of(bundle.namespace)
        except Exception:
            await self._give_back(bundle)
            raise
        if stored is None or bundle not in stored.bundles:
            await self._give_back(bundle)
            log.info("bundle %s not taken: no longer a bundle of %s (split)", bundle, bundle.namespace)
            raise BundleNotCurrentError(f"Namespace bundle {bundle} is no longer a bundle of {bundle.namespace}: "
                                        f"look up again")

    async def _give_back(self, bundle: NamespaceBundle) -> None:
        """Release the node of a bundle this broker created but does not own. A failed release is left to the
        retrying release of dropped bundles: the node would send other brokers' clients here, which refuses them."""
        try:
            await self._release_node(bundle)
        except MetadataStoreError as exc:
            log.warning("releasing %s, not taken, failed (%s); retrying", bundle, exc)
            self._dropped.add(bundle)
            if not self._closed:
                self._tasks.spawn(self._release_dropped(), name="release dropped bundles")

    async def unload_bundle(self, bundle: NamespaceBundle) -> int:
        """Release an owned bundle (Pulsar's OwnedBundle.handleUnloadRequest): mark the node disabled (lookups meanwhile
        answer 'being unloaded', which clients retry), close the bundle's topics (their clients look up again), then
        delete the node so any broker may take it. Not owned here: nothing to do. Returns how many topics
        were closed."""
        if self._owned.get(bundle) is not BundleState.ACTIVE:
            return 0
        self._owned[bundle] = BundleState.UNLOADING
        path = ownership_path(bundle)
        try:
            with contextlib.suppress(MetadataStoreError):
                got = await self.store.get(path)
                if got is not None and got.stat.created_by_self:
                    await self.store.put(path, self.mine.with_disabled(True).to_bytes(), got.stat.version,
                                         ephemeral=True)
            closed = await self.host.unload_topics(_topics_in(self.host, bundle))
            await self._release_node(bundle)
        finally:
            if self._owned.get(bundle) is BundleState.UNLOADING:
                del self._owned[bundle]
            self.registry.report_changed()
        log.info("bundle %s unloaded (%d topics closed)", bundle, closed)
        return closed

    async def _release_node(self, bundle: NamespaceBundle) -> None:
        """Delete the bundle's ownership node if this session holds it, at the version read (Pulsar's
        ResourceLockImpl.release deletes its own version only): after a lost session the node may be another
        broker's, and deleting it would let a third broker take the bundle while that one still serves it."""
        path = ownership_path(bundle)
        got = await self.store.get(path)
        if got is None or not got.stat.created_by_self:
            return
        with contextlib.suppress(NotFoundError, BadVersionError):
            await self.store.delete(path, got.stat.version)

    async def bundle_split(self, parent: NamespaceBundle, children: Sequence[NamespaceBundle],
                           write_bundles: WriteBundles = None) -> None:
        """Pulsar's splitAndOwnBundle: the owner of the parent takes the children first, then writes the namespace's
        new boundaries (``write_bundles``), then releases the parent; so no broker that already sees the new
        boundaries finds a child unowned and gives it away. The parent's topics stay loaded: they are the children's
        now, served by the same broker. If the boundaries cannot be written, the children are released again."""
        if self._owned.get(parent) is not BundleState.ACTIVE:
            raise ServiceNotReadyError(f"bundle {parent} is not owned by this broker")
        taken: list[NamespaceBundle] = []
        try:
            for child in children:  # (not current before write_bundles: taken unchecked)
                owner = await self.acquire(child, check_current=False)
                if not owner.same_owner(self.mine):  # (its topics, loaded here, would be served by both)
                    raise ServiceNotReadyError(f"split of {parent}: child {child} is owned by {owner.native_url}")
                taken.append(child)
            if write_bundles is not None:
                await write_bundles()
        except BaseException:
            for child in taken:  # (the node first: until it is gone the child is owned, so nobody takes it back)
                with contextlib.suppress(MetadataStoreError):
                    await self._release_node(child)
                self._owned.pop(child, None)
            raise
        self._owned.pop(parent, None)  # (gone already if the session was lost meanwhile)
        await self._release_node(parent)
        self.registry.report_changed()
        log.info("bundle %s split into %s, owned here", parent, ", ".join(c.range_name for c in children))

    async def owner_of(self, bundle: NamespaceBundle) -> NamespaceEphemeralData | None:
        state = self._owned.get(bundle)
        if state is not None:
            return self.mine.with_disabled(state is BundleState.UNLOADING)
        got = await self.store.get(ownership_path(bundle))
        if got is None:
            return None
        try:
            return NamespaceEphemeralData.from_bytes(got.value)
        except ClusterDataError as exc:
            raise ServiceNotReadyError(f"unreadable owner of {bundle}: {exc}") from None

    async def close(self) -> None:
        """Graceful shutdown: leave the registry (no lookup picks this broker from now on), then release every bundle
        (topics closed first), so other brokers take them at once; no bundle is taken from now on."""
        self._closed = True
        await self.registry.unregister()
        # An acquisition under way lands first (bounded by the store's operation timeout), so its bundle is released
        # with the others: cancelled, its node could be created all the same and left until the session ends.
        await self._acquiring.wait()
        for bundle in self.owned_bundles():
            try:
                await self.unload_bundle(bundle)
            except Exception as exc:  # (the session ends next anyway: the node goes with it)
                log.warning("releasing %s at shutdown: %s", bundle, exc)
        await self._acquiring.close()
        self._tasks.cancel()
        await self._tasks.wait()

    # -- lookup ---------------------------------------------------------------------------------------------
    async def lookup(self, name: TopicName, authoritative: bool, listener: str | None) -> LookupAnswer:
        bundle = self.bundle_of(name)
        try:
            return await self.lookup_bundle(bundle, authoritative, listener)
        except BundleNotCurrentError:  # (split: the check's read of the store is in the cache now)
            current = self.bundle_of(name)
            if current == bundle:
                raise
            return await self.lookup_bundle(current, authoritative, listener)

    async def lookup_bundle(self, bundle: NamespaceBundle, authoritative: bool, listener: str | None) -> LookupAnswer:
        try:
            owner = await self.owner_of(bundle)
            if owner is not None and not owner.disabled and not (
                    owner.same_owner(self.mine) and bundle not in self._owned):
                return self._connect(owner, listener)
            if owner is not None and owner.disabled:
                raise ServiceNotReadyError(f"Namespace bundle {bundle} is being unloaded")
            return await self._search_candidate(bundle, authoritative, listener)
        except MetadataStoreError as exc:
            raise MetadataError(f"lookup of {bundle}: metadata store: {exc}") from None

    def _connect(self, owner: NamespaceEphemeralData, listener: str | None) -> LookupAnswer:
        urls = owner.urls().for_listener(listener)
        if urls is None:
            raise ServiceNotReadyError(f"the broker do not have {listener} listener")
        return LookupAnswer(False, True, urls, owner.http_url, owner.http_url_tls)

    async def _search_candidate(self, bundle: NamespaceBundle, authoritative: bool,
                                listener: str | None) -> LookupAnswer:
        registry = self.registry
        redirect_authoritative = registry.is_leader
        named = heartbeat_broker(bundle.namespace)
        if named is not None:
            candidate = named  # (a broker's heartbeat namespace is that broker's: getHeartbeatOrSLAMonitorBrokerId)
        elif authoritative:
            candidate = self.urls.broker_id  # the leader already picked this broker
        else:
            brokers = await registry.active_brokers()
            self.placement.history.observe(brokers)  # (the reports as written: the load averages' samples)
            leader = registry.leader
            if registry.is_leader or leader is None or leader.broker_id not in brokers:
                if not self._closed:  # (a stopping broker has left the registry: it takes nothing)
                    brokers[self.urls.broker_id] = registry.current_report()
                chosen = self.placement.select(bundle, brokers)
                if chosen is None:
                    raise ServiceNotReadyError(f"No broker was available to own {bundle}")
                candidate, redirect_authoritative = chosen, True
            else:
                candidate = leader.broker_id
        if candidate == self.urls.broker_id:
            owner = await self.acquire(bundle)
            if owner.disabled:
                raise ServiceNotReadyError(f"Namespace bundle {bundle} is currently being unloaded")
            return self._connect(owner, listener)
        report = await registry.broker_report(candidate)
        if report is None:
            raise ServiceNotReadyError(f"broker {candidate} picked for {bundle} is gone; look up again")
        urls = report.urls.for_listener(listener)
        if urls is None:
            raise ServiceNotReadyError(f"the broker do not have {listener} listener")
        return LookupAnswer(True, redirect_authoritative, urls, report.urls.web_url, report.urls.web_url_tls)
