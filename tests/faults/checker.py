"""Checkers over a fault run's history (history.py) and what was read back after healing.

Each returns a list of anomalies (one line each); :func:`check` runs them all. ``final`` holds
what the harness read once every fault was healed: ``committed[group][tp]``, ``records[topic]
[partition] -> {offset: value}`` (read_uncommitted, ``data`` and ``shared``), ``txout`` (values,
read_committed), ``txin_committed[partition]`` (the transactional group's offsets).
"""

from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

Op = dict[str, Any]


@dataclass
class Report:
    anomalies: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    availability: list[dict[str, Any]] = field(default_factory=list)

    def add(self, name: str, found: list[str]) -> None:
        self.stats[f"anomalies.{name}"] = len(found)
        self.anomalies += [f"{name}: {a}" for a in found[:20]]
        if len(found) > 20:
            self.anomalies.append(f"{name}: ... {len(found) - 20} more")


def _acked_commits(ops: list[Op]) -> dict[tuple[str, str], list[Op]]:
    out: dict[tuple[str, str], list[Op]] = defaultdict(list)
    for o in ops:
        if o["op"] == "commit" and o.get("ok"):
            for tp, off in o["offsets"].items():
                out[(o["group"], tp)].append({"s": o["s"], "r": o["r"], "v": off, "w": o})
    return out


_UNKNOWN_OUTCOME = ("time", "transport", "disconnect", "connection", "broker down")


# Workers whose client resends a request it got no answer to within this many seconds
# (librdkafka's socket.timeout.ms in tests/faults/worker.py), by the history's worker name.
RESENT_AFTER_S = {"consumer": 5.0, "classic": 5.0}


def indeterminate_commits(ops: list[Op]) -> dict[tuple[str, str], set[int]]:
    """Offsets of commits whose outcome the client does not know (no answer: it timed out or
    its connection broke). Such a request may still arrive and be applied later, after newer
    commits, as with Kafka: its offset may be read back at any time after it was sent.

    Also a commit acknowledged only after its client's request timeout: the client sent it
    again, and the copy whose answer it did not take may arrive later still (a cut
    connection's bytes are retransmitted once it heals). A 9-minute run read one back 2.4 s
    after the acknowledgement, after two newer commits were acknowledged."""
    out: dict[tuple[str, str], set[int]] = defaultdict(set)
    for o in ops:
        if o["op"] != "commit":
            continue
        resent = RESENT_AFTER_S.get(o.get("w", ""))
        if o.get("ok"):
            if resent is not None and o.get("r") is not None and o["r"] - o["s"] > resent:
                for tp, off in (o.get("offsets") or {}).items():
                    out[(o["group"], tp)].add(off)
            continue
        err = str(o.get("err") or "").lower()
        if o.get("ok") is None or any(w in err for w in _UNKNOWN_OUTCOME):
            for tp, off in (o.get("offsets") or {}).items():
                out[(o["group"], tp)].add(off)
    return out


def lost_commits(ops: list[Op], committed: dict[str, dict[str, int]]) -> tuple[list[str], int]:
    """After healing, each group's committed offset is at least the highest acknowledged
    (unless it is the offset of a commit whose outcome was unknown, applied late: counted)."""
    found = []
    late = 0
    unknown = indeterminate_commits(ops)
    for (group, tp), acks in _acked_commits(ops).items():
        best = max(a["v"] for a in acks)
        got = committed.get(group, {}).get(tp, -1)
        if got < best:
            if got in unknown.get((group, tp), ()):
                late += 1
                continue
            found.append(f"{group} {tp}: committed {got} after healing, {best} was acknowledged")
    return found, late


_NO_COMMIT = re.compile(
    r"No committed offset found for TopicPartition\(topic='(.+)', partition=(\d+)\)"
)


