"""What the console, the lag JSON API and Burrow's API show, read from this node: its groups
(the shards it has loaded), the live lag model (``broker/lag/tracker.py``), topics, share
groups, transactions and the cluster view. Plain dicts and lists, JSON as they are; a
``Viewer`` filters them to the groups (and topics, transactional ids) its principal may
DESCRIBE. ``broker/web/cluster.py`` merges the views of every node."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.security.authorizer import Authorizer, Operation, ResourceType
from coordinator.classic.consumer_protocol import parse_assignment
from coordinator.lag.burrow import STATUS_NAMES
from coordinator.lag.model import GroupLag, PartitionLag

if TYPE_CHECKING:
    from broker.state import BrokerState
    from coordinator.group import Group
    from coordinator.shard import Shard


@dataclass(frozen=True)
class Viewer:
    """Who asks: what their principal may DESCRIBE (everything without an authorizer)."""

    principal: str
    host: str
    authorizer: Authorizer | None = None

    def may(self, kind: ResourceType, name: str) -> bool:
        auth = self.authorizer
        return auth is None or auth.authorize(
            self.principal, self.host, Operation.DESCRIBE, kind, name
        )

    def group(self, name: str) -> bool:
        return self.may(ResourceType.GROUP, name)

    def topic(self, name: str) -> bool:
        return self.may(ResourceType.TOPIC, name)


def _shards(state: BrokerState) -> Iterator[Shard]:
    runtime = state.groups
    if runtime is None:
        return
    for shard in runtime.shards:
        if shard is not None:
            yield shard


def _node(state: BrokerState) -> int:
    return int(state.identity.node_id)


def partition_row(topic: str, p: int, pl: PartitionLag, now: int) -> dict[str, Any]:
    log = pl.log
    entries = pl.entries()
    row: dict[str, Any] = {
        "topic": topic,
        "partition": p,
        "committed": pl.committed,
        "log_start": log.start,
        "log_end": log.end,
        "lag": pl.lag(),
        "time_lag_ms": pl.time_lag_ms(now),
        "status": STATUS_NAMES[pl.status],
        "last_commit_ms": pl.last_commit_ms,
        "consume_rate": pl.consume_rate(now),
        "produce_rate": log.produce_rate(),
        "below_log_start": pl.below_log_start(),
        "held_by_transaction": pl.held_by_transaction(),
        "last_stable_offset": log.lso,
        "window": [{"offset": o, "timestamp": t, "lag": lag} for o, t, lag in entries],
        "broker_offsets": list(log.sampled_ends()),
    }
    if pl.share is not None:
        available, in_flight, archived, done = pl.share
        row["share"] = {
            "available": available,
            "in_flight": in_flight,
            "archived": archived,
            "done": done,
        }
    return row


def lag_summary(gl: GroupLag | None) -> dict[str, Any]:
    if gl is None:
        return {
            "total_lag": 0, "max_time_lag_ms": 0, "status": "OK", "partitions": 0, "topics": []
        }  # fmt: skip
    return {
        "topics": sorted(gl.topics),
        "total_lag": gl.total_lag,
        "max_time_lag_ms": gl.max_time_lag_ms,
        "status": STATUS_NAMES[gl.status],
        "partitions": gl.count(),
        "last_commit_ms": gl.last_commit_ms,
    }


def groups(state: BrokerState, viewer: Viewer) -> list[dict[str, Any]]:
    """Every group this node coordinates that the viewer may describe, with its lag."""
    tracker = state.lag
    model = tracker.model if tracker is not None else None
    node = _node(state)
    rows: dict[str, dict[str, Any]] = {}
    for shard in _shards(state):
        for gid, g in shard.groups.items():
            if not viewer.group(gid):
                continue
            rows[gid] = {
                "group": gid,
                "type": g.type,
                "state": str(g.state),
                "members": len(g.members),
                "node": node,
            }
    if model is not None:
        for gid, gl in model.groups.items():
            row = rows.get(gid)
            if row is None:
                if not viewer.group(gid) or gl.kind != "share":
                    continue  # offsets of a group this node no longer coordinates
                row = rows[gid] = {
                    "group": gid,
                    "type": "share",
                    "state": "Unknown",
                    "members": 0,
                    "node": node,
                }
            row.update(lag_summary(gl))
    for row in rows.values():
        if "total_lag" not in row:
            row.update(lag_summary(None))
    return sorted(rows.values(), key=lambda r: r["group"])


def _members(state: BrokerState, g: Group) -> list[dict[str, Any]]:
    topics = state.topics
    out = []
    for member_id, m in g.members.items():
        assignment: dict[str, list[int]] = {}
        raw = getattr(m, "assignment", None)
        assigned = getattr(m, "assigned", None)
        if isinstance(raw, (bytes, bytearray)) and raw:
            try:
                for topic, parts in parse_assignment(bytes(raw)):
                    assignment.setdefault(topic, []).extend(parts)
            except Exception:
                assignment = {}  # another protocol type's assignment: opaque
        elif assigned:
            for tid, parts in assigned.items():
                t = topics.by_id(tid) if topics is not None else None
                assignment[t.name if t is not None else str(tid)] = sorted(parts)
        out.append(
            {
                "member_id": member_id,
                "client_id": getattr(m, "client_id", ""),
                "host": getattr(m, "client_host", ""),
                "instance_id": getattr(m, "group_instance_id", None)
                or getattr(m, "instance_id", None),
                "assignment": {t: sorted(ps) for t, ps in sorted(assignment.items())},
            }
        )
    return sorted(out, key=lambda m: (m["client_id"], m["member_id"]))


def find_group(state: BrokerState, gid: str) -> Group | None:
    for shard in _shards(state):
        g = shard.groups.get(gid)
        if g is not None:
            return g
    return None


def group_detail(state: BrokerState, gid: str, viewer: Viewer) -> dict[str, Any] | None:
    """One group as its coordinator sees it; None if not here (or not to be seen)."""
    if not viewer.group(gid):
        return None
    tracker = state.lag
    g = find_group(state, gid)
    gl = tracker.model.groups.get(gid) if tracker is not None else None
    if g is None and gl is None:
        return None
    now = tracker.model_now() if tracker is not None else int(time.time() * 1000)
    members = _members(state, g) if g is not None else []
    owners = {
        (t, p): m["client_id"] or m["member_id"]
        for m in members
        for t, ps in m["assignment"].items()
        for p in ps
    }
    hosts = {(t, p): m["host"] for m in members for t, ps in m["assignment"].items() for p in ps}
    partitions = []
    if gl is not None:
        for topic, p, pl in sorted(gl.partitions(), key=lambda x: (x[0], x[1])):
            if not viewer.topic(topic):
                continue
            row = partition_row(topic, p, pl, now)
            row["owner"] = owners.get((topic, p), "")
            row["owner_host"] = hosts.get((topic, p), "")
            partitions.append(row)
    pending = []
    for shard in _shards(state):
        for pid, offsets in shard.state.pending_txn.items():
            n = sum(1 for (grp, _, _) in offsets if grp == gid)
            if n:
                pending.append({"producer_id": pid, "partitions": n})
    out: dict[str, Any] = lag_summary(gl)
    out.update(
        {
            "group": gid,
            "type": g.type if g is not None else (gl.kind if gl is not None else "classic"),
            "state": str(g.state) if g is not None else "Unknown",
            "protocol_type": getattr(g, "protocol_type", None) if g is not None else None,
            "node": _node(state),
            "members": members,
            "partitions": partitions,
            "history": tracker.history_of(gid) if tracker is not None else [],
            "rebalances": [
                vars(r) for r in (tracker.rebalances.get(gid, ()) if tracker is not None else ())
            ],
            "pending_transactional_offsets": pending,
            "evaluated_ms": now,
        }
    )
    return out


def topics(state: BrokerState, viewer: Viewer) -> list[dict[str, Any]]:
    store = state.data
    if store is None:
        return []
    tracker = state.lag
    consumers: dict[str, set[str]] = {}
    if tracker is not None:
        for gid, gl in tracker.model.groups.items():
            if viewer.group(gid):
                for t in gl.topics:
                    consumers.setdefault(t, set()).add(gid)
    out = []
    for name, parts in sorted(store.partitions.items()):
        if name.startswith("__") or not viewer.topic(name):
            continue
        start = end = size = 0
        led = 0
        rate = 0.0
        for p in parts:
            if p.closed or not p.leading:
                continue
            led += 1
            start += p.log.log_start_offset
            end += p.log.high_watermark
            size += p.log.size_bytes
            if tracker is not None:
                ls = tracker.model.logs.get((name, p.index))
                r = ls.produce_rate() if ls is not None else None
                rate += r or 0.0
        out.append(
            {
                "topic": name,
                "partitions": len(parts),
                "led_here": led,
                "records": end - start,
                "log_end_sum": end,
                "size_bytes": size,
                "produce_rate": rate,
                "groups": sorted(consumers.get(name, ())),
                "node": _node(state),
            }
        )
    return out


def share_groups(state: BrokerState, viewer: Viewer) -> list[dict[str, Any]]:
    tracker = state.lag
    if tracker is None:
        return []
    now = tracker.model_now()
    out = []
    for row in groups(state, viewer):
        if row["type"] != "share":
            continue
        gl = tracker.model.groups.get(row["group"])
        parts = []
        if gl is not None:
            for topic, p, pl in sorted(gl.partitions(), key=lambda x: (x[0], x[1])):
                parts.append(partition_row(topic, p, pl, now))
        backlog = {"available": 0, "in_flight": 0, "archived": 0}
        for pr in parts:
            for k in backlog:
                backlog[k] += pr.get("share", {}).get(k, 0)
        out.append({**row, "backlog": backlog, "share_partitions": parts})
    return out


def transactions(state: BrokerState, viewer: Viewer) -> dict[str, Any]:
    txns = state.txns
    now = int(time.time() * 1000)
    open_txns = []
    if txns is not None:
        for m in txns.listing(set(), set(), -1):
            if not viewer.may(ResourceType.TRANSACTIONAL_ID, m.transactional_id):
                continue
            open_txns.append(
                {
                    "transactional_id": m.transactional_id,
                    "producer_id": m.producer_id,
                    "producer_epoch": m.producer_epoch,
                    "state": m.state.kafka_name,
                    "started_ms": m.start_ms,
                    "age_ms": now - m.start_ms if m.start_ms > 0 else None,
                    "timeout_ms": m.timeout_ms,
                    "partitions": [f"{t}-{p}" for t, p in sorted(m.partitions)],
                    "node": _node(state),
                }
            )
    held = []
    tracker = state.lag
    if tracker is not None:
        for gid, gl in tracker.model.groups.items():
            if not viewer.group(gid):
                continue
            for topic, p, pl in gl.partitions():
                if pl.held_by_transaction():
                    held.append(
                        {
                            "group": gid,
                            "topic": topic,
                            "partition": p,
                            "committed": pl.committed,
                            "last_stable_offset": pl.log.lso,
                            "log_end": pl.log.end,
                        }
                    )
    pending = []
    for shard in _shards(state):
        for pid, offsets in shard.state.pending_txn.items():
            for grp in sorted({k[0] for k in offsets}):
                if viewer.group(grp):
                    pending.append({"producer_id": pid, "group": grp})
    return {"transactions": open_txns, "held_groups": held, "pending_offsets": pending}


def node_info(state: BrokerState) -> dict[str, Any]:
    tracker = state.lag
    runtime = state.groups
    loaded = sum(1 for _ in _shards(state))
    return {
        "node": _node(state),
        "address": f"{state.advertised_host}:{state.advertised_port}",
        "offsets_partitions_loaded": loaded,
        "offsets_partitions": runtime.partitions if runtime is not None else 0,
        "lag_tick_ms": round(tracker.tick_seconds * 1000, 1) if tracker is not None else None,
        "lag_evaluated_ms": tracker.last_tick_ms if tracker is not None else None,
        "rebalances": tracker.rebalance_count if tracker is not None else 0,
        "group_partitions_tracked": (
            sum(g.count() for g in tracker.model.groups.values()) if tracker is not None else 0
        ),
    }
