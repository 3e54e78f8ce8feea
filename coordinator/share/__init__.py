"""Share groups (KIP-932, "queues for Kafka").

The group side: `group.ShareGroup`, its records, ShareGroupHeartbeat and the simple assignor.
The share-partition side: `partition.SharePartition` is one partition's in-flight records for one
share group (acquire, acknowledge, lock expiry, the start offset); `persisted` is its state as the
share coordinator's ShareSnapshot and ShareUpdate records carry it, and `state_replay` folds
those records back into it (for the broker's start and the exporter's report). Pure, like the
rest of coordinator/: time comes in as `now`, state to persist goes out as values.
"""
