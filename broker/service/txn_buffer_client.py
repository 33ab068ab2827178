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
import itertools
import logging
import ssl
from typing import TYPE_CHECKING

from broker.auth.tls import client_context
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.service.peer_link import CommandReader, Credentials, connect_command, keepalive_reply
from broker.service.remote_producer import RemoteError, broker_client_credentials
from broker.service.remote_producer import _address as parse_url
from broker.tasks import OwnedTasks, SingleFlight
from broker.transactions.model import TxnID
from broker.version import __version__

if TYPE_CHECKING:
    from broker.config import BrokerConfig

log = logging.getLogger(__name__)
T = pb.BaseCommand.Type

CONNECT_TIMEOUT_S = 10.0
# Pulsar's TransactionBufferHandlerImpl gives an END_TXN_ON_* 3 s; loading a topic on BookKeeper (recovery of its
# last ledger) may take longer on a busy machine, and a retry after a timeout only costs a second request.
REQUEST_TIMEOUT_S = 30.0
MAX_LOOKUP_HOPS = 8  # redirects followed before giving up (the client's own limit is of this order)
CLIENT_VERSION = f"pulsar-py-broker-txn/{__version__}"

# Responses matched to their request by request id: type -> field of BaseCommand.
_RESPONSES = {
    T.LOOKUP_RESPONSE: "lookupTopicResponse",
    T.END_TXN_ON_PARTITION_RESPONSE: "endTxnOnPartitionResponse",
    T.END_TXN_ON_SUBSCRIPTION_RESPONSE: "endTxnOnSubscriptionResponse",
    T.ERROR: "error",
}


class TxnBufferClientError(RemoteError):
    """The participant was not told (yet): the coordinator tries again."""


class _BrokerLink:
    """One connection to one broker: requests answered by request id, pings answered, auth challenges met."""

    def __init__(self, url: str, credentials: Credentials, context: ssl.SSLContext | None) -> None:
        self.url = url
        self._credentials = credentials
        self._context = context
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self._reader_task: asyncio.Task[None] | None = None
        self.closed = False

    async def open(self) -> None:
        host, port, tls = _address(self.url)
        context = self._context if tls else None
        if tls and context is None:
            context = client_context(check_hostname=False)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                stream, self._writer = await asyncio.open_connection(host, port, ssl=context)
                reader = CommandReader(stream, lambda: TxnBufferClientError(f"connection to {self.url} closed"))
                self._writer.write(connect_command(CLIENT_VERSION, self._credentials))
                while True:
                    cmd = await reader.next_command()
                    if cmd.type == T.CONNECTED:
                        break
                    if cmd.type == T.ERROR:
                        raise TxnBufferClientError(f"{self.url} refused the connection: "
                                                   f"{pb.ServerError.Name(cmd.error.error)}: {cmd.error.message}")
                    self._answer(cmd)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            self.close()
            raise TxnBufferClientError(f"cannot connect to {self.url}: {exc or type(exc).__name__}") from None
        except BaseException:
            self.close()
            raise
        self._reader_task = asyncio.get_running_loop().create_task(self._read(reader))
        log.info("transaction link to %s open", self.url)

    def _answer(self, cmd: pb.BaseCommand) -> None:
        reply = keepalive_reply(cmd, CLIENT_VERSION, self._credentials)
        if reply is not None:
            self._write(reply)

    def _write(self, data: bytes) -> None:
        writer = self._writer
        if writer is None or writer.is_closing():
            raise TxnBufferClientError(f"connection to {self.url} is closed")
        writer.write(data)

    async def _read(self, reader: CommandReader) -> None:
        try:
            while True:
                cmd = await reader.next_command()
                field = _RESPONSES.get(cmd.type)
                if field is None:
                    self._answer(cmd)
                    continue
                waiter = self._pending.pop(getattr(cmd, field).request_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(cmd)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # (OSError, a protocol error, the peer gone: the link is lost)
            log.info("transaction link to %s lost: %s", self.url, exc)
        finally:
            self.close()

    async def request(self, cmd: pb.BaseCommand, body: pb.CommandLookupTopic | pb.CommandEndTxnOnPartition
                      | pb.CommandEndTxnOnSubscription, request_id: int) -> pb.BaseCommand:
        body.request_id = request_id
        waiter: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = waiter
        try:
            self._write(commands.frame(cmd))
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                return await waiter
        except TimeoutError:
            raise TxnBufferClientError(f"no answer from {self.url} within {REQUEST_TIMEOUT_S:.0f} s") from None
        finally:
            self._pending.pop(request_id, None)

    def close(self) -> None:
        self.closed = True
        if self._writer is not None:
            self._writer.close()
        for waiter in self._pending.values():
            if not waiter.done():
                waiter.set_exception(TxnBufferClientError(f"connection to {self.url} lost"))
                waiter.exception()
        self._pending.clear()

    async def aclose(self) -> None:
        self.close()
        if self._reader_task is not None:
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)


