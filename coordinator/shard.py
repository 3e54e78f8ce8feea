"""One shard per `__consumer_offsets` partition: it routes each call to its handler over the
shard's state (`coordinator.state`), and reports completed KIP-848 rebalances.

Pure and deterministic apart from the member-id UUIDs: time comes in as `now` (ms), and every
call returns a Result (records to append, replies to send once they are durable, timers).
Every record a call writes is applied through the state's `replay()`, the same code that loads
the log; what no record carries (a rebalance in progress, parked requests, pending member ids)
is transient, as in Kafka, and a reload brings the group back as of its last record.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from coordinator import groups as _groups
from coordinator import offsets as _offsets
from coordinator import txn_offsets as _txn_offsets
from coordinator.classic import rebalance as _classic
from coordinator.classic.heartbeat import expire_heartbeat, heartbeat
from coordinator.classic.join import join_group
from coordinator.classic.leave import leave_group
from coordinator.classic.steady import steady_heartbeat as steady_classic_heartbeat
from coordinator.classic.sync import expire_pending_sync, sync_group
from coordinator.config import GroupConfig
from coordinator.context import Ctx
from coordinator.group import Group, MemberChange
from coordinator.modern import describe as _modern_describe
from coordinator.modern import keys as _modern_keys
from coordinator.modern import membership as _membership
from coordinator.modern.group import ConsumerGroup, ConsumerGroupState
from coordinator.modern.heartbeat import consumer_group_heartbeat
from coordinator.modern.steady import steady_heartbeat
from coordinator.modern.topics_image import TopicsImage
from coordinator.offset_store import OffsetStore
from coordinator.request_meta import RequestMeta
from coordinator.result import RebalanceEvent, Result, Timer
from coordinator.share import admin as _share_admin
from coordinator.share import describe as _share_describe
from coordinator.share import heartbeat as _share_heartbeat
from coordinator.state import ShardState
from coordinator.streams import describe as _streams_describe
from coordinator.streams import heartbeat as _streams_heartbeat
from coordinator.streams import keys as _streams_keys
from coordinator.streams import membership as _streams_membership
from coordinator.streams.group import StreamsGroup, StreamsGroupState
from protocol.errors import ErrorCode
from protocol.messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    StreamsGroupDescribeResponse,
    StreamsGroupHeartbeatRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)

# DescribeGroups from v6 (KIP-1043) answers GROUP_ID_NOT_FOUND for a group it cannot describe.
DESCRIBE_GROUPS_NOT_FOUND_VERSION = 6

# Per group type: what a group of that type does once its partition is loaded.
_RESUME: dict[str, Callable[[Ctx, Any], None]] = {
    "classic": _classic.resume_after_load,
    "consumer": _membership.resume_after_load,
    "share": _share_heartbeat.resume_after_load,
    "streams": _streams_membership.resume_after_load,
}
# The states in which a consumer or streams group's rebalance is over.
_SETTLED = frozenset(
    {
        ConsumerGroupState.STABLE,
        ConsumerGroupState.EMPTY,
        StreamsGroupState.STABLE,
        StreamsGroupState.EMPTY,
    }
)
# Per group type: how its parked requests are answered when the partition goes away.
_ABANDON: dict[str, Callable[[Ctx, Any, ErrorCode], None]] = {
    "classic": _classic.answer_parked,
}


class Shard:
    def __init__(
        self,
        partition: int,
        config: GroupConfig,
        new_uuid: Callable[[], str] | None = None,
    ) -> None:
        self.partition = partition
        self.config = config
        self.state = ShardState(config, new_uuid)
        # Loading replays every record of the partition: no extra call per record.
        self.replay = self.state.replay
        # Transient: consumer groups whose epoch moved and whose members have not all
        # reconciled yet: group id -> (why, when it started), for their RebalanceEvent.
        self.consumer_rebalances: dict[str, tuple[str, int]] = {}

    @property
    def groups(self) -> dict[str, Group]:
        """Every group of the partition, of every kind, by id."""
        return self.state.groups

    @property
    def offsets(self) -> OffsetStore:
        return self.state.offsets

    @property
    def deadlines(self) -> dict[tuple, int]:
        return self.state.deadlines

    # -- requests that may write records or park replies ------------------------------------

    def join_group(
        self,
        req: JoinGroupRequest,
        meta: RequestMeta,
        req_id: int,
        now: int,
        topics: TopicsImage | None = None,
    ) -> Result:
        """JoinGroup; `topics` (the current topic metadata) is needed when the group is a
        consumer group with classic members."""
        if topics is not None:
            self.state.topics = topics
        ctx = Ctx(self.state, now)
        before = self._epoch(req.group_id)
        join_group(ctx, req, meta, req_id)
        self._track_consumer_rebalance(ctx, req.group_id, before)
        return ctx.result()

    def consumer_group_heartbeat(
        self,
        req: ConsumerGroupHeartbeatRequest,
        meta: RequestMeta,
        topics: TopicsImage,
        req_id: int,
        now: int,
    ) -> Result:
        """ConsumerGroupHeartbeat; `topics` is the current topic metadata snapshot."""
        self.state.topics = topics
        if req.group_id not in self.consumer_rebalances:
            # Most heartbeats of a stable group change nothing: answered without a Ctx or
            # rebalance tracking (a group with a rebalance pending takes the full path).
            steady = steady_heartbeat(self.state, req, meta, topics, now)
            if steady is not None:
                key, deadline, reply = steady
                return Result([], {req_id: reply}, [Timer(key, deadline)], [], [], None, None)
        ctx = Ctx(self.state, now)
        before = self._epoch(req.group_id)
        consumer_group_heartbeat(ctx, req, meta, topics, req_id)
        self._track_consumer_rebalance(ctx, req.group_id, before)
        return ctx.result()

    def steady_consumer_heartbeat(
        self,
        req: ConsumerGroupHeartbeatRequest,
        meta: RequestMeta,
        topics: TopicsImage,
        now: int,
    ) -> tuple[tuple, int, Any] | None:
        """A steady-state ConsumerGroupHeartbeat (coordinator/modern/steady.py) answered
        without a Result: the session timer's key, renewed deadline and the reply; None:
        call ``consumer_group_heartbeat``."""
        self.state.topics = topics
        if req.group_id in self.consumer_rebalances:
            return None
        return steady_heartbeat(self.state, req, meta, topics, now)

    def share_group_heartbeat(
        self,
        req: ShareGroupHeartbeatRequest,
        meta: RequestMeta,
        topics: TopicsImage,
        req_id: int,
        now: int,
    ) -> Result:
        """ShareGroupHeartbeat (KIP-932); `topics` is the current topic metadata snapshot."""
        self.state.topics = topics
        ctx = Ctx(self.state, now)
        _share_heartbeat.share_group_heartbeat(ctx, req, meta, topics, req_id)
        return ctx.result()

    def streams_group_heartbeat(
        self,
        req: StreamsGroupHeartbeatRequest,
        meta: RequestMeta,
        topics: TopicsImage,
        req_id: int,
        now: int,
    ) -> Result:
        """StreamsGroupHeartbeat (KIP-1071); `topics` is the current topic metadata snapshot.
        The reply is a `coordinator.streams.heartbeat.Outcome`."""
        self.state.topics = topics
        ctx = Ctx(self.state, now)
        before = self._epoch(req.group_id)
        _streams_heartbeat.streams_group_heartbeat(ctx, req, meta, topics, req_id)
        self._track_consumer_rebalance(ctx, req.group_id, before)
        return ctx.result()

    def sync_group(self, req: SyncGroupRequest, meta: RequestMeta, req_id: int, now: int) -> Result:
        ctx = Ctx(self.state, now)
        before = self._epoch(req.group_id)
        sync_group(ctx, req, meta, req_id)
        self._track_consumer_rebalance(ctx, req.group_id, before)
        return ctx.result()

    def heartbeat(self, req: HeartbeatRequest, meta: RequestMeta, req_id: int, now: int) -> Result:
        ctx = Ctx(self.state, now)
        heartbeat(ctx, req, meta, req_id)
        return ctx.result()

    def steady_heartbeat(self, req: HeartbeatRequest, now: int) -> tuple | None:
        """A steady-state classic heartbeat (coordinator/classic/steady.py): the session
        timer's key and renewed deadline, its reply being NONE; None: call ``heartbeat``."""
        return steady_classic_heartbeat(self.state, req, now)

    def leave_group(
        self, req: LeaveGroupRequest, meta: RequestMeta, req_id: int, now: int
    ) -> Result:
        ctx = Ctx(self.state, now)
        before = self._epoch(req.group_id)
        leave_group(ctx, req, meta, req_id)
        self._track_consumer_rebalance(ctx, req.group_id, before, "LeaveGroup")
        return ctx.result()

    def commit_offsets(
        self, req: OffsetCommitRequest, meta: RequestMeta, req_id: int, now: int
    ) -> Result:
        ctx = Ctx(self.state, now)
        _offsets.commit_offsets(ctx, req, meta, req_id)
        return ctx.result()

    def txn_offset_commit(
        self, req: TxnOffsetCommitRequest, meta: RequestMeta, req_id: int, now: int
    ) -> Result:
        ctx = Ctx(self.state, now)
        _txn_offsets.txn_offset_commit(ctx, req, meta, req_id)
        return ctx.result()

    def end_txn(
        self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int, now: int
    ) -> Result:
        """The transaction coordinator's marker for this partition: replies[0] is None."""
        ctx = Ctx(self.state, now)
        _txn_offsets.end_txn(ctx, producer_id, epoch, commit, coordinator_epoch)
        ctx.reply(0, None)
        return ctx.result()

    def delete_groups(self, group_ids: list[str], now: int) -> Result:
        """replies[0] is the list of DeleteGroupsResponse.DeletableGroupResult."""
        ctx = Ctx(self.state, now)
        ctx.reply(0, _groups.delete_groups(ctx, group_ids))
        return ctx.result()

    def delete_offsets(
        self, req: OffsetDeleteRequest, meta: RequestMeta, req_id: int, now: int
    ) -> Result:
        ctx = Ctx(self.state, now)
        _offsets.delete_offsets(ctx, req, meta, req_id)
        return ctx.result()

    def on_timer(self, key: tuple, now: int) -> Result:
        deadlines = self.state.deadlines
        deadline = deadlines.get(key)
        if deadline is None:
            return Result()  # cancelled or replaced after the runtime armed it
        if now < deadline:
            return Result(timers=[Timer(key, deadline)])  # fired early: arm it again
        del deadlines[key]
        ctx = Ctx(self.state, now)
        kind, group_id = key[0], key[1]
        if kind == _modern_keys.SESSION:
            before = self._epoch(group_id)
            _membership.fence_on_timeout(ctx, group_id, key[2])
            self._track_consumer_rebalance(ctx, group_id, before, "session timeout")
            return ctx.result()
        if kind == _modern_keys.REBALANCE:
            before = self._epoch(group_id)
            _membership.on_rebalance_timeout(ctx, group_id, key[2])
            self._track_consumer_rebalance(ctx, group_id, before, "rebalance timeout")
            return ctx.result()
        if kind in (_streams_keys.SESSION, _streams_keys.REBALANCE, _streams_keys.INITIAL):
            before = self._epoch(group_id)
            if kind == _streams_keys.SESSION:
                _streams_membership.on_session_timeout(ctx, group_id, key[2])
                why = "session timeout"
            elif kind == _streams_keys.REBALANCE:
                _streams_membership.on_rebalance_timeout(ctx, group_id, key[2])
                why = "rebalance timeout"
            else:
                _streams_membership.on_initial_delay(ctx, group_id)
                why = ""
            self._track_consumer_rebalance(ctx, group_id, before, why)
            return ctx.result()
        if kind == _share_heartbeat.SESSION:
            _share_heartbeat.on_session_timeout(ctx, group_id, key[2])
            return ctx.result()
        if kind in (_modern_keys.JOIN, _modern_keys.SYNC):
            # A classic member of a consumer group that did not rejoin or sync in time.
            before = self._epoch(group_id)
            _membership.fence_on_timeout(ctx, group_id, key[2])
            why = "join timeout" if kind == _modern_keys.JOIN else "sync timeout"
            self._track_consumer_rebalance(ctx, group_id, before, why)
            return ctx.result()
        group = self.state.classic_group(group_id)
        if group is not None:
            if kind == "heartbeat":
                expire_heartbeat(ctx, group, key[2])
            elif kind == "join":
                _classic.on_join_timer(ctx, group)
            elif kind == "sync":
                expire_pending_sync(ctx, group)
        return ctx.result()

    def expire_offsets(self, now: int) -> Result:
        ctx = Ctx(self.state, now)
        _offsets.expire_offsets(ctx)
        return ctx.result()

    def delete_topic_offsets(
        self, topics: Collection[str], now: int, since: int | None = None
    ) -> Result:
        ctx = Ctx(self.state, now)
        _offsets.delete_topic_offsets(ctx, topics, since)
        return ctx.result()

    # -- KIP-848 rebalances, for the runtime's logs and metrics -------------------------------

    def _epoch_group(self, group_id: str) -> ConsumerGroup | StreamsGroup | None:
        """A group whose rebalances are epochs: a consumer or a streams group."""
        group = self.state.groups.get(group_id)
        return group if isinstance(group, ConsumerGroup | StreamsGroup) else None

    def _epoch(self, group_id: str) -> int | None:
        """The consumer group's epoch before a call, or None if there is no such group."""
        group = self._epoch_group(group_id)
        return None if group is None else group.group_epoch

    def _track_consumer_rebalance(
        self, ctx: Ctx, group_id: str, epoch_before: int | None, cause: str = ""
    ) -> None:
        """A rebalance of a consumer or streams group starts when its epoch moves and completes
        when every member has reconciled to the new target (Stable) or none is left (Empty); it is
        reported once, then, as a RebalanceEvent. Who joined or left comes from the member
        records the call replayed (`ctx.member_changes`)."""
        group = self._epoch_group(group_id)
        if group is None:
            self.consumer_rebalances.pop(group_id, None)
            return
        epoch = 0 if epoch_before is None else epoch_before
        if group.group_epoch > epoch and group_id not in self.consumer_rebalances:
            members = (
                frozenset()
                if epoch_before is None
                else _members_before(group.members, group_id, ctx.member_changes)
            )
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
        if state in _SETTLED:
            del self.consumer_rebalances[group_id]
            ctx.events.append(
                RebalanceEvent(
                    group_id=group_id,
                    group_type=group.type,
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
        # api_version changes nothing the coordinator decides (member_id and member_epoch
        # come with v9).
        return _offsets.fetch_offsets(
            self.state, group_id, topics, member_id, member_epoch, require_stable
        )

    def describe_group(
        self, group_id: str, api_version: int
    ) -> DescribeGroupsResponse.DescribedGroup:
        group = self.state.groups.get(group_id)
        if api_version >= DESCRIBE_GROUPS_NOT_FOUND_VERSION and (
            group is None or group.type != "classic"
        ):
            # KIP-1043: v6 tells a group DescribeGroups cannot describe, as Kafka 4.x does.
            why = "not found" if group is None else "is not a classic group"
            return DescribeGroupsResponse.DescribedGroup(
                group_id=group_id,
                group_state="Dead",
                error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                error_message=f"Group {group_id} {why}.",
            )
        if group is None:
            # Kafka (DescribeGroups v0-5) reports an unknown group as Dead, without an error.
            return DescribeGroupsResponse.DescribedGroup(group_id=group_id, group_state="Dead")
        return group.describe(self.state.topics)

    def consumer_group_describe(
        self, group_ids: list[str], topics: TopicsImage
    ) -> list[ConsumerGroupDescribeResponse.DescribedGroup]:
        default = self.config.consumer_assignors[0]
        return [
            _modern_describe.consumer_group_describe(
                g, self.state.consumer_group(g), default, topics
            )
            for g in group_ids
        ]

    def share_group_describe(
        self, group_ids: list[str], topics: TopicsImage
    ) -> list[ShareGroupDescribeResponse.DescribedGroup]:
        return [
            _share_describe.share_group_describe(g, self.state.groups.get(g), topics)
            for g in group_ids
        ]

    def streams_group_describe(
        self, group_ids: list[str]
    ) -> list[StreamsGroupDescribeResponse.DescribedGroup]:
        return [
            _streams_describe.streams_group_describe(g, self.state.groups.get(g)) for g in group_ids
        ]

    def share_group_prepare_alter(self, group_id: str, req_id: int, now: int) -> Result:
        """AlterShareGroupOffsets' check (coordinator/share/admin.py); the reply is a Verdict
        with the share group's new epoch, once its record is written."""
        ctx = Ctx(self.state, now)
        ctx.reply(req_id, _share_admin.prepare_alter(ctx, group_id))
        return ctx.result()

    def share_group_check_delete(self, group_id: str) -> _share_admin.Verdict:
        """DeleteShareGroupOffsets' check: an empty share group."""
        return _share_admin.check_delete(group_id, self.state.groups.get(group_id))

    def list_groups(
        self, states: set[str] | None, types: set[str] | None
    ) -> list[ListGroupsResponse.ListedGroup]:
        # Kafka compares both filters case-insensitively.
        state_filter = {s.strip().lower() for s in states} if states else None
        type_filter = {t.strip().lower() for t in types} if types else None
        return [
            g.listed()
            for g in self.state.groups.values()
            if (type_filter is None or g.type in type_filter)
            and (state_filter is None or _state_name(g.state) in state_filter)
        ]

    # -- persistence ------------------------------------------------------------------------

    def on_loaded(self, now: int) -> Result:
        """After the whole partition is replayed: every group resumes its timers."""
        ctx = Ctx(self.state, now)
        for group in list(self.state.groups.values()):
            _RESUME[group.type](ctx, group)
        return ctx.result()

    def on_unloaded(self) -> Result:
        """The partition is leaving this broker: parked requests get NOT_COORDINATOR, so that
        their clients look the coordinator up again, and every timer is cancelled."""
        ctx = Ctx(self.state, 0)  # answers only: no records, no timers
        for group in self.state.groups.values():
            abandon = _ABANDON.get(group.type)
            if abandon is not None:
                abandon(ctx, group, ErrorCode.NOT_COORDINATOR)
        result = Result(cancel=list(self.state.deadlines), replies=ctx.replies)
        self.state.deadlines.clear()
        return result


def _state_name(state: object) -> str:
    """The name ListGroups' state filter matches: the state's, lower case (Kafka's streams
    NotReady is "not_ready")."""
    name = getattr(state, "filter_name", None)
    return name() if name is not None else str(state).lower()


def _members_before(
    members: Collection[str], group_id: str, changes: list[MemberChange]
) -> frozenset[str]:
    """The member ids a group had before the call: its members now, with the call's joins
    undone and its departures put back (in reverse order)."""
    before = set(members)
    for change in reversed(changes):
        if change.group_id != group_id:
            continue
        if change.joined:
            before.discard(change.member_id)
        else:
            before.add(change.member_id)
    return frozenset(before)
