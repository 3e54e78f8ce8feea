"""The group coordinator: pure state machines driven by the broker's runtime.

Layers, each importing only those below it (tests/coordinator/test_layering.py checks):

- `shard.Shard`: one per `__consumer_offsets` partition, the facade the runtime calls; it routes
  each call to its handler and reports completed KIP-848 rebalances. Every call takes `now`
  (ms) and returns a `result.Result` (records, replies, timers, cancels, events).
- handlers: `offsets` (OffsetCommit/Fetch/Delete, retention, deleted topics), `groups`
  (DeleteGroups), `classic/` (join, sync, heartbeat, leave, the rebalance machinery) and
  `modern/` (ConsumerGroupHeartbeat, fencing, ConsumerGroupDescribe).
- `context.Ctx`: one call's working state over the shard's state; records go through it.
- `state.ShardState`: one map of groups, the `offset_store.OffsetStore`, timer deadlines, and
  `replay`, the fold of records into them.
- models: `group.Group`, the protocol every kind of group implements (offsets, describe,
  delete and expiry use only it); `classic/group.ClassicGroup`, `modern/group.ConsumerGroup`.
- `config.GroupConfig`: Kafka's settings by name. `partitioning.partition_for`: which shard.
  `keys`: timer and record keys.

Nothing here imports asyncio, the broker or storage.
"""
