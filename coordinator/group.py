"""What every kind of group offers the code that does not care about its kind (Kafka's
group-coordinator `Group` interface): offsets, describe, delete and expiry call these, never
an if/else on the kind. Classic, consumer, share and streams groups implement it (a consumer
group holding classic members is a consumer group).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

from coordinator.modern.topics_image import TopicsImage
from protocol.coordinator_records import OffsetCommitValue
from protocol.errors import ErrorCode
from protocol.messages import DescribeGroupsResponse, ListGroupsResponse

# A per-partition verdict on an OffsetCommit: (topic, partition) -> error.
PartitionCheck = Callable[[str, int], ErrorCode]
# The time an offset's retention counts from.
ExpirationCondition = Callable[[OffsetCommitValue], int]
Record = tuple[Any, Any | None]


class MemberChange(NamedTuple):
    """A member that a replayed record added to its group (joined) or removed from it (left):
    how the shard tells who joined or left during a call, for its RebalanceEvents."""

    group_id: str
    joined: bool
    member_id: str


@runtime_checkable
class Group(Protocol):
    group_id: str

    @property
    def type(self) -> str:
        """The kind of group ("classic", "consumer"): ListGroups' group type, the metrics' label."""
        ...

    @property
    def state(self) -> Any:
        """The group's state; `str()` of it is Kafka's state name."""
        ...

    @property
    def members(self) -> Mapping[str, object]:
        """The members by id (each kind has its own member class)."""
        ...

    @property
    def protocol_type(self) -> str | None:
        """What ListGroups and DescribeGroups report as the protocol type."""
        ...

    def is_empty(self) -> bool:
        """No members, and nobody in the middle of joining."""
        ...

    def is_simple(self) -> bool:
        """A group that only holds committed offsets (a commit made it; nobody ever joined):
        any kind of group may take its id."""
        ...

    def validate_offset_commit(
        self, member_id: str, instance_id: str | None, generation: int, version: int
    ) -> tuple[ErrorCode, PartitionCheck | None]:
        """(group-level error, per-partition check or None when every partition is fine)."""
        ...

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode: ...

    def validate_offset_delete(self) -> ErrorCode: ...

    def validate_delete_group(self) -> ErrorCode: ...

    def is_subscribed_to_topic(self, topic: str) -> bool: ...

    def offset_expiration_condition(self) -> ExpirationCondition | None:
        """How old an offset is, for retention; None while the group's offsets do not
        expire (offsets written with an explicit expiry still do)."""
        ...

    def should_expire(self) -> bool:
        """Whether the group goes once all its offsets have expired."""
        ...

    def session_renewal(self, member_id: str) -> tuple[tuple, int] | None:
        """The session timer (key, timeout) an offset commit of this member renews, if any."""
        ...

    def tombstone_records(self) -> list[Record]:
        """The records that delete the group (its offsets aside)."""
        ...

    def describe(self, topics: TopicsImage) -> DescribeGroupsResponse.DescribedGroup:
        """DescribeGroups' DescribedGroup; `topics` is the latest TopicsImage."""
        ...

    def listed(self) -> ListGroupsResponse.ListedGroup:
        """ListGroups' ListedGroup."""
        ...


def commit_timestamp(om: OffsetCommitValue) -> int:
    return om.commit_timestamp
