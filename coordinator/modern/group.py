"""A KIP-848 consumer group, as Kafka's ConsumerGroup / ModernGroup: the hard state that the
ConsumerGroup* records fold into, plus indexes kept in step with it (static members, topic
subscription counts, the epoch at which each partition is owned, assignor preferences).

Everything here changes only through the methods under "replay" (`put_member`, `remove_member`,
`set_target`, `remove_target`), which only `replay` calls; handlers read it and build records.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable

from coordinator.classic.consumer_protocol import encode_assignment
from coordinator.group import ExpirationCondition, PartitionCheck, Record, commit_timestamp
from coordinator.modern import records
from coordinator.modern.assignment import EMPTY, Assignment
from coordinator.modern.member import ConsumerGroupMember
from coordinator.modern.regex import RegexResolution
from coordinator.modern.topics_image import TopicMeta, TopicsImage
from protocol.errors import ErrorCode
from protocol.messages import ConsumerGroupHeartbeatResponse as Response
from protocol.messages import DescribeGroupsResponse, ListGroupsResponse

# OffsetCommit v9 is the first that consumer-protocol members may use.
MEMBER_EPOCH_COMMIT_VERSION = 9


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


class OwnershipConflict(AssertionError):
    """Two members would own one partition: the records contradict each other."""


def _count(counts: dict, keys: Iterable, delta: int) -> None:
    for k in keys:
        n = counts.get(k, 0) + delta
        if n > 0:
            counts[k] = n
        else:
            counts.pop(k, None)


class ConsumerGroup:
    """A KIP-848 consumer group; with the methods under "the Group protocol", a
    `coordinator.group.Group`."""

    type = "consumer"
    protocol_type = "consumer"

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0  # the epoch of the target assignment (-1 after its tombstone)
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.subscribed_names: dict[str, int] = {}  # explicit topic names -> member count
        self.regex_counts: dict[str, int] = {}  # regular expression -> member count
        self.regexes: dict[str, RegexResolution] = {}
        self.subscription_metadata: dict[str, TopicMeta] = {}
        self.target: dict[str, Assignment] = {}
        self.partition_epochs: dict[uuid.UUID, dict[int, int]] = {}
        self.partition_owners: dict[tuple[uuid.UUID, int], str] = {}
        self.assignor_counts: dict[str, int] = {}
        # Transient: the topics image version the subscription metadata was last checked
        # against, and the epoch each running rebalance timer was armed at.
        self.metadata_version = -1
        self.rebalance_timer_epochs: dict[str, int] = {}
        # Transient: each member's steady-state heartbeat reply, kept with the member value
        # and heartbeat interval it was built for (see `steady_reply`).
        self._steady_replies: dict[str, tuple[ConsumerGroupMember, int, Response]] = {}

    # -- queries ------------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if not m.is_reconciled_to(self.assignment_epoch):
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def is_empty(self) -> bool:
        return not self.members

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        if instance_id is None:
            return None
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        parts = self.partition_epochs.get(topic_id)
        return -1 if parts is None else parts.get(partition, -1)

    def target_of(self, member_id: str, instance_id: str | None = None) -> Assignment:
        if instance_id is not None:
            previous = self.static_members.get(instance_id)
            if previous is not None:
                return self.target.get(previous, EMPTY)
            return EMPTY
        return self.target.get(member_id, EMPTY)

    def member_topic_names(
        self, member: ConsumerGroupMember, regexes: dict[str, RegexResolution] | None = None
    ) -> frozenset[str]:
        regex = member.subscribed_topic_regex
        if regex is None:
            return member.subscribed_topic_names
        resolved = (self.regexes if regexes is None else regexes).get(regex)
        if resolved is None:
            return member.subscribed_topic_names
        return member.subscribed_topic_names | resolved.topics

    def subscribed_topic_names(
        self,
        old: ConsumerGroupMember | None = None,
        new: ConsumerGroupMember | None = None,
        regexes: dict[str, RegexResolution] | None = None,
    ) -> set[str]:
        """Every topic the members subscribe to, with `old` replaced by `new` (either may be
        None) and `regexes` in place of the stored resolutions."""
        names = dict(self.subscribed_names)
        counts = dict(self.regex_counts)
        if old is not None:
            _count(names, old.subscribed_topic_names, -1)
            if old.subscribed_topic_regex is not None:
                _count(counts, (old.subscribed_topic_regex,), -1)
        if new is not None:
            _count(names, new.subscribed_topic_names, 1)
            if new.subscribed_topic_regex is not None:
                _count(counts, (new.subscribed_topic_regex,), 1)
        out = set(names)
        resolved = self.regexes if regexes is None else regexes
        for regex in counts:
            r = resolved.get(regex)
            if r is not None:
                out |= r.topics
        return out

    def without(self, leaving: Iterable[ConsumerGroupMember]) -> tuple[set[str], set[str]]:
        """The topics the members subscribe to, and the regexes they use, once `leaving` go."""
        names = dict(self.subscribed_names)
        counts = dict(self.regex_counts)
        for m in leaving:
            _count(names, m.subscribed_topic_names, -1)
            if m.subscribed_topic_regex is not None:
                _count(counts, (m.subscribed_topic_regex,), -1)
        topics = set(names)
        for regex in counts:
            r = self.regexes.get(regex)
            if r is not None:
                topics |= r.topics
        return topics, set(counts)

    def regexes_in_use(
        self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None
    ) -> set[str]:
        counts = dict(self.regex_counts)
        if old is not None and old.subscribed_topic_regex is not None:
            _count(counts, (old.subscribed_topic_regex,), -1)
        if new is not None and new.subscribed_topic_regex is not None:
            _count(counts, (new.subscribed_topic_regex,), 1)
        return set(counts)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if topic in self.subscribed_names:
            return True
        return any(topic in r.topics for rx, r in self.regexes.items() if rx in self.regex_counts)

    def preferred_assignor(
        self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None
    ) -> str | None:
        counts = dict(self.assignor_counts)
        if old is not None and old.server_assignor is not None:
            _count(counts, (old.server_assignor,), -1)
        if new is not None and new.server_assignor is not None:
            _count(counts, (new.server_assignor,), 1)
        if not counts:
            return None
        # The most popular; ties go to the name first in alphabetical order (deterministic).
        return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]

    def steady_reply(self, member: ConsumerGroupMember, interval_ms: int) -> Response:
        """The ConsumerGroupHeartbeat reply to `member` when nothing changes: its id, epoch and
        the heartbeat interval, no assignment. One object per member, shared by its steady
        heartbeats (replies are only encoded, never changed): it saves building a response
        per request. A member changes only by being replaced (records are replayed into a
        new value), so the reply is kept for that value and rebuilt for the next."""
        kept = self._steady_replies.get(member.member_id)
        if kept is not None and kept[0] is member and kept[1] == interval_ms:
            return kept[2]
        reply = Response.make(0, 0, None, member.member_id, member.member_epoch, interval_ms, None)
        self._steady_replies[member.member_id] = (member, interval_ms, reply)
        return reply

    def topic_names(self, topics: TopicsImage) -> dict[uuid.UUID, str]:
        """Topic id -> name, from the group's subscription metadata and then the image."""
        names = {t.topic_id: t.name for t in self.subscription_metadata.values()}
        for tid, t in topics.by_id.items():
            names.setdefault(tid, t.name)
        return names

    # -- the Group protocol ---------------------------------------------------------------------

    def is_simple(self) -> bool:
        return False

    def validate_offset_commit(
        self, member_id: str, instance_id: str | None, generation: int, version: int
    ) -> tuple[ErrorCode, PartitionCheck | None]:
        """Kafka's ConsumerGroup.validateOffsetCommit with KIP-1251 assignment epochs.

        A commit carrying the member's current epoch is accepted. One carrying an older epoch
        (the member has not yet seen the heartbeat response that bumped it) is accepted per
        partition when the member holds the partition and was assigned it at or before that
        epoch; anything else is STALE_MEMBER_EPOCH. Consumer-protocol members must use
        OffsetCommit v9 or later."""
        epoch = generation
        if epoch < 0 and not self.members:
            return ErrorCode.NONE, None  # the admin client, or a consumer assigning itself
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, None
        if version < MEMBER_EPOCH_COMMIT_VERSION and not member.uses_classic_protocol():
            return ErrorCode.UNSUPPORTED_VERSION, None
        if epoch == member.member_epoch:
            return ErrorCode.NONE, None
        if member.uses_classic_protocol():
            # A classic member's generation is its epoch, exactly (Kafka's validateMemberEpoch).
            return ErrorCode.ILLEGAL_GENERATION, None
        if epoch > member.member_epoch or epoch < 0:
            return ErrorCode.STALE_MEMBER_EPOCH, None
        ids = {name: t.topic_id for name, t in self.subscription_metadata.items()}
        epochs = member.assignment_epochs

        def check(topic: str, partition: int) -> ErrorCode:
            tid = ids.get(topic)
            assigned_at = None if tid is None else epochs.get((tid, partition))
            if assigned_at is None or assigned_at > epoch:
                return ErrorCode.STALE_MEMBER_EPOCH
            return ErrorCode.NONE

        return ErrorCode.NONE, check

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        """An OffsetFetch (v9+) naming a member must come from a current member at its current
        epoch; one without a member id and epoch (the admin client) is always accepted."""
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE
        member = self.members.get(member_id) if member_id is not None else None
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            # A classic-protocol member's epoch is its generation.
            if member.uses_classic_protocol():
                return ErrorCode.ILLEGAL_GENERATION
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def validate_offset_delete(self) -> ErrorCode:
        # A consumer group knows its subscriptions: offsets of other topics may go.
        return ErrorCode.NONE

    def validate_delete_group(self) -> ErrorCode:
        return ErrorCode.NONE if self.is_empty() else ErrorCode.NON_EMPTY_GROUP

    def offset_expiration_condition(self) -> ExpirationCondition | None:
        # Offsets count from their commit (Kafka's ConsumerGroup); those of subscribed topics
        # are kept anyway.
        return commit_timestamp

    def should_expire(self) -> bool:
        return self.is_empty()

    def session_renewal(self, member_id: str) -> tuple[tuple, int] | None:
        return None  # only a ConsumerGroupHeartbeat keeps a consumer-group member alive

    def tombstone_records(self) -> list[Record]:
        return records.group_tombstones(
            self.group_id, list(self.members), list(self.target), list(self.regexes)
        )

    def describe(self, topics: TopicsImage) -> DescribeGroupsResponse.DescribedGroup:
        """DescribeGroups (v0-5) of a consumer group: its members with their current assignment
        in the classic consumer-protocol encoding, so that classic admin tools can read it."""
        names = self.topic_names(topics)
        members = [
            DescribeGroupsResponse.DescribedGroupMember(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                # A classic member's subscription, as a classic group would show it.
                member_metadata=_classic_subscription(m),
                member_assignment=consumer_protocol_assignment(m.assigned, names),
            )
            for m in self.members.values()
        ]
        return DescribeGroupsResponse.DescribedGroup(
            group_id=self.group_id,
            group_state=str(self.state),
            protocol_type=self.protocol_type,
            protocol_data="",
            members=members,
        )

    def listed(self) -> ListGroupsResponse.ListedGroup:
        return ListGroupsResponse.ListedGroup(
            group_id=self.group_id,
            protocol_type=self.protocol_type,
            group_state=str(self.state),
            group_type=self.type,
        )

    # -- replay -------------------------------------------------------------------------------

    def put_member(self, new: ConsumerGroupMember) -> None:
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
            self._steady_replies.pop(member_id, None)

    def set_target(self, member_id: str, assignment: Assignment) -> None:
        self.target[member_id] = assignment

    def remove_target(self, member_id: str) -> None:
        self.target.pop(member_id, None)

    def _index(self, m: ConsumerGroupMember) -> None:
        _count(self.subscribed_names, m.subscribed_topic_names, 1)
        if m.subscribed_topic_regex is not None:
            _count(self.regex_counts, (m.subscribed_topic_regex,), 1)
        if m.server_assignor is not None:
            _count(self.assignor_counts, (m.server_assignor,), 1)
        if m.instance_id is not None:
            self.static_members[m.instance_id] = m.member_id
        self._own(m, m.assigned)
        self._own(m, m.pending_revocation)

    def _unindex(self, m: ConsumerGroupMember) -> None:
        _count(self.subscribed_names, m.subscribed_topic_names, -1)
        if m.subscribed_topic_regex is not None:
            _count(self.regex_counts, (m.subscribed_topic_regex,), -1)
        if m.server_assignor is not None:
            _count(self.assignor_counts, (m.server_assignor,), -1)
        if m.instance_id is not None and self.static_members.get(m.instance_id) == m.member_id:
            del self.static_members[m.instance_id]
        self._disown(m, m.assigned)
        self._disown(m, m.pending_revocation)

    def _own(self, m: ConsumerGroupMember, assignment: Assignment) -> None:
        for t, ps in assignment.items():
            epochs = self.partition_epochs.setdefault(t, {})
            for p in ps:
                owner = self.partition_owners.get((t, p))
                if owner is not None:
                    raise OwnershipConflict(
                        f"group {self.group_id}: {t}-{p} is owned by {owner} at epoch "
                        f"{epochs.get(p)}, cannot give it to {m.member_id}"
                    )
                epochs[p] = m.member_epoch
                self.partition_owners[(t, p)] = m.member_id

    def _disown(self, m: ConsumerGroupMember, assignment: Assignment) -> None:
        for t, ps in assignment.items():
            epochs = self.partition_epochs.get(t)
            for p in ps:
                if self.partition_owners.get((t, p)) == m.member_id:
                    del self.partition_owners[(t, p)]
                    if epochs is not None:
                        epochs.pop(p, None)
            if epochs is not None and not epochs:
                del self.partition_epochs[t]


def _classic_subscription(member: ConsumerGroupMember) -> bytes:
    protocols = member.classic_protocols()
    return protocols[0][1] if protocols else b""


def consumer_protocol_assignment(assignment: Assignment, names: dict, version: int = 0) -> bytes:
    """A ConsumerProtocolAssignment of `assignment` (what classic members and tools read)."""
    topics = sorted((names[t], sorted(ps)) for t, ps in assignment.items() if t in names and ps)
    return encode_assignment(topics, version)
