"""The group coordinator: pure state machines driven by the broker's runtime.

- `shard.Shard`: one per `__consumer_offsets` partition, the facade the runtime calls; every
  call takes `now` (ms) and returns a `result.Result` (records, replies, timers, cancels).
- `classic/`: the classic protocol. `group` (the group and member model, the protocol vote,
  GroupMetadata record mapping), `rebalance` (prepare/complete a rebalance, answering parked
  requests), `join`, `sync`, `heartbeat`, `leave`, `describe`, `consumer_protocol` (the
  subscribed topics inside a consumer's metadata), `responses` (per-version reply shapes).
- `offsets`: the committed-offset store, OffsetCommit/Fetch/Delete and retention.
- `groups`: DeleteGroups. `keys`: timer and record keys. `context`: one call's working state.
- `config.GroupConfig`: Kafka's settings by name. `partitioning.partition_for`: which shard.

Nothing here imports asyncio, the broker or storage.
"""
