"""A subscription's transactional acknowledgements (Pulsar's PendingAckHandleImpl).

An ACK with a transaction id does not move the cursor: its positions wait here, held back from
delivery to anyone, until the transaction ends: committed, they become ordinary acks; aborted,
they are dropped and the messages delivered again. An ack that collides with one pending in
another transaction, or with a message already acknowledged, is refused with TransactionConflict,
as in Pulsar. Cumulative transactional acks (Exclusive and Failover only) come from one
transaction at a time.

Persistence: the pending state is kept in the subscription cursor's properties (saved with its
acknowledgement state), one key per pending position, so it survives a restart:
``txnack:<most>:<least>:<ledger>:<entry>`` (a whole entry) or ``...:<ledger>:<entry>:w<i>`` (word
i of a batch-index ack_set), and ``txncum:<most>:<least>:<ledger>`` -> entry (a cumulative ack).
Pulsar keeps a log of its own (``{topic}-{sub}__transaction_pending_ack``) instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from broker.errors import TransactionConflictError
from broker.protocol import ack_sets
from broker.transactions.model import TxnID
from managed_ledger import Position

_ACK = "txnack:"
_CUMULATIVE = "txncum:"


@dataclass
class TxnAcks:
    """What one transaction acknowledged on a subscription."""

    # position -> None for the whole entry, or the ack_set (bit set = message still unacked).
    individual: dict[Position, list[int] | None] = field(default_factory=dict)
    cumulative: Position | None = None


class PendingAcks:
    def __init__(self) -> None:
        self.by_txn: dict[TxnID, TxnAcks] = {}
        # position -> the transactions with an ack pending on it (several only for batch indexes).
        self._owners: dict[Position, set[TxnID]] = {}
        self._cumulative: tuple[TxnID, Position] | None = None
        # position -> messages in its batch, as the ACKs gave it (not saved: unknown after a restart).
        self._batch_sizes: dict[Position, int] = {}
        # coordinator id -> the last low watermark its ends brought (-1: none below the first transaction).
        self.low_watermarks: dict[int, int] = {}
        # When the state was made or read back (Pulsar's recoverStartTime / recoverEndTime of its log's replay).
        self.recover_started_ms = self.recover_ended_ms = int(time.time() * 1000)

    def __bool__(self) -> bool:
        return bool(self.by_txn)

    def holds(self, position: Position) -> bool:
        """Not to be delivered: a whole entry acknowledged in an open transaction (or covered by
        an open cumulative one)."""
        owners = self._owners.get(position)
        if owners is not None and any(self.by_txn[t].individual.get(position) is None for t in owners):
            return True
        cumulative = self._cumulative
        return cumulative is not None and position <= cumulative[1]

    def held_indexes(self, position: Position) -> list[int] | None:
        """The messages of a batch entry still unacknowledged by every open transaction (ack_set
        words: bit set = not acknowledged in any of them); None when none acked part of it."""
        owners = self._owners.get(position)
        if owners is None:
            return None
        words: list[int] | None = None
        for txn in owners:
            ack_set = self.by_txn[txn].individual.get(position)
            if ack_set is None:
                continue
            words = ack_sets.merged(words, ack_set)
        return words

    # -- adding --------------------------------------------------------------------------------------
    def add_individual(self, txn: TxnID, acks: list[tuple[Position, list[int] | None, int]],
                       is_acked: Callable[[Position], bool],
                       batch_acked: Callable[[Position], list[int] | None] = lambda _: None) -> None:
        """All or nothing: a conflict on any position refuses the whole ACK. Each ack is (position,
        ack_set or None for the whole entry, messages in the batch or 0 when not known).
        ``batch_acked``: the ack_set the subscription keeps for a batch acknowledged in part, if any."""
        for pos, ack_set, batch_size in acks:
            if is_acked(pos):
                raise TransactionConflictError(
                    f"Transaction {txn} tried to ack message {pos} that is already acknowledged")
            if ack_set is not None:
                kept = batch_acked(pos)
                if kept is not None and _overlap(ack_set, kept, batch_size):
                    raise TransactionConflictError(
                        f"Transaction {txn} tried to ack message {pos} that is already acknowledged")
            for other in self._owners.get(pos, ()):
                if other == txn:
                    continue
                theirs = self.by_txn[other].individual.get(pos)
                if ack_set is None or theirs is None or _overlap(ack_set, theirs, batch_size):
                    raise TransactionConflictError(
                        f"Transaction {txn} tried to ack message {pos} in pending ack status of transaction {other}")
            cumulative = self._cumulative
            if cumulative is not None and cumulative[0] != txn and pos <= cumulative[1]:
                raise TransactionConflictError(
                    f"Transaction {txn} tried to ack message {pos} in pending ack status of "
                    f"transaction {cumulative[0]}")
        mine = self.by_txn.setdefault(txn, TxnAcks())
        for pos, ack_set, _ in acks:
            old = mine.individual.get(pos, ack_set)
            if old is None or ack_set is None:
                mine.individual[pos] = None
            else:  # both partial: a message is acked if either ack cleared its bit
                mine.individual[pos] = ack_sets.merged(old, ack_set)
            self._owners.setdefault(pos, set()).add(txn)
        for pos, _, batch_size in acks:
            if batch_size > 0:
                self._batch_sizes[pos] = batch_size

    def add_cumulative(self, txn: TxnID, position: Position, mark_delete: Position) -> None:
        cumulative = self._cumulative
        if cumulative is not None and cumulative[0] != txn:
            raise TransactionConflictError(
                f"Transaction {txn} tried to cumulatively ack {position} while transaction {cumulative[0]} "
                "has a pending cumulative ack")
        if position <= mark_delete:
            raise TransactionConflictError(
                f"Transaction {txn} tried to cumulatively ack {position}, already acknowledged "
                f"(mark-delete {mark_delete})")
        for pos, owners in self._owners.items():
            if pos <= position and any(o != txn for o in owners):
                raise TransactionConflictError(
                    f"Transaction {txn} tried to cumulatively ack over message {pos} in pending ack status")
        if cumulative is not None and position < cumulative[1]:
            position = cumulative[1]
        self._cumulative = (txn, position)
        self.by_txn.setdefault(txn, TxnAcks()).cumulative = position

    # -- ending --------------------------------------------------------------------------------------
    def end(self, txn: TxnID) -> TxnAcks | None:
        """Forget what ``txn`` acknowledged; what it was (None: nothing here)."""
        acks = self.by_txn.pop(txn, None)
        if acks is None:
            return None
        for pos in acks.individual:
            owners = self._owners.get(pos)
            if owners is not None:
                owners.discard(txn)
                if not owners:
                    del self._owners[pos]
                    self._batch_sizes.pop(pos, None)
        if self._cumulative is not None and self._cumulative[0] == txn:
            self._cumulative = None
        return acks

    # -- persistence ---------------------------------------------------------------------------------
    def to_properties(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for txn, acks in self.by_txn.items():
            tid = f"{txn.most}:{txn.least}"
            for pos, ack_set in acks.individual.items():
                key = f"{_ACK}{tid}:{pos.ledger_id}:{pos.entry_id}"
                if ack_set is None:
                    out[key] = 0
                else:
                    for i, word in enumerate(ack_set):
                        out[f"{key}:w{i}"] = word
            if acks.cumulative is not None:
                out[f"{_CUMULATIVE}{tid}:{acks.cumulative.ledger_id}"] = acks.cumulative.entry_id
        return out

    @staticmethod
    def is_own_property(key: str) -> bool:
        return key.startswith((_ACK, _CUMULATIVE))

    @classmethod
    def from_properties(cls, properties: Mapping[str, int]) -> PendingAcks:
        pending = cls()
        pending.recover_started_ms = int(time.time() * 1000)
        words: dict[tuple[TxnID, Position], dict[int, int]] = {}
        for key, value in properties.items():
            if key.startswith(_CUMULATIVE):
                most, least, ledger = key[len(_CUMULATIVE):].split(":")
                txn = TxnID(int(most), int(least))
                pos = Position(int(ledger), value)
                pending._cumulative = (txn, pos)
                pending.by_txn.setdefault(txn, TxnAcks()).cumulative = pos
            elif key.startswith(_ACK):
                parts = key[len(_ACK):].split(":")
                txn = TxnID(int(parts[0]), int(parts[1]))
                pos = Position(int(parts[2]), int(parts[3]))
                if len(parts) == 5:
                    words.setdefault((txn, pos), {})[int(parts[4][1:])] = value
                else:
                    pending.by_txn.setdefault(txn, TxnAcks()).individual[pos] = None
                    pending._owners.setdefault(pos, set()).add(txn)
        for (txn, pos), by_index in words.items():
            pending.by_txn.setdefault(txn, TxnAcks()).individual[pos] = [by_index[i] for i in sorted(by_index)]
            pending._owners.setdefault(pos, set()).add(txn)
        pending.recover_ended_ms = int(time.time() * 1000)
        return pending

    def position_state(self, position: Position, batch_index: int | None, mark_delete: Position) -> str:
        """Pulsar's PositionInPendingAckStats.State of a position (and a message of its batch): ``MarkDelete`` at or
        before the subscription's mark-delete, ``PendingAck`` when an open transaction acknowledged it, else
        ``NotInPendingAck``; ``InvalidPosition`` for a batch index outside the batch. Unlike Pulsar 4.0.7, which looks
        only at individual acks, a position covered by an open cumulative ack is ``PendingAck`` too (it is)."""
        if position <= mark_delete:
            return "MarkDelete"
        cumulative = self._cumulative
        if self._owners.get(position) is None:
            return "PendingAck" if cumulative is not None and position <= cumulative[1] else "NotInPendingAck"
        if batch_index is None:
            return "PendingAck"
        words = self.held_indexes(position)
        # (a message that is no batch has no index; after a restart a batch's size is bounded by its ack set)
        size = self._batch_sizes.get(position, 64 * len(words) if words is not None else 0)
        if not 0 <= batch_index < size:
            return "InvalidPosition"
        if words is None or batch_index >= 64 * len(words):  # (the whole batch acknowledged in a transaction)
            return "PendingAck"
        return "NotInPendingAck" if words[batch_index // 64] >> (batch_index % 64) & 1 else "PendingAck"

    def stats(self, low_watermarks: bool = False) -> dict[str, object]:
        """Pulsar's TransactionPendingAckStats (``low_watermarks``: with the last one of each coordinator)."""
        out: dict[str, object] = {"state": "Ready", "ongoingTxnSize": len(self.by_txn),
                                  "recoverStartTime": self.recover_started_ms, "recoverEndTime": self.recover_ended_ms}
        if low_watermarks:
            out["lowWaterMarks"] = {str(tc): lw for tc, lw in sorted(self.low_watermarks.items())}
        return out

    def txn_stats(self, txn: TxnID) -> dict[str, object]:
        """Pulsar's TransactionInPendingAckStats of one transaction (no key: no cumulative ack)."""
        acks = self.by_txn.get(txn)
        cumulative = acks.cumulative if acks is not None else None
        return {"cumulativeAckPosition": str(cumulative)} if cumulative is not None else {}


def _overlap(a: Iterable[int], b: Iterable[int], batch_size: int) -> bool:
    """Two batch-index ack_sets (bit set = still unacked) acknowledge a message in common: a bit
    cleared in both, among the batch's ``batch_size`` messages (0: every bit of the words, which
    may see a conflict in the unused bits past the batch: clients send MessageIdData.batch_size)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        bits = 64 if batch_size <= 0 else max(0, min(64, batch_size - 64 * i))
        if (~x & ~y) & ((1 << bits) - 1):
            return True
    return False
