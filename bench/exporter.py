"""Exporter benchmark: records/s from __consumer_offsets log files into a Spark DataFrame, and the
end-to-end `kcoord report` time, over a synthetic log of 5 million offset commit records.

    .venv/bin/python bench/exporter.py [--records 5000000] [--per-batch 10] [--groups 1000]
    .venv/bin/python bench/exporter.py --records 50000000 --groups 5000 --dir /tmp/d50m \
        --report-only --modes local,cluster     # the 50M-record data set, both masters

``--modes cluster`` starts a Spark standalone master and ``--workers`` one-core workers from
pyspark's distribution on loopback (as the tests do) and runs the same reads and report on
them, this process being the driver; every rate is also given per executor core.

The log is written the way the coordinator writes commits: one batch per commit request, each
holding the group's partitions (``--per-batch`` records), groups spread over the 50
__consumer_offsets partitions (one ~6 MiB segment each at 5M records). Topic logs give the end
offsets. Targets on a 2-core machine: >= 5,000,000 records/s read; report < 60 s.

Reads are timed as count + max over the DataFrame, best of ``--runs``, with the CPU time of the
Spark JVM and of the Python workers (decoding) shown apart: the JVM turns every Arrow row into
a Spark row, so its share grows with the number of columns.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.partitioning import partition_for  # noqa: E402
from exporter import synthetic as S  # noqa: E402
from protocol.records import build_kv_batch  # noqa: E402

T0 = 1_700_000_000_000
REPORT_COLUMNS = ["group", "topic", "partition", "committed_offset", "timestamp"]
COMMIT_COLUMNS = ",".join(REPORT_COLUMNS)
TOPICS = 10
PARTS = 10


def _key(group: str, topic: str, partition: int) -> bytes:
    g, t = group.encode(), topic.encode()
    return (
        struct.pack(">hh", 1, len(g))
        + g
        + struct.pack(">h", len(t))
        + t
        + struct.pack(">i", partition)
    )


_V3 = struct.Struct(">hqihq")  # version 3: offset, leader epoch, metadata "" (length 0), commit ts


def generate(d: Path, records: int, per_batch: int, groups: int) -> float:
    t = time.perf_counter()
    S.write_catalog(d, {f"topic-{i}": PARTS for i in range(TOPICS)})
    commits_per_partition = records // (groups * per_batch) + 1
    end = commits_per_partition * 10 + 100
    for i in range(TOPICS):
        for p in range(PARTS):
            # Topic logs: `end` records over the commit time range, 100 per batch.
            with S.LogWriter(d / f"topic-{i}-{p}") as w:
                step = max(1, commits_per_partition * 1000 // (end // 100))
                for b in range(end // 100):
                    ts = T0 + b * step
                    w.append_records([(ts, None, b"x")] * 100)
    log = S.CoordinatorLog(d)
    keys = {}
    written = 0
    with log:
        for c in range(commits_per_partition):
            ts = T0 + c * 1000
            for g in range(groups):
                group = f"group-{g}"
                topic = f"topic-{g % TOPICS}"
                pkeys = keys.get(group)
                if pkeys is None:
                    pkeys = keys[group] = [_key(group, topic, p % PARTS) for p in range(per_batch)]
                value = _V3.pack(3, c * 10, -1, 0, ts)
                w = log.writer(partition_for(group))
                w.append_raw(
                    build_kv_batch(
                        [(k, value) for k in pkeys], timestamp=ts, base_offset=w.next_offset
                    ),
                    per_batch,
                )
                written += per_batch
                if written >= records:
                    return time.perf_counter() - t
    return time.perf_counter() - t


def spark_cpu_seconds() -> dict[str, float]:
    """CPU seconds used so far by this process and its children, split into the Spark JVM
    ("jvm") and Python ("python": this process and Spark's Python workers), from /proc
    (Linux; this process only elsewhere). With other work on the machine, wall time swings
    with the load; CPU time says what the job itself cost, and where."""
    out = {"jvm": 0.0, "python": sum(os.times()[:2])}
    tck = os.sysconf("SC_CLK_TCK")
    kids: dict[int, list[tuple[int, str, float]]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                st = fh.read()
        except OSError:
            continue
        comm = st[st.find("(") + 1 : st.rfind(")")]
        f = st[st.rfind(")") + 2 :].split()
        cpu = (int(f[11]) + int(f[12])) / tck
        kids.setdefault(int(f[1]), []).append((int(name), comm, cpu))
    stack = [os.getpid()]
    while stack:
        for pid, comm, cpu in kids.get(stack.pop(), []):
            out["jvm" if comm == "java" else "python"] += cpu
            stack.append(pid)
    return out


def _cpu_delta(before: dict[str, float]) -> dict[str, float]:
    now = spark_cpu_seconds()
    return {k: now[k] - before[k] for k in now}


def _decode_files(paths: list[tuple[int, int, str]], columns: list[str] | None) -> int:
    """Decode these segments to Arrow batches (as a Spark task of the data source does); the
    records produced."""
    from exporter.logread import decode_segment, read_segment

    n = 0
    for p, base, path in paths:
        for b in decode_segment(read_segment(Path(path), base), p, columns=columns):
            n += b.num_rows
    return n


def raw_read(d: Path, columns: list[str] | None, workers: int) -> tuple[int, float, float]:
    """The segment reader alone (exporter.logread over every __consumer_offsets segment, no
    Spark): (records, wall seconds, CPU seconds), segments dealt to ``workers`` processes."""
    from concurrent.futures import ProcessPoolExecutor

    from exporter.logread import OFFSETS_TOPIC, list_partition_dirs, list_segments

    segs = [
        (p, base, str(path))
        for _, p, pdir in list_partition_dirs(d, OFFSETS_TOPIC)
        for base, path in list_segments(pdir)
    ]
    shares = [segs[i::workers] for i in range(workers)]
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_decode_files, shares, [columns] * workers))  # warm: imports, numba
        c = spark_cpu_seconds()
        t = time.perf_counter()
        n = sum(pool.map(_decode_files, shares, [columns] * workers))
        wall = time.perf_counter() - t
        cpu = sum(_cpu_delta(c).values())
    return n, wall, cpu


def count_records(d: Path) -> int:
    """The OffsetCommit records of the data set (from the segment summaries, no decoding)."""
    from exporter.logread import OFFSETS_TOPIC, list_partition_dirs, list_segments, read_segment
    from exporter.logread import segment_summary as summary

    return sum(
        summary(OFFSETS_TOPIC, p, read_segment(path, base, check_crc=False))["records"]
        for _, p, pdir in list_partition_dirs(d, OFFSETS_TOPIC)
        for base, path in list_segments(pdir)
    )


def run_mode(mode: str, d: Path, args: argparse.Namespace, out: Path) -> None:
    """Reads and reports in one Spark session: local[2] in this process, or a standalone
    master with ``--workers`` one-core workers started here (this process is the driver)."""
    from pyspark.sql import functions as F

    from exporter.session import build_session

    cluster = None
    if mode == "cluster":
        from tests.exporter.sparkcluster import StandaloneCluster

        scratch = Path(tempfile.mkdtemp(prefix="kcoord-bench-cluster-"))
        t = time.perf_counter()
        cluster = StandaloneCluster(scratch, workers=args.workers, memory=args.worker_memory)
        cluster.start()
        print(f"standalone cluster: {args.workers} one-core workers up in"
              f" {time.perf_counter() - t:.1f}s ({cluster.url})")  # fmt: skip
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        executor_memory = f"{max(1, int(args.worker_memory.rstrip('g')) - 1)}g"
        conf = {"spark.executor.memory": executor_memory, "spark.driver.memory": "2g"}
        master = cluster.url
    elif mode == "local":
        conf, master = {}, "local[2]"
    else:
        raise SystemExit(f"unknown mode {mode!r}: local or cluster")
    try:
        t = time.perf_counter()
        spark = build_session(master, extra_conf=conf)
        cores = spark.sparkContext.defaultParallelism
        print(f"[{mode}] spark session ({master}, {cores} executor cores):"
              f" {time.perf_counter() - t:.1f}s")  # fmt: skip
        reads = {
            "all": ("all columns", {}),
            "commit": ("commit columns (as the report reads)", {"columns": COMMIT_COLUMNS}),
            "per-segment": (
                "all columns, one Spark partition per segment",
                {"bytesPerPartition": "0"},
            ),
        }
        chosen = [reads[k] for k in args.reads.split(",") if k]
        for label, opts in [] if args.report_only else chosen:
            runs = []
            for _ in range(args.runs):
                df = spark.read.format("kcoord").options(minPartitions=str(cores), **opts)
                df = df.load(str(d))
                c = spark_cpu_seconds()
                t = time.perf_counter()
                row = df.agg(
                    F.count("*").alias("n"), F.max("committed_offset").alias("m")
                ).collect()[0]
                runs.append((time.perf_counter() - t, _cpu_delta(c)))
            best, cpu = min(runs, key=lambda r: r[0])
            rate = row.n / best / 1e6
            print(
                f"[{mode}] read, {label}: {row.n:,} records, best {best:.2f}s ="
                f" {rate:.2f} M records/s, {rate / cores:.2f} M/s per executor core"
                f" (CPU-s: {cpu['python']:.2f} Python workers, {cpu['jvm']:.2f} JVM;"
                f" load average {os.getloadavg()[0]:.1f})"
            )
        if not args.no_report:
            from exporter.report import run_report

            n = count_records(d)
            for i in range(args.report_runs):
                c = spark_cpu_seconds()
                t = time.perf_counter()
                r = run_report(d, out, spark=spark, at=T0 + 10**9, console=open("/dev/null", "w"))  # noqa: SIM115
                secs = time.perf_counter() - t
                used = _cpu_delta(c)
                print(
                    f"[{mode}] report {i + 1}: {n:,} records, {len(r.groups)} groups,"
                    f" {len(r.partitions)} partitions, {secs:.1f}s end to end (session up) ="
                    f" {n / secs / 1e3:.0f} k records/s, {n / secs / cores / 1e3:.0f} k/s per"
                    f" executor core; {sum(used.values()):.1f} CPU-s: {used['jvm']:.1f} JVM,"
                    f" {used['python']:.1f} Python (on this machine: the workers' JVMs count as"
                    f" JVM only when started here); load average {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
        spark.stop()
    finally:
        if cluster is not None:
            cluster.stop()
            shutil.rmtree(cluster.scratch, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--per-batch", type=int, default=10)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--dir", type=Path, help="keep the generated data here (reused if present)")
    ap.add_argument("--no-report", action="store_true")
    ap.add_argument(
        "--generate-only", action="store_true", help="write the data set (--dir) and stop"
    )
    ap.add_argument(
        "--modes",
        default="local",
        help="where the report runs, comma-separated: local (local[2] in this process) and/or"
        " cluster (a standalone master and --workers one-core workers started here)",
    )
    ap.add_argument("--workers", type=int, default=2, help="workers of the cluster mode")
    ap.add_argument(
        "--reads",
        default="all,commit,per-segment",
        help="the Spark read variants to time (all columns, the report's commit columns,"
        " one Spark partition per segment); empty: none",
    )
    ap.add_argument("--no-raw", action="store_true", help="skip the segment reader alone")
    ap.add_argument(
        "--worker-memory", default="4g", help="memory of each cluster worker (its executor's)"
    )
    ap.add_argument(
        "--report-only", action="store_true", help="skip the reads; time the report alone"
    )
    ap.add_argument(
        "--report-runs",
        type=int,
        default=1,
        help="reports in one session, each timed (the first warms the JVM up)",
    )
    ap.add_argument(
        "--runs", type=int, default=5, help="reads per variant, best kept (the JVM warms up)"
    )
    args = ap.parse_args()
    tmp = None
    if args.dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="kcoord-bench-exporter-"))
        d = tmp / "data"
    else:
        d = args.dir
    try:
        if not (d / "kcoord-topics.json").exists():
            secs = generate(d, args.records, args.per_batch, args.groups)
            print(
                f"generated {args.records:,} offset records ({args.per_batch}/batch) in {secs:.1f}s"
            )
        size = sum(p.stat().st_size for p in d.glob("__consumer_offsets-*/*.log"))
        nseg = len(list(d.glob("__consumer_offsets-*/*.log")))
        print(f"log: {size / 2**20:.0f} MiB in {nseg} segments")
        if args.generate_only:
            return

        for workers in () if args.report_only or args.no_raw else (1, 2):
            raw_runs = [raw_read(d, REPORT_COLUMNS, workers) for _ in range(args.runs)]
            n, wall, cpu = min(raw_runs, key=lambda r: r[1])
            print(
                f"segment reader alone (no Spark), report columns, {workers} process(es):"
                f" {n:,} records, best {wall:.2f}s = {n / wall / 1e6:.2f} M records/s"
                f" ({cpu:.2f} CPU-s = {n / cpu / 1e6:.2f} M records per CPU-s;"
                f" load average {os.getloadavg()[0]:.1f})"
            )

        for mode in args.modes.split(","):
            run_mode(mode.strip(), d, args, (tmp or d.parent) / f"report-{mode.strip()}")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
