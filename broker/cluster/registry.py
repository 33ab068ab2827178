"""The broker registry and the leader election, at Apache Pulsar's paths (``broker.cluster.data``).

Each broker keeps an ephemeral node ``/loadbalance/brokers/<host:webport>`` holding its ``LocalBrokerData`` (its
URLs and a load report) as long as its metadata session lives, and rewrites it when its load moved enough
(Pulsar's ``loadBalancerReportUpdateThresholdPercentage``, 10 %) or its bundles changed, checked every
``REPORT_INTERVAL_S``, and at least every ``REPORT_MAX_INTERVAL_S``.

The leader is whoever created the ephemeral ``/loadbalance/leader`` (Pulsar's ``LeaderElectionImpl``): each broker
tries to create it; who finds it taken watches it and tries again when it goes. A node left by a previous session of
this very broker (same value: it restarted before its old session expired) is taken back at once, as Pulsar's
resource locks do. Only the leader assigns bundles that nobody owns (``broker.cluster.lookup``).

After a lost session the broker re-registers and runs for leader again once a new session is up
(``SESSION_REESTABLISHED``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from broker.cluster.data import (
    LEADER_PATH,
    LOADBALANCE_BROKERS_ROOT,
    BrokerUrls,
    ClusterDataError,
    LeaderBroker,
    LoadReport,
)
from broker.tasks import OwnedTasks, woken
from metadata_store.api import (
    BadVersionError,
    MetadataStore,
    MetadataStoreError,
    NotFoundError,
    Notification,
    NotificationType,
    SessionEvent,
)

log = logging.getLogger(__name__)

# Pulsar's loadBalancerReportUpdateMinIntervalMillis: how often the report is considered for a rewrite.
REPORT_INTERVAL_S = 5.0
# Pulsar's loadBalancerReportUpdateMaxIntervalMinutes (15): a report is rewritten at least this often.
REPORT_MAX_INTERVAL_S = 15 * 60.0
# Pulsar's loadBalancerReportUpdateThresholdPercentage: a change of this share in a rate or count rewrites it.
REPORT_THRESHOLD = 0.10
# A failed registration or election write is retried after this long (the store may be reconnecting).
RETRY_S = 1.0


class BrokerRegistry:
    def __init__(self, store: MetadataStore, urls: BrokerUrls, report: Callable[[], LoadReport]) -> None:
        self.store = store
        self.urls = urls
        self._report = report  # builds the current load report
        self.path = f"{LOADBALANCE_BROKERS_ROOT}/{urls.broker_id}"
        self.is_leader = False
        self.leader: LeaderBroker | None = None
        self._written: LoadReport | None = None
        self._written_at = 0.0
        # The report last built (written or not): what this broker's load is, for broker-stats/metrics.
        self.latest: LoadReport | None = None
        self._tasks = OwnedTasks("broker registry")
        self._wake = asyncio.Event()
        self._closed = False
        self._registered = asyncio.Event()

    @property
    def leader_value(self) -> LeaderBroker:
        return LeaderBroker(self.urls.broker_id, self.urls.web_url or self.urls.web_url_tls or "")

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        self.store.register_listener(self._notified)
        self.store.register_session_listener(self._session_event)
        await self._register()
        await self._elect()
        self._tasks.spawn(self._report_loop(), name="load report")

    async def close(self) -> None:
        """Graceful: give up the leadership and the registration (others see it at once)."""
        self._closed = True
        self._tasks.cancel()
        await self._tasks.wait()
        if self.is_leader:
            self.is_leader = False
            with contextlib.suppress(MetadataStoreError):
                await self.store.delete(LEADER_PATH)
        with contextlib.suppress(MetadataStoreError):
            await self.store.delete(self.path)

    async def unregister(self) -> None:
        """A graceful stop, before the bundles are released (Pulsar's unloadNamespaceBundlesGracefully calls the load
        manager's disableBroker first): the registration goes and is not written again, so no lookup gives a bundle
        to this broker, and the others stop waiting for it as leader (a leader that is not registered is not
        active: they place bundles themselves)."""
        self._closed = True
        self._registered.clear()
        self._tasks.cancel()  # (a report write under way could create the node again after the delete)
        await self._tasks.wait()
        with contextlib.suppress(MetadataStoreError):
            await self.store.delete(self.path)

    def _session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.SESSION_LOST:
            self.is_leader = False
            self._registered.clear()
        elif event is SessionEvent.SESSION_REESTABLISHED and not self._closed:
            self._tasks.spawn(self._rejoin(), name="re-register")

    async def _rejoin(self) -> None:
        while not self._closed:
            try:
                await self._register()
                await self._elect()
                return
            except MetadataStoreError as exc:
                log.warning("re-registering the broker failed (%s); retrying", exc)
                await asyncio.sleep(RETRY_S)

    def _notified(self, n: Notification) -> None:
        if n.path == LEADER_PATH and n.type is NotificationType.DELETED and not self._closed:
            self.leader = None
            self._tasks.spawn(self._elect_retrying(), name="leader election")

    # -- registration --------------------------------------------------------------------------------
    async def _register(self) -> None:
        report = self.latest = self._report()
        value = report.to_bytes()
        await _create_ephemeral(self.store, self.path, value, lambda old: _same_broker(self.urls, old))
        self._written, self._written_at = report, time.monotonic()
        self._registered.set()
        log.info("broker registered at %s", self.path)

    def current_report(self) -> LoadReport:
        return self._report()

    def report_changed(self) -> None:
        """Bundles were gained or lost: rewrite the report soon (placement counts bundles from it)."""
        self._wake.set()

    async def _report_loop(self) -> None:
        while True:
            await woken(self._wake, REPORT_INTERVAL_S)
            if not self._registered.is_set():
                continue
            report = self.latest = self._report()
            if self._written is not None and not _needs_write(self._written, report, self._written_at):
                continue
            try:
                await self.store.put(self.path, report.to_bytes(), None, ephemeral=True)
                self._written, self._written_at = report, time.monotonic()
            except MetadataStoreError as exc:
                log.warning("load report not written: %s", exc)

    # -- the other brokers -----------------------------------------------------------------------------
    async def active_brokers(self) -> dict[str, LoadReport]:
        """The registered brokers and their last reports, by broker id."""
        out: dict[str, LoadReport] = {}
        for broker_id in await self.store.get_children(LOADBALANCE_BROKERS_ROOT):
            got = await self.store.get(f"{LOADBALANCE_BROKERS_ROOT}/{broker_id}")
            if got is None:
                continue
            try:
                out[broker_id] = LoadReport.from_bytes(broker_id, got.value)
            except ClusterDataError as exc:
                log.warning("broker %s: unreadable load report: %s", broker_id, exc)
        return out

    async def broker_report(self, broker_id: str) -> LoadReport | None:
        got = await self.store.get(f"{LOADBALANCE_BROKERS_ROOT}/{broker_id}")
        if got is None:
            return None
        return LoadReport.from_bytes(broker_id, got.value)

    # -- leader election --------------------------------------------------------------------------------
    async def _elect_retrying(self) -> None:
        while not self._closed:
            try:
                await self._elect()
                return
            except MetadataStoreError as exc:
                log.warning("leader election failed (%s); retrying", exc)
                await asyncio.sleep(RETRY_S)

    async def _elect(self) -> None:
        mine = self.leader_value
        won = await _create_ephemeral(self.store, LEADER_PATH, mine.to_bytes(),
                                      lambda old: _leader_is(old, mine))
        if won:
            self.is_leader, self.leader = True, mine
            log.info("this broker (%s) is the leader", mine.broker_id)
            return
        got = await self.store.get(LEADER_PATH)  # (also watches it: its deletion starts a new election)
        if got is None:  # gone meanwhile
            await self._elect()
            return
        try:
            self.leader = LeaderBroker.from_bytes(got.value)
        except ClusterDataError as exc:
            log.warning("unreadable %s: %s", LEADER_PATH, exc)
            self.leader = None
        self.is_leader = False


async def _create_ephemeral(store: MetadataStore, path: str, value: bytes, ours: Callable[[bytes], bool]) -> bool:
    """Create the ephemeral ``path``; True when this session holds it afterwards. A node of another session that
    ``ours`` recognises (this broker before a restart) is replaced."""
    for _ in range(3):
        try:
            await store.put(path, value, -1, ephemeral=True)
            return True
        except BadVersionError:
            got = await store.get(path)
            if got is None:
                continue  # deleted meanwhile: try again
            if got.stat.created_by_self:
                if got.value != value:
                    await store.put(path, value, got.stat.version, ephemeral=True)
                return True
            if not ours(got.value):
                return False
            with contextlib.suppress(NotFoundError, BadVersionError):
                await store.delete(path, got.stat.version)
    return False


def _same_broker(urls: BrokerUrls, raw: bytes) -> bool:
    try:
        old = LoadReport.from_bytes(urls.broker_id, raw).urls
    except ClusterDataError:
        return False
    return (old.pulsar_url, old.pulsar_url_tls, old.web_url, old.web_url_tls) == (
        urls.pulsar_url, urls.pulsar_url_tls, urls.web_url, urls.web_url_tls)


def _leader_is(raw: bytes, mine: LeaderBroker) -> bool:
    try:
        return LeaderBroker.from_bytes(raw) == mine
    except ClusterDataError:
        return False


def _needs_write(old: LoadReport, new: LoadReport, written_at: float) -> bool:
    """Pulsar's ModularLoadManagerImpl.needBrokerDataUpdate: a changed bundle set, a rate or count that moved by
    more than REPORT_THRESHOLD, or a report older than REPORT_MAX_INTERVAL_S."""
    if set(old.bundles) != set(new.bundles) or time.monotonic() - written_at > REPORT_MAX_INTERVAL_S:
        return True
    pairs = [(old.msg_rate_in, new.msg_rate_in), (old.msg_rate_out, new.msg_rate_out),
             (old.msg_throughput_in, new.msg_throughput_in), (old.msg_throughput_out, new.msg_throughput_out),
             (old.num_topics, new.num_topics), (old.num_producers, new.num_producers),
             (old.num_consumers, new.num_consumers), (old.cpu_usage, new.cpu_usage)]
    for before, after in pairs:
        base = max(abs(before), 1.0)
        if abs(after - before) / base > REPORT_THRESHOLD:
            return True
    return False
