"""A member of a streams group, as Kafka's StreamsGroupMember: a value that handlers copy
(`dataclasses.replace`) and replay puts in the group. Two records carry it:
StreamsGroupMemberMetadata (who it is: process, endpoint, tags, topology epoch) and
StreamsGroupCurrentMemberAssignment (its epoch, state and tasks, with the epoch at which each
active task was assigned: KIP-1251's fencing of late offset commits)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from coordinator.streams.tasks import EMPTY, TaskMap, Tasks, task_map
from protocol.coordinator_records import (
    StreamsGroupCurrentMemberAssignmentValue,
    StreamsGroupMemberMetadataValue,
)

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
TaskIds = StreamsGroupCurrentMemberAssignmentValue.TaskIds


class MemberState(enum.IntEnum):
    """Kafka's streams MemberState and the values its records carry (not the consumer ones)."""

    STABLE = 1  # reconciled, or has everything it can get at its epoch
    UNREVOKED_TASKS = 2  # must give tasks up before its epoch moves
    UNRELEASED_TASKS = 3  # waits for tasks another member (or its process) still holds
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


Epochs = Mapping[tuple[str, int], int]  # active task -> the member epoch it was assigned at


@dataclass(slots=True)
class StreamsGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    topology_epoch: int = -1
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: Mapping[str, str] = field(default_factory=dict)
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Tasks = EMPTY
    pending_revocation: Tasks = EMPTY
    epochs: Epochs = field(default_factory=dict)

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def metadata_key(self) -> tuple:
        """What the metadata record carries: a member whose key is unchanged needs none."""
        return (
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.rebalance_timeout_ms,
            self.topology_epoch,
            self.process_id,
            self.user_endpoint,
            tuple(sorted(self.client_tags.items())),
        )

    def assignment_key(self) -> tuple:
        return (
            self.member_epoch,
            self.previous_member_epoch,
            self.state,
            self.assigned,
            self.pending_revocation,
            dict(self.epochs),
        )

    # -- records ------------------------------------------------------------------------------

    def metadata_value(self) -> StreamsGroupMemberMetadataValue:
        v = StreamsGroupMemberMetadataValue
        endpoint = None
        if self.user_endpoint is not None:
            endpoint = v.Endpoint(host=self.user_endpoint[0], port=self.user_endpoint[1])
        return v(
            instance_id=self.instance_id,
            rack_id=self.rack_id,
            client_id=self.client_id,
            client_host=self.client_host,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            topology_epoch=self.topology_epoch,
            process_id=self.process_id,
            user_endpoint=endpoint,
            client_tags=[v.KeyValue(key=k, value=x) for k, x in sorted(self.client_tags.items())],
        )

    def assignment_value(self) -> StreamsGroupCurrentMemberAssignmentValue:
        a, p = self.assigned, self.pending_revocation
        return StreamsGroupCurrentMemberAssignmentValue(
            member_epoch=self.member_epoch,
            previous_member_epoch=self.previous_member_epoch,
            state=int(self.state),
            active_tasks=_task_ids(a.active, self.epochs),
            standby_tasks=_task_ids(a.standby),
            warmup_tasks=_task_ids(a.warmup),
            active_tasks_pending_revocation=_task_ids(p.active, self.epochs),
            standby_tasks_pending_revocation=_task_ids(p.standby),
            warmup_tasks_pending_revocation=_task_ids(p.warmup),
        )

    def with_metadata(self, value: StreamsGroupMemberMetadataValue) -> StreamsGroupMember:
        endpoint = value.user_endpoint
        return replace(
            self,
            instance_id=value.instance_id,
            rack_id=value.rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            rebalance_timeout_ms=value.rebalance_timeout_ms,
            topology_epoch=value.topology_epoch,
            process_id=value.process_id,
            user_endpoint=None if endpoint is None else (endpoint.host, endpoint.port),
            client_tags={kv.key: kv.value for kv in value.client_tags},
        )

    def with_assignment(
        self, value: StreamsGroupCurrentMemberAssignmentValue
    ) -> StreamsGroupMember:
        epochs: dict[tuple[str, int], int] = {}
        _read_epochs(value.active_tasks, value.member_epoch, epochs)
        _read_epochs(value.active_tasks_pending_revocation, value.member_epoch, epochs)
        return replace(
            self,
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=MemberState.of(value.state),
            assigned=Tasks(
                _map(value.active_tasks), _map(value.standby_tasks), _map(value.warmup_tasks)
            ),
            pending_revocation=Tasks(
                _map(value.active_tasks_pending_revocation),
                _map(value.standby_tasks_pending_revocation),
                _map(value.warmup_tasks_pending_revocation),
            ),
            epochs=epochs,
        )


def _map(ids: list) -> dict[str, frozenset[int]]:
    return task_map((t.subtopology_id, t.partitions) for t in ids)


def _task_ids(tasks: TaskMap, epochs: Epochs | None = None) -> list:
    out = []
    for sub in sorted(tasks):
        parts = sorted(tasks[sub])
        t = TaskIds(subtopology_id=sub, partitions=parts)
        if epochs is not None:
            t.assignment_epochs = [epochs[(sub, p)] for p in parts]
        out.append(t)
    return out


def _read_epochs(ids: list, default: int, out: dict[tuple[str, int], int]) -> None:
    """A record's active tasks with their assignment epochs; a record without them (written
    before KIP-1251, or with a mismatched list) gives every task the member epoch, as Kafka."""
    for t in ids:
        epochs = t.assignment_epochs
        if epochs is not None and len(epochs) == len(t.partitions):
            for p, e in zip(t.partitions, epochs, strict=True):
                out[(t.subtopology_id, p)] = e
        else:
            for p in t.partitions:
                out[(t.subtopology_id, p)] = default
