"""Transactions (Pulsar's PIP-31), switched on by transactionCoordinatorEnabled.

- model.py: the transaction id, its states and the one place that moves between them;
- log.py: the coordinator's log, one managed ledger per coordinator (MLTransactionLogImpl);
- coordinator.py: a transaction coordinator (TransactionMetadataStore): new, add partitions and
  subscriptions, end (fanned out to the topics through ``TxnParticipants``), timeouts, recovery;
- buffer.py: a topic's transaction buffer (TopicTransactionBuffer): where transactional entries
  wait, the max read position, commit/abort markers, the aborted set and its recovery;
- pending_ack.py: a subscription's transactional acknowledgements (PendingAckHandle).

This package stands on managed_ledger and broker.protocol; the service layer drives it.
"""
