"""A transaction coordinator (Pulsar's TransactionMetadataStore, MLTransactionMetadataStore).

It hands out transaction ids (most = its id, least = its sequence), records what each
transaction touched, and ends them: the new status is logged (COMMITTING / ABORTING), the topics
and subscriptions it touched are told (``TxnParticipants``: Pulsar's END_TXN_ON_PARTITION and
END_TXN_ON_SUBSCRIPTION), then the final status is logged and the transaction forgotten. A
transaction that outlives its timeout is aborted. Every change is in the log first, so after a
restart (or kill -9) open transactions are open again with their remaining time, and one caught
between COMMITTING and COMMITTED is finished.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left
from collections.abc import Callable
from typing import Protocol

from broker.errors import (
    BrokerError,
    NotAllowedError,
    TransactionCoordinatorNotFoundError,
    TransactionNotFoundError,
)
from broker.tasks import OwnedTasks
from broker.transactions.log import LogRecord, TransactionLog
from broker.transactions.model import TxnID, TxnMeta, TxnStatus
from managed_ledger import InvalidPositionError, LedgerFencedError

log = logging.getLogger(__name__)

# Pulsar's default when NEW_TXN names no timeout (TransactionCoordinatorClient default, 60 s).
DEFAULT_TIMEOUT_MS = 60_000
# A participant that could not be told is told again after this long, doubling up to the cap.
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 5.0


# Pulsar's TransactionMetadataStoreStats execution latency bounds (ms): how long a transaction was open.
EXECUTION_LATENCY_BUCKETS_MS = (10, 20, 50, 100, 500, 1000, 5000, 15000, 30000, 60000, 300000, 1500000, 3000000)

class TxnParticipants(Protocol):
    """The topics and subscriptions a transaction touched, as the coordinator reaches them."""

    async def end_on_partition(self, topic: str, txn: TxnID, commit: bool,
                               low_watermark: int | None = None) -> None: ...

    async def end_on_subscription(self, topic: str, subscription: str, txn: TxnID, commit: bool,
                                  low_watermark: int | None = None) -> None: ...


class TransactionCoordinator:
    def __init__(self, tc_id: int, txn_log: TransactionLog, participants: TxnParticipants,
                 max_active: int = 0, clock: Callable[[], float] = time.time) -> None:
        self.tc_id = tc_id
        self.log = txn_log
        self.participants = participants
        # maxActiveTransactionsPerCoordinator (0 = no limit).
        self.max_active = max_active
        self.clock = clock
        self.txns: dict[TxnID, TxnMeta] = {}
        self.sequence = -1
        self._timeouts: dict[TxnID, asyncio.TimerHandle] = {}
        self._ending: dict[TxnID, asyncio.Future[None]] = {}
        self._tasks = OwnedTasks(f"transaction coordinator {tc_id}")
        self.closed = False
        # Counters for stats and metrics (Pulsar's TransactionCoordinatorStats).
        self.created = 0
        self.committed = 0
        self.aborted = 0
        self.timed_out = 0
        self.recover_started_ms = 0
        self.recover_ended_ms = 0
        # Ended transactions by how long they were open (Pulsar's execution latency buckets, counted
        # since the last /metrics scrape, which takes them: take_execution_latency).
        self._execution_latency = [0] * (len(EXECUTION_LATENCY_BUCKETS_MS) + 1)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def take_execution_latency(self) -> list[int]:
        """The transactions ended since the last call, by bucket of EXECUTION_LATENCY_BUCKETS_MS (the
        overflow last); the counts start again from zero (as Pulsar's StatsBuckets.refresh at a scrape)."""
        counts = self._execution_latency
        self._execution_latency = [0] * len(counts)
        return counts

    # -- recovery ----------------------------------------------------------------------------------
    async def recover(self) -> None:
        """Rebuild the live transactions from the log; finish those caught ending; re-arm timeouts."""
        self.recover_started_ms = self.now_ms()
        self.sequence = self.log.max_txn_id
        for position, r in await self.log.replay():
            self.sequence = max(self.sequence, r.txn.least)
            meta = self.txns.get(r.txn)
            if r.op == "new":
                self.txns[r.txn] = TxnMeta(r.txn, TxnStatus.OPEN, r.opened_ms, r.timeout_ms, owner=r.owner,
                                           first_record=position)
            elif meta is None:
                continue  # (its earlier records were trimmed: it had ended)
            elif r.op == "partitions":
                meta.partitions.extend(p for p in r.partitions if p not in meta.partitions)
            elif r.op == "subscriptions":
                meta.subscriptions.extend(s for s in r.subscriptions if s not in meta.subscriptions)
            elif r.op == "status" and r.status is not None:
                if r.status in (TxnStatus.COMMITTED, TxnStatus.ABORTED):
                    del self.txns[r.txn]
                else:
                    meta.status = r.status
        for meta in list(self.txns.values()):
            if meta.status is TxnStatus.OPEN:
                self._arm_timeout(meta)
            else:
                self._ending[meta.txn] = asyncio.get_running_loop().create_future()
                self._tasks.spawn(self._finish(meta))
        self.recover_ended_ms = self.now_ms()
        if self.txns:
            log.info("transaction coordinator %d recovered %d live transactions", self.tc_id, len(self.txns))

    # -- the operations of the protocol ------------------------------------------------------------
    async def new_txn(self, timeout_ms: int, owner: str | None = None) -> TxnID:
        """A new open transaction of ``owner`` (the role that asked; None: anyone may use it)."""
        self._check_open()
        if 0 < self.max_active <= len(self.txns):
            raise NotAllowedError(f"Transaction coordinator {self.tc_id} reached the limit of "
                                  f"{self.max_active} active transactions")
        self.sequence += 1
        txn = TxnID(self.tc_id, self.sequence)
        meta = TxnMeta(txn, TxnStatus.OPEN, self.now_ms(), timeout_ms if timeout_ms > 0 else DEFAULT_TIMEOUT_MS,
                       owner=owner)
        self.txns[txn] = meta
        # Until it knows where its record went, it is after everything stored now (see _trim).
        meta.stored_after = self.log.ledger.last_confirmed_entry
        try:
            meta.first_record = await self.log.append(LogRecord(txn, "new", timeout_ms=meta.timeout_ms,
                                                                opened_ms=meta.opened_ms, owner=owner))
        except BaseException:
            self.txns.pop(txn, None)
            raise
        self.created += 1
        self._arm_timeout(meta)
        return txn

    def get(self, txn: TxnID) -> TxnMeta:
        meta = self.txns.get(txn)
        if meta is None:
            raise TransactionNotFoundError(f"The transaction with the given txnID {txn} is not found")
        return meta

    async def add_partitions(self, txn: TxnID, partitions: list[str]) -> None:
        meta = self.get(txn)
        meta.expect_open()
        new = [p for p in dict.fromkeys(partitions) if p not in meta.partitions]
        if not new:
            return
        meta.partitions.extend(new)
        await self.log.append(LogRecord(txn, "partitions", partitions=tuple(new)))

    async def add_subscriptions(self, txn: TxnID, subscriptions: list[tuple[str, str]]) -> None:
        meta = self.get(txn)
        meta.expect_open()
        new = [s for s in dict.fromkeys(subscriptions) if s not in meta.subscriptions]
        if not new:
            return
        meta.subscriptions.extend(new)
        await self.log.append(LogRecord(txn, "subscriptions", subscriptions=tuple(new)))

    async def end_txn(self, txn: TxnID, commit: bool) -> None:
        """END_TXN: returns once every participant was told and the end is logged."""
        meta = self.get(txn)
        target = TxnStatus.COMMITTING if commit else TxnStatus.ABORTING
        ending = self._ending.get(txn)
        if ending is not None and meta.status is target:
            await asyncio.shield(ending)  # the same request again (a client retry): same outcome
            return
        meta.move(target)  # InvalidTxnStatus: ending the other way, or already ending
        self._disarm_timeout(txn)
        done = self._ending[txn] = asyncio.get_running_loop().create_future()
        try:
            await self.log.append(LogRecord(txn, "status", status=target))
        except BaseException as exc:
            # Not logged, so not decided: the transaction stays open for a retry.
            meta.status = TxnStatus.OPEN
            del self._ending[txn]
            done.set_exception(exc)
            done.exception()
            self._arm_timeout(meta)
            raise
        self._tasks.spawn(self._finish(meta))
        await asyncio.shield(done)

    # -- ending --------------------------------------------------------------------------------------
    async def _finish(self, meta: TxnMeta) -> None:
        """Tell every participant (again and again until each has heard), log the final status,
        forget the transaction."""
        commit = meta.status is TxnStatus.COMMITTING
        txn = meta.txn
        done = self._ending[txn]
        lwm = self.low_watermark  # (told to the participants, as Pulsar's END_TXN_ON_PARTITION carries it)
        calls = [lambda p=p: self.participants.end_on_partition(p, txn, commit, lwm) for p in meta.partitions]
        calls += [lambda s=s: self.participants.end_on_subscription(s[0], s[1], txn, commit, lwm)
                  for s in meta.subscriptions]
        final = TxnStatus.COMMITTED if commit else TxnStatus.ABORTED
        try:
            await asyncio.gather(*(self._until_done(txn, call, "a participant was not told yet") for call in calls))
            # Written again until it is (as Pulsar retries an end that failed on a managed-ledger error): the
            # transaction is decided, so it must not stay half ended with every END_TXN for it failing.
            await self._until_done(txn, lambda: self.log.append(LogRecord(txn, "status", status=final)),
                                   "its final status was not logged yet", own_log=True)
            meta.move(final)
        except BaseException as exc:
            if not done.done():
                done.set_exception(self._moved() if self.closed or not isinstance(exc, Exception) else exc)
                done.exception()
            raise
        if commit:
            self.committed += 1
        else:
            self.aborted += 1
        self._execution_latency[bisect_left(EXECUTION_LATENCY_BUCKETS_MS, self.now_ms() - meta.opened_ms)] += 1
        self.txns.pop(txn, None)
        self._ending.pop(txn, None)
        self._trim()
        if not done.done():
            done.set_result(None)

    async def _until_done(self, txn: TxnID, call: Callable[[], object], what: str, own_log: bool = False) -> None:
        """``call`` again and again until it succeeds; given up when the coordinator closes, or (``own_log``: a write
        to the coordinator's log) when the log was fenced: another broker took the coordinator and finishes the end
        from the log (Pulsar does not retry that either)."""
        delay = RETRY_FIRST_S
        while True:
            try:
                await call()  # type: ignore[misc]
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.closed or (own_log and isinstance(exc, LedgerFencedError)):
                    raise
                log.warning("transaction %s: %s (%s); retrying", txn, what, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)

    def _trim(self) -> None:
        oldest = min((m.first_record for m in self.txns.values() if m.first_record is not None), default=None)
        # A NEW_TXN whose record is being stored (first_record None) may have it in the log already (stored by the
        # same flush as the record that brought us here) without knowing where: the trim stops at what was stored
        # before it asked (else the next load would not see that open transaction).
        in_flight = min((m.stored_after for m in self.txns.values()
                         if m.first_record is None and m.stored_after is not None), default=None)
        try:
            self.log.trim_before(oldest, self.sequence, at_most=in_flight)
        except InvalidPositionError:  # (nothing stored yet)
            pass

    # -- timeouts ------------------------------------------------------------------------------------
    def _arm_timeout(self, meta: TxnMeta) -> None:
        loop = asyncio.get_running_loop()
        delay = max(0.0, (meta.deadline_ms - self.now_ms()) / 1000)
        self._timeouts[meta.txn] = loop.call_later(delay, self._timed_out, meta.txn)

    def _disarm_timeout(self, txn: TxnID) -> None:
        handle = self._timeouts.pop(txn, None)
        if handle is not None:
            handle.cancel()

    def _timed_out(self, txn: TxnID) -> None:
        self._timeouts.pop(txn, None)
        meta = self.txns.get(txn)
        if self.closed or meta is None or meta.status is not TxnStatus.OPEN:
            return
        log.info("transaction %s timed out after %d ms: aborting it", txn, meta.timeout_ms)
        self.timed_out += 1
        self._tasks.spawn(self._abort_quietly(txn))

    async def _abort_quietly(self, txn: TxnID) -> None:
        try:
            await self.end_txn(txn, commit=False)
        except BrokerError as exc:  # (ended meanwhile by its client)
            log.debug("timeout abort of %s: %s", txn, exc)
        except Exception:
            log.exception("timeout abort of %s failed", txn)

    # -- stats ---------------------------------------------------------------------------------------
    @property
    def low_watermark(self) -> int:
        """Every transaction with a sequence up to this one has ended."""
        open_ones = [t.least for t in self.txns]
        return min(open_ones) - 1 if open_ones else self.sequence

    def stats(self) -> dict[str, object]:
        """Pulsar's TransactionCoordinatorStats."""
        return {"state": "Ready" if not self.closed else "Close", "leastSigBits": self.sequence,
                "lowWaterMark": self.low_watermark, "ongoingTxnSize": len(self.txns),
                "recoverStartTime": self.recover_started_ms, "recoverEndTime": self.recover_ended_ms}

    # -- lifecycle -----------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise NotAllowedError(f"Transaction coordinator {self.tc_id} is closed")

    async def close(self) -> None:
        self.closed = True
        for handle in self._timeouts.values():
            handle.cancel()
        self._timeouts.clear()
        await self._tasks.close()
        for fut in self._ending.values():
            if not fut.done():
                # Its END_TXN is answered TransactionCoordinatorNotFound: the client finds the coordinator's next
                # broker (which finishes the end from the log) and asks again.
                fut.set_exception(self._moved())
                fut.exception()
        await self.log.close()

    def _moved(self) -> TransactionCoordinatorNotFoundError:
        return TransactionCoordinatorNotFoundError(
            f"Transaction coordinator with id {self.tc_id} is closed here (unloaded, or the broker is stopping)")
