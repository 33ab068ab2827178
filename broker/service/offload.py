"""A topic's offload runs, as Pulsar's PersistentTopic.triggerOffload / offloadStatus keep them: one at a time, and
the last one's outcome (NOT_RUN until one was asked for; kept in memory only, so NOT_RUN again after the topic
loads anew).

No offloader is configured here yet (Pulsar's NullLedgerOffloader, its default when ``managedLedgerOffloadDriver``
is not set): a run fails at once with Pulsar's words, and its status says ERROR.
"""

from __future__ import annotations

import enum
from typing import Any

from managed_ledger.position import Position

# ManagedLedgerImpl.asyncOffloadPrefix's refusal without an offloader, as the status's lastError carries it (the
# Java exception's class and message).
NO_OFFLOADER = "org.apache.bookkeeper.mledger.ManagedLedgerException: [NullLedgerOffloader] does not support offload"


class OffloadStatus(enum.Enum):
    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class OffloadProcess:
    __slots__ = ("first_unoffloaded", "last_error", "status")

    def __init__(self) -> None:
        self.status = OffloadStatus.NOT_RUN
        self.last_error = ""
        self.first_unoffloaded: Position | None = None  # (after a SUCCESS)

    def trigger(self, up_to: Position) -> bool:
        """Offload the closed ledgers before ``up_to``'s; False while a run is under way (Pulsar: 409)."""
        if self.status is OffloadStatus.RUNNING:
            return False
        self.status, self.last_error, self.first_unoffloaded = OffloadStatus.ERROR, NO_OFFLOADER, None
        return True

    def to_json(self) -> dict[str, Any]:
        """OffloadProcessStatusImpl's JSON: the first message not offloaded is MessageId.earliest (all -1) unless
        the last run succeeded (then its ledger's first entry; Pulsar leaves the partition out: -1)."""
        first = self.first_unoffloaded
        ledger_id, entry_id = (first.ledger_id, first.entry_id) if first is not None else (-1, -1)
        return {"status": self.status.value, "lastError": self.last_error,
                "firstUnoffloadedMessage": {"ledgerId": ledger_id, "entryId": entry_id, "partitionIndex": -1,
                                            "batchSize": 0, "batchIndex": -1}}
