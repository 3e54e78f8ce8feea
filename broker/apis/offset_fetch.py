"""OffsetFetch: one group (v0-7) or many (v8+), each read from its own shard.

v10 (Kafka 4.2) names topics by id: the ids asked for are resolved to names (an unknown id's
partitions answer UNKNOWN_TOPIC_ID), and the reply names each topic by its id; asked for every
topic, a group's offsets of topics that no longer exist (no id to name them by) are left out."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from broker.apis._groups import when_ready
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import OffsetFetchRequest, OffsetFetchResponse

Resp = OffsetFetchResponse

# (group error, [(topic, partition, offset, leader epoch, metadata, error)])
Fetched = tuple[int, list[tuple[str, int, int, int, str, int]]]


def _fetch(
    ctx: RequestContext,
    group_id: str,
    topics: list[OffsetFetchRequest.OffsetFetchRequestTopic]
    | list[OffsetFetchRequest.OffsetFetchRequestTopics]
    | None,
    stable: bool,
    member_id: str | None = None,
    member_epoch: int = -1,
) -> Fetched | Awaitable[Fetched]:
    wanted = None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]
    version = ctx.api_version
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, group_id):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return code, _errored(wanted) if version < 2 else []
    got = ctx.broker.groups.read(
        group_id,
        lambda shard, now: shard.fetch_offsets(
            group_id, wanted, stable, version, now, member_id, member_epoch
        ),
        lambda code: (code, _errored(wanted) if version < 2 else []),
    )
    if ctx.broker.authorizer is None:
        return got
    return when_ready([got], lambda f: _visible(ctx, f[0], named=wanted is not None))


def _visible(ctx: RequestContext, fetched: Fetched, named: bool) -> Fetched:
    """Offsets of topics the client may not DESCRIBE: an error where it named them, left out
    where it asked for all (Kafka's rule)."""
    code, rows = fetched
    allowed: dict[str, bool] = {}
    out = []
    for row in rows:
        topic = row[0]
        ok = allowed.get(topic)
        if ok is None:
            ok = allowed[topic] = ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, topic)
        if ok:
            out.append(row)
        elif named:
            out.append((topic, row[1], -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    return code, out


def _errored(
    wanted: list[tuple[str, list[int]]] | None,
) -> list[tuple[str, int, int, int, str, int]]:
    # v0-1 carry errors only per partition, so an error must name every requested partition,
    # else an old client reads "nothing committed". No partitions requested: nothing to name
    # (Kafka's getErrorResponse answers an empty list too). _single sets the error code.
    return [(t, p, -1, -1, "", ErrorCode.NONE) for t, ps in wanted or () for p in ps]


def _by_topic(rows: list, make_topic: Any, make_partition: Any) -> list:
    topics: dict[str, list] = {}
    for topic, partition, offset, epoch, metadata, error in rows:
        topics.setdefault(topic, []).append(
            make_partition(
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=epoch,
                metadata=metadata,
                error_code=error,
            )
        )
    return [make_topic(name=name, partitions=parts) for name, parts in topics.items()]


def _single(version: int, fetched: Fetched) -> OffsetFetchResponse:
    code, rows = fetched
    topics = _by_topic(rows, Resp.OffsetFetchResponseTopic, Resp.OffsetFetchResponsePartition)
    if version < 2 and code != ErrorCode.NONE:
        # v0-1 have no group-level error: Kafka reports it on every partition.
        for t in topics:
            for p in t.partitions:
                p.error_code = code
    return Resp(error_code=code, topics=topics)


def _group(group_id: str, fetched: Fetched) -> Resp.OffsetFetchResponseGroup:
    code, rows = fetched
    topics = _by_topic(rows, Resp.OffsetFetchResponseTopics, Resp.OffsetFetchResponsePartitions)
    return Resp.OffsetFetchResponseGroup(group_id=group_id, topics=topics, error_code=code)


TOPIC_ID_VERSION = 10
Unresolved = list[OffsetFetchRequest.OffsetFetchRequestTopics]


def _resolve(ctx: RequestContext, group: OffsetFetchRequest.OffsetFetchRequestGroup) -> Unresolved:
    """v10: the group's topics named by their ids (in place); those with unknown ids, removed."""
    if group.topics is None:
        return []
    registry = ctx.broker.topics
    known, unknown = [], []
    for t in group.topics:
        topic = registry.by_id(t.topic_id)
        if topic is None:
            unknown.append(t)
        else:
            t.name = topic.name
            known.append(t)
    group.topics = known
    return unknown


def _group_by_id(
    ctx: RequestContext, group_id: str, fetched: Fetched, unknown: Unresolved
) -> Resp.OffsetFetchResponseGroup:
    registry = ctx.broker.topics
    answer = _group(group_id, fetched)
    topics = []
    for t in answer.topics:
        topic = registry.get(t.name)
        if topic is not None:
            t.topic_id = topic.topic_id
            topics.append(t)
    if answer.error_code == ErrorCode.NONE:
        P = Resp.OffsetFetchResponsePartitions
        for u in unknown:
            parts = [
                P(
                    partition_index=p,
                    committed_offset=-1,
                    committed_leader_epoch=-1,
                    metadata="",
                    error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                )
                for p in u.partition_indexes
            ]
            topics.append(Resp.OffsetFetchResponseTopics(topic_id=u.topic_id, partitions=parts))
    answer.topics = topics
    return answer


@serves(ApiKey.OFFSET_FETCH, 0, 10)
def handle(
    ctx: RequestContext, req: OffsetFetchRequest
) -> OffsetFetchResponse | Awaitable[OffsetFetchResponse]:
    version = ctx.api_version
    if version < 8:
        got = _fetch(ctx, req.group_id, req.topics, req.require_stable)
        return when_ready([got], lambda fetched: _single(version, fetched[0]))

    ids = [g.group_id for g in req.groups]
    if version >= TOPIC_ID_VERSION:
        unknown = [_resolve(ctx, g) for g in req.groups]
        reads = [
            _fetch(ctx, g.group_id, g.topics, req.require_stable, g.member_id, g.member_epoch)
            for g in req.groups
        ]
        return when_ready(
            reads,
            lambda fetched: Resp(
                groups=[
                    _group_by_id(ctx, g, f, u)
                    for g, f, u in zip(ids, fetched, unknown, strict=True)
                ]
            ),
        )
    reads = [
        _fetch(ctx, g.group_id, g.topics, req.require_stable, g.member_id, g.member_epoch)
        for g in req.groups
    ]
    return when_ready(
        reads,
        lambda fetched: Resp(groups=[_group(g, f) for g, f in zip(ids, fetched, strict=True)]),
    )
