"""Loading `__consumer_offsets` partition by partition: a damaged rolled segment or a failing
disk on one partition leaves the others serving, and the damaged one serves what it kept."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from broker.config import load_config
from broker.group_runtime import OFFSETS_TOPIC, GroupRuntime
from broker.loading import DEGRADED, FAILING, SERVING
from broker.metrics import Metrics
from coordinator.partitioning import partition_for
from coordinator.shard import RequestMeta
from protocol.errors import ErrorCode
from protocol.messages import OffsetCommitRequest
from protocol.records import HEADER, LOG_OVERHEAD
from storage.recovery import QUARANTINE_SUFFIX

META = RequestMeta(api_version=8, client_id="c", client_host="/127.0.0.1")
PARTITIONS = 50
DAMAGED = 1


def config() -> Any:
    return load_config(env={}, overrides={"offsets.topic.num.partitions": PARTITIONS})


def groups_on(partition: int, n: int) -> list[str]:
    found = []
    for i in itertools.count():
        g = f"g{i}"
        if partition_for(g, PARTITIONS) == partition:
            found.append(g)
            if len(found) == n:
                return found
    raise AssertionError


def one_group_per_partition() -> dict[int, str]:
    out: dict[int, str] = {}
    for i in itertools.count():
        g = f"other{i}"
        out.setdefault(partition_for(g, PARTITIONS), g)
        if len(out) == PARTITIONS:
            return out
    raise AssertionError


async def commit(rt: GroupRuntime, group: str, offset: int) -> None:
    await commit_metadata(rt, group, offset, None)


async def commit_metadata(rt: GroupRuntime, group: str, offset: int, metadata: str | None) -> None:
    part = OffsetCommitRequest.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=offset, committed_metadata=metadata
    )
    req = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[part])],
    )
    reply = rt.call(
        group, lambda s, rid, now: s.commit_offsets(req, META, rid, now), lambda code: code
    )
    if asyncio.isfuture(reply):
        reply = await reply
    assert reply.topics[0].partitions[0].error_code == ErrorCode.NONE


def committed(rt: GroupRuntime, group: str) -> int | ErrorCode:
    """The group's committed offset of t-0 (-1: none), or the error the partition answers."""
    answer = rt.read(
        group,
        lambda s, now: s.fetch_offsets(group, [("t", [0])], False, 8, now),
        lambda code: code,
    )
    if isinstance(answer, ErrorCode | int):
        return answer
    _, rows = answer
    return int(rows[0][2])


async def started(data_dir: Path) -> GroupRuntime:
    cfg = config()
    rt = GroupRuntime(data_dir, cfg, cfg.durability)
    rt.start()
    return rt


async def serving(rt: GroupRuntime, partitions: list[int]) -> None:
    """Wait (bounded) until the partitions serve."""
    for _ in range(1000):
        if all(rt.shards[p] is not None for p in partitions):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not serving: {[p for p in partitions if rt.shards[p] is None]}")


def batch_positions(path: Path) -> list[int]:
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        pos += HEADER.unpack_from(data, pos)[1] + LOG_OVERHEAD
    return out


async def build_damaged(data_dir: Path) -> dict[str, Any]:
    """Three segments on partition DAMAGED: [a=5, b=7] [b=8, c=3] active:[d=9], every other
    partition one group; then one bit of c's batch (in the rolled middle segment) flipped."""
    a, b, c, d = groups_on(DAMAGED, 4)
    others = one_group_per_partition()
    rt = await started(data_dir)
    await asyncio.wait_for(rt.loaded.wait(), 30)
    for p, g in others.items():
        if p != DAMAGED:
            await commit(rt, g, 100 + p)
    await commit(rt, a, 5)
    await commit(rt, b, 7)
    plog = rt.logs[DAMAGED]
    assert plog is not None
    plog.roll()
    await commit(rt, b, 8)
    await commit(rt, c, 3)
    plog.roll()
    await commit(rt, d, 9)
    await rt.close()
    seg = plog.segments[1].log_path
    positions = batch_positions(seg)
    assert len(positions) == 2
    size = seg.stat().st_size
    data = bytearray(seg.read_bytes())
    data[positions[1] + 70] ^= 0x10  # inside c's record: the batch CRC no longer matches
    seg.write_bytes(bytes(data))
    cut = bytes(data[positions[1] :])
    return {"groups": (a, b, c, d), "others": others, "segment": seg, "cut": cut, "size": size}