def commits_after_client_reset(ops: list[Op]) -> dict[tuple[str, str], set[int]]:
    """Offsets committed after an aiokafka member started a partition over from
    auto_offset_reset for "no committed offset" although the group had an acknowledged commit
    of it. aiokafka (0.14 and earlier) reads OffsetFetch v2+ answers partition by partition and
    ignores the top-level error, which is where Kafka, and kcoord, put NOT_COORDINATOR or
    COORDINATOR_LOAD_IN_PROGRESS from v2 on (no partitions listed): it takes the error for "no
    offsets" and consumes the partition again from the start, committing as it goes (a
    30-minute run: a PostgreSQL failover answered COORDINATOR_LOAD_IN_PROGRESS, and the
    member's commits went back from 4,832 to 104). A client bug, not kcoord's: counted."""
    acked_at: dict[tuple[str, str], float] = {}
    for (group, tp), acks in _acked_commits(ops).items():
        acked_at[(group, tp)] = min(a["r"] for a in acks)
    resets: dict[tuple[str, str], float] = {}
    for o in ops:
        if o["op"] != "position_reset":
            continue
        m = _NO_COMMIT.match(o.get("why", ""))
        if m is None:
            continue
        key = (o["group"], f"{m.group(1)}/{m.group(2)}")
        first = acked_at.get(key)
        if first is not None and first < o["t"]:
            resets[key] = min(resets.get(key, o["t"]), o["t"])
    out: dict[tuple[str, str], set[int]] = defaultdict(set)
    for o in ops:
        if o["op"] != "commit" or not o.get("ok"):
            continue
        for tp, off in (o.get("offsets") or {}).items():
            t = resets.get((o["group"], tp))
            if t is not None and o["s"] > t:
                out[(o["group"], tp)].add(off)
    return out


def offsets_backwards(ops: list[Op]) -> tuple[list[str], int, int]:
    """OffsetFetch answers never go back: an answer to a fetch sent after another answer (or
    after a commit's acknowledgement) was received is not lower than it, unless it is the
    offset of a commit sent earlier whose outcome the client never learnt (applied late, as
    Kafka would too: counted, and documented as not promised), or one committed after a client
    started the partition over because it misread an error as "no committed offset"
    (`commits_after_client_reset`: counted apart). Returns (anomalies, late commits read,
    client restarts read)."""
    found = []
    late = restarted = 0
    unknown = indeterminate_commits(ops)
    redone = commits_after_client_reset(ops)
    seen: dict[tuple[str, str], list[tuple[float, int, str]]] = defaultdict(list)  # (r, v, what)
    fetches: dict[tuple[str, str], list[tuple[float, int, int]]] = defaultdict(list)  # (s, v, node)
    for o in ops:
        if o["op"] == "fetch" and o["code"] == 0:
            for tp, v in o["offsets"].items():
                seen[(o["group"], tp)].append((o["r"], v, f"fetch from node {o['node']}"))
                fetches[(o["group"], tp)].append((o["s"], v, o["node"]))
    for key, acks in _acked_commits(ops).items():
        seen[key] += [(a["r"], a["v"], f"commit by {a['w']['member']}") for a in acks]
    for key, events in seen.items():
        events.sort()
        ends = [e[0] for e in events]
        # the running maximum of what was known before each instant
        best: list[tuple[int, str]] = []
        top: tuple[int, str] = (-1, "")
        for _, v, what in events:
            if v > top[0]:
                top = (v, what)
            best.append(top)
        for s, v, node in fetches.get(key, []):
            i = bisect.bisect_left(ends, s) - 1
            if i >= 0 and v < best[i][0]:
                if v in unknown.get(key, ()):
                    late += 1
                    continue
                if v in redone.get(key, ()):
                    restarted += 1
                    continue
                found.append(
                    f"{key[0]} {key[1]}: node {node} answered {v} at {s:.3f},"
                    f" after {best[i][1]} had seen {best[i][0]}"
                )
    return found, late, restarted


