"""The fault checkers find what they look for, on small histories made by hand (the bounded
runs in test_faults.py need root; these run anywhere)."""

from __future__ import annotations

from tests.faults import checker as C


def commit(group: str, off: int, s: float, r: float, ok: bool | None = True, **kw) -> dict:
    return {"op": "commit", "group": group, "member": "m", "offsets": {"t/0": off}, "s": s,
            "r": r, "ok": ok, **kw}  # fmt: skip


def fetch(group: str, node: int, off: int, s: float, r: float, code: int = 0) -> dict:
    return {"op": "fetch", "group": group, "node": node, "offsets": {"t/0": off}, "s": s, "r": r,
            "code": code}  # fmt: skip


def test_a_lost_commit_and_an_offset_going_back_are_found() -> None:
    ops = [commit("g", 5, 1, 2), commit("g", 9, 3, 4), fetch("g", 1, 5, 5, 6)]
    lost, late = C.lost_commits(ops, {"g": {"t/0": 5}})
    assert len(lost) == 1 and late == 0
    back, late, _ = C.offsets_backwards(ops)
    assert len(back) == 1 and late == 0
    assert C.lost_commits(ops, {"g": {"t/0": 9}}) == ([], 0)


def test_a_late_commit_of_unknown_outcome_is_counted_not_reported() -> None:
    ops = [commit("g", 5, 1, 3, ok=None, err="timed out"), commit("g", 9, 2, 4),
           fetch("g", 1, 5, 5, 6)]  # fmt: skip
    assert C.offsets_backwards(ops) == ([], 1, 0)
    assert C.lost_commits(ops, {"g": {"t/0": 5}}) == ([], 1)


def test_a_late_copy_of_a_commit_the_client_sent_again_is_counted_not_reported() -> None:
    """librdkafka resends a request unanswered within its socket timeout (5 s in the workers):
    a commit acknowledged later than that had a second copy, which may be applied after newer
    commits. A quick acknowledgement had none: the same history with it is an anomaly."""
    slow = commit("g", 5, 1, 7, w="consumer")  # answered 6 s after it was sent
    ops = [slow, commit("g", 9, 8, 8.1, w="consumer"), fetch("g", 1, 5, 9, 9.1)]
    assert C.offsets_backwards(ops) == ([], 1, 0)
    ops[0] = commit("g", 5, 1, 1.2, w="consumer")
    assert len(C.offsets_backwards(ops)[0]) == 1


def test_commits_of_a_client_that_misread_an_error_as_no_offset_are_counted_apart() -> None:
    """aiokafka takes OffsetFetch's top-level error (v2+) for "no committed offset" and starts
    the partition over; its new, lower commits are counted, not reported. Without the reset in
    the history the same reads are an anomaly."""
    why = "No committed offset found for TopicPartition(topic='t', partition=0)"
    reset = {"op": "position_reset", "group": "g", "t": 5.0, "why": why}
    ops = [commit("g", 90, 1, 2), reset, commit("g", 10, 6, 7), fetch("g", 1, 10, 8, 8.1)]
    assert C.offsets_backwards(ops) == ([], 0, 1)
    assert len(C.offsets_backwards([o for o in ops if o is not reset])[0]) == 1


def test_two_nodes_answering_as_coordinator_in_turn_are_found() -> None:
    ops = [fetch("g", 1, 0, 0.0, 0.1), fetch("g", 2, 0, 0.2, 0.3), fetch("g", 1, 0, 0.4, 0.5)]
    found, changes = C.coordinator_overlap(ops, window_s=3.0)
    assert len(found) == 1 and changes == 2
    # a takeover slower than the window is a failover, not two coordinators
    ops[2] = fetch("g", 1, 0, 4.0, 4.1)
    assert C.coordinator_overlap(ops, window_s=3.0)[0] == []


def test_a_partition_owned_by_two_members_is_found() -> None:
    def ev(op: str, m: str, t: float, parts: list[int]) -> dict:
        return {"op": op, "group": "g", "member": m, "t": t, "parts": parts}

    ok = [ev("assign", "a", 1, [0, 1]), ev("revoke", "a", 2, [0, 1]), ev("assign", "b", 3, [0])]
    assert C.ownership_overlap(ok) == ([], 0)
    # a zombie that lets go soon and whose commits were refused meanwhile: counted
    zombie = [ev("assign", "a", 1, [0, 1]), ev("assign", "b", 2, [1]), ev("revoke", "a", 3, [0, 1])]
    assert C.ownership_overlap(zombie) == ([], 1)
    # ... whose commit of the partition was accepted after b got it: reported
    accepted = {**commit("g", 7, 2.5, 2.6), "member": "a", "offsets": {"t/1": 7}}
    assert len(C.ownership_overlap([*zombie, accepted])[0]) == 1
    # ... that never lets go: reported
    never = [ev("assign", "a", 1, [0, 1]), ev("assign", "b", 2, [1])]
    assert len(C.ownership_overlap(never)[0]) == 1


