"""The broker's side of transactions: the coordinators it serves (Pulsar's
TransactionMetadataStoreService) and how they reach topics and subscriptions.

With ``transactionCoordinatorEnabled`` the broker makes sure the assignment topic
``persistent://pulsar/system/transaction_coordinator_assign`` exists (1 partition, as Pulsar's
standalone; an operator may create it with more: partition i is coordinator i). A coordinator is
loaded (its log replayed) on the first request that names it, TC_CLIENT_CONNECT as a rule, and
on start for those with a log. One broker serves them all; END_TXN reaches the topics in-process
(Pulsar's TransactionBufferClient sends END_TXN_ON_PARTITION / _SUBSCRIPTION to their owners).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from broker.errors import InvalidTopicNameError, TopicNotFoundError, TransactionCoordinatorNotFoundError
from broker.topic_name import TopicName
from broker.transactions.coordinator import TransactionCoordinator
from broker.transactions.log import TransactionLog, log_ledger_name
from broker.transactions.model import TxnID

if TYPE_CHECKING:
    from broker.service.broker_service import BrokerService

log = logging.getLogger(__name__)

ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"
# Coordinators created with the assignment topic (Pulsar's standalone makes 1).
DEFAULT_COORDINATORS = 1


class TransactionService:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.coordinators: dict[int, TransactionCoordinator] = {}
        self._loading: dict[int, asyncio.Future[TransactionCoordinator]] = {}
        self.closed = False

    async def create_assign_topic(self) -> None:
        """At start: the assignment topic, when it is missing."""
        metadata = self.service.metadata
        if metadata.partitions_of(ASSIGN_TOPIC) == 0:
            await metadata.create_partitioned_topic(ASSIGN_TOPIC, DEFAULT_COORDINATORS)
            log.info("created %s with %d partition(s)", ASSIGN_TOPIC, DEFAULT_COORDINATORS)

    async def load_stored(self) -> None:
        """Once storage is up: load the coordinators that have a log (their open transactions
        time out, those caught ending are finished, without waiting for a client)."""
        names = set(self.service.ledger_factory.list_names())
        for tc_id in range(self.count):
            if log_ledger_name(tc_id) in names:
                await self.coordinator(tc_id)

    @property
    def count(self) -> int:
        return self.service.metadata.partitions_of(ASSIGN_TOPIC)

    async def coordinator(self, tc_id: int) -> TransactionCoordinator:
        """Coordinator ``tc_id``, loaded (its log replayed) on first use."""
        tc = self.coordinators.get(tc_id)
        if tc is not None:
            return tc
        if self.closed or not 0 <= tc_id < self.count:
            raise TransactionCoordinatorNotFoundError(f"Transaction coordinator with id {tc_id} not found!")
        loading = self._loading.get(tc_id)
        if loading is not None:
            return await asyncio.shield(loading)
        fut: asyncio.Future[TransactionCoordinator] = asyncio.get_running_loop().create_future()
        self._loading[tc_id] = fut
        try:
            ledger = await self.service.ledger_factory.open(log_ledger_name(tc_id), self.service.ledger_config)
            tc = TransactionCoordinator(tc_id, await TransactionLog.open(ledger), self,
                                        max_active=self.service.config.maxActiveTransactionsPerCoordinator)
            await tc.recover()
            self.coordinators[tc_id] = tc
            fut.set_result(tc)
            return tc
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()
            raise
        finally:
            del self._loading[tc_id]

    async def coordinator_of(self, txn: TxnID) -> TransactionCoordinator:
        return await self.coordinator(txn.most)

    # -- what a coordinator does on topics (TxnParticipants) -----------------------------------------
    async def prepare_partitions(self, partitions: list[str]) -> None:
        """ADD_PARTITION_TO_TXN: the topics' buffers are ready before the first transactional SEND."""
        for partition in partitions:
            topic = await self.service.get_persistent_topic(TopicName.parse(partition), create=True)
            await topic.txn_buffer.prepare()

    async def end_on_partition(self, topic: str, txn: TxnID, commit: bool,
                               low_watermark: int | None = None) -> None:
        try:
            t = await self.service.get_persistent_topic(TopicName.parse(topic), create=False)
        except (TopicNotFoundError, InvalidTopicNameError) as exc:  # deleted since: nothing to end there
            log.warning("transaction %s: %s not ended: %s", txn, topic, exc.message)
            return
        await t.txn_buffer.end(txn, commit, low_watermark)

    async def end_on_subscription(self, topic: str, subscription: str, txn: TxnID, commit: bool,
                                  low_watermark: int | None = None) -> None:
        try:
            t = await self.service.get_persistent_topic(TopicName.parse(topic), create=False)
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
        coordinators = list(self.coordinators.values())
        self.coordinators.clear()
        await asyncio.gather(*(tc.close() for tc in coordinators), return_exceptions=True)
