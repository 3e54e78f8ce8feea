"""The classic group and member model, as Kafka's ClassicGroup / ClassicGroupMember.

Only bookkeeping lives here: membership, the protocol vote, leader election, state transitions
and the mapping to and from a GroupMetadata record. Deciding what to do on a request or a timer
(and replying to parked requests) is the job of the handler modules next to this one.
"""

from __future__ import annotations

import enum
from typing import NamedTuple, cast

from coordinator.classic.consumer_protocol import CONSUMER_PROTOCOL_TYPE, subscribed_topics
from coordinator.group import ExpirationCondition, PartitionCheck, Record, commit_timestamp
from coordinator.keys import group_record_key, heartbeat_key
from coordinator.modern.topics_image import TopicsImage
from protocol.coordinator_records import GroupMetadataValue
from protocol.errors import ErrorCode
from protocol.messages import DescribeGroupsResponse, JoinGroupResponse, ListGroupsResponse

Protocols = list[tuple[str, bytes]]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

# Kafka's ClassicGroupState.validPreviousStates: a transition from elsewhere is a bug.
_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    EMPTY: frozenset({PREPARING_REBALANCE}),
    PREPARING_REBALANCE: frozenset({STABLE, COMPLETING_REBALANCE, EMPTY}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    DEAD: frozenset({STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD}),
}


class Parked(NamedTuple):
    """A request whose reply waits: its runtime id and API version (the reply's shape)."""

    req_id: int
    version: int


class ClassicMember:
    __slots__ = (
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "protocol_type",
        "protocols",
        "assignment",
        "join",
        "sync",
        "is_new",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
        assignment: bytes = b"",
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = assignment
        self.join: Parked | None = None  # a JoinGroup waiting for the join phase to complete
        self.sync: Parked | None = None  # a SyncGroup waiting for the leader's assignment
        # A member added by this rebalance; its session timer is the new-member join timeout
        # and it may expire even while its JoinGroup is parked.
        self.is_new = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol_name:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol_name}")

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            return False
        # A member waiting on the coordinator cannot heartbeat on that connection.
        return self.join is not None or self.sync is not None

    def matches(self, protocols: Protocols) -> bool:
        return protocols == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