def coordinator_overlap(ops: list[Op], window_s: float) -> tuple[list[str], int]:
    """No two nodes answer as one group's coordinator at once. Answers are seen from outside,
    so an answer's instant is anywhere in its [sent, received]; what cannot be explained by
    any order of takeovers is node X answering, then Y, then X again, each strictly after the
    previous was received, within ``window_s``: a takeover waits for a lease to expire or for a
    node to join, and going back needs a second one. Also returns how many times the
    answering node changed."""
    found = []
    changes = 0
    by_group: dict[str, list[Op]] = defaultdict(list)
    for o in ops:
        if o["op"] == "fetch" and o["code"] == 0:
            by_group[o["group"]].append(o)
    for group, answers in by_group.items():
        answers.sort(key=lambda o: o["r"])
        last_node = None
        for a in answers:
            if last_node is not None and a["node"] != last_node:
                changes += 1
            last_node = a["node"]
        # for each answer y, the latest answer x (other node) received before y was sent, and
        # the earliest answer x2 (x's node) sent after y was received
        starts = sorted(answers, key=lambda o: o["s"])
        s_keys = [o["s"] for o in starts]
        r_keys = [o["r"] for o in answers]
        for y in answers:
            i = bisect.bisect_left(r_keys, y["s"]) - 1
            if i < 0:
                continue
            x = answers[i]
            if x["node"] == y["node"]:
                continue
            j = bisect.bisect_right(s_keys, y["r"])
            for x2 in starts[j:]:
                if x2["s"] - x["r"] > window_s:
                    break
                if x2["node"] == x["node"]:
                    found.append(
                        f"{group}: node {x['node']} answered (received {x['r']:.3f}), node"
                        f" {y['node']} ({y['s']:.3f}-{y['r']:.3f}), node {x['node']} again"
                        f" (sent {x2['s']:.3f})"
                    )
                    break
                if x2["node"] == y["node"]:
                    continue
    return found, changes


ZOMBIE_S = 10.0  # a member's session timeout (6 s) and a heartbeat or two


def ownership_overlap(ops: list[Op]) -> tuple[list[str], int]:
    """Never one partition owned by two members of one group at once, each member's ownership
    taken from its own assignment callbacks.

    One exception is counted, not reported: a member the coordinator removed (its session
    expired while it could not reach the coordinator) keeps its partitions until it hears of
    it, and a classic-protocol client that does not give its assignment up by itself once its
    own session timeout passed (aiokafka) still owns them after the group reassigned them.
    Kafka does not promise otherwise; what it promises, and what is checked here, is that such
    a zombie's commits are refused: an overlap is an anomaly when the old owner had a commit
    of the partition acknowledged that it sent after the new owner got it, or when it did not
    let go within ZOMBIE_S. Returns (anomalies, zombie overlaps)."""
    found = []
    zombies = 0
    acked: dict[tuple[str, str, int], list[float]] = defaultdict(list)  # (g, member, p) -> s
    for o in ops:
        if o["op"] == "commit" and o.get("ok") and o.get("member") != "probe":
            for tp in o.get("offsets") or {}:
                acked[(o["group"], o["member"], int(tp.rsplit("/", 1)[1]))].append(o["s"])
    owner: dict[tuple[str, int], str] = {}
    owned: dict[tuple[str, str], set[int]] = defaultdict(set)
    pending: dict[tuple[str, int, str], tuple[float, str]] = {}  # (g, p, old) -> (t, new)
    events = [o for o in ops if o["op"] in ("assign", "revoke", "lost", "closed")]
    events.sort(key=lambda o: o["t"])

    def settle(g: str, p: int, old: str, t_end: float | None) -> None:
        t, new = pending.pop((g, p, old))
        end = float("inf") if t_end is None else t_end
        zombie_commit = [s for s in acked.get((g, old, p), []) if t < s < end]
        if zombie_commit or t_end is None or t_end - t > ZOMBIE_S:
            nonlocal found
            found.append(
                f"{g} partition {p}: {new} assigned at {t:.3f} while {old} owned it"
                f" (until {t_end if t_end is None else round(t_end, 3)};"
                f" its commits acknowledged after: {len(zombie_commit)})"
            )
        else:
            nonlocal zombies
            zombies += 1

    for e in events:
        g, m = e["group"], e["member"]
        if e["op"] == "assign":
            for p in e["parts"]:
                other = owner.get((g, p))
                if other is not None and other != m:
                    pending[(g, p, other)] = (e["t"], m)
                    owned[(g, other)].discard(p)
                owner[(g, p)] = m
                owned[(g, m)].add(p)
        else:
            parts = (
                e["parts"]
                if e["op"] != "closed"
                else [p for (gg, p, o) in pending if gg == g and o == m] + list(owned[(g, m)])
            )
            for p in parts:
                if (g, p, m) in pending:
                    settle(g, p, m, e["t"])
                if owner.get((g, p)) == m:
                    del owner[(g, p)]
                owned[(g, m)].discard(p)
    for g, p, old in list(pending):
        settle(g, p, old, None)
    return found, zombies


