"""Share groups (KIP-932) in the report: each share-partition's state as its share state log
holds it, next to its topic partition's log end, and each share group's members as its
ShareGroup* records in `__consumer_offsets` name them.

Share state is one log per topic partition, `__share_group_state:<topic id>` partition p
(`broker.share.state_log.state_log_name`), in a data directory and in the database alike. A
data directory a broker has not migrated yet holds the old single-node layout instead (or as
well, when a migration was interrupted): the partitions of `__share_group_state`
(`broker/share/legacy.py`). Both are read, the old layout first, so that a state copied to the
new logs replaces the one it was copied from.

No Spark here. The state logs are replayed on the driver, one after another, by the broker's
own fold (`coordinator.share.state_replay`): a key's records all sit in one log, in order, and
the fold has to see them in that order. What the report's Spark
side adds is the end offsets as of ``--at`` (its ``parts`` table) and the latest member
records (:data:`MEMBER_RECORD_TYPES`, from the ``kcoord`` source); without them
:func:`share_report` reads both here, which is what the tests use.

Counts come from the persisted state, restored as the broker restores it
(`SharePartition.restore`, then `advance_start` to the log start): records acquired when the
state was written are AVAILABLE there, so ``acquired`` is not known; ``available`` holds them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.share.partition import SharePartition
from coordinator.share.persisted import PersistedState
from coordinator.share.state_replay import Key, StateReplay
from exporter.logread import (
    OFFSETS_TOPIC,
    Filters,
    SegmentScan,
    batch_headers,
    decode_segment,
    list_partition_dirs,
    list_segments,
    read_segment,
)
from exporter.pgread import is_storage_url
from protocol import share_state_records as sr
from protocol.codec import DecodeError
from protocol.records import RecordError, decode_record_tuples

# ShareGroupMemberMetadata, ShareGroupMetadata, ShareGroupCurrentMemberAssignment.
MEMBER_RECORD_TYPES = (10, 11, 14)
_CONTROL = 0x20

PARTITION_COLUMNS = (
    ("group", "STRING"),
    ("topic", "STRING"),
    ("topic_id", "STRING"),
    ("partition", "INT"),
    ("start_offset", "BIGINT"),
    ("end_offset", "BIGINT"),
    ("log_start_offset", "BIGINT"),
    ("log_end_offset", "BIGINT"),
    ("in_flight", "BIGINT"),
    ("available", "BIGINT"),
    ("acknowledged", "BIGINT"),
    ("archived", "BIGINT"),
    ("redeliveries", "BIGINT"),
    ("lag", "BIGINT"),
    ("state_epoch", "INT"),
)
GROUP_COLUMNS = (
    ("group", "STRING"),
    ("state", "STRING"),
    ("epoch", "INT"),
    ("members", "INT"),
    ("member_ids", "ARRAY<STRING>"),
    ("clients", "ARRAY<STRING>"),
    ("partitions", "INT"),
    ("in_flight", "BIGINT"),
    ("available", "BIGINT"),
    ("acknowledged", "BIGINT"),
    ("archived", "BIGINT"),
    ("redeliveries", "BIGINT"),
    ("lag", "BIGINT"),
)
PARTITION_DDL = ", ".join(f"`{n}` {t}" for n, t in PARTITION_COLUMNS)
GROUP_DDL = ", ".join(f"`{n}` {t}" for n, t in GROUP_COLUMNS)
_SUMMED = ("in_flight", "available", "acknowledged", "archived", "redeliveries", "lag")


@dataclass
class ShareReport:
    partitions: list[dict] = field(default_factory=list)  # PARTITION_COLUMNS
    groups: list[dict] = field(default_factory=list)  # GROUP_COLUMNS
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Reading


def _scans(source: str, topic: str) -> Iterator[tuple[str, int, SegmentScan]]:
    """(log name, partition, scanned segment) of every partition of the log ``topic`` and,
    for share state, of the logs named ``topic:...``: ``topic`` itself first, each in offset
    order."""

    def wanted(name: str) -> bool:
        return name == topic or name.startswith(topic + ":")

    def order(name: str) -> tuple[bool, str]:
        return (name != topic, name)

    if is_storage_url(source):
        from exporter import pgread

        logs = sorted(pgread.partitions_of_logs(source, wanted), key=lambda t: (order(t[0]), t[1]))
        for name, p in logs:
            for lo, hi, _ in pgread.ranges(source, name, p):
                yield name, p, pgread.scan(source, name, p, lo, hi)
        return
    dirs = list_partition_dirs(Path(source), topic) + [
        d for d in list_partition_dirs(Path(source), None) if d[0].startswith(topic + ":")
    ]
    for name, p, pdir in sorted(dirs, key=lambda d: (order(d[0]), d[1])):
        for base, path in list_segments(pdir):
            yield name, p, read_segment(path, base)


def read_states(source: str, at: int | None = None) -> tuple[dict[Key, PersistedState], list[str]]:
    """Every share-partition's persisted state in the share state logs of a data directory
    or storage engine, from the records written up to ``at`` (ms; None: all), and what was
    skipped (torn tails, records that do not decode)."""
    fold = StateReplay()
    warnings: list[str] = []
    for name, p, scan in _scans(source, sr.SHARE_STATE_TOPIC):
        if scan.error:
            warnings.append(f"{name}-{p} {scan.path.name}: {scan.error}")
        h = batch_headers(scan)
        for pos, attrs in zip(h["position"], h["attributes"], strict=True):
            if attrs & _CONTROL:
                continue
            try:
                records = decode_record_tuples(scan.data, int(pos))
            except RecordError as e:
                warnings.append(f"{name}-{p}: skipped a batch: {e}")
                continue
            for _offset, ts, key, value, _headers in records:
                if key is None or (at is not None and ts > at):
                    continue
                try:
                    fold.apply(sr.decode_record(key, value))
                except DecodeError as e:
                    warnings.append(f"{name}-{p}: skipped a record: {e}")
    return fold.states, warnings


def read_member_rows(source: str, at: int | None = None) -> list[dict]:
    """The share-group member records of ``__consumer_offsets`` as the ``kcoord`` source
    gives them (the report reads them through Spark instead)."""
    filters = Filters(record_types=frozenset(MEMBER_RECORD_TYPES), max_timestamp=at)
    rows: list[dict] = []
    for _, p, scan in _scans(source, OFFSETS_TOPIC):
        for batch in decode_segment(scan, p, filters):
            rows.extend(batch.to_pylist())
    return rows


def topic_names(source: str) -> dict[uuid.UUID, str]:
    """Topic id -> name, from the data plane's catalog."""
    if is_storage_url(source):
        from exporter import pgread

        entries = {name: e.get("id") for name, e in pgread.catalog(source).items()}
    else:
        from exporter.topic_partitions import read_catalog

        entries = {name: t.topic_id for name, t in read_catalog(Path(source)).items()}
    out = {}
    for name, tid in entries.items():
        try:
            out[uuid.UUID(str(tid))] = name
        except ValueError:
            continue
    return out


