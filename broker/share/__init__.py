"""The share-partition side of share groups (KIP-932) in the broker runtime.

`sessions` holds the share fetch sessions of members (Kafka's ShareSessionCache rules),
`partitions` one `coordinator.share.partition.SharePartition` per (group, topic id, partition)
with the timer that expires acquisition locks, `reads` turns acquired ranges into the record
batches a ShareFetch answers with, `state_log` keeps share-partitions in one log per topic
partition (`legacy` moves the old single-node layout to it), `group_configs` the per-group
overrides (share.auto.offset.reset, share.record.lock.duration.ms), and `runtime`
(`BrokerState.share`) holds them together. The APIs are `broker/apis/share_fetch.py`,
`broker/apis/share_acknowledge.py` and the offset admin APIs
`broker/apis/{describe,alter,delete}_share_group_offsets.py`.
"""
