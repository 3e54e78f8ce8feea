"""Incremental reports: ``kcoord report --state DIR`` reads only the coordinator records
written since the previous run and keeps what it read, so the tables come out as a full run
over the whole log would write them.

The state folder holds:

``state.json``
    the report time of the last run (``at``) and, per ``__consumer_offsets`` partition,
    ``next`` (every record below it is final: read, or never to be counted), ``end`` (where
    the last read stopped) and ``pending`` (the offset ranges of the batches of transactions
    still open then);
``records/run=N/``
    the decoded records each run kept (Parquet): the OffsetCommit and group metadata records
    the report's tables are computed from.

A run reads each partition from ``next`` to its end now, and keeps a record when its
timestamp is at or before ``--at`` and an earlier run did not keep it: one did when the
record is below that run's ``end``, not later than its ``at``, and not in a transaction
that was open then. ``next`` stays at the first record that may still count later (one
written after ``--at``, or in an open transaction), so a transaction that commits after a
run is counted by the next one, as a full run would count it.

Only the coordinator log is read incrementally: the topic logs (end offsets and the record
timestamps of time lags) are read as a full run reads them. Records a full run can no longer
see (segments deleted by retention, or compacted) stay in the state, so after such a change
the incremental tables keep history a full run has lost.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any

from exporter.datasource import PENDING_MARKER

STATE_FILE = "state.json"
RECORDS = "records"
INCOMING = ".incoming.parquet"
VERSION = 1


class StateError(ValueError):
    """A state folder this run cannot continue from (another source, a later report time)."""


@dataclass
class LogPosition:
    next: int
    end: int
    pending: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class State:
    source: str
    at: int | None = None
    runs: int = 0
    logs: dict[int, LogPosition] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": VERSION,
                "source": self.source,
                "at": self.at,
                "runs": self.runs,
                "logs": {
                    str(p): {"next": x.next, "end": x.end, "pending": x.pending}
                    for p, x in sorted(self.logs.items())
                },
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> State:
        obj = json.loads(text)
        if obj.get("version") != VERSION:
            raise StateError(f"state version {obj.get('version')}, this kcoord reads {VERSION}")
        return cls(
            source=obj["source"],
            at=obj.get("at"),
            runs=int(obj.get("runs", 0)),
            logs={
                int(p): LogPosition(
                    int(x["next"]), int(x["end"]), [(int(a), int(b)) for a, b in x["pending"]]
                )
                for p, x in obj.get("logs", {}).items()
            },
        )


def load_state(folder: Path, source: str) -> State:
    """The folder's state, or a new one; a state of another source is refused."""
    path = folder / STATE_FILE
    if not path.exists():
        return State(source=source)
    state = State.from_json(path.read_text())
    if state.source != source:
        raise StateError(f"{folder} holds the state of {state.source}, not of {source}")
    return state


def save_state(folder: Path, state: State) -> None:
    tmp = folder / (STATE_FILE + ".tmp")
    tmp.write_text(state.to_json())
    os.replace(tmp, folder / STATE_FILE)


@dataclass
class CoordinatorInputs:
    """What the report needs from the coordinator log."""

    records: Any  # the kept records, every type the report uses
    segment_rows: list[dict]  # the segments read (warnings)
    open_transactions: list[dict]
    state: State | None = None


class Incremental:
    """One incremental run over ``folder``: :meth:`read`, then :meth:`commit` once the
    report is written (a run that fails leaves the state as it was)."""

    def __init__(self, spark: Any, data_dir: str, folder: Path, source: str, at: int) -> None:
        self.spark = spark
        self.data_dir = data_dir
        self.folder = folder
        self.at = at
        folder.mkdir(parents=True, exist_ok=True)
        self.state = load_state(folder, source)
        if self.state.at is not None and at < self.state.at:
            raise StateError(
                f"--at {at} is before the state's last report time {self.state.at}:"
                " a report with --state only moves forward"
            )
        self.run = self.state.runs + 1
        # A run that failed before committing left its records: not part of the state.
        for stale in (folder / RECORDS).glob("run=*"):
            if int(stale.name.split("=", 1)[1]) >= self.run:
                shutil.rmtree(stale)
        shutil.rmtree(folder / INCOMING, ignore_errors=True)

    def read(self, options: dict[str, str], record_types: tuple[int, ...]) -> CoordinatorInputs:
        from pyspark.sql import functions as F

        spark, st = self.spark, self.state
        starts = {p: x.next for p, x in st.logs.items()}

        def src(**more: str) -> Any:  # a reader of its own each time: options stick to one
            opts = {**options, **more}
            if starts:
                opts["startOffsets"] = json.dumps(starts)
            return spark.read.format("kcoord").options(**opts)

        # Where each partition ends now (a record written after this is left to the next run).
        segment_rows = [r.asDict() for r in src(level="segments").load(self.data_dir).collect()]
        ends = {p: x.end for p, x in st.logs.items()}
        for r in segment_rows:
            p = r["log_partition"]
            ends[p] = max(ends.get(p, 0), r["next_offset"], starts.get(p, 0))
        txns = [
            r.asDict()
            for r in src(level="transactions").load(self.data_dir).collect()
            if r["batch_base"] < ends.get(r["log_partition"], 0)
        ]
        incoming = str(self.folder / INCOMING)
        (
            # The ranges of still-open transactions come from this same read (rows of type
            # -1), so what is kept and what is pending cannot disagree.
            src(endOffsets=json.dumps(ends), pendingMarkers="true")
            .load(self.data_dir)
            .where(F.col("record_type").isin(*record_types, PENDING_MARKER))
            .write.mode("overwrite")
            .parquet(incoming)
        )
        read = spark.read.parquet(incoming)
        pending: dict[int, set[tuple[int, int]]] = {}
        for r in read.where(F.col("record_type") == PENDING_MARKER).collect():
            pending.setdefault(r["log_partition"], set()).add((r["offset"], r["committed_offset"]))
        new = read.where(F.col("record_type") != PENDING_MARKER)
        late = {
            r["log_partition"]: r["first"]
            for r in new.where(F.col("timestamp") > self.at)
            .groupBy("log_partition")
            .agg(F.min("offset").alias("first"))
            .collect()
        }
        kept = new.where((F.col("timestamp") <= self.at) & ~self._kept_before())
        kept.write.mode("overwrite").parquet(str(self.folder / RECORDS / f"run={self.run}"))
        shutil.rmtree(incoming, ignore_errors=True)
        logs = {}
        for p, end in ends.items():
            firsts = [end, late.get(p, end)] + [lo for lo, _ in pending.get(p, ())]
            logs[p] = LogPosition(min(firsts), end, sorted(pending.get(p, ())))
        self.new_state = State(st.source, self.at, self.run, logs)
        records = spark.read.parquet(str(self.folder / RECORDS)).drop("run")
        return CoordinatorInputs(records, segment_rows, txns, self.new_state)

    def _kept_before(self) -> Any:
        """Records an earlier run kept: below its end, not after its report time, and not in
        a transaction then open."""
        from pyspark.sql import functions as F

        st = self.state
        if st.at is None or not st.logs:
            return F.lit(False)
        offset = F.col("offset")
        conds = []
        for p, x in st.logs.items():
            c = (F.col("log_partition") == p) & (offset < x.end)
            for lo, hi in x.pending:
                c &= ~offset.between(lo, hi)
            conds.append(c)
        return (F.col("timestamp") <= st.at) & reduce(lambda a, b: a | b, conds)

    def commit(self) -> None:
        save_state(self.folder, self.new_state)
