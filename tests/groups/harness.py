"""Helpers for the real-client group tests: member processes, topics, producers, waiting.

Every wait is a polling loop with a deadline; a timeout fails with what was last seen.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

MEMBER_SCRIPT = Path(__file__).with_name("member.py")
CLIENTS = ["kafka-python", "aiokafka", "confluent"]

# Short enough to keep the suite fast, long enough not to expire under a loaded CI machine.
SESSION_MS = 6000
HEARTBEAT_MS = 500
# The broker's lower bound, lowered so tests may use short session timeouts.
MIN_SESSION_MS = 500

T = TypeVar("T")


def wait_until(fn: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll `fn` until it returns something truthy; return that value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = fn()
        except Exception as e:  # a client call that fails while the group settles
            last = e
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


# -- member processes ---------------------------------------------------------------------


@dataclass(frozen=True)
class Msg:
    p: int
    o: int
    k: str | None
    v: str | None


class Member:
    """A consumer in its own process (tests/groups/member.py), observed through its events."""

    def __init__(
        self,
        client: str,
        bootstrap: str,
        group: str,
        topic: str,
        name: str,
        log_dir: Path,
        *,
        instance_id: str | None = None,
        assignor: str = "default",
        session_ms: int = SESSION_MS,
        heartbeat_ms: int = HEARTBEAT_MS,
        limit: int | None = None,
    ) -> None:
        self.client = client
        self.name = name
        args = [
            sys.executable,
            str(MEMBER_SCRIPT),
            "--client", client,
            "--bootstrap", bootstrap,
            "--group", group,
            "--topic", topic,
            "--client-id", name,
            "--assignor", assignor,
            "--session-ms", str(session_ms),
            "--heartbeat-ms", str(heartbeat_ms),
        ]  # fmt: skip
        # GROUPS_MEMBER_LOG_LEVEL=DEBUG shows the clients' protocol traffic in member-*.log.
        args += ["--log-level", os.environ.get("GROUPS_MEMBER_LOG_LEVEL", "INFO")]
        if instance_id is not None:
            args += ["--instance-id", instance_id]
        if limit is not None:
            args += ["--limit", str(limit)]
        self.stderr_path = log_dir / f"member-{name}.log"
        self._stderr = open(self.stderr_path, "w")  # noqa: SIM115 - closed in _reap
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._lock = threading.Condition()
        self.events: list[dict] = []
        self.assignment: frozenset[int] = frozenset()
        self.assignments: list[frozenset[int]] = []  # every reported assignment, in order
        self.revocations = 0
        self.member_id: str | None = None
        self.generation: int | None = None
        self.messages: list[Msg] = []
        self.commits: list[dict[int, int]] = []
        self.commit_generations: list[int | None] = []
        self.closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def __repr__(self) -> str:
        return f"Member({self.name}, {self.client}, assignment={sorted(self.assignment)})"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.startswith("EV "):
                continue
            ev = json.loads(line[3:])
            with self._lock:
                self.events.append(ev)
                kind = ev["ev"]
                if kind == "assignment":
                    self.assignment = frozenset(ev["partitions"])
                    self.assignments.append(self.assignment)
                    self.member_id = ev["member_id"]
                    self.generation = ev["generation"]
                elif kind == "revoked":
                    self.assignment = self.assignment - set(ev["partitions"])
                    self.revocations += 1
                elif kind == "msg":
                    self.messages.append(Msg(ev["p"], ev["o"], ev["k"], ev["v"]))
                elif kind == "committed":
                    self.commits.append({int(p): o for p, o in ev["offsets"].items()})
                    self.commit_generations.append(ev["generation"])
                elif kind == "closed":
                    self.closed = True
                self._lock.notify_all()

    def snapshot(self) -> dict:
        with self._lock:
            return {
                "assignment": sorted(self.assignment),
                "member_id": self.member_id,
                "generation": self.generation,
                "messages": len(self.messages),
            }

    def wait(self, pred: Callable[[Member], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                value = pred(self)
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    break
                self._lock.wait(min(left, 0.2))
        raise AssertionError(
            f"{self.name}: timed out after {timeout}s waiting for {what}; "
            f"state {self.snapshot()}, exit {self.proc.poll()}\n{self.stderr_tail()}"
        )

    def stderr_tail(self, n: int = 3000) -> str:
        try:
            return self.stderr_path.read_text()[-n:]
        except OSError:
            return ""

    def messages_since(self, start: int) -> list[Msg]:
        with self._lock:
            return list(self.messages[start:])

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def commit(self, timeout: float = 15) -> dict[int, int]:
        n = len(self.commits)
        self.send("commit")
        self.wait(lambda m: len(m.commits) > n, timeout, "commit")
        return self.commits[n]

    def close(self, timeout: float = 20) -> None:
        """close() the client: a dynamic member sends LeaveGroup."""
        self.send("close")
        self.wait(lambda m: m.closed, timeout, "close")
        self._reap(timeout)

    def kill(self) -> None:
        """SIGKILL: the member vanishes without LeaveGroup."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self._reap(10)

    def _reap(self, timeout: float) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        self._stderr.close()

    def alive(self) -> bool:
        return self.proc.poll() is None


