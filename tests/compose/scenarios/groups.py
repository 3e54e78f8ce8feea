"""Group scenarios run by the compose `runner` service, inside the compose network.

    python3 groups.py --bootstrap broker:9092 --state DIR before-restart
    python3 groups.py --bootstrap broker:9092 --state DIR after-restart

(``--no-demo``: the broker has no demo consumers, as the `postgres` profile's ``broker-pg``;
``--command-config FILE``: Kafka client properties for a secured listener, as the `secure`
profile's SASL_SSL one: every client and kcoord command uses them.)

before-restart: a kafka-python group and a confluent-kafka group (two members each, classic
protocol) consume every message of their topic and commit; the committed offsets must equal
the log end offsets. The demo group (the compose `consumer` services) must be Stable with its
two members and committing. What was seen is saved in DIR for the second phase.

after-restart (the broker container was restarted in between): the committed offsets and the
groups are still there, a new member of each group resumes exactly after the commits (it sees
only messages produced after the restart), and the demo group is back with two members and
commits past where it was.

Prints one JSON summary line; exits 1 with the failed check on stderr.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaError as CKError
from confluent_kafka import KafkaException
from confluent_kafka import Producer as CKProducer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from kcoord_admin.admin_client import LATEST
from kcoord_admin.admin_client import AdminClient as _AdminClient
from kcoord_admin.command_config import client_security, read_properties

MESSAGES, PARTITIONS, MEMBERS = 400, 4, 2
KP_TOPIC, KP_GROUP = "compose-kp", "compose-kp-group"
CK_TOPIC, CK_GROUP = "compose-ck", "compose-ck-group"
DEMO_GROUP, DEMO_TOPIC = "demo-group", "demo"
EXTRA = 10  # messages produced after the restart


# Kafka client properties of a secured listener (--command-config), and that file's path.
SECURITY: dict[str, str] = {}
COMMAND_CONFIG: list[str] = []


def kp_security() -> dict:
    """SECURITY as kafka-python's keyword arguments."""
    if not SECURITY:
        return {}
    return {
        "security_protocol": SECURITY["security.protocol"],
        "ssl_cafile": SECURITY.get("ssl.truststore.location"),
        "sasl_mechanism": SECURITY.get("sasl.mechanism"),
        "sasl_plain_username": SECURITY.get("sasl.username"),
        "sasl_plain_password": SECURITY.get("sasl.password"),
    }


def ck_security() -> dict:
    """SECURITY as librdkafka properties."""
    out = {k: v for k, v in SECURITY.items() if k.startswith(("security.", "sasl."))}
    if "ssl.truststore.location" in SECURITY:
        out["ssl.ca.location"] = SECURITY["ssl.truststore.location"]
    return out


def AdminClient(bootstrap: str, timeout: float = 10.0) -> _AdminClient:  # noqa: N802
    security = client_security(SECURITY) if SECURITY else None
    return _AdminClient(bootstrap, timeout=timeout, security=security)


def log(msg: str) -> None:
    print(f"[scenario] {msg}", file=sys.stderr, flush=True)


def wait_until(what: str, check, timeout: float = 60.0, every: float = 0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as e:  # broker restarting, group loading...
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def create_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="scenario-admin", **kp_security()
    )
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    with AdminClient(bootstrap) as a:
        ends = a.list_offsets({topic: list(range(PARTITIONS))}, LATEST)
    return {p: o for (_, p), o in ends.items()}


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    with AdminClient(bootstrap) as a:
        return {p: o for (t, p), o in a.committed_offsets(group).items() if t == topic}


# -- kafka-python ---------------------------------------------------------------------------


def kp_produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", client_id="scenario-kp", **kp_security()
    )
    for v in values:
        producer.send(topic, key=v.encode(), value=v.encode())
    producer.flush(30)
    producer.close()


