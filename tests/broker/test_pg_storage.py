"""`kcoord serve --storage postgresql://...`: the group runtime's logs in a real PostgreSQL
(tests/pg.py), driven by real clients and real broker processes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
from confluent_kafka import Consumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from tests.kcoord_process import start_kcoord

REPO = Path(__file__).resolve().parents[2]
TOPIC = "pg-orders"


def test_an_unreachable_server_stops_start_up_with_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCOORD_")}
    url = f"postgresql://kcoord:secret@/kcoord?host={tmp_path}&connect_timeout=2"
    proc = subprocess.run(
        [sys.executable, "-m", "kcoord_admin", "serve", "--listen", "127.0.0.1:0"]
        + ["--data-dir", str(tmp_path / "data"), "--storage", url],
        env={**env, "KCOORD_KCOORD_STORAGE": "file"},  # the flag wins over the variable
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("kcoord: error: cannot reach the PostgreSQL server at")
    assert "secret" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_storage_that_is_neither_file_nor_postgres_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kcoord_admin", "serve", "--listen", "127.0.0.1:0"]
        + ["--data-dir", str(tmp_path / "data"), "--storage", "mysql://x"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "kcoord.storage" in proc.stderr


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=20)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def test_committed_offsets_survive_a_restart_in_postgres(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    data = tmp_path / "data"
    settings = ("group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=5")
    args = ("--storage", pg_url)
    k = start_kcoord(data, *settings, extra_args=args)
    try:
        admin = KafkaAdminClient(bootstrap_servers=k.bootstrap)
        admin.create_topics([NewTopic(TOPIC, 3, 1)])
        admin.close()
        for group, offsets in (("g1", {0: 5, 1: 7}), ("g2", {2: 11})):
            c = Consumer({"bootstrap.servers": k.bootstrap, "group.id": group})
            c.commit(
                offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
                asynchronous=False,
            )
            c.close()
        c = Consumer({"bootstrap.servers": k.bootstrap, "group.id": "g1"})
        c.commit(offsets=[TopicPartition(TOPIC, 0, 9)], asynchronous=False)  # newer wins
        c.close()
    finally:
        assert k.stop() == 0, k.log()

    # Nothing of the group runtime went to files; the batches are rows.
    assert not [p for p in data.iterdir() if p.name.startswith("__consumer_offsets-")]

    async def rows() -> int:
        con = await asyncpg.connect(pg_url)
        try:
            return int(await con.fetchval("SELECT count(*) FROM kcoord_batches"))
        finally:
            await con.close()

    assert asyncio.run(rows()) > 0

    k = start_kcoord(data, *settings, extra_args=args)
    try:
        assert _committed(k.bootstrap, "g1") == {0: 9, 1: 7}
        assert _committed(k.bootstrap, "g2") == {2: 11}
    finally:
        assert k.stop() == 0, k.log()
