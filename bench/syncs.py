"""Ways to make one round of small appends to N partition files durable, on this machine.

    python bench/syncs.py                       # N = 1, 8, 27, 50; 200 rounds each
    python bench/syncs.py --files 27 --rounds 500 --dir /path/on/the/data/disk

Each round appends ``--bytes`` to each of N files (as one event-loop iteration of commits to N
coordinator partitions does), then makes the round durable one way:

* ``fsync-each``: every file fsynced, one after another, in one thread (one executor job doing
  N fsyncs);
* ``fsync-threads``: every file fsynced in its own executor job, concurrently (what N logs
  with a group committer each do);
* ``fdatasync-each``: as fsync-each with fdatasync;
* ``syncfs``: one syncfs(2) of the file system (everything dirty on it, others' data too);
* ``journal``: the round's bytes also appended to one journal file, which alone is
  fdatasynced (the partition files are left to a later, background sync);
* ``journal-prealloc``: the same into a journal whose blocks were written (zeros) beforehand,
  so an fdatasync has no file size or extent change to commit;
* ``journal-dsync``: the prealloc journal written with pwritev(RWF_DSYNC): write and sync in
  one system call.

Reported per round: wall time (p50, p99) and the CPU this process spent (all threads; kernel
work done in other threads, such as ext4's journal thread, is not counted), and the machine's
busy CPU per round from /proc/stat (everything on the machine: only meaningful when it is quiet).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def syncfs(fd: int) -> None:
    if _libc.syncfs(fd) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def machine_busy_ticks() -> int:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields[:8]) - idle


JOURNAL_BYTES = 64 * 1024 * 1024


def run(method: str, n: int, rounds: int, size: int, directory: Path) -> dict[str, float]:
    d = Path(tempfile.mkdtemp(prefix=f"syncs-{method}-", dir=directory))
    fds = [os.open(d / f"p{i}.log", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644) for i in range(n)]
    payload = os.urandom(size)
    pool = ThreadPoolExecutor(max_workers=max(n, 1))
    jfd = -1
    jpos = 0
    if method.startswith("journal"):
        flags = os.O_RDWR | os.O_CREAT
        jfd = os.open(d / "journal", flags, 0o644)
        if method != "journal":
            chunk = b"\0" * (1 << 20)
            for _ in range(JOURNAL_BYTES // len(chunk)):
                os.write(jfd, chunk)
            os.fsync(jfd)
    do_round: Callable[[], None]

    def write_files() -> None:
        for fd in fds:
            os.write(fd, payload)

    if method == "fsync-each":

        def do_round() -> None:
            write_files()
            pool.submit(lambda: [os.fsync(fd) for fd in fds]).result()

    elif method == "fdatasync-each":

        def do_round() -> None:
            write_files()
            pool.submit(lambda: [os.fdatasync(fd) for fd in fds]).result()

    elif method == "fsync-threads":

        def do_round() -> None:
            write_files()
            for f in [pool.submit(os.fsync, fd) for fd in fds]:
                f.result()

    elif method == "syncfs":

        def do_round() -> None:
            write_files()
            pool.submit(syncfs, fds[0]).result()

    elif method in ("journal", "journal-prealloc"):

        def do_round() -> None:
            nonlocal jpos
            write_files()
            data = payload * n
            os.pwrite(jfd, data, jpos)
            jpos = (jpos + len(data)) % (JOURNAL_BYTES - len(data))
            pool.submit(os.fdatasync, jfd).result()

    elif method == "journal-dsync":

        def do_round() -> None:
            nonlocal jpos
            write_files()
            data = payload * n
            pool.submit(os.pwritev, jfd, [data], jpos, os.RWF_DSYNC).result()
            jpos = (jpos + len(data)) % (JOURNAL_BYTES - len(data))

    else:
        raise SystemExit(f"unknown method {method}")
    for _ in range(5):
        do_round()
    walls = []
    cpu0, busy0 = time.process_time(), machine_busy_ticks()
    for _ in range(rounds):
        t0 = time.perf_counter()
        do_round()
        walls.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu0
    busy = (machine_busy_ticks() - busy0) / os.sysconf("SC_CLK_TCK")
    pool.shutdown()
    for fd in fds:
        os.close(fd)
    if jfd >= 0:
        os.close(jfd)
    for p in d.iterdir():
        p.unlink()
    d.rmdir()
    walls.sort()
    return {
        "p50_ms": 1000 * statistics.median(walls),
        "p99_ms": 1000 * walls[int(len(walls) * 0.99)],
        "cpu_us": 1e6 * cpu / rounds,
        "machine_us": 1e6 * busy / rounds,
    }


METHODS = [
    "fsync-each",
    "fdatasync-each",
    "fsync-threads",
    "syncfs",
    "journal",
    "journal-prealloc",
    "journal-dsync",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, nargs="+", default=[1, 8, 27, 50])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--bytes", type=int, default=200, help="appended to each file per round")
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = ap.parse_args()
    print(f"{'method':18} {'N':>3} {'p50 ms':>8} {'p99 ms':>8} {'CPU us':>9} {'machine us':>11}")
    for n in args.files:
        for m in args.methods:
            r = run(m, n, args.rounds, args.bytes, args.dir)
            print(
                f"{m:18} {n:3d} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['cpu_us']:9.1f}"
                f" {r['machine_us']:11.1f}"
            )


if __name__ == "__main__":
    main()
