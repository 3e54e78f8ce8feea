"""Streams-group tests: the consumer-group harness (fake clock, timers, topics, the log of
records round-tripped through the wire format) with StreamsGroupHeartbeat requests, topologies
built from short descriptions, and a client that behaves as a Kafka Streams member does: it
reports the tasks it owns, gives up those it is asked to revoke, and comes back with its
epoch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator.shard import RequestMeta
from coordinator.streams.heartbeat import Outcome
from protocol.messages import StreamsGroupHeartbeatRequest as Req
from tests.coordinator.modern.harness import Harness, of_type

Tasks = dict[str, list[int]]  # subtopology -> partitions


def info(name: str, partitions: int = 0, rf: int = 0, **configs: str) -> Req.TopicInfo:
    return Req.TopicInfo(
        name=name,
        partitions=partitions,
        replication_factor=rf,
        topic_configs=[Req.KeyValue(key=k.replace("_", "."), value=v) for k, v in configs.items()],
    )


def sub(
    sid: str,
    sources: list[str] | None = None,
    *,
    changelogs: list[Req.TopicInfo] | None = None,
    sinks: list[str] | None = None,
    repartition_sources: list[Req.TopicInfo] | None = None,
    copartition: list[tuple[list[int], list[int]]] | None = None,
) -> Req.Subtopology:
    return Req.Subtopology(
        subtopology_id=sid,
        source_topics=sources or [],
        source_topic_regex=[],
        state_changelog_topics=changelogs or [],
        repartition_sink_topics=sinks or [],
        repartition_source_topics=repartition_sources or [],
        copartition_groups=[
            Req.CopartitionGroup(
                source_topics=s, source_topic_regex=[], repartition_source_topics=r
            )
            for s, r in copartition or []
        ],
    )


def topology(*subs: Req.Subtopology, epoch: int = 0) -> Req.Topology:
    return Req.Topology(epoch=epoch, subtopologies=list(subs))


SIMPLE = topology(sub("0", ["in"]))
STATEFUL = topology(sub("0", ["in"], changelogs=[info("app-store-changelog")]))


def task_ids(tasks: Tasks | None) -> list[Req.TaskIds] | None:
    if tasks is None:
        return None
    return [Req.TaskIds(subtopology_id=s, partitions=sorted(ps)) for s, ps in sorted(tasks.items())]


def as_tasks(ids: list | None) -> Tasks | None:
    if ids is None:
        return None
    return {t.subtopology_id: sorted(t.partitions) for t in ids if t.partitions}


class StreamsHarness(Harness):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[Any] = []  # every RebalanceEvent the shard reported

    def apply(self, result: Any) -> Any:
        self.events.extend(result.events)
        return super().apply(result)

    def beat(
        self,
        member_id: str,
        epoch: int = 0,
        *,
        group: str = "app",
        topo: Req.Topology | None = None,
        process: str | None = None,
        active: Tasks | None = None,
        standby: Tasks | None = None,
        warmup: Tasks | None = None,
        rebalance_timeout: int = -1,
        shutdown: bool = False,
        endpoint: tuple[str, int] | None = None,
        endpoint_epoch: int = 0,
        tags: dict[str, str] | None = None,
        **fields: Any,
    ) -> Outcome:
        if epoch == 0:
            topo = SIMPLE if topo is None else topo
            if rebalance_timeout == -1:
                rebalance_timeout = 30000
            active, standby, warmup = active or {}, standby or {}, warmup or {}
        req = Req(
            group_id=group,
            member_id=member_id,
            member_epoch=epoch,
            endpoint_information_epoch=endpoint_epoch,
            rebalance_timeout_ms=rebalance_timeout,
            topology=topo,
            active_tasks=task_ids(active),
            standby_tasks=task_ids(standby),
            warmup_tasks=task_ids(warmup),
            process_id=process
            if process is not None
            else (f"p-{member_id}" if epoch == 0 else None),
            user_endpoint=None
            if endpoint is None
            else Req.Endpoint(host=endpoint[0], port=endpoint[1]),
            client_tags=None
            if tags is None
            else [Req.KeyValue(key=k, value=v) for k, v in tags.items()],
            shutdown_application=shutdown,
            **fields,
        )
        rid = next(self.ids)
        meta = RequestMeta(api_version=0, client_id="streams", client_host="/127.0.0.1")
        result = self.apply(
            self.shard.streams_group_heartbeat(req, meta, self.topics, rid, self.now)
        )
        return result.replies[rid]

    def streams(self, group: str = "app") -> Any:
        return of_type(self.shard, "streams")[group]


@dataclass
class Member:
    """A Kafka Streams member: owns what its last responses gave it and revokes at once."""

    h: StreamsHarness
    member_id: str
    process: str | None = None
    group: str = "app"
    topo: Req.Topology = field(default_factory=lambda: SIMPLE)
    epoch: int = 0
    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    last: Any = None

    def beat(self, **kw: Any) -> Any:
        joining = self.epoch == 0
        out = self.h.beat(
            self.member_id,
            self.epoch,
            group=self.group,
            topo=self.topo if joining else None,
            process=self.process if joining else None,
            active=self.active,
            standby=self.standby,
            warmup={},
            **kw,
        )
        r = out.response
        self.last = r
        if r.error_code == 0:
            self.epoch = r.member_epoch
            if r.active_tasks is not None:
                self.active = as_tasks(r.active_tasks) or {}
                self.standby = as_tasks(r.standby_tasks) or {}
        return r

    def leave(self) -> Any:
        r = self.h.beat(self.member_id, -1, group=self.group).response
        self.epoch = 0
        self.active, self.standby = {}, {}
        return r


def settle(members: list[Member], rounds: int = 10) -> None:
    """Heartbeat every member in turn until the group is stable (or `rounds` run out)."""
    for _ in range(rounds):
        for m in members:
            m.beat()
        g = members[0].h.streams(members[0].group)
        if str(g.state) == "Stable":
            return