def log_ends(source: str, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple]:
    """(log start, log end) of topic partitions, read from their logs now."""
    out: dict[tuple[str, int], tuple] = {}
    for topic, p in set(tps):
        if is_storage_url(source):
            from exporter import pgread

            if (topic, p) not in set(pgread.partitions(source, topic)):
                continue
            info = pgread.partition_info(source, topic, p)
        else:
            from exporter.topic_partitions import partition_info

            pdir = Path(source) / f"{topic}-{p}"
            if not pdir.is_dir():
                continue
            info = partition_info(Path(source), topic, p, pdir)
        out[(topic, p)] = (info["log_start_offset"], info["log_end_offset"])
    return out


# ---------------------------------------------------------------------------------------------
# The tables


def partition_row(
    key: Key, state: PersistedState, topic: str | None, ends: tuple | None
) -> dict[str, Any]:
    """One share-partition: its window as the broker would restore it, against the log."""
    group, topic_id, partition = key
    log_start, log_end = ends if ends is not None else (None, None)
    sp = SharePartition.restore(state)
    if log_start is not None:
        sp.advance_start(log_start)  # what the broker does on the partition's next use
    st = sp.stats()
    redeliveries = sum(
        r.last_offset - r.first_offset + 1 for r in sp.in_flight() if r.delivery_count > 1
    )
    lag = None
    if log_end is not None:
        # Records from the start offset to the log end that no consumer has finished with.
        lag = max(log_end - st.start_offset - st.acknowledged - st.archived, 0)
    return {
        "group": group,
        "topic": topic if topic is not None else str(topic_id),
        "topic_id": str(topic_id),
        "partition": partition,
        "start_offset": st.start_offset,
        "end_offset": st.end_offset,
        "log_start_offset": log_start,
        "log_end_offset": log_end,
        "in_flight": st.in_flight,
        "available": st.available + st.acquired,
        "acknowledged": st.acknowledged,
        "archived": st.archived,
        "redeliveries": redeliveries,
        "lag": lag,
        "state_epoch": state.state_epoch,
    }


