"""The steady-state classic Heartbeat: a member of a Stable group at its generation.

Almost every heartbeat of a formed group is of this kind, and its only effect is the member's
renewed session deadline; the reply is NONE. The full path (`heartbeat.heartbeat`) builds a
`Ctx`, a timer, a `Result` and a response for it. This answers it from a few comparisons and
leaves the runtime to push the session timer; anything else (another state, an unknown or
static member that is not the holder of its id, another generation, a group of another kind)
returns None and takes the full path, which stays the one definition of the protocol.
`tests/coordinator/test_steady_heartbeat.py` runs both paths on the same requests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.classic.group import STABLE, ClassicGroup
from coordinator.keys import heartbeat_key
from protocol.errors import ErrorCode
from protocol.messages import HeartbeatRequest

if TYPE_CHECKING:
    from coordinator.state import ShardState


def steady_heartbeat(state: ShardState, req: HeartbeatRequest, now: int) -> tuple | None:
    """The session timer's key and new deadline of a steady-state heartbeat (renewed in
    ``state``; the reply is NONE), or None when the full path must answer."""
    group_id = req.group_id
    group = state.groups.get(group_id) if group_id else None
    if type(group) is not ClassicGroup or group.state is not STABLE:
        return None
    member_id = req.member_id
    member = group.members.get(member_id)
    if member is None or req.generation_id != group.generation:
        return None
    if (
        req.group_instance_id is not None
        and group.validate_member(member_id, req.group_instance_id) != ErrorCode.NONE
    ):
        return None
    key = heartbeat_key(group_id, member_id)
    deadline = now + max(0, member.session_timeout_ms)
    state.deadlines[key] = deadline
    return key, deadline
