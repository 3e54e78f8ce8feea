"""OffsetCommit and OffsetFetch validation for consumer groups (Kafka's
ConsumerGroup.validateOffsetCommit with KIP-1251 assignment epochs, and validateOffsetFetch).

A commit carrying the member's current epoch is accepted. One carrying an older epoch (the
member has not yet seen the heartbeat response that bumped it) is accepted per partition when
the member holds the partition and was assigned it at or before that epoch; anything else is
STALE_MEMBER_EPOCH. Consumer-protocol members must use OffsetCommit v9 or later.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.modern.group import ConsumerGroup
from protocol.errors import ErrorCode

# OffsetCommit v9 is the first that consumer-protocol members may use.
MEMBER_EPOCH_COMMIT_VERSION = 9

PartitionCheck = Callable[[str, int], ErrorCode]


def validate_commit(
    group: ConsumerGroup, member_id: str, epoch: int, version: int
) -> tuple[ErrorCode, PartitionCheck | None]:
    """(group-level error, per-partition check or None when every partition is fine)."""
    if epoch < 0 and not group.members:
        return ErrorCode.NONE, None  # the admin client, or a consumer assigning itself
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID, None
    if version < MEMBER_EPOCH_COMMIT_VERSION and not member.uses_classic_protocol():
        return ErrorCode.UNSUPPORTED_VERSION, None
    if epoch == member.member_epoch:
        return ErrorCode.NONE, None
    if epoch > member.member_epoch or epoch < 0:
        return ErrorCode.STALE_MEMBER_EPOCH, None
    ids = {name: t.topic_id for name, t in group.subscription_metadata.items()}
    epochs = member.assignment_epochs

    def check(topic: str, partition: int) -> ErrorCode:
        tid = ids.get(topic)
        assigned_at = None if tid is None else epochs.get((tid, partition))
        if assigned_at is None or assigned_at > epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    return ErrorCode.NONE, check


def validate_fetch(group: ConsumerGroup, member_id: str | None, epoch: int) -> ErrorCode:
    """An OffsetFetch (v9+) naming a member must come from a current member at its current
    epoch; one without a member id and epoch (the admin client) is always accepted."""
    if member_id is None and epoch < 0:
        return ErrorCode.NONE
    member = group.members.get(member_id) if member_id is not None else None
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if epoch != member.member_epoch:
        # A classic-protocol member's epoch is its generation.
        if member.uses_classic_protocol():
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.STALE_MEMBER_EPOCH
    return ErrorCode.NONE
