"""Transactions with authentication and authorization on: a transaction belongs to the role that
opened it (Pulsar's TxnMeta owner). Only that role, or a super user, may add to it or end it
(ServerCnx.verifyTxnOwnership); behind a proxy the owner is the client the proxy speaks for.

The proxy's role is a super user here, as deployments often make it: a client behind it is a super
user only if its own role is one too (ServerCnx.isSuperUser)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from broker.embedded import Broker
from broker.protocol import pulsar_api_pb2 as pb
from tests.security.conftest import SUPER_USER, secure_settings, token
from tests.security.pki import Pki
from tests.security.test_wire import connect_cmd, grant, port, proxied
from tests.transactions.client import TxnWireClient

E = pb.ServerError
TOPIC = "persistent://public/default/txn-owned"


@pytest.fixture
async def broker(pki: Pki) -> AsyncIterator[Broker]:
    settings = secure_settings(pki, webServicePortTls=None, transactionCoordinatorEnabled=True, proxyRoles="proxy",
                               superUserRoles=f"{SUPER_USER},proxy")
    async with Broker(**settings) as b:
        for role in ("alice", "mallory", "proxy"):
            await grant(b, "public/default", role, ["produce", "consume"])
        yield b


async def coordinator_client(b: Broker, connect: pb.BaseCommand) -> TxnWireClient:
    c = await TxnWireClient.open(port(b), connect)
    assert not (await c.tc_connect(0)).HasField("error")
    return c


def as_role(role: str) -> pb.BaseCommand:
    return connect_cmd("token", token(role).encode())


async def test_only_the_owner_or_a_super_user_may_use_a_transaction(broker: Broker) -> None:
    alice = await coordinator_client(broker, as_role("alice"))
    mallory = await coordinator_client(broker, as_role("mallory"))
    root = await coordinator_client(broker, as_role(SUPER_USER))
    try:
        txn = await alice.new_txn()
        # Another role, though allowed on the topic, may not touch alice's transaction.
        assert (await mallory.add_partitions(txn, TOPIC)).error == E.TransactionNotFound
        assert (await mallory.add_subscription(txn, TOPIC, "s")).error == E.TransactionNotFound
        refused = await mallory.end_txn(txn, commit=False)
        assert refused.error == E.TransactionNotFound
        assert "neither the owner" in refused.message
        # ... so it is still open for its owner.
        assert not (await alice.add_partitions(txn, TOPIC)).HasField("error")
        assert not (await alice.end_txn(txn, commit=True)).HasField("error")
        # A super user may end anyone's transaction (pulsar-admin's abort does).
        other = await alice.new_txn()
        assert not (await root.end_txn(other, commit=False)).HasField("error")
    finally:
        for c in (alice, mallory, root):
            await c.close()


async def test_behind_a_proxy_the_client_owns_the_transaction(broker: Broker) -> None:
    for_alice = await coordinator_client(broker, proxied("proxy", "alice"))
    for_mallory = await coordinator_client(broker, proxied("proxy", "mallory"))
    alice = await coordinator_client(broker, as_role("alice"))
    try:
        txn = await for_alice.new_txn()
        assert (await for_mallory.end_txn(txn, commit=False)).error == E.TransactionNotFound
        assert not (await alice.end_txn(txn, commit=True)).HasField("error")
    finally:
        for c in (for_alice, for_mallory, alice):
            await c.close()


async def test_ending_a_transaction_on_a_topic_is_for_super_users_behind_the_proxy_too(broker: Broker) -> None:
    """END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION are what a coordinator sends a topic's owner: a
    client may not send them itself, even through a proxy whose own role is a super user."""
    alice = await coordinator_client(broker, as_role("alice"))
    for_mallory = await coordinator_client(broker, proxied("proxy", "mallory"))
    for_root = await coordinator_client(broker, proxied("proxy", SUPER_USER))
    try:
        txn = await alice.new_txn()
        assert not (await alice.add_partitions(txn, TOPIC)).HasField("error")
        await alice.producer(TOPIC, 1)
        assert (await alice.send(1, 0, "in a transaction", txn)).HasField("send_receipt")

        def on_partition(commit: bool) -> tuple[pb.BaseCommand, pb.CommandEndTxnOnPartition]:
            cmd = pb.BaseCommand(type=pb.BaseCommand.END_TXN_ON_PARTITION)
            c = cmd.endTxnOnPartition
            c.txnid_most_bits, c.txnid_least_bits = txn
            c.topic, c.txn_action = TOPIC, pb.COMMIT if commit else pb.ABORT
            return cmd, c

        def on_subscription() -> tuple[pb.BaseCommand, pb.CommandEndTxnOnSubscription]:
            cmd = pb.BaseCommand(type=pb.BaseCommand.END_TXN_ON_SUBSCRIPTION)
            c = cmd.endTxnOnSubscription
            c.txnid_most_bits, c.txnid_least_bits = txn
            c.subscription.topic, c.subscription.subscription, c.txn_action = TOPIC, "s", pb.ABORT
            return cmd, c

        reply = await for_mallory.request(*on_partition(commit=True))
        assert reply.endTxnOnPartitionResponse.error == E.NotAllowedError
        reply = await for_mallory.request(*on_subscription())
        assert reply.endTxnOnSubscriptionResponse.error == E.NotAllowedError
        # Both super users: allowed (the coordinator's own calls look like this).
        reply = await for_root.request(*on_partition(commit=False))
        assert not reply.endTxnOnPartitionResponse.HasField("error"), reply
    finally:
        for c in (alice, for_mallory, for_root):
            await c.close()