class Members:
    """Starts members for one test and kills whatever is left at the end."""

    def __init__(self, bootstrap: str, log_dir: Path) -> None:
        self.bootstrap = bootstrap
        self.log_dir = log_dir
        self.started: list[Member] = []

    def start(self, client: str, group: str, topic: str, name: str, **kw: Any) -> Member:
        m = Member(client, self.bootstrap, group, topic, name, self.log_dir, **kw)
        self.started.append(m)
        return m

    def cleanup(self) -> None:
        for m in self.started:
            if m.alive():
                m.kill()


def assignment_partition(members: Iterable[Member], partitions: int) -> dict[str, frozenset[int]]:
    """The members' own views, if they partition the topic: disjoint, complete, none empty."""
    views = {m.name: m.assignment for m in members}
    owned = [p for a in views.values() for p in a]
    if sorted(owned) == list(range(partitions)) and all(views.values()):
        return views
    return {}


def wait_converged(
    members: list[Member],
    partitions: int,
    admin: Any,
    group: str,
    topic: str,
    timeout: float = 30,
) -> dict[str, frozenset[int]]:
    """Wait until every partition is owned by exactly one of `members` in their own views and
    in the coordinator's (DescribeGroups: Stable, exactly these members, same assignments)."""

    def check() -> dict[str, frozenset[int]]:
        views = assignment_partition(members, partitions)
        if not views:
            return {}
        desc = describe(admin, group)
        if desc["group_state"] != "Stable":
            return {}
        by_id = {m.member_id: views[m.name] for m in members}
        coordinator = {
            d["member_id"]: frozenset(
                p
                for t in d["member_assignment"]["assigned_partitions"]
                if t["topic"] == topic
                for p in t["partitions"]
            )
            for d in desc["members"]
        }
        return views if coordinator == by_id else {}

    def state() -> str:
        # Each member's own log tail: why a member is missing is in its client's log.
        logs = "".join(f"\n--- {m.name} stderr ---\n{m.stderr_tail(1500)}" for m in members)
        return f"members {members}; group {describe_safe(admin, group)}{logs}"

    try:
        return wait_until(check, timeout, "the assignment to converge")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{state()}") from None


def describe(admin: Any, group: str) -> dict:
    """kafka-python KafkaAdminClient.describe_groups for one group."""
    return admin.describe_groups([group])[group]


def describe_safe(admin: Any, group: str) -> Any:
    try:
        return describe(admin, group)
    except Exception as e:
        return e


# -- topics and producers, through each client's own API ---------------------------------------


@dataclass(frozen=True)
class Produced:
    k: str
    v: str
    p: int
    o: int


def create_topic(client: str, bootstrap: str, topic: str, partitions: int) -> None:
    if client == "kafka-python":
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
        finally:
            admin.close()
    elif client == "aiokafka":
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.admin import NewTopic as AioNewTopic

        async def run() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            try:
                resp = await admin.create_topics([AioNewTopic(topic, partitions, 1)])
                errors = [t[1] for t in resp.topic_errors]
                assert errors == [0], resp
            finally:
                await admin.close()

        asyncio.run(run())
    else:
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.admin import NewTopic as CNewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([CNewTopic(topic, partitions, 1)])[topic].result(15)


def produce(
    client: str, bootstrap: str, topic: str, messages: list[tuple[str, str]]
) -> list[Produced]:
    """Produce keyed messages with `client`'s producer; where each landed."""
    if client == "kafka-python":
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
        try:
            futures = [
                (k, v, producer.send(topic, key=k.encode(), value=v.encode())) for k, v in messages
            ]
            out = []
            for k, v, f in futures:
                md = f.get(timeout=15)
                out.append(Produced(k, v, md.partition, md.offset))
            return out
        finally:
            producer.close()
    if client == "aiokafka":
        from aiokafka import AIOKafkaProducer

        async def run() -> list[Produced]:
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
            await producer.start()
            try:
                futures = [
                    (k, v, await producer.send(topic, key=k.encode(), value=v.encode()))
                    for k, v in messages
                ]
                out = []
                for k, v, f in futures:
                    md = await f
                    out.append(Produced(k, v, md.partition, md.offset))
                return out
            finally:
                await producer.stop()

        return asyncio.run(run())
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    delivered: dict[tuple[str, str], Produced] = {}
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
            return
        k, v = msg.key().decode(), msg.value().decode()
        delivered[(k, v)] = Produced(k, v, msg.partition(), msg.offset())

    for k, v in messages:
        producer.produce(topic, key=k.encode(), value=v.encode(), on_delivery=on_delivery)
    assert producer.flush(15) == 0, "messages left undelivered"
    assert not errors, errors
    return [delivered[(k, v)] for k, v in messages]


def keyed(tag: str, keys: int, per_key: int) -> list[tuple[str, str]]:
    """`keys` keys with `per_key` messages each; values are unique."""
    return [(f"key-{k}", f"{tag}-{k}-{i}") for i in range(per_key) for k in range(keys)]


def kafka_admin(bootstrap: str) -> Any:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
