"""A real old client: kafka-python 2.0.2 (from PyPI, in a venv of its own, cached) pinned to
Kafka 0.9 (Produce v0, Fetch v0, message format 0, OffsetCommit v2 via the 0.9 group APIs)
and 0.10.0 (Produce v2, Fetch v2, format 1, gzip): it produces, consumes in a group and
commits, and a current client reads what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kcoord_process import KcoordProcess

OLD = "2.0.2"
SCRIPT = Path(__file__).parent / "old_kafka_python.py"


@pytest.fixture(scope="session")
def old_kafka_python() -> Path:
    """The interpreter of a venv with kafka-python 2.0.2 (made once, kept in ~/.cache)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    venv = cache / "kcoord-tests" / f"kafka-python-{OLD}"
    python = venv / "bin" / "python"
    if (
        not python.exists()
        or subprocess.run(
            [python, "-c", f"import kafka; assert kafka.__version__ == '{OLD}'"],
            capture_output=True,
        ).returncode
    ):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run(
            [python, "-m", "pip", "install", "-q", f"kafka-python=={OLD}"],
            check=True, timeout=300, capture_output=True,
        )  # fmt: skip
    return python


@pytest.mark.parametrize(
    ("version", "compression", "magic"),
    [("0.9.0", None, 0), ("0.10.0", "gzip", 1)],
)
def test_an_old_kafka_python(
    kcoord: KcoordProcess, old_kafka_python: Path, version: str, compression, magic: int
) -> None:
    topic, group = f"old-{magic}", f"old-group-{magic}"
    args = [str(old_kafka_python), str(SCRIPT), kcoord.bootstrap, topic, group, version]
    out = subprocess.run(
        args + ([compression] if compression else []),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["values"] == [f"v{i}" for i in range(50)]
    assert got["offsets"] == list(range(50))
    assert got["committed"] == 50
    if magic == 0:
        assert set(got["timestamps"]) == {None}  # format 0 has none
    else:
        assert min(got["timestamps"]) > 1_600_000_000_000

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kcoord.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest"})  # fmt: skip
    assert c.committed([TopicPartition(topic, 0)], timeout=20)[0].offset == 50
    c.assign([TopicPartition(topic, 0, 0)])
    values = []
    while len(values) < 50:
        m = c.poll(5)
        assert m is not None, f"only {len(values)} records"
        if m.error() is None:
            values.append(m.value())
    c.close()
    assert values == [b"v%d" % i for i in range(50)]
