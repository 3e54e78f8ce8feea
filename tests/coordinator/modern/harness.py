"""A fake runtime for consumer-group tests: a plain-int clock, timers fired in deadline order, a
topic image the test grows, the log of every record (round-tripped through the wire format)
and heartbeat helpers that speak ConsumerGroupHeartbeat like a client."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from coordinator.classic.consumer_protocol import encode_subscription, parse_assignment
from coordinator.config import GroupConfig
from coordinator.modern.topics_image import TopicMeta, TopicsImage
from coordinator.result import Result
from coordinator.shard import RequestMeta, Shard
from protocol.coordinator_records import decode_record, encode_record
from protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)

Req = ConsumerGroupHeartbeatRequest
Owned = dict[str, list[int]]  # topic name -> partitions


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


class Harness:
    def __init__(self, config: GroupConfig | None = None, **overrides: Any) -> None:
        self.config = config or GroupConfig(**overrides)
        uuids = itertools.count(1)
        self.shard = Shard(0, self.config, new_uuid=lambda: f"u{next(uuids)}")
        self.now = 0
        self.ids = itertools.count(1)
        self.timers: dict[tuple, int] = {}
        self.log: list[tuple[Any, Any]] = []
        self.topics = TopicsImage((), 0)
        self.replies: dict[int, Any] = {}  # every reply, parked ones included

    # -- topics -------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> uuid.UUID:
        metas = dict(self.topics.by_name)
        metas[name] = TopicMeta(topic_id(name), name, partitions)
        self.topics = TopicsImage(metas.values(), self.topics.version + 1)
        return topic_id(name)

    def delete_topic(self, name: str) -> None:
        metas = {n: t for n, t in self.topics.by_name.items() if n != name}
        self.topics = TopicsImage(metas.values(), self.topics.version + 1)

    def names(self, assignment: Any) -> Owned:
        """{topic name: sorted partitions} of a response assignment or a model assignment."""
        if assignment is None:
            return {}
        if hasattr(assignment, "topic_partitions"):
            items = [(tp.topic_id, tp.partitions) for tp in assignment.topic_partitions]
        else:
            items = list(assignment.items())
        out = {}
        for tid, ps in items:
            if ps:
                out[self.topics.by_id[tid].name] = sorted(ps)
        return out

    # -- driving ------------------------------------------------------------------------------

    def apply(self, result: Result) -> Result:
        assert not set(result.cancel) & {t.key for t in result.timers}
        for key, value in result.records:
            k, v = encode_record(key, value)
            decoded = decode_record(k, v)
            self.log.append((decoded.key, decoded.value))
        for key in result.cancel:
            self.timers.pop(key, None)
        for t in result.timers:
            self.timers[t.key] = t.deadline
        self.replies.update(result.replies)
        return result

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while True:
            due = [(d, k) for k, d in self.timers.items() if d <= target]
            if not due:
                break
            deadline, key = min(due, key=lambda dk: (dk[0], dk[1]))
            self.now = max(self.now, deadline)
            del self.timers[key]
            self.apply(self.shard.on_timer(key, self.now))
        self.now = target

    def heartbeat(
        self,
        group: str = "g",
        member_id: str = "",
        epoch: int = 0,
        *,
        version: int = 1,
        topics: list[str] | None = None,
        regex: str | None = None,
        owned: Owned | None = None,
        rebalance_timeout: int = -1,
        instance: str | None = None,
        assignor: str | None = None,
        client_id: str = "client",
    ) -> Any:
        if epoch == 0:
            if rebalance_timeout == -1:
                rebalance_timeout = 30000
            if owned is None:
                owned = {}
            if topics is None and regex is None:
                topics = []
        req = Req(
            group_id=group,
            member_id=member_id,
            member_epoch=epoch,
            instance_id=instance,
            rebalance_timeout_ms=rebalance_timeout,
            subscribed_topic_names=topics,
            subscribed_topic_regex=regex,
            server_assignor=assignor,
            topic_partitions=None if owned is None else self.owned(owned),
        )
        rid = next(self.ids)
        meta = RequestMeta(api_version=version, client_id=client_id, client_host="/127.0.0.1")
        result = self.apply(
            self.shard.consumer_group_heartbeat(req, meta, self.topics, rid, self.now)
        )
        return result.replies[rid]

    def owned(self, owned: Owned) -> list[Any]:
        return [
            Req.TopicPartitions(topic_id=topic_id(name), partitions=sorted(ps))
            for name, ps in owned.items()
        ]

    def commit(
        self,
        group: str,
        member_id: str,
        epoch: int,
        offsets: dict[tuple[str, int], int],
        version: int = 9,
    ) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list] = {}
        for (t, p), off in offsets.items():
            by_topic.setdefault(t, []).append(
                OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=off
                )
            )
        req = OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=epoch,
            member_id=member_id,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        rid = next(self.ids)
        meta = RequestMeta(api_version=version, client_id="c", client_host="/127.0.0.1")
        resp = self.apply(self.shard.commit_offsets(req, meta, rid, self.now)).replies[rid]
        return {
            (t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions
        }

    # -- inspection ---------------------------------------------------------------------------

    def group(self, group_id: str = "g") -> Any:
        return of_type(self.shard, "consumer")[group_id]

    def replayed(self) -> Shard:
        """A fresh shard that loaded this one's log."""
        shard = Shard(0, self.config)
        for k, v in self.log:
            shard.replay(k, v)
        return shard


