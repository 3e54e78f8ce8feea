"""Response shapes of the classic group APIs, with Kafka's per-version quirks."""

from __future__ import annotations

from collections.abc import Sequence

from protocol.errors import ErrorCode
from protocol.messages import JoinGroupResponse, SyncGroupResponse


def join_response(
    version: int,
    *,
    error: int = ErrorCode.NONE,
    member_id: str = "",
    generation: int = -1,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    leader: str = "",
    skip_assignment: bool = False,
    members: Sequence[JoinGroupResponse.JoinGroupResponseMember] = (),
) -> JoinGroupResponse:
    # JoinGroupResponse v0-6 cannot carry a null protocol name and v7+ must not carry an
    # empty one: Kafka's JoinGroupResponse constructor rewrites one into the other.
    if version < 7 and protocol_name is None:
        protocol_name = ""
    elif version >= 7 and protocol_name == "":
        protocol_name = None
    return JoinGroupResponse(
        error_code=int(error),
        generation_id=generation,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        leader=leader or "",
        skip_assignment=skip_assignment,
        member_id=member_id,
        members=list(members),
    )


def sync_response(
    *,
    error: int = ErrorCode.NONE,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    assignment: bytes = b"",
) -> SyncGroupResponse:
    return SyncGroupResponse(
        error_code=int(error),
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignment=assignment,
    )
