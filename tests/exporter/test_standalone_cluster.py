"""`kcoord report` on a real Spark standalone cluster: a master and two one-core workers from
pyspark's own distribution, on loopback (one cluster for the module). The file engine is read
through ``kcoord report --master spark://...``, the PostgreSQL engine through ``spark-submit``
of the report's entry point; both must write the same tables as a ``local[2]`` run over the
same data, and Spark's event log must show the reads done by both executors.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from exporter import synthetic as S
from exporter.report import run_report
from tests.exporter.sparkcluster import StandaloneCluster, spark_home
from tests.exporter.tables import assert_same_tables, read_tables

T0 = 1_700_000_000_000
AT = T0 + 400_000


def write_data(d: Path) -> None:
    """Eight groups committing to two topics for 300 s, over many small segments of the 50
    log partitions, and three generations each."""
    S.write_catalog(d, {"t-a": 3, "t-b": 2})
    for topic, n in (("t-a", 3), ("t-b", 2)):
        for p in range(n):
            S.write_topic(d, topic, p, [T0 + i * 1000 for i in range(400)], per_batch=4)
    with S.CoordinatorLog(d, segment_bytes=4096) as log:
        for i in range(300):
            for g in range(8):
                group, topic, parts = f"group-{g}", ("t-a", "t-b")[g % 2], (3, 2)[g % 2]
                ts = T0 + i * 1000 + g
                commits = [S.commit(group, topic, p, min(400, i + g + p), ts) for p in range(parts)]
                log.append(group, commits, ts)
        for g in range(8):
            for gen in range(1, 4):
                members = [{"member_id": f"m{k}", "assignment": {"t-a": [k]}} for k in range(gen)]
                group = f"group-{g}"
                log.append(group, [S.group_metadata(group, gen, members)], T0 + gen * 50_000)


@pytest.fixture(scope="module")
def cluster_starting(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Future[StandaloneCluster]]:
    """The cluster's start, in a thread of its own: its JVMs come up while ``data`` runs the
    local report (each takes a quarter of a minute or more, mostly waiting on one core)."""
    c = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1)
    pool = ThreadPoolExecutor(1)
    started = pool.submit(c.start)
    try:
        yield started
    finally:
        pool.shutdown(wait=True)  # start() returned, or raised having stopped what it started
        c.stop()


@pytest.fixture(scope="module")
def cluster(cluster_starting: Future[StandaloneCluster], data: dict) -> StandaloneCluster:
    """The started cluster (``data`` is asked for here so that it is made meanwhile)."""
    return cluster_starting.result()


@pytest.fixture(scope="module")
def data(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The data directory and the tables of a local[2] report over it."""
    base = tmp_path_factory.mktemp("cluster-data")
    write_data(base / "data")
    run_report(base / "data", base / "local", spark=spark, at=AT, console=open("/dev/null", "w"))  # noqa: SIM115
    return {"dir": base / "data", "local": read_tables(base / "local")}


def _event_log_tasks(events: Path) -> list[dict]:
    """(stage, executor) of every finished task in the Spark event logs under ``events``."""
    tasks = []
    for f in events.rglob("*"):
        if not f.is_file() or f.name.startswith("appstatus"):
            continue
        for line in f.read_text().splitlines():
            e = json.loads(line)
            if e.get("Event") == "SparkListenerTaskEnd":
                tasks.append({"stage": e["Stage ID"], "executor": e["Task Info"]["Executor ID"]})
    return tasks


def _conf(events: Path) -> list[str]:
    return [
        "spark.eventLog.enabled=true",
        f"spark.eventLog.dir=file://{events}",
        "spark.eventLog.compress=false",
        "spark.eventLog.rolling.enabled=false",
    ]


def _errors(stderr: str) -> str:
    """A driver's stderr without Spark's INFO lines (spark-submit logs at INFO)."""
    lines = [x for x in stderr.splitlines() if " INFO " not in x and "BrokenPipe" not in x]
    return "\n".join(lines)[-6000:]


def _check_run(out: subprocess.CompletedProcess, events: Path) -> None:
    assert out.returncode == 0, _errors(out.stderr) + out.stdout[-2000:]
    tasks = _event_log_tasks(events)
    # Both one-core executors ran tasks; the first job (the records' scan, planned as at least
    # as many reads as the cluster has cores) was split between them.
    assert {t["executor"] for t in tasks} == {"0", "1"}, tasks
    first = min(t["stage"] for t in tasks)
    assert len({t["executor"] for t in tasks if t["stage"] == first}) == 2, tasks


def test_kcoord_report_on_the_cluster_reads_the_data_dir_alike(
    cluster: StandaloneCluster, data: dict, tmp_path: Path
) -> None:
    events = tmp_path / "events"
    events.mkdir()
    kcoord = Path(sys.executable).parent / "kcoord"
    cmd = [
        str(kcoord), "report", "--data-dir", str(data["dir"]), "--out", str(tmp_path / "out"),
        "--master", cluster.url, "--at", str(AT),
    ]  # fmt: skip
    for c in _conf(events):
        cmd += ["--conf", c]
    out = subprocess.run(cmd, env=cluster.env, capture_output=True, text=True, timeout=900)
    _check_run(out, events)
    assert "Consumer group 'group-0'" in out.stdout
    assert_same_tables(read_tables(tmp_path / "out"), data["local"])


def test_spark_submit_on_the_cluster_reads_postgresql_alike(
    cluster: StandaloneCluster,
    data: dict,
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    """The same logs in PostgreSQL, read in small offset ranges (several per partition) by
    tasks on both executors, each range over a connection of its task's own."""
    from exporter.submit import kcoord_report
    from storage.migrate import dir_to_pg

    asyncio.run(dir_to_pg(data["dir"], pg_url))
    events = tmp_path / "events"
    events.mkdir()
    cmd = [
        str(spark_home() / "bin" / "spark-submit"), "--master", cluster.url,
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--conf", "spark.executor.memory=768m",
    ]  # fmt: skip
    for c in [*_conf(events), "spark.kcoord.report.rangeRecords=50"]:
        cmd += ["--conf", c]
    cmd += [
        kcoord_report.__file__, "--storage", pg_url, "--out", str(tmp_path / "out"),
        "--at", str(AT),
    ]  # fmt: skip
    out = subprocess.run(cmd, env=cluster.env, capture_output=True, text=True, timeout=900)
    _check_run(out, events)
    assert "secret" not in out.stdout + out.stderr
    assert_same_tables(read_tables(tmp_path / "out"), data["local"])
