"""Every metric family /metrics can expose: Apache Pulsar's (same names, labels and meaning) and
our own ``pulsar_py_*``. One row per family: name -> (type, help). docs/metrics.md lists them with
their labels and units, and the tests check the two agree.

Types: Pulsar writes all its topic and namespace series as ``gauge``; here the monotonic ``*_total``
series are declared ``counter`` (same sample names, so every query works unchanged).
"""

from __future__ import annotations

from broker.admin.exposition import COUNTER, GAUGE, HISTOGRAM, SUMMARY

_LATENCY_BUCKETS = ("le_0_5", "le_1", "le_5", "le_10", "le_20", "le_50", "le_100", "le_200", "le_1000", "overflow")
ENTRY_SIZE_BUCKETS = ("le_128", "le_512", "le_1_kb", "le_2_kb", "le_4_kb", "le_16_kb", "le_100_kb", "le_1_mb",
                      "le_overflow")
# (metric prefix, bucket names, what it measures) of Pulsar's per-topic add buckets: gauges per bucket
# (not cumulative) counting the entries of the last stats interval, with _count and _sum.
ADD_BUCKETS = (
    ("pulsar_storage_write_latency", _LATENCY_BUCKETS,
     "Entries of the last stats interval whose add (request to durable) took this long (ms bound); _sum in us"),
    ("pulsar_storage_ledger_write_latency", _LATENCY_BUCKETS,
     "Entries of the last stats interval whose ledger write took this long (ms bound); _sum in us"),
    ("pulsar_entry_size", ENTRY_SIZE_BUCKETS,
     "Entries of the last stats interval of this size (bytes bound); _sum in bytes"),
)

