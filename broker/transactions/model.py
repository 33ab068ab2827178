"""The transaction id and the life of a transaction as the coordinator sees it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

from broker.errors import InvalidTxnStatusError
from managed_ledger import Position

# The transaction coordinators' assignment topic: partition i is coordinator i (Pulsar's
# SystemTopicNames.TRANSACTION_COORDINATOR_ASSIGN).
ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"


class TxnID(NamedTuple):
    """Pulsar's TxnID: ``most`` is the coordinator's id, ``least`` its sequence number."""

    most: int
    least: int

    def __str__(self) -> str:
        # Pulsar's TxnID.toString
        return f"({self.most},{self.least})"


class TxnStatus(enum.Enum):
    """Pulsar's TxnStatus, in the order a transaction goes through them."""

    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"


# The legal moves (Pulsar's TxnStatus.canTransitionTo): an open transaction ends one way or the other.
_MOVES: dict[TxnStatus, frozenset[TxnStatus]] = {
    TxnStatus.OPEN: frozenset({TxnStatus.COMMITTING, TxnStatus.ABORTING}),
    TxnStatus.COMMITTING: frozenset({TxnStatus.COMMITTED}),
    TxnStatus.ABORTING: frozenset({TxnStatus.ABORTED}),
    TxnStatus.COMMITTED: frozenset(),
    TxnStatus.ABORTED: frozenset(),
}


@dataclass(slots=True)
class TxnMeta:
    """What the coordinator knows of one transaction."""

    txn: TxnID
    status: TxnStatus
    opened_ms: int
    timeout_ms: int
    # The role that opened it (Pulsar's TxnMeta owner; None with authentication off): only it, or a super
    # user, may add to it or end it.
    owner: str | None = None
    # Topics (partitions) it produced to, and (topic, subscription) pairs it acknowledged on.
    partitions: list[str] = field(default_factory=list)
    subscriptions: list[tuple[str, str]] = field(default_factory=list)
    # Its first record in the coordinator's log: the log is kept from the oldest live one.
    first_record: Position | None = None
    # While that record is being stored: the last entry the log had stored before (the record goes after it).
    stored_after: Position | None = None

    def move(self, to: TxnStatus) -> None:
        """The one place a status changes; an illegal move raises InvalidTxnStatusError."""
        if to not in _MOVES[self.status]:
            raise InvalidTxnStatusError(
                f"Expect Txn {self.txn} to be in {_expected(to)} status but it is in {self.status.value} status")
        self.status = to

    def expect_open(self) -> None:
        if self.status is not TxnStatus.OPEN:
            raise InvalidTxnStatusError(
                f"Expect Txn {self.txn} to be in OPEN status but it is in {self.status.value} status")

    @property
    def deadline_ms(self) -> int:
        return self.opened_ms + self.timeout_ms


def _expected(to: TxnStatus) -> str:
    return next((s.value for s, moves in _MOVES.items() if to in moves), "?")
