"""Timer keys of streams groups."""

from __future__ import annotations

SESSION = "sg-streams-session"
REBALANCE = "sg-streams-rebalance"
INITIAL = "sg-streams-initial"


def session_key(group_id: str, member_id: str) -> tuple:
    """The member is fenced when no heartbeat arrives within the session timeout."""
    return (SESSION, group_id, member_id)


def rebalance_key(group_id: str, member_id: str) -> tuple:
    """The member is fenced when it does not revoke tasks within its rebalance timeout."""
    return (REBALANCE, group_id, member_id)


def initial_key(group_id: str) -> tuple:
    """The first assignment of a group that had no members waits for more to join
    (group.streams.initial.rebalance.delay.ms)."""
    return (INITIAL, group_id)
