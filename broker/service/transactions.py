"""The broker's side of transactions: the coordinators it serves (Pulsar's
TransactionMetadataStoreService) and how they reach topics and subscriptions.

With ``transactionCoordinatorEnabled`` the broker makes sure the assignment topic
``persistent://pulsar/system/transaction_coordinator_assign`` exists (1 partition, as Pulsar's
standalone; an operator may create it with more: partition i is coordinator i).

Which broker serves coordinator i: the owner of the bundle its partition
(``transaction_coordinator_assign-partition-<i>``) hashes into, as in Pulsar. Clients find it by a
lookup of that partition and send TC_CLIENT_CONNECT there; a broker that does not own the bundle
answers TC_CLIENT_CONNECT with ServiceNotReady (Pulsar's checkTopicNsOwnership: the client looks up
again) and the other coordinator requests with TransactionCoordinatorNotFound (the Java client
reconnects, through a new lookup, and sends them again). A coordinator is loaded (its log replayed,
transactions caught ending finished) on the first request that names it, and when its bundle comes
to this broker if it has a log; it is closed when the bundle goes (unload, split away, lost
session), and the next owner recovers it from the same log. One broker (no shared metadata store)
serves them all.

Ending a transaction reaches each topic and subscription where it is served: in-process when this
broker owns the topic's bundle, else through END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION sent to
its owner (``txn_buffer_client``, Pulsar's TransactionBufferClient), retried by the coordinator
until the owner, whoever it is by then, has heard.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from broker.errors import (
    InvalidTopicNameError,
    ServiceNotReadyError,
    TopicNotFoundError,
    TransactionCoordinatorNotFoundError,
)
from broker.metadata.store import AlreadyExistsError
from broker.service.operation_stats import PendingAckStats, TxnBufferClientStats
from broker.service.txn_buffer_client import TxnBufferClient
from broker.tasks import OwnedTasks, SingleFlight
from broker.topic_name import TopicName
from broker.transactions.coordinator import TransactionCoordinator
from broker.transactions.log import TransactionLog, log_ledger_name
from broker.transactions.model import ASSIGN_TOPIC, TxnID

if TYPE_CHECKING:
    from broker.cluster.bundles import NamespaceBundle
    from broker.service.broker_service import BrokerService

log = logging.getLogger(__name__)

_ASSIGN = TopicName.parse(ASSIGN_TOPIC)
# Coordinators created with the assignment topic (Pulsar's standalone makes 1).
DEFAULT_COORDINATORS = 1


class TransactionService:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.coordinators: dict[int, TransactionCoordinator] = {}
        self._loading: SingleFlight[int, TransactionCoordinator] = SingleFlight("transaction coordinator load")
        # Coordinators being closed because their bundle went (or the session was lost).
        self._closing = OwnedTasks("transaction coordinators being closed")
        # END_TXN_ON_* to other brokers (cluster mode; made once the broker's own URL is known).
        self._tb_client: TxnBufferClient | None = None
        # Every end of a transaction on a topic, here or over the wire (Pulsar's pulsar_txn_tb_client_* series).
        self.tb_client_stats = TxnBufferClientStats(service.config.exposeTopicLevelMetricsInPrometheus)
        # Every end of a transaction on a subscription with acks pending in it (pulsar_txn_tp_*).
        self.pending_ack_stats = PendingAckStats(service.config.exposeTopicLevelMetricsInPrometheus)
        self.closed = False

    async def create_assign_topic(self) -> None:
        """At start: the assignment topic, when it is missing (several brokers may race to create it)."""
        metadata = self.service.metadata
        if metadata.partitions_of(ASSIGN_TOPIC) == 0:
            try:
                await metadata.create_partitioned_topic(ASSIGN_TOPIC, DEFAULT_COORDINATORS)
            except AlreadyExistsError:
                return  # (another broker created it meanwhile)
            log.info("created %s with %d partition(s)", ASSIGN_TOPIC, DEFAULT_COORDINATORS)

    async def load_stored(self) -> None:
        """Once storage is up, one broker: load the coordinators that have a log (their open
        transactions time out, those caught ending are finished, without waiting for a client).
        In cluster mode this happens as their bundles come to this broker (``bundle_acquired``)."""
        if self.service.ownership.distributed:
            return
        names = set(self.service.ledger_factory.list_names())
        for tc_id in range(self.count):
            if log_ledger_name(tc_id) in names:
                await self.coordinator(tc_id)

    # -- which coordinators this broker serves -------------------------------------------------------
    @staticmethod
    def assign_partition(tc_id: int) -> TopicName:
        """The assignment topic's partition of coordinator ``tc_id``: its owner serves the coordinator."""
        return _ASSIGN.partition(tc_id)

    @staticmethod
    def coordinator_of_partition(name: str) -> int | None:
        """The coordinator an assignment-topic partition stands for (None: another topic)."""
        topic = TopicName.parse(name)
        if topic.base.full != ASSIGN_TOPIC or topic.partition_index < 0:
            return None
        return topic.partition_index

    def serves(self, tc_id: int) -> bool:
        ownership = self.service.ownership
        return not ownership.distributed or ownership.is_owned(ownership.bundle_of(self.assign_partition(tc_id)))

    def served_assign_partitions(self) -> list[str]:
        """The assignment partitions of the loaded coordinators (what bundle ownership unloads with them)."""
        return [self.assign_partition(tc_id).full for tc_id in sorted({*self.coordinators, *self._loading})]

    def bundle_acquired(self, bundle: NamespaceBundle) -> list[int]:
        """The coordinators with a log whose partition falls in ``bundle`` (newly owned): the caller loads them, so
        that what their previous owner left half done is finished without waiting for a client."""
        if bundle.namespace != _ASSIGN.namespace or self.closed:
            return []
        names = set(self.service.ledger_factory.list_names())
        return [tc_id for tc_id in range(self.count)
                if bundle.includes(self.assign_partition(tc_id).full) and log_ledger_name(tc_id) in names]

    async def load_quietly(self, tc_id: int) -> None:
        try:
            await self.coordinator(tc_id)
        except Exception as exc:  # (it loads on its next request)
            log.warning("transaction coordinator %d not loaded with its bundle: %s", tc_id, exc)

    async def release(self, tc_ids: list[int]) -> None:
        """Their bundle went: close them (their clients get TransactionCoordinatorNotFound and look up again)."""
        for tc_id in tc_ids:
            tc = self.coordinators.pop(tc_id, None)
            if tc is not None:
                log.info("transaction coordinator %d released with its bundle", tc_id)
                await tc.close()

    def drop_all_now(self) -> None:
        """The metadata session is lost: every coordinator stops now (closed in the background)."""
        coordinators = list(self.coordinators.values())
        self.coordinators.clear()
        for tc in coordinators:
            self._closing.spawn(tc.close(), name=f"drop transaction coordinator {tc.tc_id}")

    @property
    def count(self) -> int:
        return self.service.metadata.partitions_of(ASSIGN_TOPIC)

    async def scale(self, count: int) -> None:
        """More coordinators (``count`` above ``self.count``): the assignment topic's partitions, which clients and
        every broker read the number from. The new ones load on their first request, where their partition's
        owner is."""
        await self.service.metadata.set_partitions(ASSIGN_TOPIC, count)
        log.info("transaction coordinators: now %d", count)

    async def coordinator(self, tc_id: int, connect: bool = False) -> TransactionCoordinator:
        """Coordinator ``tc_id``, loaded (its log replayed) on first use. Not served here:
        ServiceNotReady for a TC_CLIENT_CONNECT (``connect``), else TransactionCoordinatorNotFound."""
        tc = self.coordinators.get(tc_id)
        if tc is not None:
            return tc
        if self.closed or not 0 <= tc_id < self.count:
            raise TransactionCoordinatorNotFoundError(f"Transaction coordinator with id {tc_id} not found!")
        if not self.serves(tc_id):
            self._not_served(tc_id, connect)
        return await self._loading.run(tc_id, lambda: self._load(tc_id, connect))

    async def _load(self, tc_id: int, connect: bool) -> TransactionCoordinator:
        ledger = await self.service.ledger_factory.open(log_ledger_name(tc_id), self.service.ledger_config)
        tc = TransactionCoordinator(tc_id, await TransactionLog.open(ledger), self,
                                    max_active=self.service.config.maxActiveTransactionsPerCoordinator)
        await tc.recover()
        if self.closed or not self.serves(tc_id):  # (its bundle went while it loaded)
            await tc.close()
            self._not_served(tc_id, connect)
        self.coordinators[tc_id] = tc
        return tc

    def _not_served(self, tc_id: int, connect: bool) -> None:
        partition = self.assign_partition(tc_id)
        if connect:
            raise ServiceNotReadyError(
                f"Namespace bundle for topic ({partition.full}) not served by this instance. "
                f"Please redo the lookup. Request is denied: namespace={partition.namespace}")
        raise TransactionCoordinatorNotFoundError(
            f"Transaction coordinator with id {tc_id} not found! (not served by this broker)")

    async def coordinator_of(self, txn: TxnID) -> TransactionCoordinator:
        return await self.coordinator(txn.most)

    # -- what a coordinator does on topics (TxnParticipants) -----------------------------------------
    def start_cluster(self, own_url: str) -> None:
        """Cluster mode, once this broker's service URL is known: topics of other brokers are reached from it."""
        self._tb_client = TxnBufferClient(own_url, self.service.config)

    def _served_elsewhere(self, topic: str) -> bool:
        """The topic's bundle is not this broker's (cluster mode): its owner is told over the wire."""
        ownership = self.service.ownership
        if not ownership.distributed or self._tb_client is None:
            return False
        try:
            return not ownership.is_owned(ownership.bundle_of(TopicName.parse(topic)))
        except InvalidTopicNameError:
            return False

    async def end_on_partition(self, topic: str, txn: TxnID, commit: bool,
                               low_watermark: int | None = None) -> None:
        stats = self.tb_client_stats
        started, failed = stats.start(), True
        try:
            if self._served_elsewhere(topic):
                assert self._tb_client is not None
                await self._tb_client.end_on_partition(topic, txn, commit, low_watermark)
            else:
                await self.end_on_partition_here(topic, txn, commit, low_watermark)
            failed = False
        finally:
            stats.done(topic, commit, started, failed=failed)

    async def end_on_subscription(self, topic: str, subscription: str, txn: TxnID, commit: bool,
                                  low_watermark: int | None = None) -> None:
        stats = self.tb_client_stats
        started, failed = stats.start(), True
        try:
            if self._served_elsewhere(topic):
                assert self._tb_client is not None
                await self._tb_client.end_on_subscription(topic, subscription, txn, commit, low_watermark)
            else:
                await self.end_on_subscription_here(topic, subscription, txn, commit, low_watermark)
            failed = False
        finally:
            stats.done(topic, commit, started, failed=failed)

    async def end_on_partition_here(self, topic: str, txn: TxnID, commit: bool,
                                    low_watermark: int | None = None) -> None:
        """END_TXN_ON_PARTITION on this broker: ServiceNotReady when it does not serve the topic (the sender looks
        up again); a topic that does not exist has nothing to end, nor has a non-persistent one (it stores nothing:
        see ``_stored``)."""
        try:
            t = await self.service.get_persistent_topic(_stored(topic), create=False)
        except (TopicNotFoundError, InvalidTopicNameError) as exc:  # deleted since: nothing to end there
            log.warning("transaction %s: %s not ended: %s", txn, topic, exc.message)
            return
        await t.txn_buffer.end(txn, commit, low_watermark)

    async def end_on_subscription_here(self, topic: str, subscription: str, txn: TxnID, commit: bool,
                                       low_watermark: int | None = None) -> None:
        try:
            t = await self.service.get_persistent_topic(_stored(topic), create=False)
        except (TopicNotFoundError, InvalidTopicNameError) as exc:
            log.warning("transaction %s: subscription %s of %s not ended: %s", txn, subscription, topic, exc.message)
            return
        sub = t.subscriptions.get(subscription)
        if sub is None:
            if subscription not in t.ledger.cursors:
                return  # gone (unsubscribed): nothing to apply
            sub = await t.get_or_create_subscription(subscription, True, 0, None)
        await sub.end_txn(txn, commit, low_watermark)

    async def close(self) -> None:
        self.closed = True
        await self._loading.wait()  # (a load in progress sees `closed` and closes its coordinator)
        coordinators = list(self.coordinators.values())
        self.coordinators.clear()
        await asyncio.gather(*(tc.close() for tc in coordinators), return_exceptions=True)
        await self._closing.wait()
        if self._tb_client is not None:
            await self._tb_client.close()


def _stored(topic: str) -> TopicName:
    """The persistent topic whose transaction state an end applies to: TopicNotFoundError for a non-persistent one,
    which has none. (Pulsar's ServerCnx.handleEndTxnOnPartition and handleEndTxnOnSubscription answer a topic they
    do not have loaded by whether a managed ledger of its name exists, which a non-persistent topic never has: no
    error, so its coordinator counts it as told. Refused instead, an end was retried for ever and its END_TXN never
    answered.)"""
    name = TopicName.parse(topic)
    if not name.persistent:
        raise TopicNotFoundError(f"{topic} is not a persistent topic: no transaction to end on it")
    return name
