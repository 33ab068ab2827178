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
  (snapshotType ``Single``): the internal stats of the topic that holds the buffer's snapshot, which here is the
  topic itself (its ``pulsar.txn.buffer`` cursor, made with its first transaction), where Pulsar names its
  namespace's ``__transaction_buffer_snapshot`` topic;
- ``GET .../pendingAckInternalStats/{tenant}/{ns}/{topic}/{sub}``: TransactionPendingAckInternalStats:
  the ledger that holds the pending acks, here the topic's own (the subscription cursor's properties);
- ``GET .../positionStatsInPendingAck/{tenant}/{ns}/{topic}/{sub}/{ledgerId}/{entryId}[?batchIndex=i]``:
  PositionInPendingAckStats (broker/transactions/pending_ack.py ``position_state``);
- ``POST .../transactionCoordinator/replicas`` (body: a number, more than now): more coordinators (204).

503 when transactionCoordinatorEnabled=false (Pulsar's answer), 404 for an unknown coordinator,
transaction, topic or subscription.

Who may call them, as Pulsar 4.0.7's v3 Transactions (the rules in ``broker.auth.http``): any authenticated role
reads a coordinator, a transaction or a topic's transaction state. Without a ``coordinatorId``,
``coordinatorStats`` and ``slowTransactions`` read the assignment topic's partitions first, which takes a LOOKUP of
that topic; ``abortTransaction`` takes a super user, checked once the coordinator's owner is found to be this
broker. Those two checks are made here (``check_deferred``), after the answers Pulsar gives first: 503 when
transactions are off, 500 for a ``mostSigBits`` past an int, 307 to the coordinator's owner.

Cluster mode, as Pulsar's TransactionsBase: a call on one coordinator (``coordinatorId`` given,
``transactionMetadata`` and ``abortTransaction`` by the transaction's coordinator,
``coordinatorInternalStats``) is answered by the owner of that coordinator's assignment partition,
any other broker answering 307 there; without ``coordinatorId``, ``coordinatorStats`` and
``slowTransactions`` gather every coordinator's answer from its owner (``peers``), and
``coordinators`` names each one's broker (a lookup of its partition). A transaction's produced and
acknowledged partitions are described by their topics' owners. A call on a topic is answered by
the topic's owner (307 elsewhere).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web