def run_group(bootstrap: str, group: str, topic: str, want: int, members: int, member) -> list[str]:
    """Run `members` threads of `member(i, seen, lock, done)` until every value was seen and
    the group's committed offsets reached the log end; returns every value seen (duplicates
    possible across a rebalance, never losses)."""
    seen: list[str] = []
    lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            member(i, seen, lock, done)
        except BaseException as e:
            errors.append(e)
            done.set()

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(members)]
    for t in threads:
        t.start()
        time.sleep(0.3)  # a second member joins a running group: a real rebalance

    def finished() -> bool:
        if errors:
            return True
        with lock:
            if len(set(seen)) < want:
                return False
        return committed(bootstrap, group, topic) == end_offsets(bootstrap, topic)

    try:
        wait_until(f"{group} to consume and commit everything", finished, 120, 0.3)
    finally:
        done.set()
        for t in threads:
            t.join(60)
    if errors:
        raise errors[0]
    return seen


def kp_consume(bootstrap: str, group: str, topic: str, want: int, members: int) -> list[str]:
    """kafka-python members that commit their positions after every poll (a commit refused
    during a rebalance is simply retried after the next poll, as applications do)."""

    def member(i: int, seen: list[str], lock: threading.Lock, done: threading.Event) -> None:
        c = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=f"scenario-kp-{i}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10000,
            heartbeat_interval_ms=500,
            **kp_security(),
        )
        try:
            while not done.is_set():
                batch = c.poll(300)
                for recs in batch.values():
                    with lock:
                        seen.extend(r.value.decode() for r in recs)
                if c.assignment():
                    try:
                        c.commit()
                    except KafkaError as e:  # RebalanceInProgress, CommitFailed...
                        log(f"kafka-python member {i}: commit refused ({type(e).__name__})")
        finally:
            c.close()

    return run_group(bootstrap, group, topic, want, members, member)


# -- confluent-kafka ------------------------------------------------------------------------


def ck_produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = CKProducer(
        {"bootstrap.servers": bootstrap, "client.id": "scenario-ck", **ck_security()}
    )
    for v in values:
        producer.produce(topic, key=v.encode(), value=v.encode())
    assert producer.flush(30) == 0, "undelivered messages"


def ck_consume(bootstrap: str, group: str, topic: str, want: int, members: int) -> list[str]:
    """confluent-kafka members, committing synchronously after every consume call."""

    def member(i: int, seen: list[str], lock: threading.Lock, done: threading.Event) -> None:
        c = CKConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": f"scenario-ck-{i}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 10000,
                **ck_security(),
            }
        )
        c.subscribe([topic])
        try:
            while not done.is_set():
                msgs = c.consume(100, 0.3)
                good = [m for m in msgs if not m.error()]
                with lock:
                    seen.extend(m.value().decode() for m in good)
                if c.assignment():
                    try:
                        c.commit(asynchronous=False)
                    except KafkaException as e:  # nothing new to commit, or a rebalance
                        if e.args[0].code() != CKError._NO_OFFSET:
                            log(f"confluent-kafka member {i}: commit refused ({e.args[0]})")
        finally:
            c.close()

    return run_group(bootstrap, group, topic, want, members, member)


CLIENTS = {
    "kafka-python": (KP_TOPIC, KP_GROUP, kp_produce, kp_consume),
    "confluent-kafka": (CK_TOPIC, CK_GROUP, ck_produce, ck_consume),
}


# -- phases ---------------------------------------------------------------------------------