FAMILIES: dict[str, tuple[str, str]] = {
    # -- broker (PIP-214 aggregates, always present) --
    "pulsar_broker_topics_count": (GAUGE, "Topics loaded by this broker"),
    "pulsar_broker_subscriptions_count": (GAUGE, "Subscriptions on this broker"),
    "pulsar_broker_producers_count": (GAUGE, "Producers connected to this broker"),
    "pulsar_broker_consumers_count": (GAUGE, "Consumers connected to this broker"),
    "pulsar_broker_rate_in": (GAUGE, "Messages published per second"),
    "pulsar_broker_rate_out": (GAUGE, "Messages delivered per second"),
    "pulsar_broker_throughput_in": (GAUGE, "Bytes published per second"),
    "pulsar_broker_throughput_out": (GAUGE, "Bytes delivered per second"),
    "pulsar_broker_storage_size": (GAUGE, "Bytes stored by the broker's topics"),
    "pulsar_broker_storage_logical_size": (GAUGE, "Bytes stored, without replicas"),
    "pulsar_broker_storage_write_rate": (GAUGE, "Entries written per second"),
    "pulsar_broker_storage_read_rate": (GAUGE, "Entries read per second"),
    "pulsar_broker_storage_read_cache_misses_rate": (GAUGE, "Read operations per second that missed the cache"),
    "pulsar_broker_storage_backlog_quota_exceeded_evictions_total": (
        COUNTER, "Backlog evictions because a quota was exceeded, by quota type"),
    "pulsar_broker_msg_backlog": (GAUGE, "Entries not yet acknowledged, all subscriptions"),
    "pulsar_broker_in_bytes_total": (COUNTER, "Bytes published, by system_topic"),
    "pulsar_broker_out_bytes_total": (COUNTER, "Bytes delivered, by system_subscription"),
    "pulsar_broker_throttled_connections": (GAUGE, "Connections not read because of their own publish limits"),
    "pulsar_broker_throttled_connections_global_limit": (
        GAUGE, "Connections not read because the broker-wide publish buffer is full"),
    "pulsar_broker_pending_bytes_to_dispatch": (
        GAUGE, "Bytes of messages written to consumers' connections and not yet sent (queued, or in the socket "
               "buffer of a slow reader)"),
    "pulsar_version_info": (GAUGE, "1, labelled with the broker's version"),
    # -- connections (BrokerOperabilityMetrics; labels cluster, broker, metric) --
    "pulsar_active_connections": (GAUGE, "Open client connections"),
    "pulsar_connection_created_total_count": (GAUGE, "Connections opened"),
    "pulsar_connection_create_success_count": (GAUGE, "Connections opened and accepted"),
    "pulsar_connection_create_fail_count": (GAUGE, "Connections refused (connection limits)"),
    "pulsar_connection_closed_total_count": (GAUGE, "Connections closed"),
    "pulsar_health": (GAUGE, "Outcome of the last periodic health check (healthCheckMetricsUpdateTimeInSeconds): "
                             "1 passed, 0 failed, -1 none yet"),
    # -- the load manager's view of this broker (labels cluster, broker, metric="loadBalancing") --
    "pulsar_lb_cpu_usage": (GAUGE, "CPU use, per cent of all cores (cluster mode: of the last load report)"),
    "pulsar_lb_memory_usage": (GAUGE, "Resident memory, per cent of the machine's"),
    "pulsar_lb_directMemory_usage": (GAUGE, "Direct memory, per cent of its limit (none here: 0)"),
    "pulsar_lb_bandwidth_in_usage": (GAUGE, "Bytes in, per cent of the NIC's speed (0 when it is unknown)"),
    "pulsar_lb_bandwidth_out_usage": (GAUGE, "Bytes out, per cent of the NIC's speed (0 when it is unknown)"),
    # -- authentication --
    "pulsar_authentication_success_total": (COUNTER, "Credentials a provider accepted"),
    "pulsar_authentication_failures_total": (COUNTER, "Credentials a provider refused, by reason"),
    "pulsar_expired_token_total": (COUNTER, "Tokens refused because they had expired"),
    "pulsar_expiring_token_minutes": (HISTOGRAM, "Minutes left on the accepted tokens that expire"),
    # -- lookups (NamespaceService) and topic loads (BrokerService, BrokerOperabilityMetrics) --
    "pulsar_broker_lookup": (SUMMARY, "Lookup latency (ms); quantiles over the last stats interval"),
    "pulsar_broker_publish_latency": (SUMMARY, "Add latency, request to durable (ms); quantiles over the last "
                                               "stats interval"),
    "pulsar_broker_lookup_answers_total": (COUNTER, "Lookups answered with this broker (not redirected)"),
    "pulsar_broker_lookup_redirects_total": (COUNTER, "Lookups redirected to another broker"),
    "pulsar_broker_lookup_failures_total": (COUNTER, "Lookups that failed"),
    "pulsar_broker_lookup_pending_requests": (GAUGE, "Lookups in progress"),
    "pulsar_broker_topic_load_pending_requests": (GAUGE, "Topic loads in progress"),
    "pulsar_topic_load_times": (SUMMARY, "Topic load time (ms); quantiles over the last stats interval"),
    "pulsar_topic_load_time_mean_ms": (GAUGE, "Mean topic load time of the last stats interval"),
    "pulsar_topic_load_time_median_ms": (GAUGE, "Median topic load time of the last stats interval"),
    "pulsar_topic_load_time_75percentile_ms": (GAUGE, "75th percentile topic load time, last stats interval"),
    "pulsar_topic_load_time_95percentile_ms": (GAUGE, "95th percentile topic load time, last stats interval"),
    "pulsar_topic_load_time_99_percentile_ms": (GAUGE, "99th percentile topic load time, last stats interval"),
    "pulsar_topic_load_time_99_9_percentile_ms": (GAUGE, "99.9th percentile topic load time, last stats interval"),
    "pulsar_topic_load_time_99_99_percentile_ms": (GAUGE, "99.99th percentile topic load time, last stats "
                                                          "interval"),
    "pulsar_topic_load_rate_s": (GAUGE, "Topics loaded in the last stats interval"),
    "pulsar_topic_load_failed_count": (GAUGE, "Topic loads that failed"),
    "topic_load_failed_total": (COUNTER, "Topic loads that failed"),
    # -- metadata store (MetadataStoreStats; labels name, type, status) --
    "pulsar_metadata_store_ops_latency_ms": (HISTOGRAM, "Metadata store get / put / del latency (ms), by outcome"),
    "pulsar_metadata_store_put_bytes_total": (COUNTER, "Bytes put into the metadata store"),
    # -- schema registry (SchemaRegistryStats; label namespace) --
    "pulsar_schema_get_ops_failed_total": (COUNTER, "Schema gets (and lists) that failed"),
    "pulsar_schema_put_ops_failed_total": (COUNTER, "Schema puts that failed (incompatible ones included)"),
    "pulsar_schema_del_ops_failed_total": (COUNTER, "Schema deletes that failed"),
    "pulsar_schema_compatible_total": (COUNTER, "Compatibility checks that passed"),
    "pulsar_schema_incompatible_total": (COUNTER, "Compatibility checks that failed"),
    "pulsar_schema_get_ops_latency": (SUMMARY, "Schema get latency (ms); quantiles over the last stats interval"),
    "pulsar_schema_put_ops_latency": (SUMMARY, "Schema put latency (ms); quantiles over the last stats interval"),
    "pulsar_schema_del_ops_latency": (SUMMARY, "Schema delete latency (ms); quantiles over the last stats interval"),
    # -- namespace (topic count always; the rest when topic level is off) --
    "pulsar_topics_count": (GAUGE, "Topics of the namespace loaded by this broker"),
    # -- topic (or namespace when topic level is off) --
    "pulsar_subscriptions_count": (GAUGE, "Subscriptions"),
    "pulsar_producers_count": (GAUGE, "Producers"),
    "pulsar_consumers_count": (GAUGE, "Consumers"),
    "pulsar_rate_in": (GAUGE, "Messages published per second (last stats interval)"),
    "pulsar_rate_out": (GAUGE, "Messages delivered per second (last stats interval)"),
    "pulsar_throughput_in": (GAUGE, "Bytes published per second (last stats interval)"),
    "pulsar_throughput_out": (GAUGE, "Bytes delivered per second (last stats interval)"),
    "pulsar_average_msg_size": (GAUGE, "Average published message size (bytes)"),
    "pulsar_consumer_msg_ack_rate": (GAUGE, "Acknowledgements per second"),
    "pulsar_txn_active_count": (GAUGE, "Transactions open on the coordinator"),
    "pulsar_txn_created_total": (COUNTER, "Transactions the coordinator created"),
    "pulsar_txn_committed_total": (COUNTER, "Transactions the coordinator committed"),
    "pulsar_txn_aborted_total": (COUNTER, "Transactions the coordinator aborted (timeouts included)"),
    "pulsar_txn_timeout_total": (COUNTER, "Transactions aborted by their timeout"),
    "pulsar_txn_append_log_total": (COUNTER, "Records written to the coordinator's log"),
    "pulsar_txn_tp_committed_count_total": (COUNTER, "Transactions committed on the subscription's pending acks, "
                                                     "by status (succeed / failed)"),
    "pulsar_txn_tp_aborted_count_total": (COUNTER, "Transactions aborted on the subscription's pending acks, by "
                                                   "status (succeed / failed)"),
    "pulsar_txn_tp_commit_latency": (SUMMARY, "Time to commit a transaction's acks on the subscription (us); "
                                              "quantiles over the last stats interval"),
    "pulsar_txn_tb_client_commit_failed_total": (COUNTER, "Ends of transactions on a topic (commits) that failed"),
    "pulsar_txn_tb_client_abort_failed_total": (COUNTER, "Ends of transactions on a topic (aborts) that failed"),
    "pulsar_txn_tb_client_commit_latency": (SUMMARY, "Time to commit a transaction on a topic (ns); quantiles over "
                                                     "the last stats interval"),
    "pulsar_txn_tb_client_abort_latency": (SUMMARY, "Time to abort a transaction on a topic (ns); quantiles over the "
                                                    "last stats interval"),
    "pulsar_txn_tb_client_pending_requests": (GAUGE, "Ends of transactions on topics in progress"),
    "pulsar_txn_tb_active_total": (GAUGE, "Open transactions in the topic's transaction buffer"),
    "pulsar_txn_tb_aborted_total": (COUNTER, "Aborted transactions seen by the topic's transaction buffer"),
    "pulsar_txn_tb_committed_total": (COUNTER, "Committed transactions seen by the topic's transaction buffer"),
    "pulsar_storage_size": (GAUGE, "Bytes stored"),
    "pulsar_storage_logical_size": (GAUGE, "Bytes stored, without replicas"),
    "pulsar_msg_backlog": (GAUGE, "Entries not yet acknowledged, all subscriptions"),
    "pulsar_storage_write_rate": (GAUGE, "Entries written per second"),
    "pulsar_storage_read_rate": (GAUGE, "Entries read per second"),
    "pulsar_storage_read_cache_misses_rate": (GAUGE, "Read operations per second that missed the cache"),
    "pulsar_storage_backlog_size": (GAUGE, "Estimated bytes not yet acknowledged by the slowest subscription"),
    "pulsar_publish_rate_limit_times": (GAUGE, "Times the publish rate limit held the topic's publishers"),
    "pulsar_storage_offloaded_size": (GAUGE, "Bytes of the ledgers offloaded to tiered storage"),
    "brk_ledgeroffloader_offload_error_total": (COUNTER, "Ledger copies that failed"),
    "brk_ledgeroffloader_write_storage_error_total": (COUNTER, "Writes to the offload storage that failed"),
    "brk_ledgeroffloader_read_offload_error_total": (COUNTER, "Reads of offloaded copies that failed"),
    "brk_ledgeroffloader_read_bytes_total": (COUNTER, "Bytes read from offloaded copies"),
    "brk_ledgeroffloader_offload_rate": (GAUGE, "Bytes offloaded per second over the last stats interval"),
    "brk_ledgeroffloader_read_offload_rate": (GAUGE, "Bytes read from offloaded copies per second over the last "
                                              "stats interval"),
    "brk_ledgeroffloader_read_ledger_latency": (SUMMARY, "Reads of the local copy of a ledger being offloaded (us)"),
    "brk_ledgeroffloader_read_offload_index_latency": (SUMMARY, "Opening an offloaded copy: its index and metadata "
                                                       "(us)"),
    "brk_ledgeroffloader_read_offload_data_latency": (SUMMARY, "Reads of an entry from an offloaded copy (us)"),
    "brk_ledgeroffloader_delete_offload_ops_total": (COUNTER, "Deletions of offloaded copies, by status"),
    "pulsar_storage_backlog_quota_limit": (GAUGE, "Size backlog quota (bytes; -1 = none)"),
    "pulsar_storage_backlog_quota_limit_time": (GAUGE, "Time backlog quota (seconds; -1 = none)"),
    "pulsar_storage_backlog_age_seconds": (GAUGE, "Age of the oldest unacknowledged message (-1 = none)"),
    "pulsar_storage_backlog_quota_exceeded_evictions_total": (
        COUNTER, "Backlog evictions because a quota was exceeded, by quota type"),
    "pulsar_storage_backlog_quota_check_duration_seconds": (
        HISTOGRAM, "Time a check of every topic's backlog quotas took"),
    "pulsar_delayed_message_index_size_bytes": (GAUGE, "Memory of delayed-delivery indexes (bytes)"),
    "pulsar_in_bytes_total": (COUNTER, "Bytes published"),
    "pulsar_in_messages_total": (COUNTER, "Messages published"),
    "pulsar_out_bytes_total": (COUNTER, "Bytes delivered"),
    "pulsar_out_messages_total": (COUNTER, "Messages delivered"),
    # -- producer (exposeProducerLevelMetricsInPrometheus) --
    "pulsar_producer_msg_rate_in": (GAUGE, "Messages published per second"),
    "pulsar_producer_msg_throughput_in": (GAUGE, "Bytes published per second"),
    "pulsar_producer_msg_average_Size": (GAUGE, "Average message size (bytes)"),
    # -- subscription --
    "pulsar_subscription_back_log": (GAUGE, "Entries after the mark-delete position"),
    "pulsar_subscription_back_log_no_delayed": (GAUGE, "Backlog without delayed messages"),
    "pulsar_subscription_delayed": (GAUGE, "Entries waiting for their delivery time"),
    "pulsar_subscription_in_replay": (GAUGE, "Entries waiting to be redelivered"),
    "pulsar_subscription_dispatch_throttled_msg_events": (GAUGE, "Reads cut short by a dispatch rate limit on "
                                                                 "messages, by the limit's kind"),
    "pulsar_subscription_dispatch_throttled_bytes_events": (GAUGE, "Reads cut short by a dispatch rate limit on "
                                                                   "bytes, by the limit's kind"),
    "pulsar_subscription_msg_rate_redeliver": (GAUGE, "Messages redelivered per second"),
    "pulsar_subscription_unacked_messages": (GAUGE, "Delivered, not acknowledged"),
    "pulsar_subscription_blocked_on_unacked_messages": (GAUGE, "1 when blocked on unacked messages"),
    "pulsar_subscription_msg_rate_out": (GAUGE, "Messages delivered per second"),
    "pulsar_subscription_msg_ack_rate": (GAUGE, "Acknowledgements per second"),
    "pulsar_subscription_msg_throughput_out": (GAUGE, "Bytes delivered per second"),
    "pulsar_subscription_last_expire_timestamp": (GAUGE, "Last expiry (epoch ms)"),
    "pulsar_subscription_last_acked_timestamp": (GAUGE, "Last ack (epoch ms)"),
    "pulsar_subscription_last_consumed_flow_timestamp": (GAUGE, "Last flow (epoch ms)"),
    "pulsar_subscription_last_consumed_timestamp": (GAUGE, "Last delivery (epoch ms)"),
    "pulsar_subscription_last_mark_delete_advanced_timestamp": (GAUGE, "Last mark-delete move (epoch ms)"),
    "pulsar_subscription_msg_rate_expired": (GAUGE, "Messages expired (TTL) per second"),
    "pulsar_subscription_total_msg_expired": (GAUGE, "Messages expired (TTL) in total"),
    "pulsar_subscription_msg_drop_rate": (GAUGE, "Messages dropped per second (non-persistent)"),
    "pulsar_subscription_consumers_count": (GAUGE, "Consumers of the subscription"),
    "pulsar_subscription_filter_processed_msg_count": (GAUGE, "Messages seen by entry filters (none here: 0)"),
    "pulsar_subscription_filter_accepted_msg_count": (GAUGE, "Messages entry filters accepted (none here: 0)"),
    "pulsar_subscription_filter_rejected_msg_count": (GAUGE, "Messages entry filters rejected (none here: 0)"),
    "pulsar_subscription_filter_rescheduled_msg_count": (GAUGE, "Messages entry filters put off (none here: 0)"),
    "pulsar_subscription_delayed_message_index_size_bytes": (GAUGE, "Memory of the delayed-delivery index"),
    # -- consumer (exposeConsumerLevelMetricsInPrometheus) --
    "pulsar_consumer_msg_rate_redeliver": (GAUGE, "Messages redelivered per second"),
    "pulsar_consumer_unacked_messages": (GAUGE, "Delivered, not acknowledged"),
    "pulsar_consumer_blocked_on_unacked_messages": (GAUGE, "1 when blocked on unacked messages"),
    "pulsar_consumer_msg_rate_out": (GAUGE, "Messages delivered per second"),
    "pulsar_consumer_msg_throughput_out": (GAUGE, "Bytes delivered per second"),
    "pulsar_consumer_available_permits": (GAUGE, "Permits the consumer has granted"),
    # -- replication (replicationMetricsEnabled; per remote_cluster) --
    "pulsar_replication_rate_in": (GAUGE, "Messages per second received from the remote cluster"),
    "pulsar_replication_rate_out": (GAUGE, "Messages per second sent to the remote cluster"),
    "pulsar_replication_throughput_in": (GAUGE, "Bytes per second received from the remote cluster"),
    "pulsar_replication_throughput_out": (GAUGE, "Bytes per second sent to the remote cluster"),
    "pulsar_replication_backlog": (GAUGE, "Entries not yet replicated"),
    "pulsar_replication_connected_count": (GAUGE, "Replicators connected to the remote cluster"),
    "pulsar_replication_disconnected_count": (GAUGE, "Replicators not connected to the remote cluster"),
    "pulsar_replication_rate_expired": (GAUGE, "Replication messages expired per second"),
    "pulsar_replication_delay_in_seconds": (GAUGE, "Age of the oldest message sent and not yet confirmed"),
    # -- replicated subscriptions (a topic replicated with enableReplicatedSubscriptions) --
    "pulsar_replicated_subscriptions_snapshot_ms": (SUMMARY, "Time a snapshot took to gather every cluster's "
                                                             "position (ms)"),
    "pulsar_replicated_subscriptions_pending_snapshots": (GAUGE, "Snapshots being gathered"),
    "pulsar_replicated_subscriptions_timedout_snapshots_total": (COUNTER, "Snapshots given up on (timed out)"),
    # -- compaction (topics compacted at least once) --
    "pulsar_compaction_removed_event_count": (GAUGE, "Messages compaction removed, all runs"),
    "pulsar_compaction_succeed_count": (GAUGE, "Compaction runs that succeeded"),
    "pulsar_compaction_failed_count": (GAUGE, "Compaction runs that failed"),
    "pulsar_compaction_duration_time_in_mills": (GAUGE, "Duration of the last compaction run (ms)"),
    "pulsar_compaction_read_throughput": (GAUGE, "Bytes per second the last run read"),
    "pulsar_compaction_write_throughput": (GAUGE, "Bytes per second the last run wrote"),
    "pulsar_compaction_compacted_entries_count": (GAUGE, "Entries in the compacted view"),
    "pulsar_compaction_compacted_entries_size": (GAUGE, "Bytes of the compacted view"),
    # -- managed-ledger cache (broker-wide) --
    "pulsar_ml_count": (GAUGE, "Open managed ledgers"),
    "pulsar_ml_cache_used_size": (GAUGE, "Bytes held by the entry cache"),
    "pulsar_ml_cache_entries": (GAUGE, "Entries held by the entry cache"),
    "pulsar_ml_cache_inserted_entries_total": (COUNTER, "Entries put in the entry cache"),
    "pulsar_ml_cache_evicted_entries_total": (COUNTER, "Entries that left the entry cache"),
    "pulsar_ml_cache_evictions": (GAUGE, "Entries that left the entry cache in the last stats interval"),
    "pulsar_ml_cache_hits_rate": (GAUGE, "Entries per second read from the cache"),
    "pulsar_ml_cache_misses_rate": (GAUGE, "Entries per second the cache did not have"),
    "pulsar_ml_cache_hits_throughput": (GAUGE, "Bytes per second read from the cache"),
    "pulsar_ml_cache_misses_throughput": (GAUGE, "Bytes per second of reads the cache did not have"),
    "pulsar_ml_cache_pendingreads_entries_read_total": (COUNTER, "Entries read from storage (cache misses)"),
    "pulsar_ml_cache_pendingreads_missed_total": (COUNTER, "Entries of cache misses that no read in flight had"),
    "pulsar_ml_reads_inflight_bytes": (GAUGE, "Bytes of reads in flight under the read limit (-1: no limit)"),
    "pulsar_ml_reads_available_inflight_bytes": (GAUGE, "Bytes the read limit still allows (-1: no limit)"),
    # -- managed ledgers per namespace (exposeManagedLedgerMetricsInPrometheus) --
    "pulsar_ml_AddEntryBytesRate": (GAUGE, "Bytes added per second"),
    "pulsar_ml_AddEntryWithReplicasBytesRate": (GAUGE, "Bytes added per second, times the copies kept"),
    "pulsar_ml_AddEntryMessagesRate": (GAUGE, "Entries added per second"),
    "pulsar_ml_AddEntrySucceed": (GAUGE, "Entries added in the last stats interval"),
    "pulsar_ml_AddEntryErrors": (GAUGE, "Adds that failed in the last stats interval"),
    "pulsar_ml_AddEntryLatencyBuckets": (GAUGE, "Adds of the last interval by latency range (quantile=ms range)"),
    "pulsar_ml_AddEntryLatencyBuckets_OVERFLOW": (GAUGE, "Adds of the last interval that took over 1 s"),
    "pulsar_ml_LedgerAddEntryLatencyBuckets": (GAUGE, "Ledger writes of the last interval by latency range"),
    "pulsar_ml_LedgerAddEntryLatencyBuckets_OVERFLOW": (GAUGE, "Ledger writes of the last interval over 1 s"),
    "pulsar_ml_EntrySizeBuckets": (GAUGE, "Entries of the last interval by size range (quantile=bytes range)"),
    "pulsar_ml_EntrySizeBuckets_OVERFLOW": (GAUGE, "Entries of the last interval over 1 MB"),
    "pulsar_ml_NumberOfMessagesInBacklog": (GAUGE, "Entries not yet acknowledged, all cursors"),
    "pulsar_ml_ReadEntriesRate": (GAUGE, "Entries read per second"),
    "pulsar_ml_ReadEntriesBytesRate": (GAUGE, "Bytes delivered per second (read bytes are not counted here)"),
    "pulsar_ml_ReadEntriesOpsCacheMissesRate": (GAUGE, "Read operations per second that missed the cache"),
    "pulsar_ml_ReadEntriesSucceeded": (GAUGE, "Entries read in the last stats interval"),
    "pulsar_ml_ReadEntriesErrors": (GAUGE, "Reads that failed in the last stats interval (not counted here: 0)"),
    "pulsar_ml_StoredMessagesSize": (GAUGE, "Bytes stored"),
    "pulsar_ml_MarkDeleteRate": (GAUGE, "Cursor states (mark-delete positions) written per second"),
    "pulsar_ml_LedgerSwitchLatencyBuckets": (GAUGE, "Ledger rollovers of the last interval by the time the next ledger "
                                                    "took to be ready (quantile=ms range)"),
    "pulsar_ml_LedgerSwitchLatencyBuckets_OVERFLOW": (GAUGE, "Ledger rollovers of the last interval over 1 s"),
    # -- managed cursors (exposeManagedCursorMetricsInPrometheus) --
    "pulsar_ml_cursor_nonContiguousDeletedMessagesRange": (GAUGE, "Ranges of individually acknowledged entries"),
    "pulsar_ml_cursor_persistLedgerSucceed": (GAUGE, "Cursor states written to the cursor's ledger (or state file)"),
    "pulsar_ml_cursor_persistLedgerErrors": (GAUGE, "Cursor state writes to the cursor's ledger that failed"),
    "pulsar_ml_cursor_persistZookeeperSucceed": (GAUGE, "Cursor states written to the metadata store"),
    "pulsar_ml_cursor_persistZookeeperErrors": (GAUGE, "Cursor state writes to the metadata store that failed"),
    "pulsar_ml_cursor_writeLedgerSize": (GAUGE, "Bytes of cursor states written, times the copies kept"),
    "pulsar_ml_cursor_writeLedgerLogicalSize": (GAUGE, "Bytes of cursor states written"),
    "pulsar_ml_cursor_readLedgerSize": (GAUGE, "Bytes of cursor states read back from the cursor's ledger"),
    # -- the process (what Pulsar's JVM process_* collector reports) come from prometheus_client --
    # -- ours --
    "pulsar_py_inactive_topics_deleted_total": (COUNTER, "Topics deleted as inactive (brokerDeleteInactiveTopics*)"),
    "pulsar_py_subscriptions_expired_total": (COUNTER, "Subscriptions deleted as abandoned (expiration)"),
    "pulsar_py_publish_rate_limited_total": (COUNTER, "Times the topic's publish rate limit held its publishers"),
    "pulsar_py_permit_invariant_drift": (GAUGE, "Times the dispatcher permit total drifted from the sum over "
                                                "consumers (must stay 0)"),
    "pulsar_py_subscription_msg_dropped_total": (COUNTER, "Messages a non-persistent subscription dropped"),
    "pulsar_py_storage_write_disabled": (GAUGE, "1 while the storage refuses new entries (the disk is full, over "
                                         "managedLedgerDiskUsageThreshold or under managedLedgerMinFreeDiskSpaceMB; "
                                         "on BookKeeper: too few writable bookies for an ensemble)"),
    "pulsar_py_bookkeeper_writable_bookies": (GAUGE, "Bookies registered writable (BookKeeper storage)"),
    "pulsar_py_bookkeeper_readonly_bookies": (GAUGE, "Bookies registered read-only, e.g. their disks over "
                                                     "diskUsageThreshold (BookKeeper storage)"),
    "pulsar_py_storage_disk_warning": (GAUGE, "1 while the data directory's disk is over "
                                       "managedLedgerDiskUsageWarnThreshold"),
    "pulsar_py_storage_disk_usage_ratio": (GAUGE, "Fraction of the data directory's file system in use"),
    "pulsar_py_storage_disk_free_bytes": (GAUGE, "Bytes available in the data directory's file system"),
    "pulsar_py_storage_writes_refused_total": (COUNTER, "Runs of adds refused by the free-space floor (or held for "
                                                         "want of writable bookies)"),
    "pulsar_py_storage_no_space_errors_total": (COUNTER, "Writes that failed with ENOSPC or EDQUOT"),
    "pulsar_py_ledger_fsync_latency_seconds": (HISTOGRAM, "Time an fsync of appended entries took"),
    "pulsar_py_ledger_group_commit_entries": (HISTOGRAM, "Entries made durable by one fsync"),
    "pulsar_py_ledger_entries_written_total": (COUNTER, "Entries made durable"),
    "pulsar_py_ledger_bytes_written_total": (COUNTER, "Bytes appended to ledger files"),
    "pulsar_py_ledger_cursor_persists_total": (COUNTER, "Cursor (subscription position) states written"),
    "pulsar_py_ledger_corrupt_records_total": (COUNTER, "Bad records found by recovery or reads"),
    "pulsar_py_ledger_truncated_bytes_total": (COUNTER, "Bytes cut from ledger file tails by recovery"),
    "pulsar_py_ledger_write_errors_total": (COUNTER, "Write or sync failures (each fences a managed ledger)"),
    "pulsar_py_ledger_read_errors_total": (COUNTER, "Reads that failed"),
    "pulsar_py_ledger_segment_reopens_total": (COUNTER, "Ledger files reopened after being closed under the "
                                                        "open-file limit"),
    "pulsar_py_ledger_cache_hits_total": (COUNTER, "Managed-ledger read-cache lookups that hit"),
    "pulsar_py_ledger_cache_misses_total": (COUNTER, "Managed-ledger read-cache lookups that missed"),
    "pulsar_py_ledger_cache_hit_ratio": (GAUGE, "Read-cache hits / lookups"),
}
COMPACTION_LATENCY = ("pulsar_compaction_latency", _LATENCY_BUCKETS,
                      "Compacted-ledger writes of all runs by latency (ms bound); _sum in us")
# Pulsar's transaction coordinator execution latency buckets (ms bounds; TransactionAggregator's names).
TXN_EXECUTION_LATENCY = tuple(f"pulsar_txn_execution_latency_le_{b}" for b in (
    "10", "20", "50", "100", "500", "1000", "5000", "15000", "30000", "60000", "300000", "1500000", "3000000",
    "overflow"))
for _name in TXN_EXECUTION_LATENCY:
    FAMILIES[_name] = (GAUGE, "Transactions ended since the last scrape that were open this long (ms bound)")
for _prefix, _names, _doc in (*ADD_BUCKETS, COMPACTION_LATENCY):
    for _name in (*_names, "count", "sum"):
        FAMILIES[f"{_prefix}_{_name}"] = (GAUGE, _doc)
