"""The broker's health check (``/admin/v2/brokers/health``, and the periodic one behind ``pulsar_health``), through the
binary protocol as Apache Pulsar's HealthChecker (4.0) runs it: a client inside the broker connects to the broker's
own port with the broker client's credentials, creates a producer and a reader (a non-durable subscription
``healthCheck-<uuid>``, starting at the latest message) on the broker's heartbeat topic
``persistent://pulsar/<brokerId>/healthcheck``, sends a fresh UUID and reads until that message arrives; then it
closes both and its connection (which removes the reader's non-durable subscription even when its close is not
answered: what Pulsar's forced deletion of a subscription left behind does). So the check passes only when every
layer a client goes through answers: the listener and a connection's handler, lookups and ownership (cluster mode:
the heartbeat namespace is this broker's, ``broker.cluster.ownership``), the topic's producer and storage, the
dispatcher.

The topic is made first, whatever the namespace's auto-creation rule (Pulsar's getTopic(topic, true)); the broker
deletes it when it stops (Pulsar's HealthChecker.close). Pulsar's ``topicVersion=V1`` names
``pulsar/<cluster>/<brokerId>``, a V1 (cluster-scoped) name, which this broker does not serve: both versions check
through the V2 topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from broker.protocol import client_commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import entry_body
from broker.protocol.errors import ProtocolError
from broker.protocol.frames import Frame
from broker.service.peer_link import BrokerLink, LinkError
from broker.service.remote_producer import RemoteSettings
from broker.topic_name import HEALTH_CHECK_TOPIC, TopicName, heartbeat_namespace
from broker.version import __version__

if TYPE_CHECKING:
    from broker.service.broker_service import BrokerService

log = logging.getLogger(__name__)
R = TypeVar("R")

T = pb.BaseCommand.Type
CLIENT_VERSION = f"pulsar-py-broker-health-check/{__version__}"
PRODUCER_ID = CONSUMER_ID = 1
CLOSE_TIMEOUT_S = 5.0  # for each close at the end (a broker that does not answer it has failed the check already)
PERMITS = 100  # the reader's first FLOW (one more for each message of another check it reads past)


class HealthCheckError(Exception):
    """The broker refused or broke off a step of the check (the message says which)."""


def heartbeat_topic(broker_id: str) -> str:
    """The topic of this broker's health check (Pulsar's HealthChecker.getHeartbeatTopicName, V2)."""
    return f"persistent://{heartbeat_namespace(broker_id)}/{HEALTH_CHECK_TOPIC}"


class HealthChecker:
    def __init__(self, service: BrokerService, broker_id: str, settings: Callable[[], RemoteSettings],
                 timeout_s: float) -> None:
        self.service = service
        self.topic = heartbeat_topic(broker_id)
        self._settings = settings  # (read for each check: the broker client's settings are dynamic)
        self.timeout_s = timeout_s

    async def check(self) -> None:
        """One round trip (see the module docstring); raises HealthCheckError (or the settings' RemoteError) with
        the reason, TimeoutError after ``timeout_s``."""
        name = TopicName.parse(self.topic)
        async with asyncio.timeout(self.timeout_s):
            ownership = self.service.ownership
            if ownership.distributed and not ownership.is_owned(ownership.bundle_of(name)):
                await ownership.lookup(name, False, None)  # (unloaded by an admin: this broker takes it back)
            await self.service.get_topic(name, True, explicit=True)
            await _Probe(self.topic, self._settings()).run()

    async def delete_topic(self) -> None:
        """At the broker's stop: the heartbeat topic goes (Pulsar's HealthChecker.close), with its clients."""
        name = TopicName.parse(self.topic)
        if self.service.topic_exists(name) or self.service.get_topic_if_loaded(name) is not None:
            try:
                await self.service.delete_topic(name)
            except Exception as exc:  # (stopping anyway: the next start makes it again)
                log.warning("deleting the heartbeat topic %s: %s", self.topic, exc)


class _Probe:
    """One check's client: its connection, producer and reader."""

    def __init__(self, topic: str, settings: RemoteSettings) -> None:
        self.topic = topic
        self.text = str(uuid.uuid4())
        self.subscription = f"healthCheck-{self.text}"
        loop = asyncio.get_running_loop()
        self.seen: asyncio.Future[None] = loop.create_future()  # (the UUID read back, or the reason it was not)
        self.link = BrokerLink(settings, topic, CLIENT_VERSION, CLOSE_TIMEOUT_S * 2, on_command=self._on_command,
                               on_lost=self._fail)

    async def run(self) -> None:
        try:
            await self._step("lookup", self.link.open())
            created = await self._step("create the producer",
                                       self.link.request(*client_commands.producer(self.topic, PRODUCER_ID)))
            producer_name = created.producer_success.producer_name
            # a reader, as the Java client's: Exclusive, non-durable, from the latest message
            reader = client_commands.subscribe(self.topic, self.subscription, CONSUMER_ID,
                                               pb.CommandSubscribe.Exclusive, self.subscription, durable=False,
                                               start=client_commands.reader_start_latest())
            await self._step("create the reader", self.link.request(*reader))
            self.link.write(client_commands.flow(CONSUMER_ID, PERMITS))
            entry = client_commands.single_message(producer_name, 0, self.text.encode())
            self.link.write(client_commands.send(PRODUCER_ID, 0, 1, entry))
            await self.seen
        finally:
            await self._close()

    @staticmethod
    async def _step(what: str, step: Awaitable[R]) -> R:
        try:
            return await step
        except LinkError as exc:
            raise HealthCheckError(f"{what}: {exc}") from None

    def _on_command(self, frame: Frame) -> None:
        cmd = frame.command
        if cmd.type == T.MESSAGE and frame.payload is not None:
            try:
                body = entry_body(frame.payload)
            except ProtocolError:
                body = b""
            if body == self.text.encode() and not self.seen.done():
                self.seen.set_result(None)
            else:  # (another check's message, sent before this reader began: more permits for the next)
                self.link.write(client_commands.flow(CONSUMER_ID, 1))
        elif cmd.type == T.SEND_ERROR:
            self._fail(HealthCheckError(f"send: {pb.ServerError.Name(cmd.send_error.error)}: "
                                        f"{cmd.send_error.message}"))
        elif cmd.type in (T.CLOSE_PRODUCER, T.CLOSE_CONSUMER):
            self._fail(HealthCheckError("the broker closed the health check's producer or reader"))

    def _fail(self, exc: BaseException) -> None:
        if not self.seen.done():
            self.seen.set_exception(exc if isinstance(exc, HealthCheckError) else HealthCheckError(str(exc)))

    async def _close(self) -> None:
        """Close the producer and the reader, then the connection; closing the connection removes the reader's
        non-durable subscription too, so nothing is left when the reader's close is not answered."""
        if not self.seen.done():
            self.seen.cancel()
        elif not self.seen.cancelled():
            self.seen.exception()  # (a failure after another step's: the check raised that one)
        with contextlib.suppress(LinkError, TimeoutError):
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await self.link.request(*client_commands.close_producer(PRODUCER_ID))
                await self.link.request(*client_commands.close_consumer(CONSUMER_ID))
        await self.link.close()
