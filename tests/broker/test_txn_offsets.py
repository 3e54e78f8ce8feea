"""Transactional offsets in the group runtime: TxnOffsetCommit writes pending offsets in a
transactional batch, the marker commits or drops them, and a restart (with or without
compaction in between) rebuilds the same committed and pending offsets from the log."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from broker.config import load_config
from broker.group_runtime import GroupRuntime
from coordinator.shard import RequestMeta
from protocol.errors import ErrorCode
from protocol.messages import OffsetCommitRequest, TxnOffsetCommitRequest
from storage.log import Log

GROUP = "txn-group"
META = RequestMeta(api_version=3, client_id="c", client_host="/127.0.0.1")
UNSTABLE = ErrorCode.UNSTABLE_OFFSET_COMMIT


async def start(tmp_path: Path) -> GroupRuntime:
    cfg = load_config(
        env={},
        overrides={"offsets.topic.num.partitions": 1, "offsets.topic.segment.bytes": 100_000},
    )
    rt = GroupRuntime(tmp_path, cfg, cfg.durability)
    rt.start()
    await rt.loaded.wait()
    return rt


async def _reply(x: Any) -> Any:
    return await x if hasattr(x, "__await__") else x


async def commit(rt: GroupRuntime, partition: int, offset: int) -> None:
    req = OffsetCommitRequest(
        group_id=GROUP,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=partition, committed_offset=offset
                    )
                ],
            )
        ],
    )
    meta = RequestMeta(api_version=8, client_id="c", client_host="/127.0.0.1")
    resp = await _reply(
        rt.call(GROUP, lambda s, rid, now: s.commit_offsets(req, meta, rid, now), lambda c: c)
    )
    assert resp.topics[0].partitions[0].error_code == 0


async def txn_commit(rt: GroupRuntime, pid: int, partition: int, offset: int) -> None:
    T = TxnOffsetCommitRequest
    req = T(
        transactional_id=f"tx-{pid}",
        group_id=GROUP,
        producer_id=pid,
        producer_epoch=0,
        topics=[
            T.TxnOffsetCommitRequestTopic(
                name="t",
                partitions=[
                    T.TxnOffsetCommitRequestPartition(
                        partition_index=partition, committed_offset=offset, committed_metadata=""
                    )
                ],
            )
        ],
    )
    resp = await _reply(
        rt.call(GROUP, lambda s, rid, now: s.txn_offset_commit(req, META, rid, now), lambda c: c)
    )
    assert resp.topics[0].partitions[0].error_code == 0


async def marker(rt: GroupRuntime, pid: int, commit_: bool) -> None:
    await rt.write_marker(rt.partition_of(GROUP), pid, 0, commit_, 0)  # type: ignore[misc]


def fetch(rt: GroupRuntime, stable: bool) -> dict[int, tuple[int, int]]:
    """partition -> (offset, error) for partitions 0-2 of topic t."""
    _, rows = rt.read(
        GROUP,
        lambda s, now: s.fetch_offsets(GROUP, [("t", [0, 1, 2])], stable, 8, now),
        lambda c: c,
    )
    return {r[1]: (r[2], r[5]) for r in rows}


@pytest.mark.parametrize("compact", [False, True])
async def test_pending_offsets_commit_abort_and_survive_a_restart(
    tmp_path: Path, compact: bool
) -> None:
    rt = await start(tmp_path)
    await commit(rt, 0, 5)
    await txn_commit(rt, 100, 0, 10)
    assert fetch(rt, False)[0] == (5, 0)  # not visible before the marker
    assert fetch(rt, True)[0] == (-1, UNSTABLE)
    await txn_commit(rt, 101, 1, 20)
    await marker(rt, 101, False)  # aborted: never visible
    assert fetch(rt, True)[1] == (-1, 0)
    await marker(rt, 100, True)
    assert fetch(rt, True)[0] == (10, 0)
    # A transactional commit, then a plain one of the same partition before the marker:
    # the plain one is newer and stays when the transaction commits (Kafka's rule).
    await txn_commit(rt, 102, 2, 30)
    await commit(rt, 2, 31)
    await marker(rt, 102, True)
    assert fetch(rt, True)[2] == (31, 0)
    # Left open at the restart.
    await txn_commit(rt, 103, 1, 40)
    if compact:
        plog = rt.logs[0]
        assert isinstance(plog, Log)
        plog.roll()
        await commit(rt, 0, 10)  # something in the new active segment
        stats = await plog.compact(0)
        assert stats is not None and stats.records_kept < stats.records_read
    await rt.close()

    again = await start(tmp_path)
    assert fetch(again, False) == {0: (10, 0), 1: (-1, 0), 2: (31, 0)}
    assert fetch(again, True)[1] == (-1, UNSTABLE)
    await marker(again, 103, True)
    assert fetch(again, True)[1] == (40, 0)
    await again.close()


async def test_compaction_drops_markers_whose_transactions_left_nothing(tmp_path: Path) -> None:
    """Past delete.retention.ms, a marker whose transaction's records were all superseded (or
    aborted) goes; the marker of a transaction with a record still kept stays."""
    rt = await start(tmp_path)
    for i in range(20):
        await txn_commit(rt, 200 + i, 0, i)
        await marker(rt, 200 + i, i % 5 != 4)  # every fifth one aborted
    plog = rt.logs[0]
    assert isinstance(plog, Log)
    plog.roll()
    await commit(rt, 1, 1)  # the active segment
    later = int(time.time() * 1000) + 2 * 86_400_000
    assert await plog.compact(later) is not None
    markers = [h for seg in plog.segments for _, _, h in seg.batches(0) if h.is_control]
    # What is left: the newest committed transaction's record (offset 18) and its marker
    # (the last batch of the cleaned segment is kept in any case: it holds its end offset).
    assert 1 <= len(markers) <= 2, markers
    assert fetch(rt, True)[0] == (18, 0)
    await rt.close()
    again = await start(tmp_path)
    assert fetch(again, True) == {0: (18, 0), 1: (1, 0), 2: (-1, 0)}
    await again.close()
