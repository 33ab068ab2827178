"""The one subscription protocol both topic kinds meet.

A persistent subscription (subscription.py: a cursor, acks, redelivery, seek) and a
non-persistent one (nonpersistent.py: nothing stored) answer the same calls, so the command
router (server_cnx.py) and the admin layer never ask which kind they hold. What has no meaning
for a kind gets its neutral answer there: acks and seek do nothing on a non-persistent
subscription (Pulsar answers success), ``msg_dropped`` is 0 on a persistent one, and so on.

Topics share ``AbstractTopic`` (abstract_topic.py). Output that differs by kind in shape, such
as Pulsar's TopicStats and NonPersistentTopicStats, goes through ``AbstractTopic.match_kind``:
the one typed branch point, exhaustive over the two kinds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from broker.dispatch.base import Dispatcher
    from broker.dispatch.nonpersistent import NonPersistentDispatcher
    from broker.protocol import pulsar_api_pb2 as pb
    from broker.service.abstract_topic import AbstractTopic
    from broker.service.consumer import Consumer, DepartedOut
    from broker.transactions.model import TxnID
    from managed_ledger import Position


class AnySubscription(Protocol):
    """A subscription of either topic kind, as the router and the admin layer use it."""

    sub_type: int | None
    # Acknowledgements received (the stats' messageAckRate); always 0 where nothing is acked.
    msg_ack_counter: int
    # Out counters of the consumers that have left (stats stay cumulative).
    departed: DepartedOut

    @property
    def subscription_properties(self) -> Mapping[str, str]:
        """Set by the SUBSCRIBE that created the subscription (immutable for later consumers), or over REST;
        stored with a persistent subscription's cursor (Pulsar's cursorProperties)."""
        ...

    async def set_subscription_properties(self, properties: Mapping[str, str]) -> None: ...

    @property
    def name(self) -> str: ...
    @property
    def durable(self) -> bool: ...
    @property
    def topic(self) -> AbstractTopic: ...
    @property
    def dispatcher(self) -> Dispatcher | NonPersistentDispatcher | None: ...
    @property
    def consumers(self) -> list[Consumer]: ...
    @property
    def backlog(self) -> int: ...
    @property
    def replicated(self) -> bool: ...
    @property
    def msg_dropped(self) -> int:
        """Messages no consumer could take (non-persistent); 0 for a persistent subscription."""
        ...
    @property
    def last_mark_delete(self) -> Position | None:
        """The mark-delete position (GetLastMessageId's answer); None when there is none."""
        ...

    def type_name(self) -> str: ...

    def add_consumer(self, consumer: Consumer) -> None: ...
    def remove_consumer(self, consumer: Consumer) -> None: ...
    def drop_if_unused(self) -> None: ...
    def disconnect_consumers(self) -> None: ...
    def close(self) -> None: ...

    def set_replicated(self, enabled: bool = True) -> bool:
        """Make the subscription replicated (or not); False when it cannot be."""
        ...

    def acknowledge(self, consumer: Consumer, cumulative: bool, message_ids: Sequence[pb.MessageIdData]) -> None:
        """An ACK command's message ids (with their batch ack sets)."""
        ...

    async def acknowledge_in_txn(self, consumer: Consumer, txn: TxnID, cumulative: bool,
                                 message_ids: Sequence[pb.MessageIdData]) -> None:
        """An ACK with a transaction id (NotAllowedError where there are no transactions)."""
        ...

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None: ...

    async def seek(self, message_id: pb.MessageIdData | None, publish_time: int) -> None:
        """SEEK to a message id, else to the first message published at or after ``publish_time``."""
        ...

    async def unsubscribed(self) -> None:
        """Its last consumer unsubscribed and was removed: delete what is kept of the subscription."""
        ...
