"""Admin REST v3: Pulsar's ``/admin/v3/transactions`` reads (docs/transactions.md).

- ``GET .../coordinators``: [{id, brokerServiceUrl}] (this broker serves every coordinator);
- ``GET .../coordinatorStats[?coordinatorId=i]``: TransactionCoordinatorStats, one or by id;
- ``GET .../transactionMetadata/{most}/{least}``: TransactionMetadata (status, times, produced and
  acknowledged partitions with their buffer / pending-ack state);
- ``GET .../slowTransactions/{timeout}[?coordinatorId=i]``: transactions open longer than timeout ms;
- ``GET .../transactionBufferStats/{tenant}/{ns}/{topic}``: TransactionBufferStats;
- ``GET .../transactionInBufferStats/{tenant}/{ns}/{topic}/{most}/{least}``;
- ``GET .../pendingAckStats/{tenant}/{ns}/{topic}/{sub}``: TransactionPendingAckStats;
- ``GET .../transactionInPendingAckStats/{tenant}/{ns}/{topic}/{sub}/{most}/{least}``;
- ``POST .../abortTransaction/{most}/{least}``: abort an open transaction (204), as END_TXN with
  ABORT from a client; Pulsar answers a coordinator's refusal (unknown transaction, already
  committing) with 500 and its message, and so do we;
- ``GET .../coordinatorInternalStats/{id}``: TransactionCoordinatorInternalStats, the managed
  ledger of the coordinator's log;
- ``GET .../transactionBufferInternalStats/{tenant}/{ns}/{topic}``: TransactionBufferInternalStats
  (snapshotType ``Single``): the ledger that holds the buffer's snapshot, which here is the topic's
  own (its ``pulsar.txn.buffer`` cursor), 404 when the topic never had a transaction;
- ``GET .../pendingAckInternalStats/{tenant}/{ns}/{topic}/{sub}``: TransactionPendingAckInternalStats:
  the ledger that holds the pending acks, here the topic's own (the subscription cursor's properties).

503 when transactionCoordinatorEnabled=false (Pulsar's answer), 404 for an unknown coordinator,
transaction, topic or subscription. Super-user operations (the access table's default).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin.common import HttpError, int_param, json_response, no_content
from broker.admin.stats import ledger_internal_stats
from broker.errors import (
    InvalidTxnStatusError,
    TransactionCoordinatorNotFoundError,
    TransactionNotFoundError,
)
from broker.service.transactions import TransactionService
from broker.topic_name import TopicName
from broker.transactions.coordinator import TransactionCoordinator
from broker.transactions.model import TxnID, TxnMeta
from broker.transactions.pending_ack import PendingAcks
from managed_ledger import ManagedLedger

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.service.topic import PersistentTopic

BASE = "/admin/v3/transactions"
TOPIC = "/{tenant}/{ns}/{topic}"


class TransactionsResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service

    def register(self, r: web.UrlDispatcher) -> None:
        r.add_get(BASE + "/coordinators", self.coordinators)
        r.add_get(BASE + "/coordinatorStats", self.coordinator_stats)
        r.add_get(BASE + "/transactionMetadata/{most}/{least}", self.transaction_metadata)
        r.add_get(BASE + "/slowTransactions/{timeout}", self.slow_transactions)
        r.add_get(BASE + "/transactionBufferStats" + TOPIC, self.buffer_stats)
        r.add_get(BASE + "/transactionInBufferStats" + TOPIC + "/{most}/{least}", self.in_buffer_stats)
        r.add_get(BASE + "/pendingAckStats" + TOPIC + "/{sub}", self.pending_ack_stats)
        r.add_get(BASE + "/transactionInPendingAckStats" + TOPIC + "/{sub}/{most}/{least}",
                  self.in_pending_ack_stats)
        r.add_post(BASE + "/abortTransaction/{most}/{least}", self.abort_transaction)
        r.add_get(BASE + "/coordinatorInternalStats/{coordinatorId}", self.coordinator_internal_stats)
        r.add_get(BASE + "/transactionBufferInternalStats" + TOPIC, self.buffer_internal_stats)
        r.add_get(BASE + "/pendingAckInternalStats" + TOPIC + "/{sub}", self.pending_ack_internal_stats)

    # -- helpers ---------------------------------------------------------------------------------------
    @property
    def transactions(self) -> TransactionService:
        ts = self.web.service.transactions
        if ts is None:
            raise HttpError(503, "This Broker is not configured with transactionCoordinatorEnabled=true.")
        return ts

    async def _coordinator(self, tc_id: int) -> TransactionCoordinator:
        try:
            return await self.transactions.coordinator(tc_id)
        except TransactionCoordinatorNotFoundError:
            raise HttpError(404, f"Transaction coordinator not found! coordinator id : {tc_id}") from None

    @staticmethod
    def _txn(request: web.Request) -> TxnID:
        m = request.match_info
        return TxnID(int_param(m["most"], "mostSigBits"), int_param(m["least"], "leastSigBits"))

    async def _topic(self, request: web.Request) -> PersistentTopic:
        _ = self.transactions  # (503 first when disabled)
        m = request.match_info
        name = TopicName.parse(f"persistent://{m['tenant']}/{m['ns']}/{m['topic']}")
        return await self.web.service.get_persistent_topic(name, create=False)

    def _coordinator_ids(self, request: web.Request) -> list[int]:
        raw = request.query.get("coordinatorId")
        return [int_param(raw, "coordinatorId")] if raw is not None else list(range(self.transactions.count))

    # -- coordinators ----------------------------------------------------------------------------------
    async def coordinators(self, request: web.Request) -> web.Response:
        url = self.web.ctx.process.service_url
        return json_response([{"id": i, "brokerServiceUrl": url} for i in range(self.transactions.count)])

    async def coordinator_stats(self, request: web.Request) -> web.Response:
        if "coordinatorId" in request.query:
            (tc_id,) = self._coordinator_ids(request)
            return json_response((await self._coordinator(tc_id)).stats())
        if self.transactions.count == 0:
            raise HttpError(404, "Transaction coordinator not found")
        return json_response({str(i): (await self._coordinator(i)).stats() for i in self._coordinator_ids(request)})

    async def transaction_metadata(self, request: web.Request) -> web.Response:
        txn = self._txn(request)
        tc = await self._coordinator(txn.most)
        try:
            meta = tc.get(txn)
        except TransactionNotFoundError as exc:
            raise HttpError(404, exc.message) from None
        return json_response(await self._metadata(meta))

    async def slow_transactions(self, request: web.Request) -> web.Response:
        timeout_ms = int_param(request.match_info["timeout"], "timeout")
        out: dict[str, Any] = {}
        for tc_id in self._coordinator_ids(request):
            tc = await self._coordinator(tc_id)
            now = tc.now_ms()
            for meta in list(tc.txns.values()):
                if now - meta.opened_ms > timeout_ms:
                    out[str(meta.txn)] = await self._metadata(meta)
        return json_response(out)

    async def _metadata(self, meta: TxnMeta) -> dict[str, Any]:
        """Pulsar's TransactionMetadata."""
        service = self.web.service
        produced: dict[str, Any] = {}
        for partition in meta.partitions:
            topic = service.topics.get(partition)
            produced[partition] = (topic.txn_buffer.txn_stats(meta.txn) if topic is not None
                                   else {"startPosition": None, "aborted": False})
        acked: dict[str, dict[str, Any]] = {}
        for topic_name, sub_name in meta.subscriptions:
            topic = service.topics.get(topic_name)
            sub = topic.subscriptions.get(sub_name) if topic is not None else None
            pending = sub.pending_acks if sub is not None else None
            acked.setdefault(topic_name, {})[sub_name] = (pending.txn_stats(meta.txn) if pending is not None
                                                          else {"cumulativeAckPosition": None})
        return {"txnId": str(meta.txn), "status": meta.status.value, "openTimestamp": meta.opened_ms,
                "timeoutAt": meta.deadline_ms, "owner": None, "producedPartitions": produced,
                "ackedPartitions": acked}

    async def abort_transaction(self, request: web.Request) -> web.Response:
        txn = self._txn(request)
        if not 0 <= txn.most <= _INT_MAX:  # (Pulsar's check: the coordinator id is an int)
            raise HttpError(500, "mostSigBits out of bounds")
        tc = await self._coordinator(txn.most)
        try:
            await tc.end_txn(txn, commit=False)
        except (TransactionNotFoundError, InvalidTxnStatusError) as exc:
            raise HttpError(500, exc.message) from None
        return no_content()

    async def coordinator_internal_stats(self, request: web.Request) -> web.Response:
        tc = await self._coordinator(int_param(request.match_info["coordinatorId"], "coordinatorId"))
        return json_response({"transactionLogStats": _log_stats(tc.log.ledger)})

    # -- topics ----------------------------------------------------------------------------------------
    async def buffer_stats(self, request: web.Request) -> web.Response:
        return json_response((await self._topic(request)).txn_buffer.stats())

    async def in_buffer_stats(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        return json_response(topic.txn_buffer.txn_stats(self._txn(request)))

    async def buffer_internal_stats(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        if not topic.txn_buffer.prepared:
            raise HttpError(404, "Transaction buffer Snapshot for the topic does not exist")
        return json_response({"snapshotType": "Single",
                              "singleSnapshotSystemTopicInternalStats": _log_stats(topic.ledger),
                              "segmentInternalStats": None, "segmentIndexInternalStats": None})

    async def pending_ack_internal_stats(self, request: web.Request) -> web.Response:
        await self._pending(request)
        topic = await self._topic(request)
        return json_response({"pendingAckLogStats": _log_stats(topic.ledger)})

    async def pending_ack_stats(self, request: web.Request) -> web.Response:
        pending = await self._pending(request)
        return json_response(pending.stats())

    async def in_pending_ack_stats(self, request: web.Request) -> web.Response:
        pending = await self._pending(request)
        return json_response(pending.txn_stats(self._txn(request)))

    async def _pending(self, request: web.Request) -> PendingAcks:
        topic = await self._topic(request)
        sub_name = request.match_info["sub"]
        sub = topic.subscriptions.get(sub_name)
        if sub is None and sub_name in topic.ledger.cursors:
            sub = await topic.get_or_create_subscription(sub_name, True, 0, None)
        if sub is None:
            raise HttpError(404, f"Subscription {sub_name} not found")
        if sub.pending_acks is None:
            raise HttpError(503, "This Broker is not configured with transactionCoordinatorEnabled=true.")
        return sub.pending_acks


_INT_MAX = (1 << 31) - 1


def _log_stats(ledger: ManagedLedger) -> dict[str, Any]:
    """Pulsar's TransactionLogStats / SnapshotSystemTopicInternalStats: a managed ledger's name and
    its ManagedLedgerInternalStats (every cursor, the broker's own included)."""
    return {"managedLedgerName": ledger.name, "managedLedgerInternalStats": ledger_internal_stats(ledger)}
