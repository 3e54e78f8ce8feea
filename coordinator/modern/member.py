"""A member of a KIP-848 consumer group, as Kafka's ConsumerGroupMember.

Members are values: a handler builds an updated copy (`dataclasses.replace`), writes the
records that describe it, and replay puts the copy in the group. Two records carry a member:
ConsumerGroupMemberMetadata (who it is and what it subscribes to) and
ConsumerGroupCurrentMemberAssignment (its epoch, reconciliation state and partitions).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

from coordinator.modern.assignment import EMPTY, Assignment, from_topic_partitions
from coordinator.modern.assignment import to_topic_partitions as _tps
from protocol.coordinator_records import (
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataValue,
)

ClassicMetadata = ConsumerGroupMemberMetadataValue.ClassicMemberMetadata
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(enum.IntEnum):
    STABLE = 0  # reconciled, or has everything it can get at its epoch
    UNREVOKED_PARTITIONS = 1  # must give up partitions before its epoch moves
    UNRELEASED_PARTITIONS = 2  # waits for partitions other members still hold
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    # set only for a member that joined with the classic protocol
    classic_metadata: ConsumerGroupMemberMetadataValue.ClassicMemberMetadata | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # KIP-1251: the member epoch at which each held partition was assigned. Derived while
    # replaying CurrentMemberAssignment records (a partition new to the member gets the
    # record's epoch), so live state and a replayed log agree.
    assignment_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)

    # -- queries ------------------------------------------------------------------------------

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def metadata_key(self) -> tuple:
        """What the metadata record carries: a member whose key is unchanged needs none."""
        return (
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.rebalance_timeout_ms,
            self.server_assignor,
            self.classic_metadata,
        )

    def assignment_key(self) -> tuple:
        return (
            self.member_epoch,
            self.previous_member_epoch,
            self.state,
            self.assigned,
            self.pending_revocation,
        )

    def uses_classic_protocol(self) -> bool:
        return self.classic_metadata is not None

    def classic_protocols(self) -> list[tuple[str, bytes]]:
        """A classic member's JoinGroup protocols (name, subscription), in its preference order."""
        cm = self.classic_metadata
        return [] if cm is None else [(p.name, p.metadata) for p in cm.supported_protocols]

    def classic_session_timeout_ms(self) -> int:
        cm = self.classic_metadata
        assert cm is not None, "only a classic member has a classic session timeout"
        return int(cm.session_timeout_ms)

    # -- records ------------------------------------------------------------------------------

    def metadata_value(self) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(
            instance_id=self.instance_id,
            rack_id=self.rack_id,
            client_id=self.client_id,
            client_host=self.client_host,
            subscribed_topic_names=sorted(self.subscribed_topic_names),
            subscribed_topic_regex=self.subscribed_topic_regex,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            server_assignor=self.server_assignor,
            classic_member_metadata=self.classic_metadata,
        )

    def assignment_value(self) -> ConsumerGroupCurrentMemberAssignmentValue:
        tps = ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions
        return ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=self.member_epoch,
            previous_member_epoch=self.previous_member_epoch,
            state=int(self.state),
            assigned_partitions=_tps(self.assigned, tps),
            partitions_pending_revocation=_tps(self.pending_revocation, tps),
        )

    def with_metadata(self, value: ConsumerGroupMemberMetadataValue) -> ConsumerGroupMember:
        m = _copy(self)
        m.instance_id = value.instance_id
        m.rack_id = value.rack_id
        m.client_id = value.client_id
        m.client_host = value.client_host
        m.subscribed_topic_names = frozenset(value.subscribed_topic_names)
        m.subscribed_topic_regex = value.subscribed_topic_regex or None
        m.rebalance_timeout_ms = value.rebalance_timeout_ms
        m.server_assignor = value.server_assignor
        m.classic_metadata = value.classic_member_metadata
        return m

    def with_assignment(
        self, value: ConsumerGroupCurrentMemberAssignmentValue
    ) -> ConsumerGroupMember:
        m = _copy(self)
        m.member_epoch = value.member_epoch
        m.previous_member_epoch = value.previous_member_epoch
        m.state = MemberState.of(value.state)
        m.assigned = _reuse(self.assigned, from_topic_partitions(value.assigned_partitions))
        m.pending_revocation = _reuse(
            self.pending_revocation, from_topic_partitions(value.partitions_pending_revocation)
        )
        m.assignment_epochs = _assignment_epochs(self, m)
        return m

    def left(self) -> ConsumerGroupMember:
        """What a CurrentMemberAssignment tombstone leaves of the member."""
        m = _copy(self)
        m.member_epoch = m.previous_member_epoch = LEAVE_EPOCH
        m.assigned = EMPTY
        m.pending_revocation = EMPTY
        m.assignment_epochs = {}
        return m


def classic_metadata(
    session_timeout_ms: int, protocols: list[tuple[str, bytes]]
) -> ClassicMetadata:
    """What the member record keeps of a classic member's JoinGroup."""
    return ClassicMetadata(
        session_timeout_ms=session_timeout_ms,
        supported_protocols=[
            ConsumerGroupMemberMetadataValue.ClassicProtocol(name=n, metadata=m)
            for n, m in protocols
        ],
    )


def _copy(m: ConsumerGroupMember) -> ConsumerGroupMember:
    return ConsumerGroupMember(
        m.member_id,
        m.instance_id,
        m.rack_id,
        m.client_id,
        m.client_host,
        m.subscribed_topic_names,
        m.subscribed_topic_regex,
        m.rebalance_timeout_ms,
        m.server_assignor,
        m.classic_metadata,
        m.member_epoch,
        m.previous_member_epoch,
        m.state,
        m.assigned,
        m.pending_revocation,
        m.assignment_epochs,
    )


def _reuse(old: Assignment, new: dict) -> Assignment:
    return old if old == new else new


def _assignment_epochs(old: ConsumerGroupMember, new: ConsumerGroupMember) -> dict:
    if old.assigned is new.assigned and old.pending_revocation is new.pending_revocation:
        return old.assignment_epochs
    epoch = max(new.member_epoch, 0)
    prev = old.assignment_epochs
    out: dict[tuple[uuid.UUID, int], int] = {}
    for assignment in (new.assigned, new.pending_revocation):
        for t, ps in assignment.items():
            for p in ps:
                out[(t, p)] = prev.get((t, p), epoch)
    return out
