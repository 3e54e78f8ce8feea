"""Topic creation within what the broker can serve: max.broker.partitions, Kafka's per-topic
errors, descriptors only for partitions in use, and nothing left of a create that failed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from tests.dataplane.wire import CREATE_PARTITIONS, cls, create_topic, metadata
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[KcoordProcess]:
    # __consumer_offsets' 50 partitions count too
    proc = start_kcoord(tmp_path / "data", "max.broker.partitions=200")
    yield proc
    proc.stop()


def _create_partitions(c: WireClient, name: str, count: int, validate_only: bool = False):
    req = cls("CreatePartitionsRequest")
    topic = req.CreatePartitionsTopic(name=name, count=count, assignments=None)
    resp = c.request(
        CREATE_PARTITIONS,
        3,
        req(topics=[topic], timeout_ms=10_000, validate_only=validate_only),
    )
    [result] = resp.results
    return result


def _partition_dirs(k: KcoordProcess, name: str) -> list[str]:
    return sorted(p.name for p in k.data_dir.iterdir() if p.name.startswith(f"{name}-"))


def test_partition_counts_beyond_max_broker_partitions_are_refused(
    limited: KcoordProcess,
) -> None:
    with WireClient(limited.host, limited.port) as c:
        too_many = create_topic(c, "huge", 201)
        assert too_many.error_code == ErrorCode.INVALID_PARTITIONS
        assert "max.broker.partitions" in too_many.error_message
        assert create_topic(c, "a", 100).error_code == ErrorCode.NONE
        over = create_topic(c, "b", 60)
        assert over.error_code == ErrorCode.POLICY_VIOLATION
        assert create_topic(c, "b", 60, validate_only=True).error_code == (
            ErrorCode.POLICY_VIOLATION
        )
        grow = _create_partitions(c, "a", 160)
        assert grow.error_code == ErrorCode.POLICY_VIOLATION
        assert _create_partitions(c, "a", 120).error_code == ErrorCode.NONE
        assert _partition_dirs(limited, "b") == [] and _partition_dirs(limited, "huge") == []
        [a] = metadata(c, "a").topics
        assert len(a.partitions) == 120


def test_new_partitions_hold_no_file_descriptors(kcoord: KcoordProcess) -> None:
    fds = Path(f"/proc/{kcoord.proc.pid}/fd")
    with WireClient(kcoord.host, kcoord.port) as c:
        before = len(os.listdir(fds))
        assert create_topic(c, "wide", 500).error_code == ErrorCode.NONE
        assert len(os.listdir(fds)) - before < 50  # three per partition before


def test_a_create_that_fails_midway_answers_and_leaves_nothing(kcoord: KcoordProcess) -> None:
    # A file where partition 3's directory would go: opening that partition fails.
    (kcoord.data_dir / "t-3").write_text("in the way")
    with WireClient(kcoord.host, kcoord.port) as c:
        result = create_topic(c, "t", 6)
        assert result.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        [t] = metadata(c, "t", auto_create=False).topics
        assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert not [d for d in _partition_dirs(kcoord, "t") if (kcoord.data_dir / d).is_dir()]
        (kcoord.data_dir / "t-3").unlink(missing_ok=True)
        assert create_topic(c, "t2", 2).error_code == ErrorCode.NONE
