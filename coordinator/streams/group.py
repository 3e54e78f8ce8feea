"""A streams group (KIP-1071), as Kafka's StreamsGroup: the hard state its StreamsGroup* records
fold into, indexes kept in step with it (which process holds each task in each role), and what
no record carries (the configured topology, a shutdown request, the endpoint epoch).

Everything here changes only through `apply` (the replay of one record) and the transient
fields the heartbeat sets; handlers read it and build records.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from coordinator.group import ExpirationCondition, PartitionCheck, Record, commit_timestamp
from coordinator.modern.topics_image import TopicsImage
from coordinator.streams import records
from coordinator.streams.configure import ConfiguredTopology
from coordinator.streams.member import LEAVE_EPOCH, StreamsGroupMember
from coordinator.streams.tasks import EMPTY, TaskMap, Tasks, task_map
from coordinator.streams.topology import Topology, from_message
from protocol.coordinator_records import (
    StreamsGroupCurrentMemberAssignmentKey,
    StreamsGroupMemberMetadataKey,
    StreamsGroupMetadataKey,
    StreamsGroupTargetAssignmentMemberKey,
    StreamsGroupTargetAssignmentMetadataKey,
    StreamsGroupTopologyKey,
)
from protocol.errors import ErrorCode
from protocol.messages import DescribeGroupsResponse, ListGroupsResponse

# OffsetCommit v9 is the first that streams-protocol members may use (Kafka's check).
MEMBER_EPOCH_COMMIT_VERSION = 9


class StreamsGroupState(enum.Enum):
    EMPTY = "Empty"
    NOT_READY = "NotReady"  # no topology, or its topics not (yet) validated
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value

    def filter_name(self) -> str:
        """The name ListGroups' state filter matches (Kafka's toLowerCaseString)."""
        return "not_ready" if self is StreamsGroupState.NOT_READY else self.value.lower()


def _add(index: dict, tasks: TaskMap, process: str) -> None:
    for sub, parts in tasks.items():
        for p in parts:
            index.setdefault((sub, p), set()).add(process)


def _remove(index: dict, tasks: TaskMap, process: str) -> None:
    for sub, parts in tasks.items():
        for p in parts:
            holders = index.get((sub, p))
            if holders is not None:
                holders.discard(process)
                if not holders:
                    del index[(sub, p)]


class StreamsGroup:
    """A streams group; with the methods under "the Group protocol", a `coordinator.group.Group`."""

    type = "streams"
    protocol_type = "streams"

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        # Kafka starts a streams group at epoch 1 (its first heartbeat makes it 2).
        self.group_epoch = 1
        self.metadata_hash = 0
        self.validated_topology_epoch = -1
        self.last_assignment_configs: dict[str, str] = {}
        self.assignment_epoch = 1
        self.assignment_timestamp = 0
        self.members: dict[str, StreamsGroupMember] = {}
        self.target: dict[str, Tasks] = {}
        self.topology: Topology | None = None
        # Who holds each task: (subtopology, partition) -> process (active) or processes.
        self.active_holder: dict[tuple[str, int], str] = {}
        self.standby_holders: dict[tuple[str, int], set[str]] = {}
        self.warmup_holders: dict[tuple[str, int], set[str]] = {}
        # Transient, as in Kafka: the topology checked against the topics (recomputed after a
        # load or a topic change: `metadata_version` is the topics image it was computed
        # from), the member that asked the application to shut down, the epoch of the
        # endpoint-to-partitions information, and the epoch each rebalance timer was armed at.
        self.configured: ConfiguredTopology | None = None
        self.metadata_version = -1
        self.shutdown_requested_by: str | None = None
        self.endpoint_epoch = 0
        self.rebalance_timer_epochs: dict[str, int] = {}

    # -- queries ------------------------------------------------------------------------------

    @property
    def state(self) -> StreamsGroupState:
        if not self.members:
            return StreamsGroupState.EMPTY
        if self.topology is None or self.topology.epoch != self.validated_topology_epoch:
            return StreamsGroupState.NOT_READY
        if self.group_epoch > self.assignment_epoch:
            return StreamsGroupState.ASSIGNING
        for m in self.members.values():
            if not m.is_reconciled_to(self.assignment_epoch):
                return StreamsGroupState.RECONCILING
        return StreamsGroupState.STABLE

    def is_empty(self) -> bool:
        return not self.members

    def active_process(self, sub: str, p: int) -> str | None:
        return self.active_holder.get((sub, p))

    def standby_processes(self, sub: str, p: int) -> frozenset[str]:
        return frozenset(self.standby_holders.get((sub, p), ()))

    def warmup_processes(self, sub: str, p: int) -> frozenset[str]:
        return frozenset(self.warmup_holders.get((sub, p), ()))

    # -- the Group protocol ---------------------------------------------------------------------

    def is_simple(self) -> bool:
        return False

    def validate_offset_commit(
        self, member_id: str, instance_id: str | None, generation: int, version: int
    ) -> tuple[ErrorCode, PartitionCheck | None]:
        """Kafka's StreamsGroup.validateOffsetCommit: the member's current epoch commits; an
        older one commits a partition of an active task it was given at or before that epoch
        (assigned or pending revocation), anything else is STALE_MEMBER_EPOCH."""
        epoch = generation
        if epoch < 0 and not self.members:
            return ErrorCode.NONE, None  # the admin client
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, None
        if version < MEMBER_EPOCH_COMMIT_VERSION:
            return ErrorCode.UNSUPPORTED_VERSION, None
        if epoch == member.member_epoch:
            return ErrorCode.NONE, None
        if epoch > member.member_epoch or self.topology is None:
            return ErrorCode.STALE_MEMBER_EPOCH, None
        readers = self.topology.source_topic_map()
        epochs = member.epochs

        def check(topic: str, partition: int) -> ErrorCode:
            sub = readers.get(topic)
            given = None if sub is None else epochs.get((sub, partition))
            if given is None or epoch < given:
                return ErrorCode.STALE_MEMBER_EPOCH
            return ErrorCode.NONE

        return ErrorCode.NONE, check

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE
        member = self.members.get(member_id) if member_id is not None else None
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def validate_offset_delete(self) -> ErrorCode:
        return ErrorCode.NONE

    def validate_delete_group(self) -> ErrorCode:
        return ErrorCode.NONE if self.is_empty() else ErrorCode.NON_EMPTY_GROUP

    def is_subscribed_to_topic(self, topic: str) -> bool:
        # An empty group subscribes to nothing, so its offsets can expire.
        if not self.members or self.topology is None:
            return False
        return topic in self.topology.source_topic_map()

    def offset_expiration_condition(self) -> ExpirationCondition | None:
        return commit_timestamp

    def should_expire(self) -> bool:
        return self.is_empty()

    def session_renewal(self, member_id: str) -> tuple[tuple, int] | None:
        return None

    def tombstone_records(self) -> list[Record]:
        return records.group_tombstones(self.group_id, list(self.members))

    def describe(self, topics: TopicsImage) -> DescribeGroupsResponse.DescribedGroup:
        # DescribeGroups (v0-5) knows classic groups only: Kafka describes others as Dead.
        return DescribeGroupsResponse.DescribedGroup(
            group_id=self.group_id, group_state=str(StreamsGroupState.DEAD)
        )

    def listed(self) -> ListGroupsResponse.ListedGroup:
        return ListGroupsResponse.ListedGroup(
            group_id=self.group_id,
            protocol_type=self.protocol_type,
            group_state=str(self.state),
            group_type=self.type,
        )

    # -- replay ---------------------------------------------------------------------------------

    def put_member(self, new: StreamsGroupMember) -> None:
        old = self.members.get(new.member_id)
        self.members[new.member_id] = new
        if old is not None:
            self._unindex(old)
        self._index(new)

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self._unindex(old)
            self.rebalance_timer_epochs.pop(member_id, None)

    def _index(self, m: StreamsGroupMember) -> None:
        for tasks in (m.assigned, m.pending_revocation):
            for sub, parts in tasks.active.items():
                for p in parts:
                    self.active_holder[(sub, p)] = m.process_id
            _add(self.standby_holders, tasks.standby, m.process_id)
            _add(self.warmup_holders, tasks.warmup, m.process_id)

    def _unindex(self, m: StreamsGroupMember) -> None:
        for tasks in (m.assigned, m.pending_revocation):
            for sub, parts in tasks.active.items():
                for p in parts:
                    # Only if still this process's: another may have taken it meanwhile.
                    if self.active_holder.get((sub, p)) == m.process_id:
                        del self.active_holder[(sub, p)]
            _remove(self.standby_holders, tasks.standby, m.process_id)
            _remove(self.warmup_holders, tasks.warmup, m.process_id)


def _tasks(value: Any) -> Tasks:
    def m(ids: list) -> dict[str, frozenset[int]]:
        return task_map((t.subtopology_id, t.partitions) for t in ids)

    return Tasks(m(value.active_tasks), m(value.standby_tasks), m(value.warmup_tasks))


def _configs(value: Any) -> dict[str, str]:
    configs = value.last_assignment_configs
    return {} if configs is None else {c.key: c.value for c in configs}


def apply(group: StreamsGroup, key: Any, value: Any | None) -> bool:
    """Fold one record (not the group's own tombstone) into `group`; True when a member
    joined (its first record)."""
    if isinstance(key, StreamsGroupMemberMetadataKey):
        member = group.members.get(key.member_id)
        if value is None:
            group.remove_member(key.member_id)
            return False
        group.put_member((member or StreamsGroupMember(key.member_id)).with_metadata(value))
        return member is None
    if isinstance(key, StreamsGroupCurrentMemberAssignmentKey):
        member = group.members.get(key.member_id)
        if value is not None:
            group.put_member((member or StreamsGroupMember(key.member_id)).with_assignment(value))
            return member is None
        if member is not None:
            from dataclasses import replace

            group.put_member(
                replace(
                    member,
                    member_epoch=LEAVE_EPOCH,
                    previous_member_epoch=LEAVE_EPOCH,
                    assigned=EMPTY,
                    pending_revocation=EMPTY,
                    epochs={},
                )
            )
        return False
    if isinstance(key, StreamsGroupTargetAssignmentMemberKey):
        if value is None:
            group.target.pop(key.member_id, None)
        else:
            group.target[key.member_id] = _tasks(value)
    elif isinstance(key, StreamsGroupTargetAssignmentMetadataKey):
        if value is None:
            group.assignment_epoch, group.assignment_timestamp = -1, 0
        else:
            group.assignment_epoch = value.assignment_epoch
            group.assignment_timestamp = value.assignment_timestamp
    elif isinstance(key, StreamsGroupMetadataKey):
        assert value is not None, "the group's tombstone is folded by ShardState.replay"
        group.group_epoch = value.epoch
        group.metadata_hash = value.metadata_hash
        group.validated_topology_epoch = value.validated_topology_epoch
        group.last_assignment_configs = _configs(value)
    elif isinstance(key, StreamsGroupTopologyKey):
        group.topology = None if value is None else from_message(value)
        group.configured = None
    return False


def assignment_configs(num_standby_replicas: int) -> Mapping[str, str]:
    """The assignment configs Kafka 4.3 records in the group's metadata: a change of them
    starts a new assignment."""
    return {"num.standby.replicas": str(num_standby_replicas)}
