"""The checks Kafka's GroupCoordinatorService makes of a StreamsGroupHeartbeat before the
coordinator sees it: features Kafka 4.3 does not support yet, then malformed requests."""

from __future__ import annotations

from coordinator.modern.errors import ApiError, invalid_request
from coordinator.streams.member import STATIC_LEAVE_EPOCH
from protocol.errors import ErrorCode
from protocol.messages import StreamsGroupHeartbeatRequest as Request


def _blank(value: str | None) -> bool:
    return value is not None and not value.strip()


def unsupported_features(req: Request) -> None:
    """Kafka 4.3 refuses these with INVALID_REQUEST: static membership, task offsets, warm-up
    tasks (its assignor never gives any) and source topic regular expressions."""
    if req.instance_id is not None:
        raise invalid_request("Static membership is not yet supported.")
    if req.task_offsets is not None:
        raise invalid_request("TaskOffsets are not supported yet.")
    if req.task_end_offsets is not None:
        raise invalid_request("TaskEndOffsets are not supported yet.")
    if req.warmup_tasks:
        raise invalid_request("WarmupTasks are not supported yet.")
    if req.topology is not None:
        for sub in req.topology.subtopologies:
            if sub.source_topic_regex:
                raise invalid_request(
                    "Regular expressions for source topics are not supported yet."
                )


def request(req: Request) -> None:
    """Kafka's throwIfStreamsGroupHeartbeatRequestIsInvalid."""
    if _blank(req.member_id):
        raise invalid_request("MemberId can't be empty.")
    if _blank(req.group_id):
        raise invalid_request("GroupId can't be empty.")
    if _blank(req.instance_id):
        raise invalid_request("InstanceId can't be empty.")
    if _blank(req.rack_id):
        raise invalid_request("RackId can't be empty.")
    epoch = req.member_epoch
    if epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid_request("RebalanceTimeoutMs must be provided in first request.")
        for name, tasks in (
            ("ActiveTasks", req.active_tasks),
            ("StandbyTasks", req.standby_tasks),
            ("WarmupTasks", req.warmup_tasks),
        ):
            if tasks:
                raise invalid_request(f"{name} must be empty when (re-)joining.")
        if req.topology is None:
            raise invalid_request("Topology must be non-null when (re-)joining.")
        for sub in req.topology.subtopologies:
            for t in sub.state_changelog_topics:
                if t.partitions != 0:
                    raise ApiError(
                        ErrorCode.STREAMS_INVALID_TOPOLOGY,
                        f"Changelog topic {t.name} must have an undefined partition count, "
                        f"but it is set to {t.partitions}.",
                    )
    elif epoch == STATIC_LEAVE_EPOCH:
        if req.instance_id is None:
            raise invalid_request("InstanceId can't be null.")
    elif epoch < STATIC_LEAVE_EPOCH:
        raise invalid_request(f"MemberEpoch is {epoch}, but must be greater than or equal to -2.")
    lists = (req.active_tasks, req.standby_tasks, req.warmup_tasks)
    if any(x is not None for x in lists) and any(x is None for x in lists):
        raise invalid_request("If one task-type is non-null, all must be non-null.")
    if epoch != 0 and req.topology is not None:
        raise invalid_request("Topology can only be provided when (re-)joining.")