def members_of(rows: Iterable[dict]) -> dict[str, dict[str, Any]]:
    """Per share group, from its member records (any order; the newest of each key, by log
    offset, wins; a group's records share one log partition): the group epoch, whether the
    group record is a tombstone, and the live members with their client and partitions."""
    latest: dict[tuple, dict] = {}
    for r in rows:
        if r.get("record_type") not in MEMBER_RECORD_TYPES:
            continue
        k = (r["group"], r["record_type"], r.get("member_id"))
        old = latest.get(k)
        if old is None or r["offset"] > old["offset"]:
            latest[k] = r
    groups: dict[str, dict[str, Any]] = {}
    for (group, rtype, member_id), r in sorted(latest.items(), key=lambda kv: str(kv[0])):
        g = groups.setdefault(group, {"epoch": None, "deleted": False, "members": {}})
        if rtype == 11:
            g["deleted"] = bool(r["tombstone"])
            g["epoch"] = None if r["tombstone"] else r.get("generation")
        elif rtype == 10 and not r["tombstone"]:
            m = (r.get("members") or [{}])[0]
            g["members"].setdefault(member_id, {}).update(
                client_id=m.get("client_id"), client_host=m.get("client_host")
            )
    for (group, rtype, member_id), r in latest.items():
        g = groups[group]
        if rtype == 14 and not r["tombstone"] and member_id in g["members"]:
            m = (r.get("members") or [{}])[0]
            g["members"][member_id]["assignment"] = m.get("assignment") or []
    return groups


def group_rows(partitions: list[dict], members: dict[str, dict[str, Any]]) -> list[dict]:
    """One row per share group with state or members: its totals over its partitions."""
    names = {p["group"] for p in partitions} | {
        g for g, m in members.items() if not (m["deleted"] and not m["members"])
    }
    out = []
    for name in sorted(names):
        mine = [p for p in partitions if p["group"] == name]
        info = members.get(name, {"epoch": None, "deleted": False, "members": {}})
        live = info["members"]
        row: dict[str, Any] = {
            "group": name,
            "state": "Dead" if info["deleted"] else ("Stable" if live else "Empty"),
            "epoch": info["epoch"],
            "members": len(live),
            "member_ids": sorted(live),
            "clients": sorted(
                f"{m.get('client_id') or '-'}@{m.get('client_host') or '-'}" for m in live.values()
            ),
            "partitions": len(mine),
        }
        for col in _SUMMED:
            vals = [p[col] for p in mine if p[col] is not None]
            row[col] = sum(vals) if vals or col != "lag" else None
        out.append(row)
    return out


def build(
    states: dict[Key, PersistedState],
    names: dict[uuid.UUID, str],
    ends: dict[tuple[str, int], tuple],
    member_rows: Iterable[dict] = (),
) -> ShareReport:
    partitions = []
    for key, state in states.items():
        topic = names.get(key[1])
        partitions.append(
            partition_row(key, state, topic, ends.get((topic, key[2])) if topic else None)
        )
    partitions.sort(key=lambda r: (r["group"], r["topic"], r["partition"]))
    return ShareReport(partitions, group_rows(partitions, members_of(member_rows)))


def share_report(
    source: str | Path,
    at: int | None = None,
    *,
    ends: dict[tuple[str, int], tuple] | None = None,
    member_rows: Iterable[dict] | None = None,
) -> ShareReport:
    """The share section of a data directory or storage engine. ``ends`` (log start and end
    per topic partition) and ``member_rows`` (:data:`MEMBER_RECORD_TYPES` records) are read
    here when not given."""
    source = str(source)
    states, warnings = read_states(source, at)
    names = topic_names(source)
    if ends is None:
        ends = log_ends(source, [(names[k[1]], k[2]) for k in states if k[1] in names])
    if member_rows is None:
        member_rows = read_member_rows(source, at)
    report = build(states, names, ends, member_rows)
    report.warnings = warnings
    return report


# ---------------------------------------------------------------------------------------------
# Text


def summary(report: ShareReport) -> str:
    """The console lines of the share section: per group a header line, then its
    share-partitions (nothing when there are no share groups)."""
    if not report.groups:
        return ""
    headers = [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "START-OFFSET",
        "LOG-END-OFFSET",
        "IN-FLIGHT",
        "ACKNOWLEDGED",
        "ARCHIVED",
        "REDELIVERIES",
        "LAG",
    ]
    cols = (
        "topic",
        "partition",
        "start_offset",
        "log_end_offset",
        "in_flight",
        "acknowledged",
        "archived",
        "redeliveries",
        "lag",
    )
    lines = []
    for g in report.groups:
        lines.append(
            f"Share group '{g['group']}': state {g['state']}, epoch"
            f" {'-' if g['epoch'] is None else g['epoch']}, {g['members']} members,"
            f" {g['partitions']} partitions, in flight {g['in_flight']}, acknowledged"
            f" {g['acknowledged']}, archived {g['archived']}, redeliveries"
            f" {g['redeliveries']}, lag {'-' if g['lag'] is None else g['lag']}"
        )
        table = [headers]
        for p in report.partitions:
            if p["group"] == g["group"]:
                table.append([g["group"]] + ["-" if p[c] is None else str(p[c]) for c in cols])
        if len(table) > 1:
            widths = [max(len(r[i]) for r in table) for i in range(len(headers))]
            for r in table:
                lines.append(" ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        lines.append("")
    return "\n".join(lines) + "\n"