def demo_group(bootstrap: str) -> dict:
    """`kcoord groups describe demo-group --json`, run as an operator would."""
    out = subprocess.run(
        [
            "kcoord",
            "groups",
            "describe",
            DEMO_GROUP,
            "--json",
            "--bootstrap",
            bootstrap,
            *COMMAND_CONFIG,
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return json.loads(out.stdout)


def demo_ready(bootstrap: str) -> dict | None:
    info = demo_group(bootstrap)
    committed_total = sum(o["committed"] or 0 for o in info["offsets"])
    if info["state"] == "Stable" and len(info["members"]) == 2 and committed_total > 0:
        return info
    return None


def before_restart(bootstrap: str, state: Path, demo: bool = True) -> dict:
    summary: dict = {}
    for name, (topic, group, produce, consume) in CLIENTS.items():
        started = time.monotonic()
        create_topic(bootstrap, topic)
        values = [f"{name}-{i}" for i in range(MESSAGES)]
        produce(bootstrap, topic, values)
        seen = consume(bootstrap, group, topic, MESSAGES, MEMBERS)
        assert set(seen) == set(values), f"{name}: lost {len(set(values) - set(seen))} messages"
        ends = end_offsets(bootstrap, topic)
        assert sum(ends.values()) == MESSAGES, (name, ends)
        got = committed(bootstrap, group, topic)
        assert got == ends, f"{name}: committed {got} != log end {ends}"
        summary[name] = {
            "consumed": len(seen),
            "committed": got,
            "seconds": round(time.monotonic() - started, 2),
        }
        log(f"{name}: {len(seen)} consumed, committed {got}")
    if not demo:
        (state / "before.json").write_text(json.dumps(summary))
        return summary
    info = wait_until("demo-group Stable with 2 members", lambda: demo_ready(bootstrap), 90)
    summary["demo"] = {
        "state": info["state"],
        "members": len(info["members"]),
        "committed": sum(o["committed"] or 0 for o in info["offsets"]),
    }
    (state / "before.json").write_text(json.dumps(summary))
    return summary


def after_restart(bootstrap: str, state: Path, demo: bool = True) -> dict:
    before = json.loads((state / "before.json").read_text())
    summary: dict = {}
    with AdminClient(bootstrap, timeout=60) as a:
        listed = {g.group_id: g for g in a.list_groups()}
    for group in (KP_GROUP, CK_GROUP, DEMO_GROUP) if demo else (KP_GROUP, CK_GROUP):
        assert group in listed, f"group {group} did not survive the restart: {sorted(listed)}"
    for name, (topic, group, produce, consume) in CLIENTS.items():
        want = {int(p): o for p, o in before[name]["committed"].items()}
        got = committed(bootstrap, group, topic)
        assert got == want, f"{name}: committed after restart {got} != before {want}"
        assert listed[group].group_state == "Empty", listed[group]
        # A new member resumes after the commits: it sees exactly the new messages.
        extra = [f"{name}-after-{i}" for i in range(EXTRA)]
        produce(bootstrap, topic, extra)
        seen = consume(bootstrap, group, topic, EXTRA, 1)
        assert sorted(seen) == sorted(extra), f"{name}: resumed with {len(seen)} messages"
        summary[name] = {"committed": got, "resumed_with": len(seen)}
        log(f"{name}: offsets survived, resumed with {len(seen)} new messages")
    if not demo:
        return summary
    floor = before["demo"]["committed"]

    def demo_back() -> dict | None:
        info = demo_ready(bootstrap)
        if info and sum(o["committed"] or 0 for o in info["offsets"]) > floor:
            return info
        return None

    info = wait_until("demo-group back, committing past its last commit", demo_back, 90)
    summary["demo"] = {
        "state": info["state"],
        "members": len(info["members"]),
        "committed": sum(o["committed"] or 0 for o in info["offsets"]),
        "committed_before": floor,
    }
    return summary


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("phase", choices=("before-restart", "after-restart"))
    ap.add_argument("--bootstrap", default="broker:9092")
    ap.add_argument("--state", type=Path, default=Path("/var/lib/kcoord/scenarios"))
    ap.add_argument("--no-demo", action="store_true", help="no demo group on this broker")
    ap.add_argument("--command-config", metavar="FILE", help="client properties (secured)")
    args = ap.parse_args()
    if args.command_config:
        SECURITY.update(read_properties(args.command_config))
        COMMAND_CONFIG[:] = ["--command-config", args.command_config]
    wait_until(
        "the broker",
        lambda: (
            subprocess.run(
                ["kcoord", "health", "--bootstrap", args.bootstrap, *COMMAND_CONFIG],
                capture_output=True,
            ).returncode
            == 0
        ),
        90,
    )
    phase = before_restart if args.phase == "before-restart" else after_restart
    try:
        args.state.mkdir(parents=True, exist_ok=True)
        summary = phase(args.bootstrap, args.state, demo=not args.no_demo)
    except AssertionError as e:
        print(f"FAILED {args.phase}: {e}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps({"phase": args.phase, "ok": True, **summary}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