async def test_a_damaged_rolled_segment_is_quarantined_and_the_rest_serves(tmp_path: Path) -> None:
    built = await build_damaged(tmp_path)
    a, b, c, d = built["groups"]
    rt = await started(tmp_path)
    await asyncio.wait_for(rt.loaded.wait(), 30)
    # The other 49 partitions serve their groups.
    for p, g in built["others"].items():
        if p != DAMAGED:
            assert committed(rt, g) == 100 + p
    # The damaged one serves what came before the damage, and the intact later segment.
    assert committed(rt, a) == 5
    assert committed(rt, b) == 8
    assert committed(rt, c) == -1  # its only commit was in the quarantined batch
    assert committed(rt, d) == 9
    # The cut bytes are in the side file, and the segment kept the batch before them.
    seg: Path = built["segment"]
    side = seg.with_name(seg.name + QUARANTINE_SUFFIX)
    assert side.read_bytes() == built["cut"]
    assert seg.stat().st_size == built["size"] - len(built["cut"])
    # Reported: the partition is degraded, the others are not.
    health = rt.health[DAMAGED]
    assert health.state == DEGRADED
    assert [(cut.start, cut.end) for cut in health.cuts] == [
        (built["size"] - len(built["cut"]), built["size"])
    ]
    assert side.name in health.summary()
    assert list(rt.unhealthy_partitions()) == [DAMAGED]
    assert all(h.state == SERVING for p, h in enumerate(rt.health) if p != DAMAGED)
    metrics = Metrics()
    metrics.state = SimpleNamespace(groups=rt, data=None)
    text = metrics.render().decode()
    assert "kcoord_offsets_partitions_unhealthy 1.0" in text
    assert f'kcoord_offsets_partition_unhealthy{{partition="{DAMAGED}",state="degraded"}} 1.0' in (
        text
    )
    # New commits go on, and survive a restart (no second quarantine of the same data).
    await commit(rt, c, 4)
    await rt.close()
    again = await started(tmp_path)
    await asyncio.wait_for(again.loaded.wait(), 30)
    assert committed(again, c) == 4 and committed(again, b) == 8
    assert again.health[DAMAGED].state == DEGRADED  # until an operator removes the side file
    assert again.health[DAMAGED].cuts == []
    await again.close()
    side.unlink()
    third = await started(tmp_path)
    await asyncio.wait_for(third.loaded.wait(), 30)
    assert third.unhealthy_partitions() == {}
    await third.close()


async def test_a_bad_length_in_a_rolled_segment_is_quarantined_with_a_report(
    tmp_path: Path, caplog: Any
) -> None:
    """A length field damaged after the last index entry: the segment's index rebuild would
    truncate it; the cut goes to the side file and the log says what it held."""
    built = await build_damaged(tmp_path)
    seg: Path = built["segment"]
    data = bytearray(seg.read_bytes())
    cut_at = built["size"] - len(built["cut"])
    data[cut_at + 70] ^= 0x10  # undo the CRC damage; break the length instead
    data[cut_at + 8 : cut_at + 12] = (5).to_bytes(4, "big")
    seg.write_bytes(bytes(data))
    for suffix in (".index", ".timeindex"):
        seg.with_suffix(suffix).unlink(missing_ok=True)  # indexes are rebuilt: the scan path
    rt = await started(tmp_path)
    await asyncio.wait_for(rt.loaded.wait(), 30)
    a, b, c, d = built["groups"]
    assert (committed(rt, a), committed(rt, b), committed(rt, c), committed(rt, d)) == (
        5,
        8,
        -1,
        9,
    )
    side = seg.with_name(seg.name + QUARANTINE_SUFFIX)
    assert side.read_bytes() == bytes(data[cut_at:])
    assert rt.health[DAMAGED].state == DEGRADED
    reports = [r.getMessage() for r in caplog.records if "quarantined" in r.getMessage()]
    assert any(f"bytes [{cut_at}, {built['size']})" in m and seg.name in m for m in reports)
    await rt.close()


async def test_an_oserror_while_loading_is_retried_and_the_others_serve(tmp_path: Path) -> None:
    others = one_group_per_partition()
    rt = await started(tmp_path)
    await asyncio.wait_for(rt.loaded.wait(), 30)
    for p, g in others.items():
        await commit(rt, g, 100 + p)
    await rt.close()
    # A real OSError at every attempt until the test lifts it: the partition's directory is
    # replaced by a file (the log cannot open it); its data waits aside.
    failing = 7
    path = tmp_path / f"{OFFSETS_TOPIC}-{failing}"
    aside = tmp_path / "aside"
    os.rename(path, aside)
    path.write_bytes(b"")
    rt = await started(tmp_path)
    rest = [p for p in range(PARTITIONS) if p != failing]
    await serving(rt, rest)
    for p in rest:
        assert committed(rt, others[p]) == 100 + p
    assert committed(rt, others[failing]) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    for _ in range(1000):
        if rt.health[failing].failures >= 2:
            break
        await asyncio.sleep(0.01)
    assert rt.health[failing].state == FAILING
    assert list(rt.unhealthy_partitions()) == [failing]
    path.unlink()
    shutil.move(aside, path)
    await asyncio.wait_for(rt.loaded.wait(), 30)
    assert committed(rt, others[failing]) == 100 + failing
    assert rt.health[failing].state == SERVING and rt.unhealthy_partitions() == {}
    await rt.close()


async def test_damage_in_the_first_batch_of_a_rolled_segment_empties_it(tmp_path: Path) -> None:
    """The whole rolled segment goes aside; the segments around it still serve."""
    built = await build_damaged(tmp_path)
    seg: Path = built["segment"]
    data = bytearray(seg.read_bytes())
    cut_at = built["size"] - len(built["cut"])
    data[cut_at + 70] ^= 0x10  # undo the damage in c's batch; damage b's (the first) instead
    data[70] ^= 0x10
    seg.write_bytes(bytes(data))
    rt = await started(tmp_path)
    await asyncio.wait_for(rt.loaded.wait(), 30)
    a, b, c, d = built["groups"]
    assert (committed(rt, a), committed(rt, b), committed(rt, c), committed(rt, d)) == (
        5,
        7,
        -1,
        9,
    )
    assert seg.stat().st_size == 0
    assert seg.with_name(seg.name + QUARANTINE_SUFFIX).read_bytes() == bytes(data)
    await commit(rt, b, 11)
    plog = rt.logs[DAMAGED]
    assert plog is not None
    plog.roll()
    await commit(rt, d, 12)
    assert await plog.compact() is not None  # the emptied segment compacts with the others
    await rt.close()
    again = await started(tmp_path)
    await asyncio.wait_for(again.loaded.wait(), 30)
    assert (committed(again, a), committed(again, b), committed(again, d)) == (5, 11, 12)
    await again.close()