class ClassicGroup:
    """A classic group; with the methods under "the Group protocol", a `coordinator.group.Group`."""

    type = "classic"

    def __init__(self, group_id: str, now: int | None) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.previous_state = DEAD
        self.state_timestamp: int | None = now
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation = 0
        self.leader_id: str | None = None
        self.members: dict[str, ClassicMember] = {}  # in join order: the leader fallback order
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_join: set[str] = set()  # ids handed out with MEMBER_ID_REQUIRED
        self.pending_sync: set[str] = set()  # members yet to SyncGroup this generation
        self.num_awaiting_join = 0
        self._protocol_counts: dict[str, int] = {}
        self.subscribed_topics: frozenset[str] | None = None
        self.new_member_added = False
        # (delay, remaining) of the initial-rebalance timer while it runs; None otherwise.
        self.initial_rebalance: tuple[int, int] | None = None
        self.sync_generation = -1  # generation whose pending-sync timer runs
        self.rebalance_reason = ""

    # -- queries -----------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def member(self, member_id: str) -> ClassicMember:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def is_pending(self, member_id: str) -> bool:
        return member_id in self.pending_join

    def is_simple(self) -> bool:
        """A group that only holds offsets (created by a commit, never joined)."""
        return self.protocol_type is None and self.state is EMPTY and not self.pending_join

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_join

    def not_yet_rejoined(self) -> list[ClassicMember]:
        return [m for m in self.members.values() if m.join is None]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[PREPARING_REBALANCE]

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """Kafka's validateMember: a static member must be the current holder of its id."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.state is EMPTY:
            return protocol_type != "" and bool(names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self._protocol_counts.get(name, 0) == n for name in names
        )

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (Kafka's vote)."""
        n = len(self.members)
        candidates = {name for name, count in self._protocol_counts.items() if count == n}
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes.items(), key=lambda kv: kv[1])[0]

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            # Unknown subscriptions: assume a consumer group reads everything.
            return self.uses_consumer_protocol()
        return topic in self.subscribed_topics

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(subscribed_topics(m.metadata(self.protocol_name)))
        except (ValueError, KeyError):
            return None
        return frozenset(topics)

    def join_members(self) -> list[JoinGroupResponse.JoinGroupResponseMember]:
        """The member list a leader gets in its JoinGroup response."""
        cls = JoinGroupResponse.JoinGroupResponseMember
        return [
            cls(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                metadata=m.metadata(self.protocol_name),
            )
            for m in self.members.values()
        ]

    # -- the Group protocol ------------------------------------------------------------------

    def is_empty(self) -> bool:
        return not self.members and not self.pending_join

    def validate_offset_commit(
        self, member_id: str, instance_id: str | None, generation: int, version: int
    ) -> tuple[ErrorCode, PartitionCheck | None]:
        """Kafka's ClassicGroup.validateOffsetCommit for a non-transactional commit."""
        if self.state is DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if generation < 0 and self.state is EMPTY:
            return ErrorCode.NONE, None
        if generation >= 0 or member_id != "" or instance_id is not None:
            error = self.validate_member(member_id, instance_id)
            if error != ErrorCode.NONE:
                return error, None
            if generation != self.generation:
                return ErrorCode.ILLEGAL_GENERATION, None
        elif self.state is not EMPTY:
            # No member id and no generation (v0, or a simple commit): only an empty group
            # accepts it, or it would overwrite what the members commit.
            return ErrorCode.UNKNOWN_MEMBER_ID, None
        if self.state is COMPLETING_REBALANCE:
            # The member has its new generation but not yet its assignment: let it finish the
            # rebalance and commit afterwards.
            return ErrorCode.REBALANCE_IN_PROGRESS, None
        return ErrorCode.NONE, None

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        # Classic members fetch without a member epoch (OffsetFetch v9 is for consumer groups).
        return ErrorCode.NONE

    def validate_offset_delete(self) -> ErrorCode:
        if self.state is DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if self.state is not EMPTY and not self.uses_consumer_protocol():
            # Without the consumer protocol we cannot tell which topics the members read.
            return ErrorCode.NON_EMPTY_GROUP
        return ErrorCode.NONE

    def validate_delete_group(self) -> ErrorCode:
        if self.state is DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if self.state is not EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        return ErrorCode.NONE

    def offset_expiration_condition(self) -> ExpirationCondition | None:
        """Kafka's ClassicGroup.offsetExpirationCondition."""
        if self.protocol_type is None:
            # A simple group: each offset lives offsets_retention_ms past its last commit.
            return commit_timestamp
        if self.state is EMPTY:
            # Retention counts from when the group became empty (or, for groups written by old
            # brokers without that timestamp, from the commit).
            emptied = self.state_timestamp
            if emptied is not None:
                return lambda om: emptied
            return commit_timestamp
        if (
            self.uses_consumer_protocol()
            and self.subscribed_topics is not None
            and self.state is STABLE
        ):
            # A live consumer group: offsets of topics it no longer subscribes to expire.
            return commit_timestamp
        return None

    def should_expire(self) -> bool:
        # A group with ids handed out by MEMBER_ID_REQUIRED is mid-join and is kept.
        return self.state is EMPTY and not self.pending_join

    def session_renewal(self, member_id: str) -> tuple[tuple, int] | None:
        # A commit from a member counts as a sign of life, as in Kafka.
        if self.state is not STABLE and self.state is not PREPARING_REBALANCE:
            return None
        member = self.members.get(member_id)
        if member is None:
            return None
        return heartbeat_key(self.group_id, member_id), member.session_timeout_ms

    def tombstone_records(self) -> list[Record]:
        return [(group_record_key(self.group_id), None)]

    def describe(self, topics: TopicsImage) -> DescribeGroupsResponse.DescribedGroup:
        Member = DescribeGroupsResponse.DescribedGroupMember
        stable = self.state is STABLE
        members = [
            Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                # Members' metadata is only meaningful once the protocol is settled.
                member_metadata=m.metadata(self.protocol_name) if stable else b"",
                member_assignment=m.assignment,
            )
            for m in self.members.values()
        ]
        return DescribeGroupsResponse.DescribedGroup(
            group_id=self.group_id,
            group_state=str(self.state),
            protocol_type=self.protocol_type or "",
            protocol_data=(self.protocol_name or "") if stable else "",
            members=members,
        )

    def listed(self) -> ListGroupsResponse.ListedGroup:
        return ListGroupsResponse.ListedGroup(
            group_id=self.group_id,
            protocol_type=self.protocol_type or "",
            group_state=str(self.state),
            group_type=self.type,
        )

    # -- mutations ---------------------------------------------------------------------------

    def transition(self, state: GroupState, now: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(
                f"group {self.group_id}: illegal transition {self.state} -> {state}"
            )
        self.previous_state = self.state
        self.state = state
        self.state_timestamp = now

    def _count_protocols(self, member: ClassicMember, delta: int) -> None:
        for name in member.protocol_names():
            self._protocol_counts[name] = self._protocol_counts.get(name, 0) + delta

    def add(self, member: ClassicMember, join: Parked | None) -> None:
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, 1)
        member.join = join
        if join is not None:
            self.num_awaiting_join += 1
        self.pending_join.discard(member.member_id)

    def remove(self, member_id: str) -> ClassicMember | None:
        """Drop a member (or a pending member id); a removed leader hands over to the oldest
        remaining member. The caller answers the member's parked requests first."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self._count_protocols(member, -1)
            if member.join is not None:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_join.discard(member_id)
        self.pending_sync.discard(member_id)
        return member

    def set_join(self, member: ClassicMember, join: Parked | None) -> Parked | None:
        """Park (or clear) a member's JoinGroup; returns the one it replaces."""
        old = member.join
        if old is None and join is not None:
            self.num_awaiting_join += 1
        elif old is not None and join is None:
            self.num_awaiting_join -= 1
        member.join = join
        return old

    def update_member(
        self,
        member: ClassicMember,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join: Parked | None,
    ) -> Parked | None:
        self._count_protocols(member, -1)
        member.protocols = protocols
        self._count_protocols(member, 1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        return self.set_join(member, join)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Kafka's rule: a leader that did not rejoin is replaced by a member that did."""
        if self.leader_id is None:
            return False
        leader = self.members[self.leader_id]
        if leader.join is not None:
            return True
        for m in self.members.values():
            if m.join is not None:
                self.leader_id = m.member_id
                return True
        return False

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> tuple[ClassicMember, ClassicMember]:
        """A static member rejoined with a fresh id: the new id takes over the old member's
        place, protocols and assignment. Returns (old, new); the caller fences the old one."""
        old = self.members[old_member_id]
        if old.join is not None:
            self.num_awaiting_join -= 1
        new = ClassicMember(
            new_member_id,
            old.group_instance_id,
            old.client_id,
            old.client_host,
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
            old.protocol_type,
            old.protocols,
            old.assignment,
        )
        # The new id takes the old one's place: member order is the leader fallback order.
        self.members = {
            (new_member_id if mid == old_member_id else mid): (new if mid == old_member_id else m)
            for mid, m in self.members.items()
        }
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        return old, new

    def init_next_generation(self, now: int) -> None:
        """The join phase is over: bump the generation and pick the protocol."""
        self.generation += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition(COMPLETING_REBALANCE, now)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition(EMPTY, now)
        self.pending_sync.clear()

    # -- records -----------------------------------------------------------------------------

    def metadata_value(self, assignments: dict[str, bytes] | None = None) -> GroupMetadataValue:
        """The GroupMetadata record value for the group as it stands (Kafka's
        newGroupMetadataRecord); `assignments` overrides the members' current ones."""
        members = [
            GroupMetadataValue.MemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(self.protocol_name),
                assignment=(
                    m.assignment if assignments is None else assignments.get(m.member_id, b"")
                ),
            )
            for m in self.members.values()
        ]
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=-1 if self.state_timestamp is None else self.state_timestamp,
            members=members,
        )

    def apply_metadata(self, value: GroupMetadataValue) -> None:
        """Make the persisted part of the group what a GroupMetadata record says.

        At load time this builds the group; live, it is applied to the group whose state the
        record was made from, so it changes only what the record changes (assignments, the
        generation of an emptied group, the Stable/Empty state) and keeps the transient parts
        (parked requests, pending members) of the members that stay.
        """
        self.protocol_type = value.protocol_type or None
        self.generation = value.generation
        self.protocol_name = value.protocol
        self.leader_id = value.leader
        ts = value.current_state_timestamp
        self.state_timestamp = None if ts == -1 else ts
        members: dict[str, ClassicMember] = {}
        # Only an Empty group's record has no protocol, and it has no members: the cast
        # only tells mypy so (a malformed record keeps the null name, as before).
        chosen = cast(str, value.protocol)
        for mm in value.members:
            # Kafka's v0 records have no rebalance timeout; the session timeout stood for it.
            rebalance = mm.session_timeout if mm.rebalance_timeout == -1 else mm.rebalance_timeout
            m = self.members.get(mm.member_id)
            if m is None:
                m = ClassicMember(
                    mm.member_id,
                    mm.group_instance_id,
                    mm.client_id,
                    mm.client_host,
                    rebalance,
                    mm.session_timeout,
                    value.protocol_type,
                    [(chosen, mm.subscription)],
                )
            else:
                m.group_instance_id = mm.group_instance_id
                m.client_id = mm.client_id
                m.client_host = mm.client_host
                m.rebalance_timeout_ms = rebalance
                m.session_timeout_ms = mm.session_timeout
                try:
                    same = m.metadata(value.protocol) == mm.subscription
                except KeyError:
                    same = False
                if not same:
                    m.protocols = [(chosen, mm.subscription)]
            m.assignment = mm.assignment
            members[m.member_id] = m
        self.members = members
        self.static_members = {
            m.group_instance_id: m.member_id
            for m in members.values()
            if m.group_instance_id is not None  # is_static, spelled out for mypy
        }
        self._protocol_counts = {}
        for m in members.values():
            self._count_protocols(m, 1)
        self.num_awaiting_join = sum(1 for m in members.values() if m.join is not None)
        self.pending_sync.intersection_update(members)
        state = STABLE if members else EMPTY
        if state is not self.state:
            self.previous_state = self.state
            self.state = state
        self.subscribed_topics = self.compute_subscribed_topics()
