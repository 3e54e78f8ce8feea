"""`kcoord share-groups ...` against a real kcoord, with confluent-kafka's ShareConsumer: a
reset to the earliest offsets makes the share group receive the old records."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kcoord_process import start_kcoord

SHARE = "group.coordinator.rebalance.protocols=classic,consumer,share"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kcoord_admin", "share-groups", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _ok(*args: str) -> str:
    out = _cli(*args)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_share_groups_commands_and_a_reset_to_earliest(tmp_path: Path) -> None:
    proc = start_kcoord(tmp_path / "data", SHARE)  # share.auto.offset.reset: latest
    boot = f"{proc.host}:{proc.port}"
    b = ("--bootstrap-server", boot)
    try:
        admin = AdminClient({"bootstrap.servers": boot})  # kept: its futures need it alive
        for f in admin.create_topics([NewTopic("q", 1, 1)]).values():
            f.result(10)
        p = Producer({"bootstrap.servers": boot, "linger.ms": 5})
        for i in range(5):
            p.produce("q", value=f"old-{i}".encode())
        assert p.flush(10) == 0

        missing = _cli("describe", "sg", *b)
        assert missing.returncode == 1 and "sg" in missing.stderr, missing
        dry = _ok("reset-offsets", "sg", "--topic", "q", "--to-earliest", *b)
        assert "dry run" in dry
        assert _cli("describe", "sg", *b).returncode == 1  # nothing done
        plan = json.loads(_ok("reset-offsets", "sg", "--topic", "q:0", "--to-latest", "--json", *b))
        assert plan["offsets"] == [{"topic": "q", "partition": 0, "new_offset": 5}]
        _ok("reset-offsets", "sg", "--topic", "q", "--to-earliest", "--execute", *b)
        assert {"group": "sg", "state": "Empty"} in json.loads(_ok("list", "--json", *b))
        view = json.loads(_ok("describe", "sg", "--json", *b))
        assert view["offsets"] == [{"topic": "q", "partition": 0, "start_offset": 0, "lag": 5}]

        c = ShareConsumer({"bootstrap.servers": boot, "group.id": "sg"})
        c.subscribe(["q"])
        got: list[str] = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            for m in c.poll(0.5):
                assert m.error() is None, m.error()
                got.append(m.value().decode())
        busy = _cli("reset-offsets", "sg", "--topic", "q", "--to-earliest", "--execute", *b)
        c.commit_sync(10)
        c.close()
        assert got == [f"old-{i}" for i in range(5)]
        assert busy.returncode == 1 and "NON_EMPTY_GROUP" in busy.stderr, busy

        deadline = time.monotonic() + 10
        while True:  # the acknowledgements of the last poll arrive with the close
            view = json.loads(_ok("describe", "sg", "--json", *b))
            if view["offsets"][0]["start_offset"] == 5 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert view["state"] == "Empty"
        assert view["offsets"] == [{"topic": "q", "partition": 0, "start_offset": 5, "lag": 0}]

        assert "deleted the offsets of q" in _ok("delete-offsets", "sg", "--topic", "q", *b)
        gone = _cli("delete-offsets", "sg", "--topic", "q", *b)
        assert gone.returncode == 1 and "no offset information" in gone.stderr, gone
        assert json.loads(_ok("describe", "sg", "--json", *b))["offsets"] == []
        assert "deleted share group sg" in _ok("delete", "sg", *b)
        assert _cli("describe", "sg", *b).returncode == 1
    finally:
        proc.stop()
