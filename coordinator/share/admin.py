"""The group coordinator's part of the share-group offset admin APIs (KIP-932), as Kafka 4.x
does it: AlterShareGroupOffsets and DeleteShareGroupOffsets need an empty share group; the
share-partition state itself is the broker's (broker/share/partitions.py).

* Alter (`prepare_alter`): a group that does not exist yet is created (Kafka 4.2,
  KAFKA-19662: offsets may be set before a share group is first used); an empty share group's
  epoch is bumped and written (ShareGroupMetadata), and the new epoch is the state epoch of the
  share-partitions it initialises. A group of another kind: GROUP_ID_NOT_FOUND; members:
  NON_EMPTY_GROUP.
* Delete (`check_delete`): the group must be an empty share group (GROUP_ID_NOT_FOUND,
  NON_EMPTY_GROUP otherwise); nothing is written here.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.context import Ctx
from coordinator.share import records
from coordinator.share.group import ShareGroup
from protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class Verdict:
    error: int  # an ErrorCode
    message: str | None = None
    epoch: int = -1  # the group epoch after an accepted alter


def _empty_share_group(group_id: str, group: object | None) -> Verdict | None:
    """The refusal for an existing group, if any."""
    if not isinstance(group, ShareGroup):
        return Verdict(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
    if not group.is_empty():
        return Verdict(
            ErrorCode.NON_EMPTY_GROUP,
            f"Share group {group_id} has members: its offsets change only while it is empty.",
        )
    return None


def prepare_alter(ctx: Ctx, group_id: str) -> Verdict:
    group = ctx.state.groups.get(group_id)
    epoch = 1
    if group is not None:
        refused = _empty_share_group(group_id, group)
        if refused is not None:
            return refused
        assert isinstance(group, ShareGroup)
        epoch = group.group_epoch + 1
    ctx.append(*records.group_epoch(group_id, epoch))  # creates the group when it is new
    return Verdict(ErrorCode.NONE, None, epoch)


def check_delete(group_id: str, group: object | None) -> Verdict:
    if group is None:
        return Verdict(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
    return _empty_share_group(group_id, group) or Verdict(ErrorCode.NONE)
