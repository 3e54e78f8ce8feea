"""`kcoord migrate-storage` between a data directory and PostgreSQL (both ways, checked), and
`kcoord dump-log --storage` reading the database as dump-log reads files, with a real broker
and a real server."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.kcoord_process import KcoordProcess, start_kcoord

REPO = Path(__file__).resolve().parents[2]
N = 40


def kcoord(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kcoord_admin", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def committed(k: KcoordProcess) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": k.bootstrap, "group.id": "mg"})
    try:
        return [tp.offset for tp in c.committed([TopicPartition("mt", 0)], timeout=20)]
    finally:
        c.close()


def fill(k: KcoordProcess) -> None:
    from confluent_kafka import Consumer, Producer

    p = Producer({"bootstrap.servers": k.bootstrap})
    for i in range(N):
        p.produce("mt", f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    c = Consumer(
        {"bootstrap.servers": k.bootstrap, "group.id": "mg", "auto.offset.reset": "earliest"}
    )
    c.subscribe(["mt"])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < N and time.monotonic() < deadline:
        m = c.poll(0.5)
        seen += m is not None and m.error() is None
    c.commit(asynchronous=False)
    c.close()


def test_a_data_dir_to_postgresql_and_back(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    first = tmp_path / "first"
    k = start_kcoord(first, "group.initial.rebalance.delay.ms=0")  # the group forms at once
    try:
        fill(k)
        assert committed(k) == [N]
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        # DeleteRecords inside a batch: the log start must come along both ways.
        admin = AdminClient({"bootstrap.servers": k.bootstrap})
        [fut] = admin.delete_records([TopicPartition("mt", 0, 7)]).values()
        assert fut.result(timeout=30).low_watermark == 7
    finally:
        k.stop()

    out = kcoord("migrate-storage", "--from", str(first), "--to", pg_url)
    assert out.returncode == 0, out.stderr
    assert "copied and checked" in out.stdout and "mt: 1 partition(s)" in out.stdout

    again = kcoord("migrate-storage", "--from", str(first), "--to", pg_url)
    assert again.returncode == 1 and "already holds kcoord data" in again.stderr

    k = start_kcoord(tmp_path / "on-pg", extra_args=("--storage", pg_url))
    try:
        assert committed(k) == [N]  # offsets and the topic came along
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": k.bootstrap, "group.id": "x"})
        low, high = c.get_watermark_offsets(TopicPartition("mt", 0), timeout=20)
        c.close()
        assert (low, high) == (7, N)
    finally:
        k.stop()

    back = tmp_path / "back"
    out = kcoord("migrate-storage", "--from", pg_url, "--to", str(back))
    assert out.returncode == 0, out.stderr
    refused = kcoord("migrate-storage", "--from", pg_url, "--to", str(back))
    assert refused.returncode == 1 and "is not empty" in refused.stderr
    k = start_kcoord(back)
    try:
        assert committed(k) == [N]
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": k.bootstrap, "group.id": "x"})
        assert c.get_watermark_offsets(TopicPartition("mt", 0), timeout=20) == (7, N)
        c.close()
    finally:
        k.stop()

    # dump-log reads the database as it reads the files (after each one's header line).
    from coordinator.partitioning import partition_for

    name = f"__consumer_offsets-{partition_for('mg')}"
    from_files = kcoord("dump-log", str(first / name))
    from_db = kcoord("dump-log", "--storage", pg_url, name)
    assert from_files.returncode == from_db.returncode == 0, from_db.stderr
    import re

    def batches(text: str) -> list[str]:  # a row has no file position: leave it out
        return [re.sub(r" position: \d+", "", line) for line in text.splitlines()[1:]]

    assert batches(from_files.stdout) == batches(from_db.stdout)
    assert "OffsetCommit" in from_db.stdout or "offset" in from_db.stdout


def test_an_unreachable_target_is_one_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    url = f"postgresql://u:pw@/kcoord?host={tmp_path}&connect_timeout=2"
    out = kcoord("migrate-storage", "--from", str(tmp_path / "d"), "--to", url)
    assert out.returncode == 1
    assert out.stderr.startswith("kcoord: error: cannot reach the PostgreSQL server")
    assert "pw" not in out.stderr


def test_share_state_in_the_old_layout_is_refused_before_anything_is_copied(
    tmp_path: Path,
) -> None:
    """A cluster would store it and never read it: the operator is told how to move it."""
    data = tmp_path / "d"
    (data / "__share_group_state-7").mkdir(parents=True)
    url = f"postgresql://u:pw@/kcoord?host={tmp_path}&connect_timeout=2"
    out = kcoord("migrate-storage", "--from", str(data), "--to", url)
    assert out.returncode == 1
    assert out.stderr.startswith("kcoord: error:") and "old layout" in out.stderr, out.stderr
    assert "start kcoord on it once" in out.stderr
    assert (data / "__share_group_state-7").is_dir()
