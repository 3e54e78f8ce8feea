"""OffsetFetch v0/v1 while the group's partition loads: the error on every partition asked."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.apis import offset_fetch
from broker.config import load_config
from broker.context import RequestContext
from broker.group_runtime import GroupRuntime
from protocol.errors import ErrorCode
from protocol.messages import OffsetFetchRequest

Topic = OffsetFetchRequest.OffsetFetchRequestTopic


def _ctx(tmp_path: Path, version: int) -> RequestContext:
    cfg = load_config(env={})
    # Never started: every partition is still loading.
    state = SimpleNamespace(groups=GroupRuntime(tmp_path, cfg, cfg.durability), authorizer=None)
    return RequestContext(state, 9, version, 1, "c", "127.0.0.1")  # type: ignore[arg-type]


@pytest.mark.parametrize("version", [0, 1])
async def test_old_versions_name_the_load_error_on_every_partition(
    tmp_path: Path, version: int
) -> None:
    req = OffsetFetchRequest(
        group_id="g",
        topics=[Topic(name="a", partition_indexes=[0, 1]), Topic(name="b", partition_indexes=[3])],
    )
    resp = offset_fetch.handle(_ctx(tmp_path, version), req)
    got = [
        (t.name, p.partition_index, p.committed_offset, p.error_code)
        for t in resp.topics
        for p in t.partitions
    ]
    load = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert got == [("a", 0, -1, load), ("a", 1, -1, load), ("b", 3, -1, load)]


async def test_old_version_without_partitions_answers_an_empty_list(tmp_path: Path) -> None:
    resp = offset_fetch.handle(_ctx(tmp_path, 1), OffsetFetchRequest(group_id="g", topics=[]))
    assert resp.topics == []


async def test_v2_keeps_the_top_level_error(tmp_path: Path) -> None:
    req = OffsetFetchRequest(group_id="g", topics=[Topic(name="a", partition_indexes=[0])])
    resp = offset_fetch.handle(_ctx(tmp_path, 2), req)
    assert resp.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert resp.topics == []
