"""KIP-848 consumer groups: the coordinator owns the assignment, members reconcile towards it.

- `topics`: the topic-metadata snapshot (TopicsImage) the runtime hands in.
- `member`, `group`: the model (ConsumerGroupMember, ConsumerGroup: its indexes, and the
  `coordinator.group.Group` protocol: member-epoch offset commit and fetch validation, the
  DescribeGroups/ListGroups views, tombstones).
- `records`, `replay`: the ConsumerGroup* records (types 3-8, 16) and how they fold into a
  group (which group, and its creation and deletion, is `coordinator.state`'s).
- `heartbeat`: ConsumerGroupHeartbeat; `membership`: fencing, static leave, timeouts, an
  empty group of another kind becoming a consumer group, timers after a load; `reconcile`:
  the current-assignment state machine; `target`: the target assignment from a server
  assignor (`coordinator.assignors`).
- `regex`: regular-expression subscriptions; `describe`: ConsumerGroupDescribe.
"""