def test_produce_exactly_once_and_share_checks() -> None:
    def produced(topic: str, p: int, off: int, value: str) -> dict:
        return {"op": "produce", "ok": True, "topic": topic, "p": p, "offset": off,
                "value": value, "s": 0.0, "r": 0.1}  # fmt: skip

    ops = [produced("d", 0, 0, "a"), produced("d", 0, 1, "b")]
    assert C.produced(ops, {"d": {0: {0: "a", 1: "b"}}}) == []
    assert len(C.produced(ops, {"d": {0: {0: "a", 1: "c"}}})) == 1  # acked b lost
    assert len(C.produced(ops, {"d": {0: {0: "a", 1: "b", 2: "a"}}})) == 1  # a twice

    ins = [produced("txin", 0, 0, "x"), produced("txin", 0, 1, "y")]
    aborted = {"op": "txn", "ok": False, "aborted": True, "tag": "t2", "s": 1, "r": 2}
    final = {"txout": ["x|t1", "y|t1"], "txin_committed": {0: 2}}
    assert C.exactly_once(ins, final)[0] == []
    final = {"txout": ["x|t1", "x|t2", "y|t1"], "txin_committed": {0: 2}}
    found, _ = C.exactly_once([*ins, aborted], final)
    assert len(found) == 2  # x twice, and a record of the aborted t2 visible


def acq(m: str, t: float, dc: int = 1) -> dict:
    return {"op": "acquire", "member": m, "t": t, "recs": [[0, 0, dc]]}


def ack(m: str, s: float, ok: bool = True, err: str | None = None) -> list[dict]:
    """The acknowledgement sent at s, and its answer (the client's callback) just after."""
    return [
        {"op": "ack", "member": m, "s": s, "r": s + 0.1, "ok": ok, "recs": [[0, 0, 1]]},
        {"op": "ack_result", "member": m, "t": s + 0.05, "ok": ok, "recs": [[0, 0]], "err": err},
    ]


def test_share_checks_report_what_the_broker_promises_only() -> None:
    one = {0: {0: "v"}}
    assert C.share_records([acq("a", 1), *ack("a", 2)], one)[0] == []
    # held by two at once (and both accepted)
    found, _ = C.share_records([acq("a", 1), acq("b", 1.5), *ack("b", 1.8), *ack("a", 2)], one)
    assert any("at once" in f for f in found) and any("2 times" in f for f in found)
    assert C.share_records([], one)[0] == ["shared-0@0: never acknowledged"]
    # at least once: an acknowledgement that failed, then the record again: no anomaly
    failed = [acq("a", 1), *ack("a", 2, ok=False, err="KafkaError{code=INVALID_RECORD_STATE}")]
    assert C.share_records([*failed, acq("b", 8, dc=2), *ack("b", 9)], one)[0] == []
    # ... but the record never given out again after a definite failure: never acknowledged
    assert C.share_records(failed, one)[0] == ["shared-0@0: never acknowledged"]
    # an acknowledgement of unknown outcome, never given out again: perhaps accepted
    timed_out = [acq("a", 1), *ack("a", 2, ok=False, err="Local: Timed out")]
    found, stats = C.share_records(timed_out, one)
    assert found == [] and stats["share.ack_outcome_unknown"] == 1
    # accepted, then handed out again: the state lost its acceptance
    again = [acq("a", 1), *ack("a", 2), acq("b", 5, dc=1)]
    assert any("redelivered after it was accepted" in f for f in C.share_records(again, one)[0])
    # an older delivery the client had buffered, received after the acceptance: counted only
    stale = [acq("a", 1, dc=2), *ack("a", 2), acq("b", 3, dc=1)]
    found, stats = C.share_records(stale, one)
    assert found == [] and stats["share.stale_deliveries"] == 1


def test_aiokafka_resets_by_out_of_range_fetches_are_counted() -> None:
    def reset(why: str) -> dict:
        return {"op": "position_reset", "t": 1.0, "group": "cg-aio", "why": why}

    ops = [
        reset("No committed offset found for TopicPartition(topic='data', partition=0)"),
        reset("Fetch offset 5879 is out of range for partition TopicPartition(...), resetting"),
    ]
    rep = C.check(ops, {"committed": {}, "records": {}}, [], 3.0)
    assert rep.stats["position-reset.out-of-range"] == 1 and rep.anomalies == []
