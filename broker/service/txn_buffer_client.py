"""How a coordinator ends a transaction on topics another broker serves (Pulsar's TransactionBufferClientImpl and
TransactionBufferHandlerImpl): END_TXN_ON_PARTITION and END_TXN_ON_SUBSCRIPTION sent over a broker-to-broker binary
connection to the topic's owner.

The owner is found as Pulsar's client finds it: a LOOKUP asked of this broker's own service URL, following Redirects
(with their authoritative flag) until a Connect names the owner; the owner is remembered per topic and forgotten on
any failure, so the next try looks up again. Connections are kept per broker URL (one each, reused by every
coordinator of this broker); the broker's client credentials (``brokerClientAuthenticationPlugin`` /
``...Parameters``) make the request a super user's, as the owner requires with authorization on.

Every failure raises ``TxnBufferClientError`` (the owner moved: ServiceNotReady; a lost connection; a lookup that
failed; no answer within ``REQUEST_TIMEOUT_S``). The coordinator retries until the participant has heard
(``TransactionCoordinator._until_done``); ending twice on the topic side changes nothing, so a retry after a lost
answer is harmless.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING

from broker.auth.tls import client_context
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.peer_link import LinkError, PeerConnection, RemoteError, look_up
from broker.service.remote_producer import broker_client_credentials
from broker.tasks import OwnedTasks, SingleFlight
from broker.transactions.model import TxnID
from broker.version import __version__

if TYPE_CHECKING:
    from broker.config import BrokerConfig

log = logging.getLogger(__name__)
T = pb.BaseCommand.Type

# Pulsar's TransactionBufferHandlerImpl gives an END_TXN_ON_* 3 s; loading a topic on BookKeeper (recovery of its
# last ledger) may take longer on a busy machine, and a retry after a timeout only costs a second request.
REQUEST_TIMEOUT_S = 30.0
CLIENT_VERSION = f"pulsar-py-broker-txn/{__version__}"


class TxnBufferClientError(RemoteError):
    """The participant was not told (yet): the coordinator tries again."""


class TxnBufferClient:
    """END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION to a topic's owner, wherever it is (see the module docstring)."""

    def __init__(self, own_url: str, config: BrokerConfig) -> None:
        self.own_url = own_url
        self._config = config
        self._credentials()  # (unusable credentials: an error at once)
        self._context: ssl.SSLContext | None = None
        if own_url.startswith("pulsar+ssl://"):
            # (Pulsar's broker clients do not check host names by default)
            self._context = client_context(config.brokerClientTrustCertsFilePath or config.tlsTrustCertsFilePath,
                                           check_hostname=False)
        self._links: dict[str, PeerConnection] = {}
        self._opening: SingleFlight[str, PeerConnection] = SingleFlight("transaction buffer client: links being "
                                                                        "opened")
        self._owners: dict[str, str] = {}  # topic -> its owner's URL, as last looked up
        self._closing = OwnedTasks("transaction buffer client: links being closed")
        self.closed = False

    def _credentials(self) -> tuple[str | None, bytes]:
        """The broker client's credentials as they are now (``peer_link.Credentials``: a token file read again,
        a dynamic change seen)."""
        try:
            method, data, _cert = broker_client_credentials(self._config)
        except RemoteError as exc:
            raise TxnBufferClientError(str(exc)) from None
        return method, data

    # -- the two requests ----------------------------------------------------------------------------
    async def end_on_partition(self, topic: str, txn: TxnID, commit: bool, low_watermark: int | None = None) -> None:
        cmd = pb.BaseCommand(type=T.END_TXN_ON_PARTITION)
        c = cmd.endTxnOnPartition
        c.topic = topic
        c.txnid_most_bits, c.txnid_least_bits = txn
        c.txn_action = pb.COMMIT if commit else pb.ABORT
        if low_watermark is not None and low_watermark >= 0:  # (-1: nothing below the first transaction)
            c.txnid_least_bits_of_low_watermark = low_watermark
        reply = await self._to_owner(topic, cmd, c)
        self._check(topic, reply, "endTxnOnPartitionResponse")

    async def end_on_subscription(self, topic: str, subscription: str, txn: TxnID, commit: bool,
                                  low_watermark: int | None = None) -> None:
        cmd = pb.BaseCommand(type=T.END_TXN_ON_SUBSCRIPTION)
        c = cmd.endTxnOnSubscription
        c.subscription.topic, c.subscription.subscription = topic, subscription
        c.txnid_most_bits, c.txnid_least_bits = txn
        c.txn_action = pb.COMMIT if commit else pb.ABORT
        if low_watermark is not None and low_watermark >= 0:  # (-1: nothing below the first transaction)
            c.txnid_least_bits_of_low_watermark = low_watermark
        reply = await self._to_owner(topic, cmd, c)
        self._check(topic, reply, "endTxnOnSubscriptionResponse")

    def _check(self, topic: str, reply: pb.BaseCommand, field: str) -> None:
        r = getattr(reply, field)
        if r.HasField("error"):
            self._owners.pop(topic, None)  # (as Pulsar invalidates its cache: the next try looks up again)
            raise TxnBufferClientError(f"{topic}: {pb.ServerError.Name(r.error)}: {r.message}")

    async def _to_owner(self, topic: str, cmd: pb.BaseCommand,
                        body: pb.CommandEndTxnOnPartition | pb.CommandEndTxnOnSubscription) -> pb.BaseCommand:
        if self.closed:
            raise TxnBufferClientError("the transaction buffer client is closed")
        try:
            url = self._owners.get(topic) or await self._lookup(topic)
            self._owners[topic] = url
            link = await self._link(url)
            return await link.request(cmd, body)
        except LinkError as exc:  # (an ERROR answer, no answer, a connection lost or refused)
            self._owners.pop(topic, None)
            raise TxnBufferClientError(f"{topic}: {exc}") from None
        except BaseException:
            self._owners.pop(topic, None)
            raise

    async def _lookup(self, topic: str) -> str:
        """The owner's URL, through LOOKUPs from this broker's own URL (Redirects followed)."""
        try:
            return (await look_up(topic, self.own_url, self._link, self._context is not None)).url
        except LinkError as exc:
            raise TxnBufferClientError(f"lookup of {topic}: {exc}") from None

    async def _link(self, url: str) -> PeerConnection:
        link = self._links.get(url)
        if link is not None and not link.ended:
            return link
        return await self._opening.run(url, lambda: self._open_link(url))

    async def _open_link(self, url: str) -> PeerConnection:
        link = PeerConnection(url, self._credentials, self._context, CLIENT_VERSION, REQUEST_TIMEOUT_S,
                              on_lost=lambda exc: log.info("transaction link to %s lost: %s", url, exc))
        await link.connect()
        if self.closed:
            await link.close()
            raise TxnBufferClientError("the transaction buffer client is closed")
        log.info("transaction link to %s open", url)
        old = self._links.get(url)
        if old is not None:
            self._closing.spawn(old.close(), name=f"close link to {url}")
        self._links[url] = link
        return link

    async def close(self) -> None:
        self.closed = True
        await self._opening.close()
        links = list(self._links.values())
        self._links.clear()
        await asyncio.gather(*(link.close() for link in links), return_exceptions=True)
        await self._closing.close()
