"""KIP-848 consumer groups: the coordinator owns the assignment, members reconcile towards it.

- `topics`: the topic-metadata snapshot (TopicsImage) the runtime hands in.
- `member`, `group`: the model (ConsumerGroupMember, ConsumerGroup) and its indexes.
- `records`, `replay`: the ConsumerGroup* records (types 3-8, 16) and how they fold in.
- `heartbeat`: ConsumerGroupHeartbeat; `membership`: fencing, static leave, timeouts, the
  classic <-> consumer conversion of empty groups; `reconcile`: the current-assignment state
  machine; `target`: the target assignment from a server assignor (`coordinator.assignors`).
- `regex`: regular-expression subscriptions; `commit`: member-epoch offset commit validation;
  `describe`: ConsumerGroupDescribe and the DescribeGroups/ListGroups views.
"""
