"""Moving a running group between the classic and the consumer protocol (KIP-848's online
migration), as Kafka's GroupMetadataManager convertToConsumerGroup / convertToClassicGroup.

Upgrade: a consumer-protocol member joining a classic group that uses the consumer embedded
protocol turns it into a consumer group that keeps the classic members. Each starts Stable at
the classic generation with the partitions of its last assignment as both its current and its
target assignment, so nothing moves until the joining member's epoch bump makes them rejoin.

Downgrade: when the last consumer-protocol member of a group whose other members all speak
the classic protocol goes, the group becomes a classic group holding the target assignment, and
rebalances at once.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from coordinator.classic.consumer_protocol import (
    metadata_version,
    parse_assignment,
    parse_subscription,
)
from coordinator.classic.group import ClassicGroup, ClassicMember
from coordinator.classic.rebalance import answer_parked, prepare_rebalance, reschedule_heartbeat
from coordinator.keys import group_record_key, heartbeat_key
from coordinator.keys import join_key as classic_join_key
from coordinator.keys import sync_key as classic_sync_key
from coordinator.modern import records
from coordinator.modern import replay as _replay
from coordinator.modern.assignment import EMPTY
from coordinator.modern.errors import ApiError
from coordinator.modern.group import ConsumerGroup, consumer_protocol_assignment
from coordinator.modern.keys import member_timer_keys, session_key
from coordinator.modern.member import ConsumerGroupMember, MemberState, classic_metadata
from coordinator.modern.topics_image import TopicsImage
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from coordinator.context import Ctx


def partitions_by_id(
    items: list[tuple[str, list[int]]], topics: TopicsImage
) -> dict[uuid.UUID, frozenset[int]]:
    """Topic names and partitions as the consumer protocol carries them, by topic id; topics
    the image does not know are left out (as Kafka's toTopicPartitionMap does)."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for name, parts in items:
        meta = topics.by_name.get(name)
        if meta is not None and parts:
            out[meta.topic_id] = out.get(meta.topic_id, frozenset()) | frozenset(parts)
    return out


# -- upgrade ----------------------------------------------------------------------------------


def _refuse(group_id: str, why: str) -> ApiError:
    return ApiError(
        ErrorCode.GROUP_ID_NOT_FOUND,
        f"Group {group_id} is a classic group with members and cannot become a consumer group "
        f"now: {why}.",
    )


def upgrade(
    ctx: Ctx, classic: ClassicGroup, topics: TopicsImage, out: list[records.Record]
) -> ConsumerGroup:
    """The consumer group `classic` becomes, with the records that make it so in `out` (the
    classic group's tombstone first). The group is not stored: applying `out` does that, once
    the request that converts it is known to succeed. ApiError (GROUP_ID_NOT_FOUND) when it
    cannot be converted (Kafka's validateOnlineUpgrade and a malformed embedded protocol)."""
    gid = classic.group_id
    cfg = ctx.config
    if not cfg.allows_upgrade():
        raise _refuse(gid, "group.consumer.migration.policy does not allow upgrades")
    if not classic.uses_consumer_protocol():
        raise _refuse(gid, f"its members use the {classic.protocol_type!r} protocol type")
    if len(classic.members) > cfg.consumer_max_size:
        raise _refuse(gid, "it has more members than group.consumer.max.size")
    epoch = classic.generation
    owners: dict[tuple[uuid.UUID, int], str] = {}
    members: list[ConsumerGroupMember] = []
    for m in classic.members.values():
        try:
            sub = parse_subscription(_subscription_of(m, classic.protocol_name))
            assigned = partitions_by_id(parse_assignment(m.assignment), topics)
        except ValueError as e:
            raise _refuse(gid, f"member {m.member_id}'s embedded consumer protocol: {e}") from None
        for t, ps in assigned.items():
            for p in ps:
                other = owners.setdefault((t, p), m.member_id)
                if other != m.member_id:
                    raise _refuse(gid, f"{other} and {m.member_id} were both assigned {t}-{p}")
        members.append(
            ConsumerGroupMember(
                m.member_id,
                instance_id=m.group_instance_id,
                rack_id=sub.rack_id,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=frozenset(sub.topics),
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                classic_metadata=classic_metadata(m.session_timeout_ms, m.protocols),
                member_epoch=epoch,
                previous_member_epoch=epoch,
                state=MemberState.STABLE,
                assigned=assigned,
            )
        )
    # Kafka's createConsumerGroupRecords order.
    made = [records.member_metadata(gid, m) for m in members]
    made.append(records.group_epoch(gid, epoch))
    made += [records.target_assignment(gid, m.member_id, m.assigned) for m in members]
    made.append(records.target_epoch(gid, epoch))
    made += [records.current_assignment(gid, m) for m in members]
    group = ConsumerGroup(gid)
    for key, value in made:
        _replay.apply(group, key, value)
    out.extend(classic.tombstone_records())
    out.extend(made)
    return group


def _subscription_of(member: ClassicMember, protocol_name: str | None) -> bytes:
    if protocol_name is not None and protocol_name in member.protocol_names():
        return member.metadata(protocol_name)
    # A group still in its first join phase has not chosen a protocol: the member's first.
    return member.protocols[0][1] if member.protocols else b""


def finish_upgrade(ctx: Ctx, classic: ClassicGroup, group: ConsumerGroup) -> None:
    """Once the converted group is stored: parked JoinGroup and SyncGroup requests are told
    to rejoin, the classic timers stop and the members' sessions run on."""
    gid = classic.group_id
    answer_parked(ctx, classic, ErrorCode.REBALANCE_IN_PROGRESS)
    for member_id in [*classic.members, *classic.pending_join]:
        ctx.cancel(heartbeat_key(gid, member_id))
    ctx.cancel(classic_join_key(gid))
    ctx.cancel(classic_sync_key(gid))
    for m in group.members.values():
        if m.uses_classic_protocol():
            ctx.schedule(session_key(gid, m.member_id), m.classic_session_timeout_ms())


# -- downgrade --------------------------------------------------------------------------------


def can_downgrade(ctx: Ctx, group: ConsumerGroup, leaving: str | None) -> bool:
    """Kafka's validateOnlineDowngradeWith{Fenced,Replaced}Member: the members but `leaving`
    (the last one that speaks the consumer protocol, when given) all speak classic and share a
    protocol, and the policy and sizes allow a classic group of them."""
    if leaving is not None:
        gone = group.members.get(leaving)
        if gone is None or gone.uses_classic_protocol():
            return False
    others = [m for mid, m in group.members.items() if mid != leaving]
    if not others or not all(m.uses_classic_protocol() for m in others):
        return False
    if not ctx.config.allows_downgrade() or len(others) > ctx.config.max_size:
        return False
    common = set.intersection(*({n for n, _ in m.classic_protocols()} for m in others))
    return bool(common)


def downgrade(
    ctx: Ctx, group: ConsumerGroup, leaving: str | None, rebalance: bool = True
) -> ClassicGroup:
    """Replace `group` by a classic group of its members but `leaving`, each assigned its
    target partitions, at generation = the group epoch. A member leaving starts a rebalance
    at once; a classic static member that took the last consumer-protocol member's place
    (`rebalance` False) simply carries on, as in Kafka."""
    gid = group.group_id
    classic = ClassicGroup(gid, ctx.now)
    staying = [m for mid, m in group.members.items() if mid != leaving]
    for m in staying:
        cm = ClassicMember(
            m.member_id,
            m.instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.classic_session_timeout_ms(),
            "consumer",
            m.classic_protocols(),
        )
        classic.add(cm, None)
    classic.protocol_name = classic.select_protocol()
    classic.generation = group.group_epoch
    names = group.topic_names(ctx.state.topics)
    assignments = {}
    for cm in classic.members.values():
        version = metadata_version(cm.metadata(classic.protocol_name))
        target = group.target.get(cm.member_id, EMPTY)
        assignments[cm.member_id] = consumer_protocol_assignment(target, names, version)
    value = classic.metadata_value(assignments)

    for mid in group.members:
        for key in member_timer_keys(gid, mid):
            ctx.cancel(key)
    for key, tombstone in group.tombstone_records():
        ctx.append(key, tombstone)
    ctx.append(group_record_key(gid), value)
    # The replayed group knows each member's chosen protocol only (what the record keeps);
    # the live one keeps all they support, for the next vote, as Kafka's does.
    classic.apply_metadata(value)
    ctx.state.groups[gid] = classic
    for member in classic.members.values():
        reschedule_heartbeat(ctx, classic, member)
    if rebalance:
        prepare_rebalance(
            ctx, classic, f"group {gid} went back from the consumer to the classic protocol"
        )
    return classic
