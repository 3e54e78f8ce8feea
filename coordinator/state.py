"""What one shard knows: its groups (one map, every kind behind `coordinator.group.Group`), the
committed offsets, the deadlines of its timers and the latest topic metadata; and `replay`,
the fold of records into them.

Handlers reach this only through `Ctx`: they read it, and change the groups and offsets only by
writing records (`Ctx.append`, which replays them here). A classic group's transient rebalance
state (parked requests, pending members) is the exception, as in Kafka: no record carries it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from coordinator.classic.group import ClassicGroup
from coordinator.config import GroupConfig
from coordinator.group import Group, MemberChange
from coordinator.modern import replay as _modern_replay
from coordinator.modern.group import ConsumerGroup
from coordinator.modern.topics_image import EMPTY_IMAGE, TopicsImage
from coordinator.offset_store import OffsetStore
from coordinator.share import group as _share_group
from coordinator.share import records as _share_records
from coordinator.share.group import ShareGroup
from coordinator.streams import group as _streams_group
from coordinator.streams import records as _streams_records
from coordinator.streams.group import StreamsGroup
from coordinator.streams.keys import initial_key as _streams_initial_key
from protocol.coordinator_records import (
    ConsumerGroupMetadataKey,
    GroupMetadataKey,
    OffsetCommitKey,
    ShareGroupMetadataKey,
    StreamsGroupMemberMetadataKey,
    StreamsGroupMetadataKey,
)


class ShardState:
    def __init__(self, config: GroupConfig, new_uuid: Callable[[], str] | None = None) -> None:
        self.config = config
        # Member ids end in a random UUID, as Kafka's; tests pass a counter instead.
        self.new_uuid: Callable[[], str] = new_uuid or (lambda: str(uuid.uuid4()))
        self.groups: dict[str, Group] = {}
        self.offsets = OffsetStore()
        # Deadline of every timer the shard has asked for and not cancelled; a timer that
        # fires for a key not here (or too early) is stale and ignored.
        self.deadlines: dict[tuple, int] = {}
        # The latest topic metadata handed in (for describing consumer groups).
        self.topics: TopicsImage = EMPTY_IMAGE
        # TxnOffsetCommit offsets waiting for their transaction's marker, per producer id:
        # (group, topic, partition) -> the offset, or None once a plain commit of that
        # partition came after it (Kafka keeps the newer of the two when the marker commits).
        self.pending_txn: dict[int, dict[tuple[str, str, int], Any]] = {}

    # -- lookups of one kind, for the APIs of that kind -----------------------------------------

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        group = self.groups.get(group_id)
        return group if type(group) is ClassicGroup else None

    def streams_group(self, group_id: str) -> StreamsGroup | None:
        group = self.groups.get(group_id)
        return group if type(group) is StreamsGroup else None

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        group = self.groups.get(group_id)
        return group if type(group) is ConsumerGroup else None

    # -- replay -----------------------------------------------------------------------------------

    def replay(self, key: Any, value: Any | None) -> MemberChange | None:
        """Apply one record: from the log at load time, or just written by a handler. Returns
        the consumer-group member that joined or left with it, if any."""
        groups = self.groups
        if type(key) is OffsetCommitKey:  # most records: tested first
            if value is not None and key.group not in groups:
                # Offsets without a group: a "simple" group (no protocol type) holds them.
                groups[key.group] = ClassicGroup(key.group, None)
            self.offsets.replay(key, value)
            if self.pending_txn and value is not None:
                self._supersede(key.group, key.topic, (key.partition,))
        elif isinstance(key, _modern_replay.KEY_TYPES):
            gid = key.group_id
            group = groups.get(gid)
            if type(group) is not ConsumerGroup:
                if value is None:
                    return None  # a tombstone for a group that is gone
                if group is not None and not group.is_simple():
                    raise ValueError(f"group {gid} is a {group.type} group, not a consumer group")
                # A consumer group takes over the id of a group that only holds offsets.
                group = groups[gid] = ConsumerGroup(gid)
            if value is None and type(key) is ConsumerGroupMetadataKey:
                del groups[gid]
                if self.offsets.of_group(gid):
                    # Its committed offsets stay, held by a simple group.
                    groups[gid] = ClassicGroup(gid, None)
                return None
            return _modern_replay.apply(group, key, value)
        elif isinstance(key, _share_records.KEY_TYPES):
            return self._replay_share(key, value)
        elif isinstance(key, _streams_records.KEY_TYPES):
            return self._replay_streams(key, value)
        elif isinstance(key, GroupMetadataKey):
            gid = key.group
            group = groups.get(gid)
            if group is not None and type(group) is not ClassicGroup:
                if value is None:
                    return None  # a classic group's tombstone, and the id has moved on
                raise ValueError(f"group {gid} is a {group.type} group, not a classic group")
            if value is None:
                groups.pop(gid, None)
                return None
            if group is None:
                group = groups[gid] = ClassicGroup(gid, None)
            group.apply_metadata(value)
        return None

    def _replay_share(self, key: Any, value: Any | None) -> MemberChange | None:
        gid = key.group_id
        group = self.groups.get(gid)
        if type(group) is not ShareGroup:
            if value is None:
                return None  # a tombstone for a group that is gone
            if group is not None and not group.is_simple():
                raise ValueError(f"group {gid} is a {group.type} group, not a share group")
            group = self.groups[gid] = ShareGroup(gid)
        if value is None and type(key) is ShareGroupMetadataKey:
            del self.groups[gid]
            if self.offsets.of_group(gid):
                self.groups[gid] = ClassicGroup(gid, None)
            return None
        _share_group.apply(group, key, value)
        return None

    def _replay_streams(self, key: Any, value: Any | None) -> MemberChange | None:
        gid = key.group_id
        group = self.groups.get(gid)
        if type(group) is not StreamsGroup:
            if value is None:
                return None  # a tombstone for a group that is gone
            if group is not None and not group.is_simple():
                raise ValueError(f"group {gid} is a {group.type} group, not a streams group")
            group = self.groups[gid] = StreamsGroup(gid)
        if value is None and type(key) is StreamsGroupMetadataKey:
            del self.groups[gid]
            # Its pending first assignment goes with it (Kafka cancels the timer).
            self.deadlines.pop(_streams_initial_key(gid), None)
            if self.offsets.of_group(gid):
                self.groups[gid] = ClassicGroup(gid, None)
            return None
        was_member = getattr(key, "member_id", None) in group.members
        if _streams_group.apply(group, key, value):
            return MemberChange(gid, True, key.member_id)
        if value is None and type(key) is StreamsGroupMemberMetadataKey and was_member:
            return MemberChange(gid, False, key.member_id)
        return None

    def replay_offset_commits(self, group: str, topic: str, records: list[tuple[Any, Any]]) -> None:
        """`replay` of OffsetCommit records of one group and topic, none a tombstone."""
        if group not in self.groups:
            self.groups[group] = ClassicGroup(group, None)
        self.offsets.put_records(group, topic, records)
        if self.pending_txn:
            self._supersede(group, topic, [k.partition for k, _ in records])

    # -- transactional offsets ----------------------------------------------------------------

    def replay_txn_offsets(self, producer_id: int, records: list[tuple[Any, Any]]) -> None:
        """OffsetCommit records written by a transaction: pending until its marker."""
        pending = self.pending_txn.setdefault(producer_id, {})
        for key, value in records:
            pending[(key.group, key.topic, key.partition)] = value

    def end_txn(self, producer_id: int, commit: bool) -> None:
        """The marker of ``producer_id``'s transaction: its offsets become the committed ones
        (commit) or vanish (abort)."""
        pending = self.pending_txn.pop(producer_id, None)
        if not commit or not pending:
            return
        for (group, topic, partition), value in pending.items():
            if value is not None:
                self.replay(OffsetCommitKey.make(group, topic, partition), value)

    def has_pending(self, group: str, topic: str, partition: int) -> bool:
        k = (group, topic, partition)
        return any(k in pending for pending in self.pending_txn.values())

    def _supersede(self, group: str, topic: str, partitions: Any) -> None:
        for pending in self.pending_txn.values():
            for p in partitions:
                if (group, topic, p) in pending:
                    pending[(group, topic, p)] = None
