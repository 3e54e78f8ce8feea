"""TxnOffsetCommit and transaction markers on `__consumer_offsets`, as Kafka's
OffsetMetadataManager does them (KIP-98, KIP-447).

A transactional commit writes ordinary OffsetCommit records in a transactional batch of the
producer; they stay pending (`ShardState.pending_txn`) until the transaction coordinator
writes the marker to this partition: a commit marker makes them the committed offsets, an
abort drops them. OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for a
partition with pending offsets.

The group checks the member as for OffsetCommit (KIP-447: a producer committing for a
consumer that has since been fenced out of the group gets ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID
/ FENCED_INSTANCE_ID); a request without member and generation (v0-2) is not checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.context import Ctx
from coordinator.offsets import _utf16_len
from coordinator.result import Marker
from protocol.coordinator_records import OffsetCommitKey, OffsetCommitValue
from protocol.errors import ErrorCode
from protocol.messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse

if TYPE_CHECKING:
    from coordinator.request_meta import RequestMeta

# Any version past the consumer-group minimum: the member checks of a transactional commit do
# not depend on the TxnOffsetCommit version.
_MEMBER_CHECK_VERSION = 99


def error_response(req: TxnOffsetCommitRequest, code: int) -> TxnOffsetCommitResponse:
    Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    Part = TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition
    return TxnOffsetCommitResponse(
        topics=[
            Topic(
                name=t.name,
                partitions=[
                    Part(partition_index=p.partition_index, error_code=int(code))
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ]
    )


def txn_offset_commit(
    ctx: Ctx, req: TxnOffsetCommitRequest, meta: RequestMeta, req_id: int
) -> None:
    group = ctx.state.groups.get(req.group_id)
    check = None
    unchecked = req.member_id == "" and req.generation_id < 0
    if group is not None and not unchecked:
        error, check = group.validate_offset_commit(
            req.member_id, req.group_instance_id, req.generation_id, _MEMBER_CHECK_VERSION
        )
        if error == ErrorCode.STALE_MEMBER_EPOCH:
            error = ErrorCode.ILLEGAL_GENERATION  # TxnOffsetCommit has no STALE_MEMBER_EPOCH
        if error != ErrorCode.NONE:
            ctx.reply(req_id, error_response(req, error))
            return
    elif group is None and not unchecked:
        ctx.reply(req_id, error_response(req, ErrorCode.ILLEGAL_GENERATION))
        return
    Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    Part = TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition
    max_len = ctx.config.offset_metadata_max_bytes
    records = []
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code = ErrorCode.NONE
            if check is not None:
                code = check(t.name, p.partition_index)
                if code == ErrorCode.STALE_MEMBER_EPOCH:
                    code = ErrorCode.ILLEGAL_GENERATION
            metadata = p.committed_metadata or ""
            if code == ErrorCode.NONE and _utf16_len(metadata) > max_len:
                code = ErrorCode.OFFSET_METADATA_TOO_LARGE
            if code == ErrorCode.NONE:
                records.append(
                    (
                        OffsetCommitKey.make(req.group_id, t.name, p.partition_index),
                        OffsetCommitValue.make(
                            p.committed_offset, p.committed_leader_epoch, metadata, ctx.now, -1
                        ),
                    )
                )
            parts.append(Part(partition_index=p.partition_index, error_code=int(code)))
        topics.append(Topic(name=t.name, partitions=parts))
    if records:
        # (A group that does not exist yet comes into being, holding only offsets, when the
        # commit marker applies them.)
        ctx.append_txn_offset_commits(req.producer_id, req.producer_epoch, records)
    ctx.reply(req_id, TxnOffsetCommitResponse(topics=topics))


def end_txn(ctx: Ctx, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int) -> None:
    ctx.end_txn(Marker(producer_id, epoch, commit, coordinator_epoch))
