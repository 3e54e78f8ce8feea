"""Timer keys and record keys, in one place so handlers and tests agree on them."""

from __future__ import annotations

from protocol.coordinator_records import GroupMetadataKey, OffsetCommitKey


def heartbeat_key(group_id: str, member_id: str) -> tuple:
    """Session expiry of a member (or of a pending member id handed out by JoinGroup v4+)."""
    return ("heartbeat", group_id, member_id)


def join_key(group_id: str) -> tuple:
    """End of the join phase: the initial-rebalance delay or the rebalance timeout."""
    return ("join", group_id)


def sync_key(group_id: str) -> tuple:
    """Members that have not sent SyncGroup within the rebalance timeout are removed."""
    return ("sync", group_id)


def group_record_key(group_id: str) -> GroupMetadataKey:
    return GroupMetadataKey(group=group_id)


def offset_record_key(group_id: str, topic: str, partition: int) -> OffsetCommitKey:
    return OffsetCommitKey(group=group_id, topic=topic, partition=partition)
