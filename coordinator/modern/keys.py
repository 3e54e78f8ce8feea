"""Timer keys of consumer-group members."""

from __future__ import annotations

SESSION = "cg-session"
REBALANCE = "cg-rebalance"


def session_key(group_id: str, member_id: str) -> tuple:
    """The member is fenced when no heartbeat arrives within the session timeout."""
    return (SESSION, group_id, member_id)


def rebalance_key(group_id: str, member_id: str) -> tuple:
    """The member is fenced when it does not revoke partitions within its rebalance timeout."""
    return (REBALANCE, group_id, member_id)


JOIN = "cg-join"
SYNC = "cg-sync"


def join_key(group_id: str, member_id: str) -> tuple:
    """A classic member told to rejoin (REBALANCE_IN_PROGRESS) is fenced when it does not
    within its rebalance timeout."""
    return (JOIN, group_id, member_id)


def sync_key(group_id: str, member_id: str) -> tuple:
    """A classic member that joined is fenced when it does not send SyncGroup within its
    rebalance timeout."""
    return (SYNC, group_id, member_id)


def member_timer_keys(group_id: str, member_id: str) -> tuple[tuple, ...]:
    return (
        session_key(group_id, member_id),
        rebalance_key(group_id, member_id),
        join_key(group_id, member_id),
        sync_key(group_id, member_id),
    )
