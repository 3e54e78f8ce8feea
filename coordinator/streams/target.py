"""The target assignment of a streams group (Kafka's streams TargetAssignmentBuilder and
maybeUpdateStreamsTargetAssignment): when the group epoch is ahead of the assignment epoch, the
sticky assignor runs over every member (the one heartbeating as it is now), each starting from
its current target; a member whose target changed gets a record, and the assignment metadata
record carries the new epoch and the time. An unready topology gives every member nothing.

Kafka 4.3 waits between assignments (group.streams.assignment.interval.ms, KIP-1263) and, for
a group that had no members, before the first one (group.streams.initial.rebalance.delay.ms):
meanwhile members keep their last target and hear ASSIGNMENT_DELAYED.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from coordinator.streams import assignor, records
from coordinator.streams.configure import ConfiguredTopology
from coordinator.streams.group import StreamsGroup
from coordinator.streams.member import StreamsGroupMember
from coordinator.streams.tasks import EMPTY, Tasks

DELAYED_INITIAL = "Assignment delayed due to the configured initial rebalance delay."
DELAYED_INTERVAL = "Assignment delayed due to the configured assignment interval."


class Target(NamedTuple):
    epoch: int
    tasks: Tasks  # the heartbeating member's (EMPTY when there is none)
    delayed: str | None = None  # why the assignment was not computed now, if it was due


def can_compute(assignment_timestamp: int, interval_ms: int, now: int) -> bool:
    """Kafka's canComputeNextTargetAssignment: at once without an earlier timestamp or with
    no interval (the escape hatch for a clock set back), else once the interval is over."""
    if assignment_timestamp == 0 or interval_ms == 0:
        return True
    return now >= assignment_timestamp + interval_ms


def compute(
    group: StreamsGroup,
    epoch: int,
    member: StreamsGroupMember | None,
    configured: ConfiguredTopology,
    configs: Mapping[str, str],
    now: int,
    out: list[records.Record],
) -> Target:
    """Run the assignor (the member, if any, as given) and put the changed targets in `out`."""
    members = dict(group.members)
    if member is not None:
        members[member.member_id] = member
    previous = {mid: group.target.get(mid, EMPTY) for mid in members}
    if configured.ready and configured.subtopologies is not None:
        specs = {
            mid: assignor.MemberSpec(m.process_id, previous[mid].active, previous[mid].standby)
            for mid, m in members.items()
        }
        subs = [
            assignor.SubtopologySpec(sid, s.tasks, bool(s.state_changelog_topics))
            for sid, s in configured.subtopologies.items()
        ]
        standby = int(configs.get(assignor.NUM_STANDBY_REPLICAS, "0") or 0)
        targets = assignor.assign(specs, subs, standby)
    else:
        targets = {mid: EMPTY for mid in members}
    gid = group.group_id
    for mid in members:
        new = targets.get(mid, EMPTY)
        if mid not in group.target or group.target[mid] != new:
            out.append(records.target_assignment(gid, mid, new))
    out.append(records.target_metadata(gid, epoch, now))
    mine = EMPTY if member is None else targets.get(member.member_id, EMPTY)
    return Target(epoch, mine)
