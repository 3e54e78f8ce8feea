"""A fake runtime for shard tests: a plain-int clock, timers fired in deadline order, the log
of every record written, and the replies by request id."""

from __future__ import annotations

import itertools
from typing import Any

from coordinator.classic.consumer_protocol import encode_subscription
from coordinator.config import GroupConfig
from coordinator.result import Result
from coordinator.shard import RequestMeta, Shard
from protocol.coordinator_records import decode_record, encode_record
from protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    SyncGroupRequest,
)

Protocols = list[tuple[str, bytes]]


def sub(*topics: str) -> bytes:
    return encode_subscription(list(topics))


RANGE = [("range", sub("t"))]


class Harness:
    def __init__(self, config: GroupConfig | None = None, **overrides: Any) -> None:
        if config is None:
            config = GroupConfig(**{"initial_rebalance_delay_ms": 3000, **overrides})
        uuids = itertools.count(1)
        self.shard = Shard(0, config, new_uuid=lambda: f"u{next(uuids)}")
        self.now = 0
        self.ids = itertools.count(1)
        self.timers: dict[tuple, int] = {}
        self.log: list[tuple[Any, Any]] = []
        self.replies: dict[int, Any] = {}
        self.results: list[Result] = []

    # -- driving -----------------------------------------------------------------------------

    def apply(self, result: Result) -> Result:
        assert not set(result.cancel) & {t.key for t in result.timers}
        for key, value in result.records:
            # Round-trip through the wire format: the log holds bytes, not objects.
            k, v = encode_record(key, value)
            decoded = decode_record(k, v)
            self.log.append((decoded.key, decoded.value))
        for rid, reply in result.replies.items():
            assert rid not in self.replies, f"request {rid} answered twice"
            self.replies[rid] = reply
        for key in result.cancel:
            self.timers.pop(key, None)
        for t in result.timers:
            self.timers[t.key] = t.deadline
        self.results.append(result)
        return result

    def advance(self, ms: int) -> None:
        """Move the clock forward, firing every timer that falls due on the way."""
        target = self.now + ms
        while True:
            due = [(d, k) for k, d in self.timers.items() if d <= target]
            if not due:
                break
            deadline, key = min(due, key=lambda dk: dk[0])
            self.now = max(self.now, deadline)
            del self.timers[key]
            self.apply(self.shard.on_timer(key, self.now))
        self.now = target

    def meta(self, version: int, client_id: str = "client") -> RequestMeta:
        return RequestMeta(api_version=version, client_id=client_id, client_host="/127.0.0.1")

    def reply(self, rid: int) -> Any:
        return self.replies.get(rid)

    # -- requests ----------------------------------------------------------------------------

    def join(
        self,
        group: str = "g",
        member_id: str = "",
        *,
        version: int = 5,
        session: int = 10000,
        rebalance: int = 30000,
        instance: str | None = None,
        protocols: Protocols | None = None,
        protocol_type: str = "consumer",
        client_id: str = "client",
        reason: str | None = None,
    ) -> int:
        protocols = RANGE if protocols is None else protocols
        req = JoinGroupRequest(
            group_id=group,
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type=protocol_type,
            protocols=[
                JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols
            ],
            reason=reason,
        )
        rid = next(self.ids)
        self.apply(self.shard.join_group(req, self.meta(version, client_id), rid, self.now))
        return rid

    def join_member(self, group: str = "g", **kw: Any) -> str:
        """A v5 dynamic member through the two-step join; returns its member id. Its second
        JoinGroup is left parked (see `last_join`)."""
        rid = self.join(group, **kw)
        resp = self.reply(rid)
        assert resp.error_code == 79, resp  # MEMBER_ID_REQUIRED
        self.last_join = self.join(group, resp.member_id, **kw)
        return resp.member_id

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        version: int = 3,
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> int:
        req = SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ],
        )
        rid = next(self.ids)
        self.apply(self.shard.sync_group(req, self.meta(version), rid, self.now))
        return rid

    def heartbeat(
        self,
        group: str,
        member_id: str,
        generation: int,
        *,
        version: int = 3,
        instance: str | None = None,
    ) -> int:
        req = HeartbeatRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
        )
        rid = next(self.ids)
        self.apply(self.shard.heartbeat(req, self.meta(version), rid, self.now))
        return self.reply(rid).error_code

    def leave(
        self,
        group: str,
        members: list[tuple[str, str | None]],
        *,
        version: int = 3,
    ) -> Any:
        if version >= 3:
            req = LeaveGroupRequest(
                group_id=group,
                members=[
                    LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=i)
                    for m, i in members
                ],
            )
        else:
            req = LeaveGroupRequest(group_id=group, member_id=members[0][0])
        rid = next(self.ids)
        self.apply(self.shard.leave_group(req, self.meta(version), rid, self.now))
        return self.reply(rid)

    def commit(
        self,
        group: str,
        offsets: dict[tuple[str, int], int],
        *,
        member_id: str = "",
        generation: int = -1,
        instance: str | None = None,
        version: int = 8,
        metadata: str | None = "",
        leader_epoch: int = -1,
        commit_timestamp: int = -1,
        retention: int = -1,
    ) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(
                OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=leader_epoch,
                    commit_timestamp=commit_timestamp,
                    committed_metadata=metadata,
                )
            )
        req = OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=instance,
            retention_time_ms=retention,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        rid = next(self.ids)
        self.apply(self.shard.commit_offsets(req, self.meta(version), rid, self.now))
        return {
            (t.name, p.partition_index): p.error_code
            for t in self.reply(rid).topics
            for p in t.partitions
        }

    def fetch(
        self, group: str, topics: list[tuple[str, list[int]]] | None = None
    ) -> dict[tuple[str, int], tuple[int, int, str, int]]:
        error, rows = self.shard.fetch_offsets(group, topics, False, 8, self.now)
        assert error == 0
        return {(t, p): (o, e, m, err) for t, p, o, e, m, err in rows}

    def delete_offsets(self, group: str, topics: dict[str, list[int]]) -> Any:
        req = OffsetDeleteRequest(
            group_id=group,
            topics=[
                OffsetDeleteRequest.OffsetDeleteRequestTopic(
                    name=t,
                    partitions=[
                        OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=p)
                        for p in ps
                    ],
                )
                for t, ps in topics.items()
            ],
        )
        rid = next(self.ids)
        self.apply(self.shard.delete_offsets(req, self.meta(0), rid, self.now))
        return self.reply(rid)

    def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        result = self.shard.delete_groups(group_ids, self.now)
        answer = result.replies.pop(0)  # not a request id: the runtime takes it directly
        self.apply(result)
        self.last_delete = answer
        return {r.group_id: r.error_code for r in answer}

    # -- composite steps ---------------------------------------------------------------------

    def stable_group(self, group: str = "g", n: int = 2, **kw: Any) -> tuple[list[str], int]:
        """n dynamic members joined and synced; returns (member ids in join order, generation).
        The first member leads and assigns each member its id as assignment bytes."""
        members = []
        rids = []
        for _ in range(n):
            members.append(self.join_member(group, **kw))
            rids.append(self.last_join)
        # The initial delay extends itself while members keep arriving: wait it out.
        step = max(1, self.shard.config.initial_rebalance_delay_ms)
        for _ in range(1000):
            if all(self.reply(r) is not None for r in rids):
                break
            self.advance(step)
        responses = [self.reply(r) for r in rids]
        assert all(r is not None and r.error_code == 0 for r in responses), responses
        generation = responses[0].generation_id
        leader = responses[0].leader
        for m in members:
            if m != leader:
                self.sync(group, m, generation)
        self.sync(group, leader, generation, {m: m.encode() for m in members})
        assert str(self.shard.groups[group].state) == "Stable"
        return members, generation

    def records_of(self, rid_result: Result) -> list[tuple[Any, Any]]:
        return rid_result.records