def _address(url: str) -> tuple[str, int, bool]:
    try:
        return parse_url(url)
    except RemoteError as exc:
        raise TxnBufferClientError(str(exc)) from None


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
        self._links: dict[str, _BrokerLink] = {}
        self._opening: SingleFlight[str, _BrokerLink] = SingleFlight("transaction buffer client: links being opened")
        self._owners: dict[str, str] = {}  # topic -> its owner's URL, as last looked up
        self._ids = itertools.count(1)
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
        if reply.type == T.ERROR:
            code, message = reply.error.error, reply.error.message
        else:
            r = getattr(reply, field)
            if not r.HasField("error"):
                return
            code, message = r.error, r.message
        self._owners.pop(topic, None)  # (as Pulsar invalidates its cache: the next try looks up again)
        raise TxnBufferClientError(f"{topic}: {pb.ServerError.Name(code)}: {message}")

    async def _to_owner(self, topic: str, cmd: pb.BaseCommand,
                        body: pb.CommandEndTxnOnPartition | pb.CommandEndTxnOnSubscription) -> pb.BaseCommand:
        if self.closed:
            raise TxnBufferClientError("the transaction buffer client is closed")
        try:
            url = self._owners.get(topic) or await self._lookup(topic)
            self._owners[topic] = url
            link = await self._link(url)
            return await link.request(cmd, body, next(self._ids))
        except BaseException:
            self._owners.pop(topic, None)
            raise

    async def _lookup(self, topic: str) -> str:
        """The owner's URL, through LOOKUPs from this broker's own URL (Redirects followed)."""
        url, authoritative = self.own_url, False
        for _ in range(MAX_LOOKUP_HOPS):
            cmd = pb.BaseCommand(type=T.LOOKUP)
            cmd.lookupTopic.topic, cmd.lookupTopic.authoritative = topic, authoritative
            reply = await (await self._link(url)).request(cmd, cmd.lookupTopic, next(self._ids))
            if reply.type == T.ERROR:
                raise TxnBufferClientError(f"lookup of {topic}: {pb.ServerError.Name(reply.error.error)}: "
                                           f"{reply.error.message}")
            r = reply.lookupTopicResponse
            if r.response == pb.CommandLookupTopicResponse.Failed:
                raise TxnBufferClientError(f"lookup of {topic}: {pb.ServerError.Name(r.error)}: {r.message}")
            target = (r.brokerServiceUrlTls if self._context is not None else r.brokerServiceUrl) or url
            if r.response == pb.CommandLookupTopicResponse.Connect:
                return target
            url, authoritative = target, r.authoritative
        raise TxnBufferClientError(f"lookup of {topic} redirected more than {MAX_LOOKUP_HOPS} times")

    async def _link(self, url: str) -> _BrokerLink:
        link = self._links.get(url)
        if link is not None and not link.closed:
            return link
        return await self._opening.run(url, lambda: self._open_link(url))

    async def _open_link(self, url: str) -> _BrokerLink:
        link = _BrokerLink(url, self._credentials, self._context)
        await link.open()
        if self.closed:
            await link.aclose()
            raise TxnBufferClientError("the transaction buffer client is closed")
        old = self._links.get(url)
        if old is not None:
            self._closing.spawn(old.aclose(), name=f"close link to {url}")
        self._links[url] = link
        return link

    async def close(self) -> None:
        self.closed = True
        await self._opening.close()
        links = list(self._links.values())
        self._links.clear()
        await asyncio.gather(*(link.aclose() for link in links), return_exceptions=True)
        await self._closing.close()
