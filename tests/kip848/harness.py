"""Real confluent-kafka members (group.protocol=consumer) against a real kcoord process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

MEMBER = Path(__file__).with_name("member.py")
T = TypeVar("T")

# Short enough for a quick suite, long enough for a loaded CI machine.
SESSION_MS = 6000
HEARTBEAT_MS = 300
BROKER_SETTINGS = (
    "group.initial.rebalance.delay.ms=0",
    "group.min.session.timeout.ms=500",
    f"group.consumer.min.heartbeat.interval.ms={HEARTBEAT_MS}",
    f"group.consumer.heartbeat.interval.ms={HEARTBEAT_MS}",
    "group.consumer.min.session.timeout.ms=1000",
    f"group.consumer.session.timeout.ms={SESSION_MS}",
)


def wait_until(fn: Callable[[], T], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = fn()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(0.05)


class Member:
    """One member process and the events it reported so far."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: str,
        name: str,
        log_dir: Path,
        protocol: str = "consumer",
        assignor: str | None = None,
    ):
        self.name = name
        self.protocol = protocol
        self.stderr = open(log_dir / f"{name}.stderr", "w")  # noqa: SIM115
        extra = [assignor] if assignor else []
        self.proc = subprocess.Popen(
            [sys.executable, str(MEMBER), bootstrap, group, topics, name, protocol, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            cwd=Path(__file__).parent.parent.parent,
        )
        self.events: list[dict] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.events)

    def assignment(self) -> set[tuple[str, int]]:
        owned: set[tuple[str, int]] = set()
        for ev in self.snapshot():
            if ev["ev"] == "assigned":
                owned |= {tuple(tp) for tp in ev["tps"]}
            elif ev["ev"] in ("revoked", "lost"):
                owned -= {tuple(tp) for tp in ev["tps"]}
        return owned

    def consumed(self) -> list[tuple[int, int]]:
        return [(e["p"], e["o"]) for e in self.snapshot() if e["ev"] == "msg"]

    def stop(self) -> None:
        """Graceful: close() leaves the group."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
            self.proc.wait(20)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def cleanup(self) -> None:
        self.kill()
        self.stderr.close()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(15)


def produce(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        p.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert p.flush(20) == 0
