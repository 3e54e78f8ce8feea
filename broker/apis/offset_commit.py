"""OffsetCommit: the broker answers partitions of unknown topics itself, as Kafka's request
handler does, and hands the rest to the group's coordinator shard.

v10 (Kafka 4.2) names topics by id only: the ids are resolved to names here (an unknown id's
partitions get UNKNOWN_TOPIC_ID), the coordinator keeps offsets by name as before, and the
reply names each topic by its id again."""

from __future__ import annotations

import inspect
import uuid

from broker.apis._groups import meta, when_ready
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from coordinator.offsets import commit_error_response
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import OffsetCommitRequest, OffsetCommitResponse
from protocol.types import ZERO_UUID

Resp = OffsetCommitResponse


TOPIC_ID_VERSION = 10


@serves(ApiKey.OFFSET_COMMIT, 0, 10)
def handle(ctx: RequestContext, req: OffsetCommitRequest):
    if ctx.api_version < TOPIC_ID_VERSION:
        return _handle(ctx, req)
    topics = ctx.broker.topics
    unresolved = []
    named = []
    for t in req.topics:
        topic = topics.by_id(t.topic_id)
        if topic is None:
            unresolved.append(t)
        else:
            t.name = topic.name
            named.append(t)
    req.topics = named
    ids = {t.name: t.topic_id for t in named}
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return _with_ids(
            commit_error_response(named, ErrorCode.GROUP_AUTHORIZATION_FAILED), ids, unresolved
        )
    got = _handle(ctx, req)
    if not inspect.isawaitable(got):
        return _with_ids(got, ids, unresolved)

    async def later() -> OffsetCommitResponse:
        return _with_ids(await got, ids, unresolved)

    return later()


def _with_ids(
    resp: OffsetCommitResponse,
    ids: dict[str, uuid.UUID],
    unresolved: list[OffsetCommitRequest.OffsetCommitRequestTopic],
) -> OffsetCommitResponse:
    for t in resp.topics:
        t.topic_id = ids.get(t.name, ZERO_UUID)
    errors = commit_error_response(unresolved, ErrorCode.UNKNOWN_TOPIC_ID).topics
    for u, t in zip(unresolved, errors, strict=True):
        t.topic_id = u.topic_id
        resp.topics.append(t)
    return resp


def _handle(ctx: RequestContext, req: OffsetCommitRequest):
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return commit_error_response(req.topics, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    topics = ctx.broker.topics
    known, unknown = [], []
    denied = []
    if ctx.broker.authorizer is not None:
        denied = [
            t for t in req.topics if not ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name)
        ]
        if denied:
            req.topics = [t for t in req.topics if t not in denied]
    for t in req.topics:
        topic = topics.get(t.name)
        count = topic.partitions if topic else 0
        ps = t.partitions
        for p in ps:  # a plain loop: a generator costs twice as much per partition
            if not 0 <= p.partition_index < count:
                break
        else:
            if ps:
                known.append(t)  # the common case: the request's own topic object
            continue
        ok = [p for p in ps if 0 <= p.partition_index < count]
        bad = [p for p in ps if not 0 <= p.partition_index < count]
        if ok:
            known.append(OffsetCommitRequest.OffsetCommitRequestTopic(name=t.name, partitions=ok))
        if bad:
            unknown.append(
                OffsetCommitRequest.OffsetCommitRequestTopic(name=t.name, partitions=bad)
            )
    rejected = (
        commit_error_response(unknown, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION).topics
        if unknown
        else []
    )
    if denied:
        rejected += commit_error_response(denied, ErrorCode.TOPIC_AUTHORIZATION_FAILED).topics
    if not known and req.group_id:
        return Resp(topics=rejected)
    req.topics = known
    m = meta(ctx)
    reply = ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.commit_offsets(req, m, rid, now),
        lambda code: commit_error_response(req.topics, code),
    )
    if not rejected:
        return reply

    def merged(replies: list[OffsetCommitResponse]) -> OffsetCommitResponse:
        replies[0].topics.extend(rejected)
        return replies[0]

    return when_ready([reply], merged)
