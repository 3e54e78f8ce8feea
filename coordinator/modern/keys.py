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
