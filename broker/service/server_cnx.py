"""Command handlers of one client connection (Pulsar's ServerCnx): the command router.

Handlers that must wait (topic load, cursor open) run as tasks owned by this object and are
cancelled when the connection closes. Errors are answered in the response type the client
expects for that request (PROTOCOL.md section 0.3): a CommandError for a LOOKUP would hang it.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import re
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from broker.auth import ConnectionAuth, TopicOperation
from broker.auth.authorization import NAMESPACE_LOOKUP
from broker.auth.service import REFRESH_AUTH_DATA, PrincipalChanged, RefreshAction
from broker.errors import (
    AuthenticationError,
    BrokerError,
    ExclusiveConsumerBusyError,
    HashRangeTakenError,
    IncompatibleSchemaError,
    MetadataError,
    NotAllowedError,
    ProducerBusyError,
    ProducerNameTakenError,
    SubscriptionNotFoundError,
    TopicNotFoundError,
)
from broker.java_text import client_address, iso_time
from broker.metadata.global_namespace import PeerCluster
from broker.metadata.policy_table import (
    ALLOW_AUTO_UPDATE_SCHEMA,
    SCHEMA_VALIDATION_ENFORCED,
    SUBSCRIPTION_TYPES_ENABLED,
)
from broker.protocol import commands
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.checksum import crc32c
from broker.protocol.entry import (
    SendChecks,
    build_entry,
    check_send_payload,
    entry_body,
    parse_payload,
    plain_send_payloads,
)
from broker.protocol.errors import ProtocolError
from broker.protocol.frames import RunSend, SendCommand, command_body
from broker.protocol.limits import MAX_PROTOCOL_VERSION
from broker.service.consumer import Consumer
from broker.service.producer import Producer, ProducerState, QueuedSend
from broker.service.schemas import decode_version, encode_version, to_proto
from broker.service.subscription import position_of
from broker.service.topic import check_subscription_name
from broker.service.topic_watchers import TopicWatchers, compile_pattern
from broker.service.txn_commands import CoordinatorCommands
from broker.service.wire import WireConnection
from broker.tasks import OwnedTasks
from broker.topic_name import TopicName, blank, is_namespace_name, is_system_topic
from broker.transactions.model import TxnID
from broker.version import __version__
from managed_ledger import ManagedLedgerError
from metadata_store.api import MetadataStoreError

if TYPE_CHECKING:
    from broker.service.abstract_topic import SendPolicy
    from broker.service.broker_service import BrokerService
    from broker.service.nonpersistent import NonPersistentTopic
    from broker.service.rate_limits import ConnectionThrottle
    from broker.service.topic import PersistentTopic

log = logging.getLogger(__name__)
T = pb.BaseCommand.Type
E = pb.ServerError
# Extra bytes a stored entry may carry beyond maxMessageSize: magic+crc (6) and the metadata size (4).
ENTRY_OVERHEAD = 10
# A read's SENDs go to storage in appends of at most this many (see flush_sends): with reads of up
# to ~900 unbatched SENDs, the first half of a big read is on its way to the disk while the loop
# checks the rest. Half of Pulsar's default maxPendingPublishRequestsPerConnection (1000), the point
# at which a paused connection is read again.
SENDS_PER_APPEND = 512

Handler = Callable[[pb.BaseCommand, bytes | None], None]
_WAITING = ProducerState.WAITING  # (an Enum member looked up on its class costs ~0.2 us on Python 3.11: per SEND)
SERVER_VERSION = f"Pulsar Server {__version__}"


class ServerCnx:
    def __init__(self, connection: WireConnection, service: BrokerService) -> None:
        self.connection = connection
        self.service = service
        self.security = connection.server.security
        self.auth = ConnectionAuth(self.security.authentication)
        self.client_version = ""
        self.protocol_version = 0
        self.keeps_broker_entry_metadata = False
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        # Creations under way (another request for the id gets ServiceNotReady). Producers: id -> the request;
        # a CLOSE of a pending id abandons its creation and frees the id at once (Pulsar's handleCloseProducer
        # removes the pending future), so the creation, when it completes, finds another request or none under
        # its id. Consumers: id -> whether a CLOSE abandoned it; the id stays taken until the creation ends (Pulsar's
        # handleCloseConsumer keeps the failed future: a SUBSCRIBE meanwhile gets "Consumer that failed ...").
        self._pending_producers: dict[int, pb.CommandProducer] = {}
        self._pending_consumers: dict[int, bool] = {}
        # producers the broker closed: their in-flight SENDs are dropped, not fatal
        self._closed_producer_ids: set[int] = set()
        # the publish rate limits not reading this connection now (told to forget it when it closes)
        self._held_by: set[ConnectionThrottle] = set()
        self._max_payload = service.config.maxMessageSize + ENTRY_OVERHEAD
        # Producers with SENDs queued in this read (see flush_sends), and how many SENDs.
        self.open_batches: list[Producer] = []
        self._queued_sends = 0
        self._tasks = OwnedTasks("connection")  # command handlers under way
        # PIP-145 topic-list watchers of this connection, and whether their check loop runs.
        self.topic_watchers = TopicWatchers(
            lambda ns: service.topics_of_namespace(ns, pb.CommandGetTopicsOfNamespace.PERSISTENT), topics_hash,
            lambda wid, new, deleted, digest: self.write(commands.watch_topic_update(wid, new, deleted, digest)),
            service.topic_list_events)
        self._watching = False
        self.handlers: dict[int, Handler] = {
            T.LOOKUP: self.handle_lookup,
            T.PARTITIONED_METADATA: self.handle_partitioned_metadata,
            T.PRODUCER: self.handle_producer,
            T.CLOSE_PRODUCER: self.handle_close_producer,
            T.SUBSCRIBE: self.handle_subscribe,
            T.FLOW: self.handle_flow,
            T.ACK: self.handle_ack,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: self.handle_redeliver,
            T.UNSUBSCRIBE: self.handle_unsubscribe,
            T.CLOSE_CONSUMER: self.handle_close_consumer,
            T.SEEK: self.handle_seek,
            T.GET_LAST_MESSAGE_ID: self.handle_get_last_message_id,
            T.GET_TOPICS_OF_NAMESPACE: self.handle_get_topics_of_namespace,
            T.WATCH_TOPIC_LIST: self.handle_watch_topic_list,
            T.WATCH_TOPIC_LIST_CLOSE: self.handle_watch_topic_list_close,
            T.GET_SCHEMA: self.handle_get_schema,
            T.GET_OR_CREATE_SCHEMA: self.handle_get_or_create_schema,
            T.CONSUMER_STATS: self.handle_consumer_stats,
            T.AUTH_RESPONSE: self.handle_auth_response,
        }
        # The transaction coordinator's commands (txn_commands.py), or NotAllowedError when off.
        for txn_type, handler in CoordinatorCommands(self).handlers().items():
            self.handlers[txn_type] = handler if service.transactions is not None else self.handle_txn

    # -- ClientConnection protocol (used by producers/consumers) ---------------------------------------
    @property
    def writable(self) -> bool:
        return self.connection.writable

    @property
    def remote_address(self) -> str:
        return self.connection.remote_address

    def write(self, data: bytes) -> None:
        self.connection.write(data)

    def write_many(self, frames: list[bytes]) -> None:
        self.connection.write_many(frames)

    def consumer_closed_by_broker(self, consumer: Consumer) -> None:
        if self.consumers.get(consumer.consumer_id) is consumer:
            del self.consumers[consumer.consumer_id]
            self.write(commands.close_consumer(consumer.consumer_id))
        consumer.subscription.remove_consumer(consumer)

    async def check_liveness(self) -> bool | None:
        return await self.connection.check_liveness()

    def producer_closed_by_broker(self, producer_id: int) -> None:
        producer = self.producers.pop(producer_id, None)
        if producer is not None:
            self._closed_producer_ids.add(producer_id)
            self.write(commands.close_producer(producer_id))

    def on_writable(self) -> None:
        for c in list(self.consumers.values()):
            d = c.subscription.dispatcher
            if d is not None:
                d.on_writable()

    # -- task ownership ----------------------------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self._tasks.spawn(coro)

    def connection_closed(self) -> None:
        self._tasks.cancel()
        held_by, self._held_by = self._held_by, set()
        for throttle in held_by:
            throttle.forget(self)
        for producer in self.producers.values():
            producer.topic.remove_producer(producer)
        self.producers.clear()
        for consumer in self.consumers.values():
            consumer.subscription.remove_consumer(consumer)
        self.consumers.clear()

    async def wait_tasks(self) -> None:
        await self._tasks.wait()

    # -- handshake ------------------------------------------------------------------------------------------
    def handle_connect(self, cmd: pb.CommandConnect) -> None:
        self.client_version = cmd.client_version
        self.protocol_version = min(cmd.protocol_version, MAX_PROTOCOL_VERSION)
        # PIP-70, as Pulsar decides it per connection: protocol v18+, the client's feature flag, the setting.
        self.keeps_broker_entry_metadata = (self.protocol_version >= 18
                                            and cmd.feature_flags.supports_broker_entry_metadata
                                            and self.service.config.exposingBrokerEntryMetadataToClientEnabled)
        try:
            self.auth.connect(cmd, self.connection.peer_cert)
        except AuthenticationError as exc:
            self._refuse_credentials("connect", exc)
            return
        authz = self.security.authorization
        if self.security.authentication.enabled and authz.enabled:
            problem = authz.original_principal_problem(self.auth.role, self.auth.original_principal)
            if problem is not None:  # (the details stay in the log, as in Pulsar)
                log.warning("%s: illegal combination of role %r and originalPrincipal %r: %s", self.remote_address,
                            self.auth.role, self.auth.original_principal, problem)
                self.write(commands.error(-1, E.AuthorizationError, "Invalid roles."))
                self.connection.close()
                return
        self.write(commands.connected(SERVER_VERSION, self.protocol_version, self.service.config.maxMessageSize))

    # -- authentication refresh (credentials that expire: tokens) -----------------------------------------
    def refresh_authentication(self) -> None:
        """Called every authenticationRefreshCheckSeconds: challenge or drop expired credentials."""
        action = self.auth.refresh_action(time.time())
        if action is RefreshAction.CHALLENGE:
            log.info("%s: credentials of role %s expired; asking for fresh ones", self.remote_address,
                     self.auth.refreshed_role)
            self.write(commands.auth_challenge(self.auth.method, REFRESH_AUTH_DATA, self.protocol_version))
        elif action is RefreshAction.CLOSE:
            log.warning("%s: closing: credentials of role %s expired and were not refreshed",
                        self.remote_address, self.auth.refreshed_role)
            self.connection.close()

    def handle_auth_response(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        response = cmd.authResponse
        if not (response.HasField("response") and response.response.HasField("auth_method_name")
                and response.response.HasField("auth_data")):
            # Malformed, as Pulsar's handleAuthResponse sees it (its precondition fails): the connection closes with
            # no ERROR. The method's name itself is not checked: the credentials go to the connection's provider.
            raise ProtocolError("AUTH_RESPONSE without credentials or their method's name")
        try:
            self.auth.answer(response)
        except PrincipalChanged:
            # Pulsar's ServerCnx closes such a connection with no ERROR (unlike credentials it refuses).
            log.warning("%s: closing: refreshed credentials are not role %s's", self.remote_address,
                        self.auth.refreshed_role)
            self.connection.close()
        except AuthenticationError as exc:
            self._refuse_credentials("refresh", exc)

    def _refuse_credentials(self, what: str, exc: AuthenticationError) -> None:
        # The reason is safe to log and send: providers never quote the credentials.
        log.warning("%s: authentication failed (%s, method %s): %s", self.remote_address, what,
                    self.auth.method, exc.message)
        self.write(commands.error(-1, E.AuthenticationError, f"Unable to authenticate: {exc.message}"))
        self.connection.close()

    def _authorize(self, name: TopicName, op: TopicOperation, subscription: str = "") -> None:
        """Raises AuthorizationError unless this connection's role may do ``op`` on ``name``."""
        self.security.authorization.check_proxied(name, op, self.auth.role, self.auth.original_principal,
                                                  subscription)

    # -- lookup -----------------------------------------------------------------------------------------------
    def broker_urls(self) -> tuple[str, str | None]:
        """pulsar:// and pulsar+ssl:// URLs of this broker, as reached by this client."""
        host = self.service.config.advertisedAddress or self.connection.local_host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        server = self.connection.server
        plain = f"pulsar://{host}:{server.port}" if server.port else ""
        return plain, f"pulsar+ssl://{host}:{server.tls_port}" if server.tls_port else None

    def handle_lookup(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.lookupTopic
        server = self.connection.server
        stats = self.service.lookup_stats
        started = stats.start()
        if self.service.ownership.distributed:
            self._spawn(self._cluster_lookup(c, started))
            return
        urls = self.broker_urls()
        if c.advertised_listener_name or server.listeners:
            listener = server.listener(c.advertised_listener_name)
            if listener is None:  # Pulsar's wording, which the C++ client treats as retryable
                stats.done(started, failed=True)
                self.write(commands.lookup_failed(c.request_id, E.ServiceNotReady,
                                                  f"the broker do not have {c.advertised_listener_name} listener"))
                return
            urls = (listener.url or "", listener.url_tls)
        try:
            name = TopicName.parse(c.topic)
            self._authorize(name, TopicOperation.LOOKUP)
            self.service.check_namespace(name)
            peer = self.service.peer_cluster(name)
        except BrokerError as exc:
            stats.skipped()  # (before the owner lookup: not counted, see LookupStats)
            self.write(commands.lookup_failed(c.request_id, exc.code, exc.message))
            return
        if peer is not None:
            self._redirect_to_peer(c.request_id, peer)
            return
        stats.done(started)
        # (as Pulsar's standalone: a loopback address named is reached through the URL the client used, so a
        # client outside a container whose port is mapped elsewhere still connects; not where a listener was
        # chosen, which names the address meant)
        through = not (c.advertised_listener_name or server.listeners) and names_loopback(urls[0])
        self.write(commands.lookup_connect(c.request_id, *urls, through_service_url=through))

    def _redirect_to_peer(self, request_id: int, peer: PeerCluster) -> None:
        """The namespace is served by a peer cluster: Redirect there, authoritative (the other cluster's brokers
        decide its bundles themselves), as Pulsar's lookupTopicAsync answers. Not in the lookup counts: Pulsar's
        lookupTopicAsync answers it before NamespaceService.getBrokerServiceUrlAsync, which counts them."""
        self.service.lookup_stats.skipped()
        if not peer.broker_service_url and not peer.broker_service_url_tls:
            self.write(commands.lookup_failed(request_id, E.MetadataError,
                                              "Redirected cluster's brokerService url is not configured"))
            return
        self.write(commands.lookup_redirect(request_id, peer.broker_service_url, peer.broker_service_url_tls, True))

    async def _cluster_lookup(self, c: pb.CommandLookupTopic, started: float) -> None:
        """Cluster mode (TopicLookupBase.lookupTopicAsync): Connect to the bundle's owner, or Redirect to the broker
        that is to own it (or to the leader, which picks one). Failures are ServiceNotReady, a failing metadata store
        MetadataError (Pulsar's handleLookupError); clients retry both."""
        server = self.connection.server
        stats = self.service.lookup_stats
        listener_name = c.advertised_listener_name or None
        if server.listeners and not listener_name:
            internal = server.listener(None)
            listener_name = internal.name if internal is not None else None
        looking_up = False  # (the checks before the owner lookup are not counted, see LookupStats)

        def failed() -> None:
            if looking_up:
                stats.done(started, failed=True)
            else:
                stats.skipped()

        try:
            name = TopicName.parse(c.topic)
            await self.service.refresh_namespace(name)
            self._authorize(name, TopicOperation.LOOKUP)
            self.service.check_namespace(name)
            peer = self.service.peer_cluster(name)
            if peer is not None:
                self._redirect_to_peer(c.request_id, peer)
                return
            looking_up = True
            answer = await self.service.ownership.lookup(name, c.authoritative, listener_name)
        except BrokerError as exc:
            failed()
            self.write(commands.lookup_failed(c.request_id, exc.code, exc.message))
            return
        except MetadataStoreError as exc:  # (Pulsar's handleLookupError: a MetadataStoreException is MetadataError)
            failed()
            log.warning("lookup of %s failed: %r", c.topic, exc)
            self.write(commands.lookup_failed(c.request_id, E.MetadataError, f"Lookup failed: {exc}"))
            return
        except Exception as exc:  # (Pulsar's handleLookupError: any other failure is ServiceNotReady, retried)
            failed()
            log.warning("lookup of %s failed: %r", c.topic, exc)
            self.write(commands.lookup_failed(c.request_id, E.ServiceNotReady, f"Lookup failed: {exc}"))
            return
        except BaseException:
            failed()
            raise
        stats.done(started, redirect=answer.redirect)
        if answer.redirect:
            self.write(commands.lookup_redirect(c.request_id, answer.urls.url, answer.urls.url_tls,
                                                answer.authoritative))
        else:
            self.write(commands.lookup_connect(c.request_id, answer.urls.url or "", answer.urls.url_tls))

    def handle_partitioned_metadata(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        """Answered at once when nothing needs waiting for (the usual case: a client asks this before each producer
        and consumer); otherwise (a namespace to read from the metadata store, a partitioned topic to create) in a
        task."""
        c = cmd.partitionMetadata
        auto_create = c.metadata_auto_creation_enabled
        try:
            name = TopicName.parse(c.topic)
            self._authorize(name, TopicOperation.LOOKUP)
            known = self.service.partitions_now(name, auto_create)
        except BrokerError as exc:
            self.write(commands.partitioned_metadata_failed(c.request_id, exc.code, exc.message))
            return
        if known is not None:
            self._answer_partitions(c, name, known)
            return

        async def run() -> None:
            try:
                n = await self.service.partitions_for(name, auto_create=auto_create)
            except BrokerError as exc:
                self.write(commands.partitioned_metadata_failed(c.request_id, exc.code, exc.message))
                return
            except MetadataStoreError as exc:  # (as Pulsar's handlePartitionMetadataRequest answers it)
                log.warning("partitioned metadata of %s failed: %r", c.topic, exc)
                self.write(commands.partitioned_metadata_failed(c.request_id, E.MetadataError, str(exc)))
                return
            self._answer_partitions(c, name, n)

        self._spawn(run())

    def _answer_partitions(self, c: pb.CommandPartitionedTopicMetadata, name: TopicName, n: int) -> None:
        if n == 0 and not c.metadata_auto_creation_enabled and not self._topic_known(name):
            # PIP-344: the client asked not to create it, and it does not exist
            missing = TopicNotFoundError(f"Topic {name} does not exist")
            self.write(commands.partitioned_metadata_failed(c.request_id, missing.code, missing.message))
            return
        self.write(commands.partitioned_metadata(c.request_id, n))

    def _topic_known(self, name: TopicName) -> bool:
        """A topic that exists, or a partition of a partitioned topic declared with it."""
        if self.service.topic_exists(name):
            return True
        return name.partition_index >= 0 and self.service.metadata.partitions_of(name.base.full) > name.partition_index

    # -- producers ----------------------------------------------------------------------------------------------
    def handle_producer(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.producer
        existing = self.producers.get(c.producer_id)
        if existing is not None:
            self.write(commands.producer_success(c.request_id, existing.name,
                                                 existing.topic.last_sequence_id(existing.name),
                                                 existing.schema_version, existing.topic_epoch))
            return
        if c.producer_id in self._pending_producers:
            self.write(commands.error(c.request_id, E.ServiceNotReady,
                                      "Producer is already present on the connection"))
            return
        self._pending_producers[c.producer_id] = c
        self._spawn(self._create_producer(c))

    async def _create_producer(self, c: pb.CommandProducer) -> None:
        try:
            name = TopicName.parse(c.topic)
            self._authorize(name, TopicOperation.PRODUCE)
            self.service.check_cluster_serves(name)
            topic = await self.service.get_topic(name, create=True)
            # (c.txn_enabled asks Pulsar to wait for the topic's transaction buffer to recover: ours has
            # recovered when the topic is loaded; its first transactional SEND takes its first snapshot.)
            if topic.encryption_required and not c.encrypted:
                raise MetadataError(f"Encryption is required in {name}")
            schema_version = b""
            schemas = self.service.schemas
            if c.HasField("schema"):
                may_add = self.service.policies.for_namespace(name.namespace, ALLOW_AUTO_UPDATE_SCHEMA)
                schema_version = encode_version(await schemas.add_or_get(name.base.full, c.schema, may_add))
            elif self.service.policies.get(name, SCHEMA_VALIDATION_ENFORCED) and schemas.has_schema(name.base.full):
                raise IncompatibleSchemaError("Producers cannot connect or send message without a schema to topics "
                                              "with a schema if SchemaValidationEnforced is enabled")
            generated = not (c.HasField("producer_name") and c.producer_name)
            producer_name = self.service.generate_producer_name() if generated else c.producer_name
            producer = Producer(
                self, topic, c.producer_id, producer_name,
                is_generated_name=generated or not c.user_provided_producer_name,
                access_mode=c.producer_access_mode, epoch=c.epoch,
                metadata={kv.key: kv.value for kv in c.metadata}, schema_version=schema_version,
            )
            if c.HasField("initial_subscription_name") and c.initial_subscription_name:
                try:
                    await topic.get_or_create_subscription(c.initial_subscription_name, True,
                                                           pb.CommandSubscribe.Earliest, None)
                except SubscriptionNotFoundError as exc:  # auto subscription creation is off
                    raise NotAllowedError("Could not create the initial subscription "
                                          f"{c.initial_subscription_name}: auto subscription creation "
                                          "is not allowed") from exc
            if self.connection.closed:
                return
            if self._pending_producers.get(c.producer_id) is not c:  # (closed while pending; as Pulsar answers it)
                self.write(commands.error(c.request_id, E.UnknownError, "Closed producer before creation was complete"))
                return
            try:
                ready = topic.add_producer(producer, c.request_id)
            except ProducerNameTakenError as exc:
                # (Pulsar's connection liveness check: a holder whose connection is dead is closed, then the
                # name is free)
                if await exc.holder.check_liveness() is not False:
                    raise
                if self.connection.closed or self._pending_producers.get(c.producer_id) is not c:
                    return
                ready = topic.add_producer(producer, c.request_id)
            self.producers[c.producer_id] = producer
            self.write(commands.producer_success(c.request_id, producer.name,
                                                 topic.last_sequence_id(producer.name), schema_version,
                                                 producer.topic_epoch, producer_ready=ready))
        except BrokerError as exc:
            self.write(commands.error(c.request_id, exc.code, exc.message))
        except Exception as exc:
            log.exception("failed to create producer on %s", c.topic)
            self.write(commands.error(c.request_id, E.UnknownError, f"Failed to create producer: {exc}"))
        finally:
            if self._pending_producers.get(c.producer_id) is c:
                del self._pending_producers[c.producer_id]

    def handle_send(self, c: SendCommand, payload: bytes | None) -> None:
        """A SEND (connection.py reads it with ``next_frame_or_send``): checked, then queued on
        its producer for the read's ``flush_sends``."""
        producer = self.producers.get(c.producer_id)
        if producer is None:
            if c.producer_id in self._closed_producer_ids:
                return  # in flight when we closed it; the client resends after reconnecting
            raise ProtocolError(f"SEND for producer {c.producer_id} that is not ready")
        seq = c.sequence_id
        if payload is None:
            self.write(commands.send_error(c.producer_id, seq, E.MetadataError, "Message has no payload"))
            return
        txn: TxnID | None = None
        if c.txn is not None:
            try:
                txn = self._txn_send_allowed(producer, TxnID(*c.txn))
            except BrokerError as exc:
                self.write(commands.send_error(c.producer_id, seq, exc.code, exc.message))
                return
        if producer.state is _WAITING:
            self.write(commands.send_error(c.producer_id, seq, E.PersistenceError, "Producer is not ready"))
            return
        try:
            checks = check_send_payload(payload)
        except ProtocolError as exc:
            self.write(commands.send_error(c.producer_id, seq, E.MetadataError, str(exc)))
            return
        highest = c.highest_sequence_id if c.highest_sequence_id is not None else seq
        refusal = self._refusal(seq, highest, c.is_chunk, payload, checks, producer.topic.send_policy)
        if refusal is not None:
            self.write(commands.send_error(c.producer_id, seq, *refusal))
            return
        if txn is not None and not checks.has_txn:
            # The Go client puts the transaction in CommandSend only; dispatch and recovery read it
            # from the stored metadata, so the broker writes it there (Java sends both already).
            md = parse_payload(payload, verify=False).metadata
            md.txnid_most_bits, md.txnid_least_bits = txn
            payload = build_entry(md.SerializeToString(), entry_body(payload))
        self.connection.sends_started(1, len(payload))
        if producer.publish(seq, highest, c.num_messages, payload, checks.last_chunk, txn):
            self.open_batches.append(producer)
        self._queued_sends += 1
        if self._queued_sends >= SENDS_PER_APPEND:
            self.flush_sends()

    def handle_send_run(self, producer_id: int, sends: list[RunSend], last: bool = False) -> None:
        """SENDs one producer sent in a row (connection.py reads them with ``next_send_run``: no
        transaction, no chunk, each with a payload): each checked as ``handle_send`` checks one,
        with what is the producer's (its lookup, state and send policy) read once for the run, and
        the accepted ones accounted and queued at once. ``last``: the run ends the read; when all
        its SENDs are plain and nothing was queued before it, it is stored at once
        (``Producer.store_run``) rather than queued for ``flush_sends``, which would store it next,
        alone and unchanged. (Not a run with more of the read after it: the same producer's next
        run in the read would then be a second append.)"""
        producer = self.producers.get(producer_id)
        if producer is None:
            if producer_id in self._closed_producer_ids:
                return  # in flight when we closed it; the client resends after reconnecting
            raise ProtocolError(f"SEND for producer {producer_id} that is not ready")
        if producer.state is _WAITING:
            self.connection.write_many([commands.send_error(producer_id, send[0], E.PersistenceError,
                                                            "Producer is not ready") for send in sends])
            return
        policy = producer.topic.send_policy
        max_size = self._max_payload
        if policy.max_message_size:
            max_size = min(max_size, policy.max_message_size + ENTRY_OVERHEAD)
        # The plain SENDs at the head of the run (the common case: all of them) need no further
        # look, unless encryption is required (then each is looked at).
        payloads = [send[3] for send in sends]
        plain = 0 if policy.encryption_required else plain_send_payloads(payloads, max_size)
        if plain == len(sends):
            nbytes = sum(map(len, payloads))
            if last and not self.open_batches and producer.can_store_at_once():
                self.connection.sends_started(len(sends), nbytes)
                producer.store_run(sends, payloads, nbytes)
                return
            queued: list[QueuedSend] = [(seq, highest, n, payload, True, None) for seq, highest, n, payload in sends]
        else:
            queued, nbytes = self._check_sends(producer_id, sends, plain, policy)
            if not queued:
                return
        self.connection.sends_started(len(queued), nbytes)
        if producer.publish_many(queued):
            self.open_batches.append(producer)
        self._queued_sends += len(queued)
        if self._queued_sends >= SENDS_PER_APPEND:
            self.flush_sends()

    def _check_sends(self, producer_id: int, sends: list[RunSend], plain: int,
                     policy: SendPolicy) -> tuple[list[QueuedSend], int]:
        """A run's SENDs (the first ``plain`` known plain) checked one by one: those to store and
        their bytes; each refused one answered with its SendError, in order."""
        queued: list[QueuedSend] = []
        nbytes = 0
        for i, (seq, highest, num_messages, payload) in enumerate(sends):
            if i < plain:
                queued.append((seq, highest, num_messages, payload, True, None))
                nbytes += len(payload)
                continue
            try:
                checks = check_send_payload(payload)
            except ProtocolError as exc:
                self.write(commands.send_error(producer_id, seq, E.MetadataError, str(exc)))
                continue
            refusal = self._refusal(seq, highest, False, payload, checks, policy)
            if refusal is not None:
                self.write(commands.send_error(producer_id, seq, *refusal))
                continue
            queued.append((seq, highest, num_messages, payload, checks.last_chunk, None))
            nbytes += len(payload)
        return queued, nbytes

    def _refusal(self, seq: int, highest: int, is_chunk: bool, payload: bytes, checks: SendChecks,
                 policy: SendPolicy) -> tuple[int, str] | None:
        """The SendError (code, message) a SEND's checks refuse it with, the first in Pulsar's order,
        or None when it may be stored."""
        if not checks.checksum_ok:
            return E.ChecksumError, "Checksum failed on the broker"
        # Chunks are exempt (as in Pulsar): the frame limit already bounds them.
        if not is_chunk and len(payload) > self._max_payload:
            return E.NotAllowedError, "Exceed maximum message size"
        if highest < seq:
            return E.MetadataError, "Invalid lowest or highest sequence id"
        if policy.max_message_size and not is_chunk and len(payload) > policy.max_message_size + ENTRY_OVERHEAD:
            return E.NotAllowedError, "Exceed maximum message size"
        if policy.encryption_required and not checks.encrypted:
            return E.MetadataError, "Messages must be encrypted"
        if (policy.max_delivery_delay_ms and checks.delivery_delay is not None
                and checks.delivery_delay > policy.max_delivery_delay_ms):
            return (E.NotAllowedError,
                    f"Exceeds max allowed delivery delay of {policy.max_delivery_delay_ms} milliseconds")
        return None

    def _txn_send_allowed(self, producer: Producer, txn: TxnID) -> TxnID:
        if self.service.transactions is None:
            raise NotAllowedError("Transactions are not enabled.")

        def persistent(topic: PersistentTopic) -> None:
            topic.txn_buffer.check_append(txn)

        def non_persistent(topic: NonPersistentTopic) -> None:
            raise NotAllowedError("Transactions are not supported on non-persistent topics")

        producer.topic.match_kind(persistent, non_persistent)
        return txn

    @property
    def sends_before_flush(self) -> int:
        """SENDs that may still be queued before they go to storage (at most SENDS_PER_APPEND)."""
        return SENDS_PER_APPEND - self._queued_sends

    def flush_sends(self) -> None:
        """Store the SENDs queued since the last flush, one batch per producer (connection.py
        calls this after routing a read's frames, and before any command other than SEND;
        handle_send every SENDS_PER_APPEND SENDs)."""
        batches, self.open_batches = self.open_batches, []
        self._queued_sends = 0
        for producer in batches:
            producer.flush()

    def sends_finished(self, count: int, nbytes: int) -> None:
        self.connection.sends_finished(count, nbytes)

    def set_rate_throttled(self, delta: int, throttle: ConnectionThrottle) -> None:
        if delta > 0:
            self._held_by.add(throttle)
        else:
            self._held_by.discard(throttle)
        self.connection.set_rate_throttled(delta)

    def handle_close_producer(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.close_producer
        producer = self.producers.pop(c.producer_id, None)
        if producer is not None:
            producer.topic.remove_producer(producer)
        else:
            self._pending_producers.pop(c.producer_id, None)  # its creation is abandoned when it completes
        self.write(commands.success(c.request_id))

    # -- consumers ------------------------------------------------------------------------------------------------
    def handle_subscribe(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.subscribe
        if c.consumer_id in self.consumers:
            self.write(commands.success(c.request_id))
            return
        if c.consumer_id in self._pending_consumers:
            if self._pending_consumers[c.consumer_id]:  # (closed while pending: Pulsar's failed future)
                self.write(commands.error(c.request_id, E.UnknownError,
                                          "Consumer that failed is already present on the connection"))
            else:
                self.write(commands.error(c.request_id, E.ServiceNotReady,
                                          "Consumer is already present on the connection"))
            return
        self._pending_consumers[c.consumer_id] = False
        self._spawn(self._subscribe(c))

    async def _subscribe(self, c: pb.CommandSubscribe) -> None:
        try:
            name = TopicName.parse(c.topic)
            self._authorize(name, TopicOperation.CONSUME, c.subscription)
            if c.read_compacted and not name.persistent:
                raise NotAllowedError("readCompacted only valid on persistent topics")  # NonPersistentTopic's words
            if c.read_compacted and c.subType not in (pb.CommandSubscribe.Exclusive, pb.CommandSubscribe.Failover):
                raise NotAllowedError("readCompacted only allowed on failover or exclusive subscriptions")
            self.service.check_cluster_serves(name)
            topic = await self.service.get_topic(name, create=c.force_topic_creation)
            self._check_subscription_type(name, c.subType)
            if name.persistent and blank(c.subscription):
                # (PersistentTopic.internalSubscribe's StringUtils.isBlank -> NamingException: ProducerBusy; a
                # non-persistent topic takes it)
                raise ProducerBusyError("Empty subscription name")
            check_subscription_name(c.subscription)
            host = self.remote_address.rsplit(":", 1)[0]
            if not topic.subscribe_permitted((host, c.consumer_name, c.consumer_id)):
                raise NotAllowedError("Subscribe limited by subscribe rate limit per consumer.")
            if c.HasField("schema"):
                may_add = self.service.policies.for_namespace(name.namespace, ALLOW_AUTO_UPDATE_SCHEMA)
                await self.service.schemas.check_consumer(name.base.full, c.schema, topic.in_use_for_schema, may_add)
            start = c.start_message_id if c.HasField("start_message_id") else None
            properties = {kv.key: kv.value for kv in c.subscription_properties}
            sub = await topic.get_or_create_subscription(c.subscription, c.durable, c.initialPosition, start,
                                                         properties)
            if properties and not sub.subscription_properties and not sub.consumers:
                await sub.set_subscription_properties(properties)
            consumer = Consumer(
                self, c.consumer_id, c.consumer_name, c.subType, c.priority_level, sub,
                name.partition_index, {kv.key: kv.value for kv in c.metadata},
                key_shared_meta=c.keySharedMeta if c.HasField("keySharedMeta") else None,
            )
            if self.connection.closed or self._pending_consumers.get(c.consumer_id):
                sub.drop_if_unused()
                return
            consumer.read_compacted = c.read_compacted
            consumer.read_compacted_from_earliest = c.read_compacted and start is not None and (
                commands.from_u64(start.ledgerId), commands.from_u64(start.entryId)) == (-1, -1)
            consumer.auto_consume = c.HasField("schema") and c.schema.type == pb.Schema.AutoConsume
            try:
                sub.add_consumer(consumer)
            except (ExclusiveConsumerBusyError, HashRangeTakenError) as exc:  # (as for a producer name, above)
                if await exc.holder.check_liveness() is not False:
                    raise
                if self.connection.closed or self._pending_consumers.get(c.consumer_id):
                    sub.drop_if_unused()
                    return
                sub.add_consumer(consumer)
            if c.replicate_subscription_state and self.service.config.enableReplicatedSubscriptions:
                sub.set_replicated()
            self.consumers[c.consumer_id] = consumer
            self.write(commands.success(c.request_id))
        except BrokerError as exc:
            self.write(commands.error(c.request_id, exc.code, exc.message))
        except Exception as exc:
            log.exception("failed to subscribe to %s", c.topic)
            self.write(commands.error(c.request_id, E.UnknownError, f"Failed to subscribe: {exc}"))
        finally:
            self._pending_consumers.pop(c.consumer_id, None)

    def _check_subscription_type(self, name: TopicName, sub_type: int) -> None:
        """subscriptionKeySharedEnable and subscriptionTypesEnabled (broker, namespace, topic)."""
        type_name = pb.CommandSubscribe.SubType.Name(sub_type)
        if sub_type == pb.CommandSubscribe.Key_Shared and not self.service.config.subscriptionKeySharedEnable:
            raise NotAllowedError("Key_Shared subscription is disabled by broker.")
        enabled = self.service.policies.get(name, SUBSCRIPTION_TYPES_ENABLED)
        if not is_system_topic(name.full) and type_name not in enabled:
            raise NotAllowedError(f"Topic[{{{name.full}}}] doesn't support {type_name} sub type!")

    def handle_flow(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.flow
        if c.messagePermits <= 0:
            raise ProtocolError("FLOW with no permits")
        consumer = self.consumers.get(c.consumer_id)
        if consumer is None:
            return
        consumer.last_flow = time.time()
        d = consumer.subscription.dispatcher
        if d is not None:
            d.flow(consumer, c.messagePermits)

    def _consumer_or_error(self, consumer_id: int, request_id: int) -> Consumer | None:
        """The consumer, or None after answering the request with Pulsar's "Consumer not found"."""
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            self.write(commands.error(request_id, E.MetadataError, "Consumer not found"))
        return consumer

    def handle_ack(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.ack
        has_request = c.HasField("request_id")
        consumer = self.consumers.get(c.consumer_id)
        if consumer is None:
            if has_request:
                self.write(commands.ack_response(c.consumer_id, c.request_id, E.ConsumerNotFound,
                                                 "Consumer not found"))
            return
        if c.HasField("txnid_most_bits") or c.HasField("txnid_least_bits"):
            self._ack_in_txn(consumer, c)
            return
        if c.HasField("validation_error"):
            log.warning("consumer %s discarded a message: %s", consumer.name,
                        pb.CommandAck.ValidationError.Name(c.validation_error))
        try:
            consumer.subscription.acknowledge(consumer, c.ack_type == pb.CommandAck.Cumulative, c.message_id)
        except ManagedLedgerError as exc:  # (a cumulative ack past the last entry, say: the cursor refuses it)
            log.warning("consumer %s: acknowledgement refused: %s", consumer.name, exc)
            if has_request:
                self.write(commands.ack_response(c.consumer_id, c.request_id, E.PersistenceError, str(exc)))
            return
        if has_request:
            self.write(commands.ack_response(c.consumer_id, c.request_id))

    def _ack_in_txn(self, consumer: Consumer, c: pb.CommandAck) -> None:
        txn = TxnID(c.txnid_most_bits, c.txnid_least_bits)
        reply_to = c.request_id if c.HasField("request_id") else None

        def answer(code: int | None = None, message: str = "") -> None:
            if reply_to is not None:
                self.write(commands.ack_response(c.consumer_id, reply_to, code, message, txn=txn))

        if self.service.transactions is None:
            answer(E.NotAllowedError, "Transactions are not enabled.")
            return

        async def run() -> None:
            try:
                await consumer.subscription.acknowledge_in_txn(
                    consumer, txn, c.ack_type == pb.CommandAck.Cumulative, list(c.message_id))
            except BrokerError as exc:
                answer(exc.code, exc.message)
                return
            except Exception as exc:
                log.exception("transactional ack on %s failed", consumer.subscription.name)
                answer(E.UnknownError, f"Failed to acknowledge in transaction {txn}: {exc}")
                return
            answer()

        self._spawn(run())

    def handle_redeliver(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.redeliverUnacknowledgedMessages
        consumer = self.consumers.get(c.consumer_id)
        if consumer is None:
            return
        positions = [position_of(m) for m in c.message_ids]
        consumer.subscription.redeliver(consumer, positions or None)

    def handle_unsubscribe(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.unsubscribe
        consumer = self._consumer_or_error(c.consumer_id, c.request_id)
        if consumer is None:
            return

        async def run() -> None:
            if self.consumers.get(c.consumer_id) is not consumer:
                # (a second UNSUBSCRIBE while the first runs: the consumer is gone, as Pulsar's Consumer.close
                # takes it off the connection before the subscription is deleted)
                raise MetadataError("Consumer not found")
            sub = consumer.subscription
            if any(other is not consumer for other in sub.consumers):
                # (MetadataError: Pulsar 4.0.7's code here, so clients raise what they raise against it)
                raise MetadataError("Subscription has other connected consumers")
            del self.consumers[c.consumer_id]
            sub.remove_consumer(consumer)
            await sub.unsubscribed()
            self.write(commands.success(c.request_id))

        self._spawn(self._guard(c.request_id, run(), "Failed to unsubscribe"))

    def handle_close_consumer(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.close_consumer
        consumer = self.consumers.pop(c.consumer_id, None)
        if consumer is not None:
            consumer.subscription.remove_consumer(consumer)
        elif c.consumer_id in self._pending_consumers:
            self._pending_consumers[c.consumer_id] = True  # its creation is abandoned when it completes
        self.write(commands.success(c.request_id))

    def handle_seek(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.seek
        consumer = self._consumer_or_error(c.consumer_id, c.request_id)
        if consumer is None:
            return
        if not c.HasField("message_id") and not c.HasField("message_publish_time"):
            self.write(commands.error(c.request_id, E.MetadataError,
                                      "Message id and message publish time were not present"))
            return
        sub = consumer.subscription

        async def run() -> None:
            try:
                await sub.seek(c.message_id if c.HasField("message_id") else None, c.message_publish_time)
            except ManagedLedgerError as exc:
                # (the storage refused, e.g. the cursor closed by an unload while the position by time was looked
                # for: Pulsar's handleSeek answers any failure so, logged as a warning)
                log.warning("consumer %s: failed to reset subscription %s: %s", consumer.name, sub.name, exc)
                self.write(commands.error(c.request_id, E.UnknownError, f"Error when resetting subscription: {exc}"))
                return
            self.write(commands.success(c.request_id))

        self._spawn(self._guard(c.request_id, run(), "Error when resetting subscription"))

    async def _guard(self, request_id: int, coro: Coroutine[Any, Any, None], what: str) -> None:
        try:
            await coro
        except BrokerError as exc:
            self.write(commands.error(request_id, exc.code, exc.message))
        except Exception as exc:
            log.exception("%s", what)
            self.write(commands.error(request_id, E.UnknownError, f"{what}: {exc}"))

    def handle_get_last_message_id(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.getLastMessageId
        consumer = self._consumer_or_error(c.consumer_id, c.request_id)
        if consumer is None:
            return

        async def run() -> None:
            sub = consumer.subscription
            last, batch_index = await sub.topic.last_message_id(compacted=consumer.read_compacted)
            partition = sub.topic.name.partition_index
            last_id = commands.message_id(last.ledger_id, last.entry_id, -1, -1)
            last_id.partition = partition
            last_id.batch_index = batch_index
            md = sub.last_mark_delete
            mark = (md.ledger_id, md.entry_id) if md is not None else None
            self.write(commands.get_last_message_id_response(c.request_id, last_id, mark))

        self._spawn(self._guard(c.request_id, run(), "Failed to get last message id"))

    def _may_list_topics(self, request_id: int, namespace: str) -> bool:
        """Whether this connection may list (or watch) the topics of ``namespace``; if not, the error is sent. A
        namespace that does not exist has no topics (Pulsar 4.0.7 answers an empty list: a pattern consumer
        finds the topics once it is made)."""
        # (Pulsar's namespace operation GET_TOPICS: consume or produce granted on the namespace)
        if not self.security.authorization.allows_namespace_proxied(namespace, self.auth.role,
                                                                    self.auth.original_principal, NAMESPACE_LOOKUP):
            who = f"Role {self.auth.role!r}"
            if self.auth.original_principal:  # (a proxy: either of the two may be the one refused)
                who += f" acting for {self.auth.original_principal!r}"
            self.write(commands.error(request_id, E.AuthorizationError,
                                      f"{who} is not authorized to list the topics of {namespace}"))
            return False
        if not is_namespace_name(namespace):  # (Pulsar 4.0.7 closes the connection on it)
            self.write(commands.error(request_id, E.InvalidTopicName, f"Invalid namespace name {namespace!r}"))
            return False
        return True

    def handle_get_topics_of_namespace(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.getTopicsOfNamespace
        if not self._may_list_topics(c.request_id, c.namespace):
            return
        topics = self.service.topics_of_namespace(c.namespace, c.mode)
        digest = topics_hash(topics)
        if c.HasField("topics_hash") and c.topics_hash == digest:
            self.write(commands.topics_of_namespace(c.request_id, [], digest, changed=False))
        else:
            self.write(commands.topics_of_namespace(c.request_id, topics, digest, changed=True))

    def handle_watch_topic_list(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        """PIP-145: the topics of a namespace matching a pattern now, then pushes as they change."""
        c = cmd.watchTopicList
        if not self._may_list_topics(c.request_id, c.namespace):
            return
        try:
            pattern = compile_pattern(c.topics_pattern)
        except re.error as exc:
            self.write(commands.error(c.request_id, E.InvalidTopicName, f"Invalid topics pattern: {exc}"))
            return
        topics = self.topic_watchers.add(c.watcher_id, c.namespace, pattern)
        digest = topics_hash(topics)
        unchanged = c.HasField("topics_hash") and c.topics_hash == digest
        self.write(commands.watch_topic_list_success(c.request_id, c.watcher_id, [] if unchanged else topics, digest))
        if not self._watching:
            self._watching = True
            self._spawn(self._run_topic_watchers())

    async def _run_topic_watchers(self) -> None:
        try:
            await self.topic_watchers.run()
        finally:
            self._watching = False

    def handle_watch_topic_list_close(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.watchTopicListClose
        self.topic_watchers.remove(c.watcher_id)
        self.write(commands.success(c.request_id))

    def handle_get_schema(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.getSchema
        try:
            name = TopicName.parse(c.topic)
            self._authorize(name, TopicOperation.LOOKUP)
            base = name.base.full
        except BrokerError as exc:
            self.write(commands.get_schema_error(c.request_id, exc.code, exc.message))
            return
        version: int | None = None
        if c.HasField("schema_version"):
            version = decode_version(c.schema_version)
            if version is None:
                self.write(commands.get_schema_error(c.request_id, E.IncompatibleSchema, "Empty schema version"))
                return
        found = self.service.schemas.get(base, version)
        if found is None:
            self.write(commands.get_schema_error(c.request_id, E.TopicNotFound, "Topic not found or no-schema"))
            return
        record, v = found
        schema = to_proto(record)
        schema.name = name.schema_name  # (as Pulsar's answer: the schema's id, whatever name it was stored with)
        self.write(commands.get_schema_response(c.request_id, schema, encode_version(v)))

    def handle_get_or_create_schema(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.getOrCreateSchema
        self._spawn(self._get_or_create_schema(c))

    async def _get_or_create_schema(self, c: pb.CommandGetOrCreateSchema) -> None:
        reply = pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA_RESPONSE)
        r = reply.getOrCreateSchemaResponse
        r.request_id = c.request_id
        try:
            name = TopicName.parse(c.topic)
            self._authorize(name, TopicOperation.PRODUCE)
            base = name.base.full
            if not (self.service.topic_exists(name) or self.service.metadata.partitions_of(name.full) > 0):
                raise TopicNotFoundError(f"Topic not found {name}")  # (as Pulsar: nothing is registered)
            may_add = self.service.policies.for_namespace(name.namespace, ALLOW_AUTO_UPDATE_SCHEMA)
            r.schema_version = encode_version(await self.service.schemas.add_or_get(base, c.schema, may_add))
        except (BrokerError, IncompatibleSchemaError) as exc:
            r.error_code = exc.code  # type: ignore[assignment]
            r.error_message = exc.message
        except Exception as exc:  # (answered all the same: the client waits for it)
            log.exception("get-or-create schema on %s failed", c.topic)
            r.error_code = E.UnknownError
            r.error_message = f"Failed to add schema: {exc}"
        self.write(commands.frame(reply))

    def handle_consumer_stats(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        c = cmd.consumerStats
        consumer = self.consumers.get(c.consumer_id)
        if consumer is None:
            self.write(commands.consumer_stats_error(c.request_id, E.ConsumerNotFound,
                                                     f"Consumer {c.consumer_id} not found"))
            return
        sub = consumer.subscription
        self.write(commands.consumer_stats_response(
            c.request_id,
            consumerName=consumer.name,
            availablePermits=max(consumer.permits, 0),
            unackedMessages=consumer.unacked_messages,
            blockedConsumerOnUnackedMsgs=consumer.blocked,
            address=client_address(consumer.cnx.remote_address),
            connectedSince=iso_time(consumer.connected_since),
            type=consumer.sub_type_name,
            msgBacklog=sub.backlog,
            msgRateOut=0.0, msgThroughputOut=0.0, msgRateRedeliver=0.0, msgRateExpired=0.0, messageAckRate=0.0,
        ))

    def handle_txn(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        """Any transaction command while transactionCoordinatorEnabled=false (Pulsar's answer)."""
        request_id = getattr(command_body(cmd), "request_id", 0)
        self.write(commands.error(request_id, E.NotAllowedError, "Transactions are not enabled."))


def topics_hash(topics: list[str]) -> str:
    """CRC32C of the sorted names joined by ',', as 8 hex digits of its little-endian bytes."""
    value = crc32c(",".join(sorted(topics)).encode())
    return value.to_bytes(4, "little").hex()


@functools.lru_cache(maxsize=64)
def names_loopback(url: str) -> bool:
    """Whether a pulsar:// URL's host is a loopback address (an IP literal, or ``localhost``; no name is resolved)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
