"""The coordinator's log: every change of every transaction, in a managed ledger of its own.

As Pulsar's MLTransactionLogImpl: one managed ledger per coordinator
(``pulsar/system/persistent/__transaction_log_{tcId}``), read from its cursor
(``transaction.subscription``) at start to rebuild the open transactions, the cursor moved past
the records of ended transactions so the log is trimmed. The cursor also keeps the highest
sequence number handed out (property ``maxLocalTxnId``), so ids are never reused even when every
record was trimmed.

A record is a small JSON object (our own format; Pulsar writes its TransactionMetadataEntry
protobuf): ``{"txn": [most, least], "op": ...}`` with op ``new`` (timeout_ms, opened_ms, owner when there is one),
``partitions`` / ``subscriptions`` (what was added) or ``status`` (the new status).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from broker.transactions.model import TxnID, TxnStatus
from managed_ledger import InitialPosition, ManagedCursor, ManagedLedger, Position

log = logging.getLogger(__name__)

LOG_CURSOR = "transaction.subscription"  # Pulsar's MLTransactionLogImpl cursor name
MAX_TXN_ID_PROPERTY = "maxLocalTxnId"
_READ_BATCH = 500  # records per read while replaying


def log_ledger_name(tc_id: int) -> str:
    """The managed ledger of coordinator ``tc_id``: persistent://pulsar/system/__transaction_log_{tcId}."""
    return f"pulsar/system/persistent/__transaction_log_{tc_id}"


@dataclass(frozen=True, slots=True)
class LogRecord:
    txn: TxnID
    op: str  # "new" | "partitions" | "subscriptions" | "status"
    timeout_ms: int = 0
    opened_ms: int = 0
    partitions: tuple[str, ...] = ()
    subscriptions: tuple[tuple[str, str], ...] = ()
    status: TxnStatus | None = None
    owner: str | None = None

    def encode(self) -> bytes:
        doc: dict[str, object] = {"txn": [self.txn.most, self.txn.least], "op": self.op}
        if self.op == "new":
            doc["timeout_ms"] = self.timeout_ms
            doc["opened_ms"] = self.opened_ms
            if self.owner is not None:
                doc["owner"] = self.owner
        elif self.op == "partitions":
            doc["partitions"] = list(self.partitions)
        elif self.op == "subscriptions":
            doc["subscriptions"] = [list(s) for s in self.subscriptions]
        elif self.op == "status" and self.status is not None:
            doc["status"] = self.status.value
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> LogRecord:
        doc = json.loads(data)
        most, least = doc["txn"]
        op = doc["op"]
        return cls(
            TxnID(int(most), int(least)), op,
            timeout_ms=int(doc.get("timeout_ms", 0)), opened_ms=int(doc.get("opened_ms", 0)),
            partitions=tuple(doc.get("partitions", ())),
            subscriptions=tuple((str(t), str(s)) for t, s in doc.get("subscriptions", ())),
            status=TxnStatus(doc["status"]) if "status" in doc else None,
            owner=str(doc["owner"]) if doc.get("owner") is not None else None,
        )


class TransactionLog:
    def __init__(self, ledger: ManagedLedger, cursor: ManagedCursor) -> None:
        self.ledger = ledger
        self.cursor = cursor
        self.appended = 0  # records written since it opened (pulsar_txn_append_log_total)

    @classmethod
    async def open(cls, ledger: ManagedLedger) -> TransactionLog:
        cursor = await ledger.open_cursor(LOG_CURSOR, InitialPosition.EARLIEST)
        return cls(ledger, cursor)

    @property
    def max_txn_id(self) -> int:
        """The highest sequence number recorded in the cursor (-1: none)."""
        return self.cursor.properties.get(MAX_TXN_ID_PROPERTY, -1)

    async def replay(self) -> list[tuple[Position, LogRecord]]:
        """Every record after the cursor's mark-delete, in log order (unreadable ones are logged
        and skipped: a record is written whole or not at all, so this means a foreign entry)."""
        reader = self.ledger.new_non_durable_cursor(self.cursor.mark_delete_position, f"{LOG_CURSOR}-replay")
        out: list[tuple[Position, LogRecord]] = []
        try:
            while True:
                entries = await reader.read_entries_async(_READ_BATCH)
                if not entries:
                    return out
                for e in entries:
                    try:
                        out.append((e.position, LogRecord.decode(e.data)))
                    except (ValueError, KeyError, TypeError) as exc:
                        log.error("%s: unreadable record at %s skipped: %s", self.ledger.name, e.position, exc)
        finally:
            await reader.close()

    async def append(self, record: LogRecord) -> Position:
        position = await self.ledger.add_entry_async(record.encode())
        self.appended += 1
        return position

    def trim_before(self, oldest_live: Position | None, max_txn_id: int, at_most: Position | None = None) -> None:
        """Everything before ``oldest_live`` (the first record of the oldest transaction not yet
        ended; None: all of it) belongs to ended transactions: let it go, but not past ``at_most``
        (a record being stored goes after it)."""
        last = self.ledger.last_confirmed_entry
        upto = self.ledger.previous_position(oldest_live) if oldest_live is not None else last
        if at_most is not None and at_most < upto:
            upto = at_most
        if upto.entry_id < 0 and upto <= self.cursor.mark_delete_position:
            upto = self.cursor.mark_delete_position
        if max_txn_id > self.max_txn_id:
            self.cursor.set_properties({MAX_TXN_ID_PROPERTY: max_txn_id})
        if upto > self.cursor.mark_delete_position:
            self.cursor.mark_delete(upto)

    async def close(self) -> None:
        await self.cursor.flush()
        await self.ledger.close()
