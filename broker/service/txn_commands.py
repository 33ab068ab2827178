"""The transaction coordinator's commands on a client connection (Pulsar's ServerCnx
handleTcClientConnect, handleNewTxn, handleAddPartitionToTxn, handleAddSubscriptionToTxn,
handleEndTxn, and the broker-to-broker handleEndTxnOnPartition / handleEndTxnOnSubscription).

Routed here by ``ServerCnx`` when transactionCoordinatorEnabled is on; each request runs as a task
of the connection and is answered with its own response type (an error in it, never a
CommandError: the Java client matches these responses per coordinator, a CommandError would hang
it). Transactional SEND and ACK stay in the command router: they are a producer's and a
consumer's commands.

A transaction belongs to the role that opened it (behind a proxy, the client the proxy speaks
for): only that role, or a super user, may add to it or end it (Pulsar's verifyTxnOwnership). A
super user behind a proxy is one whose proxy role is a super user too (Pulsar's isSuperUser).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from broker.auth import TopicOperation
from broker.errors import BrokerError, NotAllowedError, TransactionNotFoundError
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.topic_name import TopicName
from broker.transactions.model import TxnID

if TYPE_CHECKING:
    from broker.service.server_cnx import Handler, ServerCnx
    from broker.service.transactions import TransactionService
    from broker.transactions.coordinator import TransactionCoordinator

log = logging.getLogger(__name__)
T = pb.BaseCommand.Type
E = pb.ServerError


class CoordinatorCommands:
    def __init__(self, cnx: ServerCnx) -> None:
        self.cnx = cnx

    def handlers(self) -> dict[int, Handler]:
        return {
            T.TC_CLIENT_CONNECT_REQUEST: self.handle_tc_client_connect,
            T.NEW_TXN: self.handle_new_txn,
            T.ADD_PARTITION_TO_TXN: self.handle_add_partition_to_txn,
            T.ADD_SUBSCRIPTION_TO_TXN: self.handle_add_subscription_to_txn,
            T.END_TXN: self.handle_end_txn,
            T.END_TXN_ON_PARTITION: self.handle_end_txn_on_partition,
            T.END_TXN_ON_SUBSCRIPTION: self.handle_end_txn_on_subscription,
        }

    def _txn_request(self, kind: int, request_id: int, txn: TxnID | None,
                     work: Callable[[TransactionService], Coroutine[Any, Any, TxnID | None]]) -> None:
        """Run a coordinator request; answer with ``kind`` (the txn id it returns, else ``txn``)
        or the request's error."""
        transactions = self.cnx.service.transactions
        assert transactions is not None

        async def run() -> None:
            try:
                got = await work(transactions)
            except BrokerError as exc:
                self.cnx.write(commands.txn_response(kind, request_id, txn, exc.code, exc.message))
                return
            except Exception as exc:
                log.exception("transaction request %s failed", pb.BaseCommand.Type.Name(kind))
                self.cnx.write(commands.txn_response(kind, request_id, txn, E.UnknownError, str(exc)))
                return
            self.cnx.write(commands.txn_response(kind, request_id, got if got is not None else txn))

        self.cnx._spawn(run())

    # -- who may use a transaction ---------------------------------------------------------------------
    def _principal(self) -> str | None:
        """Pulsar's getPrincipal: the client a proxy speaks for, else the connection's role."""
        auth = self.cnx.auth
        return auth.original_principal or auth.role

    def _is_super_user(self) -> bool:
        """The connection's role is a super user and so is, behind a proxy, the client's."""
        authz, auth = self.cnx.security.authorization, self.cnx.auth
        return authz.is_super_user(auth.role) and (
            auth.original_principal is None or authz.is_super_user(auth.original_principal))

    def _check_owner(self, tc: TransactionCoordinator, txn: TxnID) -> None:
        """TransactionNotFound (Pulsar's answer) unless this connection may use ``txn``: it opened it,
        nobody owns it (opened with authentication off), or, with authorization on, it is a super user."""
        owner = tc.get(txn).owner
        principal = self._principal()
        if owner is None or owner == principal:
            return
        if self.cnx.security.authorization.enabled and self._is_super_user():
            return
        message = f"Client ({principal}) is neither the owner of the transaction {txn} nor a super user"
        log.warning("%s: %s", self.cnx.remote_address, message)
        raise TransactionNotFoundError(message)

    def handle_tc_client_connect(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.tcClientConnectRequest

        async def work(ts: TransactionService) -> None:
            await ts.coordinator(c.tc_id, connect=True)

        self._txn_request(T.TC_CLIENT_CONNECT_RESPONSE, c.request_id, None, work)

    def handle_new_txn(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.newTxn
        owner = self._principal()

        async def work(ts: TransactionService) -> TxnID:
            # txn_ttl_seconds carries milliseconds (Java and Go; upstream renamed it txn_ttl_millis)
            return await (await ts.coordinator(c.tc_id)).new_txn(c.txn_ttl_seconds, owner)

        self._txn_request(T.NEW_TXN_RESPONSE, c.request_id, None, work)

    def handle_add_partition_to_txn(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.addPartitionToTxn
        txn = TxnID(c.txnid_most_bits, c.txnid_least_bits)
        partitions = list(c.partitions)

        async def work(ts: TransactionService) -> None:
            for p in partitions:
                self.cnx._authorize(TopicName.parse(p), TopicOperation.PRODUCE)
            tc = await ts.coordinator_of(txn)
            self._check_owner(tc, txn)
            tc.get(txn).expect_open()
            await tc.add_partitions(txn, partitions)

        self._txn_request(T.ADD_PARTITION_TO_TXN_RESPONSE, c.request_id, txn, work)

    def handle_add_subscription_to_txn(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.addSubscriptionToTxn
        txn = TxnID(c.txnid_most_bits, c.txnid_least_bits)
        subscriptions = [(s.topic, s.subscription) for s in c.subscription]

        async def work(ts: TransactionService) -> None:
            for topic, sub in subscriptions:
                self.cnx._authorize(TopicName.parse(topic), TopicOperation.CONSUME, sub)
            tc = await ts.coordinator_of(txn)
            self._check_owner(tc, txn)
            await tc.add_subscriptions(txn, subscriptions)

        self._txn_request(T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE, c.request_id, txn, work)

    def handle_end_txn(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.endTxn
        txn = TxnID(c.txnid_most_bits, c.txnid_least_bits)
        if c.txn_action not in (pb.COMMIT, pb.ABORT) or not c.HasField("txn_action"):
            self.cnx.write(commands.txn_response(T.END_TXN_RESPONSE, c.request_id, txn, E.InvalidTxnStatus,
                                             "END_TXN needs txn_action COMMIT or ABORT"))
            return

        async def work(ts: TransactionService) -> None:
            tc = await ts.coordinator_of(txn)
            self._check_owner(tc, txn)
            await tc.end_txn(txn, commit=c.txn_action == pb.COMMIT)

        self._txn_request(T.END_TXN_RESPONSE, c.request_id, txn, work)

    def _check_broker_role(self, what: str) -> None:
        """With authorization on, only a super user (another broker) may end a transaction on a
        topic directly; behind a proxy, the client must be one too (not only the proxy)."""
        if self.cnx.security.authorization.enabled and not self._is_super_user():
            raise NotAllowedError(f"{what} is for brokers (super users) only")

    def handle_end_txn_on_partition(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        """What a coordinator on another broker sends the owner of a topic (txn_buffer_client.py); ServiceNotReady
        when this broker does not serve it (the sender looks up again)."""
        c = cmd.endTxnOnPartition
        txn = TxnID(c.txnid_most_bits, c.txnid_least_bits)

        async def work(ts: TransactionService) -> None:
            self._check_broker_role("END_TXN_ON_PARTITION")
            await ts.end_on_partition_here(c.topic, txn, c.txn_action == pb.COMMIT, _low_watermark(c))

        self._txn_request(T.END_TXN_ON_PARTITION_RESPONSE, c.request_id, txn, work)

    def handle_end_txn_on_subscription(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.endTxnOnSubscription
        txn = TxnID(c.txnid_most_bits, c.txnid_least_bits)

        async def work(ts: TransactionService) -> None:
            self._check_broker_role("END_TXN_ON_SUBSCRIPTION")
            await ts.end_on_subscription_here(c.subscription.topic, c.subscription.subscription, txn,
                                              c.txn_action == pb.COMMIT, _low_watermark(c))

        self._txn_request(T.END_TXN_ON_SUBSCRIPTION_RESPONSE, c.request_id, txn, work)


def _low_watermark(c: pb.CommandEndTxnOnPartition | pb.CommandEndTxnOnSubscription) -> int | None:
    return c.txnid_least_bits_of_low_watermark if c.HasField("txnid_least_bits_of_low_watermark") else None