from broker.admin.cluster import topic_owner_url, validate_topic_ownership
from broker.admin.common import (
    HttpError,
    int_param,
    json_response,
    no_content,
    parse_topic_name,
    query_flag,
    read_body,
)
from broker.admin.peers import topic_path
from broker.admin.stats import add_ledger_metadata, cursor_internal_stats, internal_stats, ledger_internal_stats
from broker.auth.http import check_deferred, skip_deferred
from broker.errors import (
    BrokerError,
    InvalidTxnStatusError,
    TopicNotFoundError,
    TransactionCoordinatorNotFoundError,
    TransactionNotFoundError,
)
from broker.metadata.policy_values import check_java_int, max_partitions
from broker.service.transactions import TransactionService
from broker.topic_name import TopicName
from broker.transactions.buffer import BUFFER_CURSOR
from broker.transactions.coordinator import TransactionCoordinator
from broker.transactions.model import TxnID, TxnMeta
from broker.transactions.pending_ack import PendingAcks
from managed_ledger import ManagedLedger, Position

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.service.subscription import Subscription
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
        r.add_get(BASE + "/positionStatsInPendingAck" + TOPIC + "/{sub}/{ledger}/{entry}", self.position_in_pending_ack)
        r.add_post(BASE + "/transactionCoordinator/replicas", self.scale_coordinators)

    # -- helpers ---------------------------------------------------------------------------------------
    @property
    def transactions(self) -> TransactionService:
        ts = self.web.service.transactions
        if ts is None:
            raise HttpError(503, "This Broker is not configured with transactionCoordinatorEnabled=true.")
        return ts

    async def _coordinator(self, tc_id: int, reason: str | None = None) -> TransactionCoordinator:
        """Coordinator ``tc_id``, else 404 with Pulsar's reason for a coordinator asked for by id (``reason``:
        None), or the coordinator's own for one reached through a transaction (``reason`` "own")."""
        try:
            return await self.transactions.coordinator(tc_id)
        except TransactionCoordinatorNotFoundError as exc:
            raise HttpError(404, exc.message if reason == "own" else
                            f"Transaction coordinator not found! coordinator id : {tc_id}") from None

    @staticmethod
    def _txn(request: web.Request) -> TxnID:
        m = request.match_info
        return TxnID(int_param(m["most"], "mostSigBits"), int_param(m["least"], "leastSigBits"))

    async def _topic(self, request: web.Request) -> PersistentTopic:
        _ = self.transactions  # (503 first when disabled)
        m = request.match_info
        name = parse_topic_name("persistent", m["tenant"], m["ns"], m["topic"])
        if self.web.service.ownership.distributed:
            await validate_topic_ownership(self.web.ctx, request, name)  # (307 to its owner)
        try:
            return await self.web.service.get_persistent_topic(name, create=False)
        except TopicNotFoundError:
            raise HttpError(404, f"Topic not found {name.full}") from None

    async def _owned_coordinator(self, request: web.Request, tc_id: int) -> TransactionCoordinator:
        """Coordinator ``tc_id``, served here; in cluster mode a 307 to the owner of its assignment partition
        when that is another broker (Pulsar's validateTopicOwnership of the partition)."""
        await self._validate_coordinator_owner(request, tc_id)
        return await self._coordinator(tc_id)

    async def _validate_coordinator_owner(self, request: web.Request, tc_id: int) -> None:
        ts = self.transactions
        if self.web.service.ownership.distributed and 0 <= tc_id < ts.count:
            await validate_topic_ownership(self.web.ctx, request, ts.assign_partition(tc_id))

    async def _from_each_coordinator(self, request: web.Request, path: str,
                                     local: Callable[[TransactionCoordinator], Awaitable[Any]]) -> dict[int, Any]:
        """Every coordinator's answer: ``local`` for those served here, else ``path?coordinatorId=i`` asked of the
        owner of its assignment partition (Pulsar asks each through the broker's admin client)."""
        ts = self.transactions
        if ts.count == 0:
            raise HttpError(404, "Transaction coordinator not found")
        answers: dict[int, Any] = {}
        for tc_id in range(ts.count):
            base = await topic_owner_url(self.web.ctx, ts.assign_partition(tc_id), request.secure)
            if base is None:
                answers[tc_id] = await local(await self._coordinator(tc_id))
            else:
                answers[tc_id] = await self.web.peers.call("GET", f"{base}{BASE}/{path}?coordinatorId={tc_id}",
                                                           request)
        return answers

    # -- coordinators ----------------------------------------------------------------------------------
    async def coordinators(self, request: web.Request) -> web.Response:
        ts = self.transactions
        if not self.web.service.ownership.distributed:
            url = self.web.ctx.process.service_url
            return json_response([{"id": i, "brokerServiceUrl": url} for i in range(ts.count)])
        return json_response([{"id": i, "brokerServiceUrl": await self._owner_service_url(request, i)}
                              for i in range(ts.count)])

    async def _owner_service_url(self, request: web.Request, tc_id: int) -> str:
        """The binary service URL of the broker that serves coordinator ``tc_id``: a lookup of its partition
        (placing its bundle when nobody owns it), redirects followed."""
        partition = self.transactions.assign_partition(tc_id)
        answer = await self.web.service.ownership.lookup(partition, False, None)
        if not answer.redirect:
            return answer.urls.url or answer.urls.url_tls or ""
        base = answer.http_url_tls if request.secure else answer.http_url
        if not base:
            raise HttpError(412, f"Failed to find ownership for topic:{partition.full}")
        found = await self.web.peers.call(
            "GET", f"{base}/lookup/v2/topic/{partition.domain}/{partition.namespace}/"
                   f"{quote(partition.local_name, safe='')}?authoritative={str(answer.authoritative).lower()}",
            request)
        return str(found.get("brokerUrl") or found.get("brokerUrlTls") or "") if isinstance(found, dict) else ""

    async def coordinator_stats(self, request: web.Request) -> web.Response:
        _ = self.transactions  # (503 first)
        raw = request.query.get("coordinatorId")
        if raw is not None:
            skip_deferred(request)  # (one coordinator: Pulsar checks nothing)
            return json_response((await self._owned_coordinator(request, int_param(raw, "coordinatorId"))).stats())
        await check_deferred(request)  # (every coordinator: a LOOKUP of the assignment topic, read first)

        async def stats(tc: TransactionCoordinator) -> Any:
            return tc.stats()

        answers = await self._from_each_coordinator(request, "coordinatorStats", stats)
        return json_response({str(i): answer for i, answer in answers.items()})

    async def transaction_metadata(self, request: web.Request) -> web.Response:
        txn = self._txn(request)
        await self._validate_coordinator_owner(request, txn.most)
        tc = await self._coordinator(txn.most, "own")
        try:
            meta = tc.get(txn)
        except TransactionNotFoundError as exc:
            raise HttpError(404, exc.message) from None
        return json_response(await self._metadata(request, meta))

    async def slow_transactions(self, request: web.Request) -> web.Response:
        _ = self.transactions  # (503 first)
        timeout_ms = int_param(request.match_info["timeout"], "timeout")

        async def slow(tc: TransactionCoordinator) -> dict[str, Any]:
            now = tc.now_ms()
            return {str(meta.txn): await self._metadata(request, meta)
                    for meta in list(tc.txns.values()) if now - meta.opened_ms > timeout_ms}

        raw = request.query.get("coordinatorId")
        if raw is not None:
            skip_deferred(request)  # (one coordinator: Pulsar checks nothing)
            return json_response(await slow(await self._owned_coordinator(request, int_param(raw, "coordinatorId"))))
        await check_deferred(request)  # (every coordinator: a LOOKUP of the assignment topic, read first)
        out: dict[str, Any] = {}
        for answer in (await self._from_each_coordinator(request, f"slowTransactions/{timeout_ms}", slow)).values():
            out.update(answer or {})
        return json_response(out)

    async def _metadata(self, request: web.Request, meta: TxnMeta) -> dict[str, Any]:
        """Pulsar's TransactionMetadata; each partition and subscription as its topic's owner describes it."""
        produced: dict[str, Any] = {}
        for partition in meta.partitions:
            produced[partition] = await self._on_topic_owner(
                request, partition, f"transactionInBufferStats{{topic}}/{meta.txn.most}/{meta.txn.least}",
                lambda topic: topic.txn_buffer.txn_stats(meta.txn), {"aborted": False})
        acked: dict[str, dict[str, Any]] = {}
        for topic_name, sub_name in meta.subscriptions:

            def pending_stats(topic: PersistentTopic, sub_name: str = sub_name) -> dict[str, Any] | None:
                pending = sub.pending_acks if (sub := topic.subscriptions.get(sub_name)) is not None else None
                return pending.txn_stats(meta.txn) if pending is not None else None

            acked.setdefault(topic_name, {})[sub_name] = await self._on_topic_owner(
                request, topic_name,
                f"transactionInPendingAckStats{{topic}}/{quote(sub_name, safe='')}/{meta.txn.most}/{meta.txn.least}",
                pending_stats, {})
        # (timeoutAt: the transaction's timeout in ms, not a time: what Pulsar 4.0.7's TxnMetaImpl keeps under
        # that name, and so what its admin clients show)
        out = {"txnId": str(meta.txn), "status": meta.status.value, "openTimestamp": meta.opened_ms,
               "timeoutAt": meta.timeout_ms, "producedPartitions": produced, "ackedPartitions": acked}
        if meta.owner is not None:
            out["owner"] = meta.owner
        return out

    async def _on_topic_owner(self, request: web.Request, topic_name: str, path: str,
                              local: Callable[[PersistentTopic], Any], missing: dict[str, Any]) -> Any:
        """``local`` of the topic when it is loaded here; ``path`` (``{topic}`` standing for the topic's
        tenant/namespace/local name) asked of its owner when another broker serves it; ``missing`` when neither
        knows it."""
        service = self.web.service
        topic = service.topics.get(topic_name)
        if topic is not None:
            found = local(topic)
            return found if found is not None else missing
        try:
            name = TopicName.parse(topic_name)
            base = await topic_owner_url(self.web.ctx, name, request.secure) if service.ownership.distributed else None
        except (BrokerError, HttpError):
            return missing
        if base is None:
            return missing
        where = topic_path(name).removeprefix(f"/admin/v2/{name.domain}")
        try:
            return await self.web.peers.call("GET", f"{base}{BASE}/{path.format(topic=where)}", request)
        except HttpError as exc:
            if exc.status_code == 404:
                return missing
            raise

    async def abort_transaction(self, request: web.Request) -> web.Response:
        _ = self.transactions  # (503 first)
        txn = self._txn(request)
        if not 0 <= txn.most <= _INT_MAX:  # (Pulsar's check: the coordinator id is an int)
            raise HttpError(500, "mostSigBits out of bounds")
        await self._validate_coordinator_owner(request, txn.most)
        await check_deferred(request)  # (a super user: Pulsar checks once the owner is found to be here)
        tc = await self._coordinator(txn.most)
        try:
            await tc.end_txn(txn, commit=False)
        except (TransactionNotFoundError, InvalidTxnStatusError) as exc:
            raise HttpError(500, exc.message) from None
        return no_content()

    async def scale_coordinators(self, request: web.Request) -> web.Response:
        """More coordinators: the assignment topic's partition count raised to the body's number (Pulsar's
        scaleTransactionCoordinators; 406 unless more than now). New clients find them; ours bounds the number by
        maxNumPartitionsPerPartitionedTopic (or 100,000 without one), as every partitioned topic here."""
        ts = self.transactions  # (503 first)
        await check_deferred(request)  # (then a super user)
        replicas = check_java_int(await read_body(request) or 0, "replicas")
        if replicas <= ts.count:
            raise HttpError(406, "Number of transaction coordinators should be more than the current number of "
                                 "transaction coordinator")
        most = max_partitions(self.web.service.config.maxNumPartitionsPerPartitionedTopic)
        if replicas > most:
            raise HttpError(406, f"Number of transaction coordinators should be less than or equal to {most}")
        await ts.scale(replicas)
        return no_content()

    async def coordinator_internal_stats(self, request: web.Request) -> web.Response:
        tc = await self._owned_coordinator(request, int_param(request.match_info["coordinatorId"], "coordinatorId"))
        stats = _log_stats(tc.log.ledger)
        if query_flag(request, "metadata"):
            await add_ledger_metadata(stats["managedLedgerInternalStats"], tc.log.ledger)
        return json_response({"transactionLogStats": stats})

    # -- topics ----------------------------------------------------------------------------------------
    async def buffer_stats(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        return json_response(topic.txn_buffer.stats(query_flag(request, "lowWaterMarks")))

    async def in_buffer_stats(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        return json_response(topic.txn_buffer.txn_stats(self._txn(request)))

    async def buffer_internal_stats(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        stats = internal_stats(topic)
        cursor = topic.txn_buffer.cursor
        if cursor is not None:  # (the snapshot's own cursor, beside the subscriptions')
            stats["cursors"][BUFFER_CURSOR] = cursor_internal_stats(topic.ledger, cursor)
        return json_response({"snapshotType": "Single", "singleSnapshotSystemTopicInternalStats": {
            "managedLedgerName": topic.ledger.name, "managedLedgerInternalStats": stats}})

    async def pending_ack_internal_stats(self, request: web.Request) -> web.Response:
        await self._pending(request)
        topic = await self._topic(request)
        return json_response({"pendingAckLogStats": _log_stats(topic.ledger)})

    async def pending_ack_stats(self, request: web.Request) -> web.Response:
        pending = await self._pending(request)
        return json_response(pending.stats(query_flag(request, "lowWaterMarks")))

    async def in_pending_ack_stats(self, request: web.Request) -> web.Response:
        pending = await self._pending(request)
        return json_response(pending.txn_stats(self._txn(request)))

    async def position_in_pending_ack(self, request: web.Request) -> web.Response:
        """PositionInPendingAckStats: where a position (``?batchIndex=``: a message of its batch) stands on the
        subscription: MarkDelete, PendingAck, NotInPendingAck or InvalidPosition."""
        m = request.match_info
        position = Position(int_param(m["ledger"], "ledgerId"), int_param(m["entry"], "entryId"))
        raw_index = request.query.get("batchIndex")
        batch_index = None if raw_index is None else int_param(raw_index, "batchIndex")
        pending, sub = await self._pending_of(request)
        state = pending.position_state(position, batch_index, sub.cursor.mark_delete_position)
        return json_response({"state": state})

    async def _pending(self, request: web.Request) -> PendingAcks:
        return (await self._pending_of(request))[0]

    async def _pending_of(self, request: web.Request) -> tuple[PendingAcks, Subscription]:
        topic = await self._topic(request)
        sub_name = request.match_info["sub"]
        sub = topic.subscriptions.get(sub_name)
        if sub is None and sub_name in topic.ledger.cursors:
            sub = await topic.get_or_create_subscription(sub_name, True, 0, None)
        if sub is None:
            raise HttpError(404, f"Subscription {sub_name} not found")
        if sub.pending_acks is None:
            raise HttpError(503, "This Broker is not configured with transactionCoordinatorEnabled=true.")
        return sub.pending_acks, sub


_INT_MAX = (1 << 31) - 1


def _log_stats(ledger: ManagedLedger) -> dict[str, Any]:
    """Pulsar's TransactionLogStats / SnapshotSystemTopicInternalStats: a managed ledger's name and
    its ManagedLedgerInternalStats (every cursor, the broker's own included)."""
    return {"managedLedgerName": ledger.name, "managedLedgerInternalStats": ledger_internal_stats(ledger)}