def produced(ops: list[Op], records: dict[str, dict[int, dict[int, str]]]) -> list[str]:
    """Every acknowledged record is readable at its offset, and no value is at two offsets."""
    found = []
    for o in ops:
        if o["op"] == "produce" and o["ok"] and o["topic"] in records and o["offset"] is not None:
            got = records.get(o["topic"], {}).get(o["p"], {}).get(o["offset"])
            if got != o["value"]:
                found.append(
                    f"{o['topic']}-{o['p']}@{o['offset']}: acknowledged {o['value']}, read {got}"
                )
    for topic, parts in records.items():
        seen: dict[str, tuple[int, int]] = {}
        for p, by_offset in parts.items():
            for off, v in by_offset.items():
                if v in seen:
                    found.append(f"{topic}: {v} at {seen[v]} and at {(p, off)}")
                seen[v] = (p, off)
    return found


def exactly_once(ops: list[Op], final: dict[str, Any]) -> tuple[list[str], dict[str, int]]:
    """``txout`` (read_committed) holds every input the transactional group committed past
    exactly once, and nothing from a transaction that was aborted."""
    found = []
    out = Counter(v.rsplit("|", 1)[0] for v in final["txout"])
    tags = Counter(v.rsplit("|", 1)[1] for v in final["txout"])
    aborted = {o["tag"] for o in ops if o["op"] == "txn" and not o["ok"] and o.get("aborted")}
    for t in aborted & set(tags):
        found.append(f"records of aborted transaction {t} are visible ({tags[t]})")
    committed = final["txin_committed"]
    inputs = [o for o in ops if o["op"] == "produce" and o["ok"] and o["topic"] == "txin"]
    # an input stored twice (a producer's duplicate, reported by `produced`) is two inputs
    stored = Counter(
        v
        for p, by_offset in final.get("records", {}).get("txin", {}).items()
        for off, v in by_offset.items()
        if off < committed.get(p, -1)
    )
    done = 0
    pending = 0
    for o in inputs:
        n = out.get(o["value"], 0)
        consumed = o["offset"] is not None and o["offset"] < committed.get(o["p"], -1)
        if consumed:
            done += 1
            if n != max(1, stored.get(o["value"], 0)):
                found.append(
                    f"input {o['value']} (txin-{o['p']}@{o['offset']}) is in txout {n} times"
                )
        else:
            pending += 1
            if n > 1:
                found.append(f"input {o['value']} not yet consumed is in txout {n} times")
    return found, {"txn.inputs_done": done, "txn.inputs_pending": pending}


DELIVERY_LIMIT = 5  # group.share.delivery.count.limit's default: archived after that


