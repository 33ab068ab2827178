"""Broker errors, typed by who is at fault, each carrying the wire ServerError it maps to.

The C++ client decides from the code alone whether to retry (PROTOCOL.md section 20): codes in
``_RETRYABLE`` make it back off and retry until its operation timeout; the others fail the
operation at once. Pick the class by what the client should do, not by where the error arose.
"""

from __future__ import annotations

from typing import Protocol

from broker.protocol import pulsar_api_pb2 as pb

E = pb.ServerError

_RETRYABLE = frozenset({
    E.ServiceNotReady, E.UnknownError, E.MetadataError, E.PersistenceError, E.SubscriptionNotFound,
    E.ConsumerNotFound, E.UnsupportedVersionError, E.InvalidTopicName,
})


class BrokerError(Exception):
    """Base: an operation failed in a way the client is told about with ``code``."""

    code: int = E.UnknownError

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)

    @property
    def retryable(self) -> bool:
        return self.code in _RETRYABLE


# -- the client asked for something that is not allowed or does not exist (client's fault) --------

class InvalidTopicNameError(BrokerError):
    code = E.InvalidTopicName


class TopicNotFoundError(BrokerError):
    code = E.TopicNotFound


class SubscriptionNotFoundError(BrokerError):
    code = E.SubscriptionNotFound


class ConsumerNotFoundError(BrokerError):
    code = E.ConsumerNotFound


class NotAllowedError(BrokerError):
    code = E.NotAllowedError


class UnsupportedOperationError(BrokerError):
    """What this kind of topic cannot do where Pulsar answers UnknownError (its
    UnsupportedOperationException): GetLastMessageId on a non-persistent topic. The client fails the
    call at once."""
    code = E.UnknownError


class TooManySubscriptionsError(NotAllowedError):
    """maxSubscriptionsPerTopic reached (NotAllowedError on the wire, 412 over REST)."""


class AuthenticationError(BrokerError):
    """The client's credentials were refused or missing (HTTP 401). ``reason`` is the refusing
    provider's code, as Pulsar labels pulsar_authentication_failures_total (e.g. INVALID_TOKEN)."""

    code = E.AuthenticationError

    def __init__(self, message: str, reason: str = "UNKNOWN") -> None:
        super().__init__(message)
        self.reason = reason


class AuthorizationError(BrokerError):
    """The authenticated role may not do this (HTTP 403)."""

    code = E.AuthorizationError


class MetadataError(BrokerError):
    code = E.MetadataError


class IncompatibleSchemaError(BrokerError):
    code = E.IncompatibleSchema


class InvalidSchemaDefinitionError(IncompatibleSchemaError):
    """A schema whose definition does not parse (an AVRO or JSON schema that is not one): refused before it is
    stored, or it would stand as the topic's first version and refuse every valid one after it."""


class ConsumerAssignError(BrokerError):
    code = E.ConsumerAssignError


# -- conflicts with other clients --------------------------------------------------------------------

class ConsumerBusyError(BrokerError):
    code = E.ConsumerBusy


class ProducerBusyError(BrokerError):
    code = E.ProducerBusy


class Holder(Protocol):
    """The connection handler of the producer or consumer that holds what a newcomer asked for."""

    async def check_liveness(self) -> bool | None:
        """False: it did not answer (it is closed, what it held released); True or None (no check): it stands."""


class ProducerNameTakenError(ProducerBusyError):
    """A producer of that name is connected on another connection (``holder``'s)."""

    def __init__(self, message: str, holder: Holder) -> None:
        super().__init__(message)
        self.holder = holder


class ExclusiveConsumerBusyError(ConsumerBusyError):
    """The Exclusive subscription's consumer is connected on ``holder``'s connection."""

    def __init__(self, message: str, holder: Holder) -> None:
        super().__init__(message)
        self.holder = holder


class HashRangeTakenError(ConsumerAssignError):
    """A STICKY Key_Shared consumer's hash range overlaps one held by a consumer on ``holder``'s connection."""

    def __init__(self, message: str, holder: Holder) -> None:
        super().__init__(message)
        self.holder = holder


class ProducerFencedError(BrokerError):
    code = E.ProducerFenced


class TopicTerminatedError(BrokerError):
    code = E.TopicTerminatedError


class ProducerBlockedQuotaExceededError(BrokerError):
    """Backlog quota, producer_request_hold: the client keeps retrying the producer until the
    backlog shrinks."""

    code = E.ProducerBlockedQuotaExceededError


class ProducerBlockedQuotaExceededException(BrokerError):
    """Backlog quota, producer_exception: the client fails the producer and its pending sends."""

    code = E.ProducerBlockedQuotaExceededException


# -- transactions (PIP-31): the client's transaction is unknown, ended, or in another's way ---------

class TransactionCoordinatorNotFoundError(BrokerError):
    code = E.TransactionCoordinatorNotFound


class TransactionNotFoundError(BrokerError):
    code = E.TransactionNotFound


class InvalidTxnStatusError(BrokerError):
    code = E.InvalidTxnStatus


class TransactionConflictError(BrokerError):
    code = E.TransactionConflict


# -- the broker cannot serve right now (broker's fault, client retries) ------------------------------

class ServiceNotReadyError(BrokerError):
    code = E.ServiceNotReady


class PersistenceError(BrokerError):
    code = E.PersistenceError


class ChecksumError(BrokerError):
    code = E.ChecksumError
