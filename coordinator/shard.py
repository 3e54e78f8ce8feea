"""One shard per `__consumer_offsets` partition: its classic and consumer groups and committed
offsets.

Pure and deterministic apart from the member-id UUIDs: time comes in as `now` (ms), and every
call returns a Result (records to append, replies to send once they are durable, timers).
Every record a call writes is applied through `replay()`, the same code that loads the log;
what no record carries (a rebalance in progress, parked requests, pending member ids) is
transient, as in Kafka, and a reload brings the group back as of its last record.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from coordinator import groups as _groups
from coordinator import offsets as _offsets
from coordinator.classic import describe as _describe
from coordinator.classic.group import ClassicGroup
from coordinator.classic.heartbeat import expire_heartbeat, heartbeat
from coordinator.classic.join import join_group
from coordinator.classic.leave import leave_group
from coordinator.classic.rebalance import on_join_timer, prepare_rebalance, reschedule_heartbeat
from coordinator.classic.responses import join_response, sync_response
from coordinator.classic.sync import expire_pending_sync, sync_group
from coordinator.config import GroupConfig
from coordinator.context import Ctx
from coordinator.modern import describe as _modern_describe
from coordinator.modern import keys as _modern_keys
from coordinator.modern import membership as _membership
from coordinator.modern import replay as _modern_replay
from coordinator.modern.group import ConsumerGroup, ConsumerGroupState
from coordinator.modern.heartbeat import consumer_group_heartbeat
from coordinator.modern.member import MemberState
from coordinator.modern.topics import EMPTY_IMAGE, TopicsImage
from coordinator.offsets import OffsetStore
from coordinator.result import RebalanceEvent, Result, Timer
from protocol.coordinator_records import GroupMetadataKey, OffsetCommitKey
from protocol.errors import ErrorCode


@dataclass
class RequestMeta:
    api_version: int
    client_id: str
    client_host: str


class Shard:
    def __init__(
        self,
        partition: int,
        config: GroupConfig,
        new_uuid: Callable[[], str] | None = None,
    ) -> None:
        self.partition = partition
        self.config = config
        # Member ids end in a random UUID, as Kafka's; tests pass a counter instead.
        self.new_uuid: Callable[[], str] = new_uuid or (lambda: str(uuid.uuid4()))
        self.groups: dict[str, ClassicGroup] = {}
        # KIP-848 consumer groups; a group id is in at most one of the two maps.
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        # Transient: consumer groups whose epoch moved and whose members have not all
        # reconciled yet: group id -> (why, when it started), for their RebalanceEvent.
        self.consumer_rebalances: dict[str, tuple[str, int]] = {}
        # The latest topic metadata handed in (for describing consumer groups).
        self.topics: TopicsImage = EMPTY_IMAGE
        self.offsets = OffsetStore()
        # Deadline of every timer this shard has asked for and not cancelled; a timer that
        # fires for a key not here (or too early) is stale and ignored.
        self.deadlines: dict[tuple, int] = {}

    # -- requests that may write records or park replies ------------------------------------

    def join_group(self, req: Any, meta: RequestMeta, req_id: int, now: int) -> Result:
        ctx = Ctx(self, now)
        consumer = self.consumer_groups.get(req.group_id)
        if consumer is not None:
            policy = self.config.consumer_migration_policy
            if not consumer.is_empty() or policy not in _membership.DOWNGRADE_POLICIES:
                # Classic members cannot join a consumer group that has members.
                ctx.reply(
                    req_id,
                    join_response(
                        meta.api_version,
                        error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                        member_id=req.member_id,
                    ),
                )
                return ctx.result()
            # An empty consumer group becomes a classic group.
            _membership.delete_empty_group(ctx, consumer)
        join_group(ctx, req, meta, req_id)
        return ctx.result()

    def consumer_group_heartbeat(
        self, req: Any, meta: RequestMeta, topics: TopicsImage, req_id: int, now: int
    ) -> Result:
        """ConsumerGroupHeartbeat; `topics` is the current topic metadata snapshot."""
        self.topics = topics
        ctx = Ctx(self, now)
        before = self._consumer_snapshot(req.group_id)
        consumer_group_heartbeat(ctx, req, meta, topics, req_id)
        self._track_consumer_rebalance(ctx, req.group_id, before)
        return ctx.result()

    def sync_group(self, req: Any, meta: RequestMeta, req_id: int, now: int) -> Result:
        ctx = Ctx(self, now)
        sync_group(ctx, req, meta, req_id)
        return ctx.result()

    def heartbeat(self, req: Any, meta: RequestMeta, req_id: int, now: int) -> Result:
        ctx = Ctx(self, now)
        heartbeat(ctx, req, meta, req_id)
        return ctx.result()

    def leave_group(self, req: Any, meta: RequestMeta, req_id: int, now: int) -> Result:
        ctx = Ctx(self, now)
        leave_group(ctx, req, meta, req_id)
        return ctx.result()

    def commit_offsets(self, req: Any, meta: RequestMeta, req_id: int, now: int) -> Result:
        ctx = Ctx(self, now)
        _offsets.commit_offsets(ctx, req, meta, req_id)
        return ctx.result()

    def delete_groups(self, group_ids: list[str], now: int) -> Result:
        """replies[0] is the list of DeleteGroupsResponse.DeletableGroupResult."""
        ctx = Ctx(self, now)
        ctx.reply(0, _groups.delete_groups(ctx, group_ids))
        return ctx.result()

    def delete_offsets(self, req: Any, meta: RequestMeta, req_id: int, now: int) -> Result:
        ctx = Ctx(self, now)
        _offsets.delete_offsets(ctx, req, meta, req_id)
        return ctx.result()

    def on_timer(self, key: tuple, now: int) -> Result:
        deadline = self.deadlines.get(key)
        if deadline is None:
            return Result()  # cancelled or replaced after the runtime armed it
        if now < deadline:
            return Result(timers=[Timer(key, deadline)])  # fired early: arm it again
        del self.deadlines[key]
        ctx = Ctx(self, now)
        kind, group_id = key[0], key[1]
        if kind == _modern_keys.SESSION:
            before = self._consumer_snapshot(group_id)
            _membership.on_session_timeout(ctx, group_id, key[2])
            self._track_consumer_rebalance(ctx, group_id, before, "session timeout")
            return ctx.result()
        if kind == _modern_keys.REBALANCE:
            before = self._consumer_snapshot(group_id)
            _membership.on_rebalance_timeout(ctx, group_id, key[2])
            self._track_consumer_rebalance(ctx, group_id, before, "rebalance timeout")
            return ctx.result()
        group = self.groups.get(group_id)
        if group is not None:
            if kind == "heartbeat":
                expire_heartbeat(ctx, group, key[2])
            elif kind == "join":
                on_join_timer(ctx, group)
            elif kind == "sync":
                expire_pending_sync(ctx, group)
        return ctx.result()

    def expire_offsets(self, now: int) -> Result:
        ctx = Ctx(self, now)
        _offsets.expire_offsets(ctx)
        return ctx.result()

    def delete_topic_offsets(self, topics: Collection[str], now: int) -> Result:
        ctx = Ctx(self, now)
        _offsets.delete_topic_offsets(ctx, topics)
        return ctx.result()

    # -- KIP-848 rebalances, for the runtime's logs and metrics -------------------------------

    def _consumer_snapshot(self, group_id: str) -> tuple[int, ConsumerGroup | None]:
        """The group's epoch, and the group, whose membership changes are journaled until
        `_track_consumer_rebalance` (O(1): a heartbeat must not copy the member set)."""
        group = self.consumer_groups.get(group_id)
        if group is None:
            return 0, None
        group.journal = []
        return group.group_epoch, group

    def _track_consumer_rebalance(
        self, ctx: Ctx, group_id: str, before: tuple[int, ConsumerGroup | None], cause: str = ""
    ) -> None:
        """A rebalance of a consumer group starts when its epoch moves and completes when every
        member has reconciled to the new target (Stable) or none is left (Empty); it is
        reported once, then, as a RebalanceEvent."""
        epoch, old = before
        journal: list[tuple[bool, str]] = []
        if old is not None:
            journal, old.journal = old.journal or [], None
        group = self.consumer_groups.get(group_id)
        if group is None:
            self.consumer_rebalances.pop(group_id, None)
            return
        if group.group_epoch > epoch and group_id not in self.consumer_rebalances:
            members = _members_before(old, journal)
            now_members = frozenset(group.members)
            joined, left = sorted(now_members - members), sorted(members - now_members)
            reasons = [f"member {m} joined" for m in joined]
            reasons += [f"member {m} left" + (f" ({cause})" if cause else "") for m in left]
            reason = "; ".join(reasons) or "subscriptions or topic metadata changed"
            self.consumer_rebalances[group_id] = (reason, ctx.now)
        pending = self.consumer_rebalances.get(group_id)
        if pending is None:
            return
        state = group.state  # O(members): only while a rebalance is pending
        if state in (ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY):
            del self.consumer_rebalances[group_id]
            ctx.events.append(
                RebalanceEvent(
                    group_id=group_id,
                    group_type="consumer",
                    generation=group.group_epoch,
                    members=len(group.members),
                    reason=pending[0],
                    duration_ms=max(ctx.now - pending[1], 0),
                    state=str(state),
                )
            )

    # -- reads ------------------------------------------------------------------------------

    def fetch_offsets(
        self,
        group_id: str,
        topics: list[tuple[str, list[int]]] | None,
        require_stable: bool,
        api_version: int,
        now: int,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[int, list[tuple[str, int, int, int, str, int]]]:
        # require_stable only matters with pending transactional offsets, which the classic
        # API never writes; api_version changes nothing the coordinator decides (member_id
        # and member_epoch come with v9).
        return _offsets.fetch_offsets(self, group_id, topics, member_id, member_epoch)

    def describe_group(self, group_id: str, api_version: int) -> Any:
        consumer = self.consumer_groups.get(group_id)
        if consumer is not None:
            return _modern_describe.describe_groups_view(consumer, self.topics)
        return _describe.describe(group_id, self.groups.get(group_id))

    def consumer_group_describe(self, group_ids: list[str], topics: TopicsImage) -> list[Any]:
        default = self.config.consumer_assignors[0]
        return [
            _modern_describe.consumer_group_describe(
                g, self.consumer_groups.get(g), default, topics
            )
            for g in group_ids
        ]

    def list_groups(self, states: set[str] | None, types: set[str] | None) -> list[Any]:
        return _describe.list_groups(self.groups, states, types) + _modern_describe.list_groups(
            self.consumer_groups, states, types
        )

    # -- persistence ------------------------------------------------------------------------

    def replay(self, key: Any, value: Any | None) -> None:
        """Apply one record: from the log at load time, or just written by a handler."""
        if type(key) is OffsetCommitKey:  # most records: tested first
            if (
                value is not None
                and key.group not in self.groups
                and key.group not in self.consumer_groups
            ):
                # Offsets without a group: a "simple" group (no protocol type) holds them.
                self.groups[key.group] = ClassicGroup(key.group, None)
            self.offsets.replay(key, value)
        elif isinstance(key, _modern_replay.KEY_TYPES):
            _modern_replay.apply(self, key, value)
        elif isinstance(key, GroupMetadataKey):
            if value is None:
                self.groups.pop(key.group, None)
                return
            group = self.groups.get(key.group)
            if group is None:
                group = self.groups[key.group] = ClassicGroup(key.group, None)
            group.apply_metadata(value)

    def replay_offset_commits(self, group: str, topic: str, records: list[tuple[Any, Any]]) -> None:
        """`replay` of OffsetCommit records of one group and topic, none a tombstone."""
        if group not in self.groups and group not in self.consumer_groups:
            self.groups[group] = ClassicGroup(group, None)
        self.offsets.put_records(group, topic, records)

    def new_simple_group(self, group_id: str) -> None:
        """A group that only holds committed offsets."""
        self.groups[group_id] = ClassicGroup(group_id, None)

    def on_loaded(self, now: int) -> Result:
        """After the whole partition is replayed: members get fresh session timers, as Kafka
        gives them, and a group over a lowered max size rebalances."""
        ctx = Ctx(self, now)
        for group in self.groups.values():
            for member in group.members.values():
                reschedule_heartbeat(ctx, group, member)
            if len(group.members) > self.config.max_size:
                prepare_rebalance(ctx, group, "loaded group is over group.max.size")
        session = self.config.consumer_session_timeout_ms
        for consumer in self.consumer_groups.values():
            gid = consumer.group_id
            for member in consumer.members.values():
                ctx.schedule(_modern_keys.session_key(gid, member.member_id), session)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    key = _modern_keys.rebalance_key(gid, member.member_id)
                    ctx.schedule(key, member.rebalance_timeout_ms)
                    consumer.rebalance_timer_epochs[member.member_id] = member.member_epoch
        return ctx.result()

    def on_unloaded(self) -> Result:
        """The partition is leaving this broker: parked requests get NOT_COORDINATOR, so that
        their clients look the coordinator up again, and every timer is cancelled."""
        result = Result(cancel=list(self.deadlines))
        error = ErrorCode.NOT_COORDINATOR
        for group in self.groups.values():
            for member in group.members.values():
                if member.join is not None:
                    result.replies[member.join.req_id] = join_response(
                        member.join.version, error=error, member_id=member.member_id
                    )
                    group.set_join(member, None)
                if member.sync is not None:
                    result.replies[member.sync.req_id] = sync_response(error=error)
                    member.sync = None
        self.deadlines.clear()
        return result


def _members_before(group: ConsumerGroup | None, journal: list[tuple[bool, str]]) -> frozenset[str]:
    """The member ids `group` had when its journal started: its members now, with the
    journaled additions undone and removals put back (in reverse order)."""
    if group is None:
        return frozenset()
    members = set(group.members)
    for added, member_id in reversed(journal):
        if added:
            members.discard(member_id)
        else:
            members.add(member_id)
    return frozenset(members)