def share_records(
    ops: list[Op], records: dict[int, dict[int, str]]
) -> tuple[list[str], dict[str, int]]:
    """Share groups are at least once: a record may be delivered again after its lock expired
    or its member left, and an acknowledgement whose answer was lost may or may not have
    taken effect. What is checked is what the broker promises:

    * ``at once``: no record held by two consumers at once. A consumer certainly held a
      record from receiving it to sending an ACCEPT of it that the broker took (it took it
      because the lock still held), so two such spans of different consumers must not
      overlap.
    * ``redelivered after it was accepted``: once an ACCEPT was answered successfully
      (``ack_result``, the client's acknowledgement callback), the record is never handed
      out again. A delivery received after that answer with a delivery count below the
      accepted one is an older delivery the client had buffered (counted, not reported);
      one at or above it was handed out after the acceptance.
    * ``accepted twice``: two different deliveries of a record both accepted successfully.
    * ``never acknowledged``: every produced record is accepted in the end, archived (its
      delivery count reached the limit), or had an acknowledgement whose outcome the client
      does not know (a failed answer other than INVALID_RECORD_STATE: perhaps applied)."""
    found = []
    acquired: dict[tuple[int, int], list[tuple[float, str, int]]] = defaultdict(list)
    for o in ops:
        if o["op"] == "acquire":
            for p, off, dc in o["recs"]:
                acquired[(p, off)].append((o["t"], o["member"], dc))
    for deliveries in acquired.values():
        deliveries.sort()
    sent: dict[tuple[int, int, str], list[float]] = defaultdict(list)  # (p, off, member) -> s
    for o in ops:
        if o["op"] == "ack":
            for p, off, _ in o["recs"]:
                sent[(p, off, o["member"])].append(o["s"])
    # per record, each successful ACCEPT: (answered at, member, delivery received at, sent
    # at, delivery count)
    accepted: dict[tuple[int, int], list[tuple[float, str, float, float, int]]] = defaultdict(list)
    perhaps: set[tuple[int, int]] = set()
    for o in sorted((o for o in ops if o["op"] == "ack_result"), key=lambda o: o["t"]):
        for p, off in o["recs"]:
            rec = (p, off)
            if not o["ok"]:
                if "INVALID_RECORD_STATE" not in str(o.get("err")).upper().replace(" ", "_"):
                    perhaps.add(rec)
                continue
            # the delivery accepted: this member's latest before the answer
            mine = [(t, dc) for t, m, dc in acquired.get(rec, []) if m == o["member"]]
            before = [(t, dc) for t, dc in mine if t <= o["t"]]
            if not before:
                found.append(f"shared-{p}@{off}: accepted by {o['member']}, who never got it")
                continue
            t_acq, dc = before[-1]
            s = [x for x in sent.get((p, off, o["member"]), []) if t_acq <= x <= o["t"]]
            accepted[rec].append((o["t"], o["member"], t_acq, s[0] if s else o["t"], dc))
    held: dict[tuple[int, int], list[tuple[float, float, str]]] = defaultdict(list)
    stale = 0
    for rec, accepts in accepted.items():
        for _, member, t_acq, s, _ in accepts:
            held[rec].append((t_acq, s, member))
        deliveries = {(member, t_acq) for _, member, t_acq, _, _ in accepts}
        if len(deliveries) > 1:
            found.append(f"shared-{rec[0]}@{rec[1]}: accepted {len(deliveries)} times")
        answered, _, _, _, dc_acc = accepts[0]
        for t, member, dc in acquired.get(rec, []):
            if t <= answered:
                continue
            if dc < dc_acc:
                stale += 1
                continue
            found.append(
                f"shared-{rec[0]}@{rec[1]}: redelivered after it was accepted (answered at"
                f" {answered:.3f}, delivery {dc_acc}; {member} got delivery {dc} at {t:.3f})"
            )
            break
    for rec, spans in held.items():
        spans.sort()
        for a, b in zip(spans, spans[1:], strict=False):
            if b[0] < a[1] and a[2] != b[2]:
                found.append(f"shared-{rec[0]}@{rec[1]}: held by {a[2]} and {b[2]} at once")
    never = 0
    archived = 0
    unknown = 0
    for p, by_offset in records.items():
        for off in by_offset:
            if accepted.get((p, off)):
                continue
            if any(dc >= DELIVERY_LIMIT for _, _, dc in acquired.get((p, off), [])):
                archived += 1
                continue
            if (p, off) in perhaps:
                unknown += 1
                continue
            never += 1
            if never <= 20:
                found.append(f"shared-{p}@{off}: never acknowledged")
    stats = {
        "share.acked": len(accepted),
        "share.archived": archived,
        "share.ack_outcome_unknown": unknown,
        "share.stale_deliveries": stale,
    }
    return found, stats