def of_type(shard: Shard, kind: str) -> dict[str, Any]:
    """The shard's groups of one kind ("classic" or "consumer"), by id."""
    return {gid: g for gid, g in shard.groups.items() if g.type == kind}


def snapshot(shard: Shard) -> dict[str, Any]:
    """The persisted state of a shard's consumer groups (what replay must rebuild)."""
    out: dict[str, Any] = {}
    for gid, g in of_type(shard, "consumer").items():
        out[gid] = {
            "epoch": g.group_epoch,
            "assignment_epoch": g.assignment_epoch,
            "members": {
                mid: (m.metadata_key(), m.assignment_key(), dict(m.assignment_epochs))
                for mid, m in g.members.items()
            },
            "static": dict(g.static_members),
            "target": {mid: dict(a) for mid, a in g.target.items() if a or True},
            "subscription": dict(g.subscription_metadata),
            "regexes": dict(g.regexes),
            "partition_epochs": {t: dict(ps) for t, ps in g.partition_epochs.items()},
            "owners": dict(g.partition_owners),
            "state": g.state,
        }
    return out


class ClassicClient:
    """A classic-protocol consumer (JoinGroup/SyncGroup/Heartbeat) against a harness, eager or
    cooperative, that keeps the partitions its last SyncGroup gave it, as a client does."""

    def __init__(
        self,
        h: Harness,
        topics: list[str],
        *,
        group: str = "g",
        cooperative: bool = False,
        instance: str | None = None,
        session: int = 10000,
        rebalance: int = 30000,
        version: int = 5,
    ) -> None:
        self.h = h
        self.topics = topics
        self.group = group
        self.cooperative = cooperative
        self.instance = instance
        self.session = session
        self.rebalance = rebalance
        self.version = version
        self.member_id = ""
        self.generation = -1
        self.owned: Owned = {}
        self.protocol = "cooperative-sticky" if cooperative else "range"
        self.last_rid = -1

    def _call(self, method: Any, req: Any, version: int) -> Any:
        rid = self.last_rid = next(self.h.ids)
        meta = RequestMeta(api_version=version, client_id="classic", client_host="/127.0.0.1")
        result = self.h.apply(method(req, meta, rid, self.h.now))
        return result.replies.get(rid)

    def subscription(self) -> bytes:
        owned = sorted((t, sorted(ps)) for t, ps in self.owned.items() if ps)
        if not self.cooperative:
            # An eager client gives everything up before it joins.
            owned = []
        return encode_subscription(self.topics, 3, owned=owned, generation=self.generation)

    def join(self) -> Any:
        if not self.cooperative:
            self.owned = {}
        req = JoinGroupRequest(
            group_id=self.group,
            session_timeout_ms=self.session,
            rebalance_timeout_ms=self.rebalance,
            member_id=self.member_id,
            group_instance_id=self.instance,
            protocol_type="consumer",
            protocols=[
                JoinGroupRequest.JoinGroupRequestProtocol(
                    name=self.protocol, metadata=self.subscription()
                )
            ],
        )
        resp = self._call(
            lambda *a: self.h.shard.join_group(*a, topics=self.h.topics), req, self.version
        )
        if resp is not None and resp.error_code == 79:  # MEMBER_ID_REQUIRED
            self.member_id = resp.member_id
            return self.join()
        if resp is not None and resp.error_code == 0:
            self.member_id = resp.member_id
            self.generation = resp.generation_id
        return resp

    def sync(self) -> Any:
        req = SyncGroupRequest(
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.instance,
            protocol_type="consumer",
            protocol_name=self.protocol,
        )
        resp = self._call(self.h.shard.sync_group, req, 5)
        if resp is not None and resp.error_code == 0:
            self.owned = {t: sorted(ps) for t, ps in parse_assignment(resp.assignment) if ps}
        return resp

    def heartbeat(self) -> int:
        req = HeartbeatRequest(
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.instance,
        )
        return int(self._call(self.h.shard.heartbeat, req, 4).error_code)

    def leave(self) -> Any:
        req = LeaveGroupRequest(
            group_id=self.group,
            members=[
                LeaveGroupRequest.MemberIdentity(
                    member_id=self.member_id, group_instance_id=self.instance
                )
            ],
        )
        return self._call(self.h.shard.leave_group, req, 5)

    def rejoin(self) -> tuple[Any, Any]:
        """JoinGroup then SyncGroup, as a client does after REBALANCE_IN_PROGRESS."""
        j = self.join()
        if j is None or j.error_code != 0:
            return j, None
        return j, self.sync()
