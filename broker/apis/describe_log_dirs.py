"""DescribeLogDirs v0-5: kcoord has one log directory, its data directory (with the
PostgreSQL engine, topic logs live in the database: the directory named is `postgresql`,
with no disk figures). Every partition this node serves is in it, `__consumer_offsets` ones
included, with its size; there are no future replicas and no replica lag, and it is never
cordoned (v5, KIP-1066: kcoord places every partition in its one directory).

DESCRIBE on the cluster is required (Kafka: CLUSTER_AUTHORIZATION_FAILED, v3+ at the top,
nothing listed before)."""

from __future__ import annotations

import shutil

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.coordinator_records import OFFSETS_TOPIC
from protocol.errors import ErrorCode
from protocol.messages import DescribeLogDirsRequest, DescribeLogDirsResponse

Resp = DescribeLogDirsResponse


@serves(ApiKey.DESCRIBE_LOG_DIRS, 0, 5)
def handle(ctx: RequestContext, req: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER):
        return Resp(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    sizes = _partition_sizes(ctx)
    wanted = None if req.topics is None else {t.topic: set(t.partitions) for t in req.topics}
    by_topic: dict[str, list[Resp.DescribeLogDirsPartition]] = {}
    for (topic, index), size in sorted(sizes.items()):
        if wanted is not None and index not in wanted.get(topic, ()):
            continue
        by_topic.setdefault(topic, []).append(
            Resp.DescribeLogDirsPartition(
                partition_index=index, partition_size=size, offset_lag=0, is_future_key=False
            )
        )
    store = ctx.broker.data
    directory, total, usable = "postgresql", -1, -1
    if store is not None and store.engine is None:
        directory = str(store.data_dir.resolve())
        usage = shutil.disk_usage(store.data_dir)
        total, usable = usage.total, usage.free
    result = Resp.DescribeLogDirsResult(
        error_code=ErrorCode.NONE,
        log_dir=directory,
        topics=[
            Resp.DescribeLogDirsTopic(name=t, partitions=ps) for t, ps in sorted(by_topic.items())
        ],
        total_bytes=total,
        usable_bytes=usable,
    )
    return Resp(results=[result])


def _partition_sizes(ctx: RequestContext) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    store = ctx.broker.data
    if store is not None:
        for topic, parts in list(store.partitions.items()):
            for part in parts:
                if part is not None and not part.closed and part.leading:
                    out[(topic, part.index)] = part.log.size_bytes
    groups = ctx.broker.groups
    if groups is not None:
        for p, plog in enumerate(groups.logs):
            if plog is not None:
                out[(OFFSETS_TOPIC, p)] = plog.size_bytes
    return out