def availability(
    ops: list[Op], faults: list[Op], bound_s: float, groups: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """For each fault and each group: the longest time without an acknowledged commit during
    the fault, and how long after the heal the first commit sent after it was acknowledged.
    The probe groups (whose coordinator the fault left reachable after healing) must commit
    again within ``bound_s`` of the heal."""
    oks: dict[str, list[float]] = defaultdict(list)
    for o in ops:
        if o["op"] == "commit" and o.get("ok"):
            oks[o["group"]].append(o["r"])
    rows = []
    found = []
    for f in faults:
        row: dict[str, Any] = {"fault": f["kind"], "detail": f.get("detail", ""), "groups": {}}
        for g in groups:
            times = sorted(oks.get(g, []))
            after = [t for t in times if t > f["healed"]]
            first = after[0] - f["healed"] if after else None
            inside = (
                [f["start"]]
                + [t for t in times if f["start"] < t < f["healed"]]
                + [after[0] if after else f["healed"]]
            )
            gap = max(b - a for a, b in zip(inside, inside[1:], strict=False))
            row["groups"][g] = {
                "max_gap_s": round(gap, 2),
                "after_heal_s": None if first is None else round(first, 2),
            }
            if g.startswith("probe-") and (first is None or first > bound_s):
                found.append(f"{g}: no commit within {bound_s}s of healing {f['kind']} ({first})")
        rows.append(row)
    return rows, found


def check(
    ops: list[Op],
    final: dict[str, Any],
    faults: list[Op],
    lease_s: float,
    availability_bound_s: float | None = None,
) -> Report:
    """Every checker; ``availability_bound_s``: how soon after a heal each probe group must
    commit again (default: two lease periods, the issue's bound)."""
    rep = Report()
    rep.stats["ops"] = len(ops)
    rep.stats["commits.acked"] = sum(1 for o in ops if o["op"] == "commit" and o.get("ok"))
    rep.stats["produce.acked"] = sum(1 for o in ops if o["op"] == "produce" and o["ok"])
    rep.stats["txn.committed"] = sum(1 for o in ops if o["op"] == "txn" and o["ok"])
    rep.stats["faults"] = len(faults)
    lost, late_final = lost_commits(ops, final["committed"])
    rep.add("lost-commit", lost)
    back, late_reads, restarted_reads = offsets_backwards(ops)
    rep.add("offset-backwards", back)
    # not anomalies either: commits of an aiokafka member that misread an error as no offset
    rep.stats["client-restart-commit.reads"] = restarted_reads
    # not anomalies: commits whose outcome the client did not know, applied after newer ones
    rep.stats["late-indeterminate-commit.reads"] = late_reads
    rep.stats["late-indeterminate-commit.final"] = late_final
    overlap, changes = coordinator_overlap(ops, lease_s)
    rep.stats["coordinator.changes"] = changes
    rep.add("two-coordinators", overlap)
    owners, zombies = ownership_overlap(ops)
    rep.add("two-owners", owners)
    rep.stats["zombie-member.overlaps"] = zombies  # not anomalies: see ownership_overlap
    # Why aiokafka members started partitions from auto_offset_reset (the worker's
    # position_reset): no committed offset (a new group), or a Fetch answered
    # OFFSET_OUT_OF_RANGE, which a broker that lost no data answers a committed position never.
    resets = [o for o in ops if o["op"] == "position_reset"]
    rep.stats["position-reset.out-of-range"] = sum(
        1 for o in resets if o["why"].startswith("Fetch offset")
    )
    prod = produced(ops, final["records"])
    rep.add("produce-lost", [a for a in prod if " acknowledged " in a])
    rep.add("produce-duplicate", [a for a in prod if " acknowledged " not in a])
    if "txout" in final:
        eo, st = exactly_once(ops, final)
        rep.stats.update(st)
        rep.add("exactly-once", eo)
    if "shared" in final["records"] and any(o["op"] == "acquire" for o in ops):
        sh, st = share_records(ops, final["records"]["shared"])
        rep.stats.update(st)
        rep.add("share-redelivered", [a for a in sh if "after it was accepted" in a])
        rep.add("share-accepted-twice", [a for a in sh if a.endswith(" times")])
        rep.add("share-never-acknowledged", [a for a in sh if a.endswith("never acknowledged")])
        rep.add("share", [a for a in sh if "at once" in a or "never got it" in a])
    groups = sorted({o["group"] for o in ops if o["op"] == "commit"})
    bound = 2 * lease_s if availability_bound_s is None else availability_bound_s
    rows, found = availability(ops, faults, bound, groups)
    rep.availability = rows
    rep.add("availability", found)
    return rep
