"""StreamsGroupDescribe (Kafka's StreamsGroup.asDescribedGroup): the group's state and epochs,
its topology (as configured against the topics when that succeeded, else as declared), and each
member with its current and target tasks. The ListGroups view is a `StreamsGroup` method."""

from __future__ import annotations

from collections.abc import Mapping

from coordinator.streams.configure import ConfiguredTopology, InternalTopic
from coordinator.streams.group import StreamsGroup
from coordinator.streams.member import StreamsGroupMember
from coordinator.streams.tasks import TaskMap, Tasks
from coordinator.streams.topology import TopicInfo, Topology
from protocol.errors import ErrorCode
from protocol.messages import StreamsGroupDescribeResponse as Response


def _task_ids(tasks: TaskMap) -> list[Response.TaskIds]:
    return [Response.TaskIds(subtopology_id=s, partitions=sorted(tasks[s])) for s in sorted(tasks)]


def _assignment(tasks: Tasks) -> Response.Assignment:
    return Response.Assignment(
        active_tasks=_task_ids(tasks.active),
        standby_tasks=_task_ids(tasks.standby),
        warmup_tasks=_task_ids(tasks.warmup),
    )


def _kv(pairs: list[tuple[str, str]]) -> list[Response.KeyValue]:
    return [Response.KeyValue(key=k, value=v) for k, v in pairs]


def _declared(t: TopicInfo) -> Response.TopicInfo:
    return Response.TopicInfo(
        name=t.name,
        partitions=t.partitions,
        replication_factor=t.replication_factor,
        topic_configs=_kv(list(t.configs)),
    )


def _configured_info(t: InternalTopic) -> Response.TopicInfo:
    return Response.TopicInfo(
        name=t.name,
        partitions=t.partitions,
        replication_factor=max(t.replication_factor, 0),
        topic_configs=_kv(list(t.configs)),
    )


def _topology(
    topology: Topology | None, configured: ConfiguredTopology | None
) -> Response.Topology | None:
    if configured is not None and configured.ready and configured.subtopologies is not None:
        subs = [
            Response.Subtopology(
                subtopology_id=sid,
                source_topics=sorted(s.source_topics),
                repartition_sink_topics=sorted(s.repartition_sink_topics),
                state_changelog_topics=[
                    _configured_info(t) for _, t in sorted(s.state_changelog_topics.items())
                ],
                repartition_source_topics=[
                    _configured_info(t) for _, t in sorted(s.repartition_source_topics.items())
                ],
            )
            for sid, s in configured.subtopologies.items()
        ]
        return Response.Topology(epoch=configured.epoch, subtopologies=subs)
    if topology is None:
        return None
    subs = [
        Response.Subtopology(
            subtopology_id=s.subtopology_id,
            source_topics=sorted(s.source_topics),
            repartition_sink_topics=sorted(s.repartition_sink_topics),
            state_changelog_topics=[
                _declared(t) for t in sorted(s.state_changelog_topics, key=lambda t: t.name)
            ],
            repartition_source_topics=[
                _declared(t) for t in sorted(s.repartition_source_topics, key=lambda t: t.name)
            ],
        )
        for s in sorted(topology.subtopologies, key=lambda s: s.subtopology_id)
    ]
    return Response.Topology(epoch=topology.epoch, subtopologies=subs)


def _member(m: StreamsGroupMember, target: Tasks | None) -> Response.Member:
    endpoint = None
    if m.user_endpoint is not None:
        endpoint = Response.Endpoint(host=m.user_endpoint[0], port=m.user_endpoint[1])
    return Response.Member(
        member_id=m.member_id,
        member_epoch=m.member_epoch,
        instance_id=m.instance_id,
        rack_id=m.rack_id,
        client_id=m.client_id,
        client_host=m.client_host,
        topology_epoch=m.topology_epoch,
        process_id=m.process_id,
        user_endpoint=endpoint,
        client_tags=_kv(sorted(m.client_tags.items())),
        task_offsets=[],
        task_end_offsets=[],
        assignment=_assignment(m.assigned),
        target_assignment=_assignment(target or Tasks()),
        is_classic=False,
    )


def streams_group_describe(group_id: str, group: object | None) -> Response.DescribedGroup:
    if not isinstance(group, StreamsGroup):
        message = (
            f"Streams group {group_id} not found."
            if group is None
            else f"Group {group_id} is not a streams group."
        )
        return Response.DescribedGroup(
            group_id=group_id, error_code=int(ErrorCode.GROUP_ID_NOT_FOUND), error_message=message
        )
    targets: Mapping[str, Tasks] = group.target
    return Response.DescribedGroup(
        group_id=group_id,
        group_state=str(group.state),
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        topology=_topology(group.topology, group.configured),
        members=[_member(m, targets.get(mid)) for mid, m in group.members.items()],
    )
