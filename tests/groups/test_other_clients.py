"""Clients beyond the Python ones: kcat (librdkafka's command-line tool, from Debian) and
kafkajs (Node.js, from npm). Each produces, consumes in a group and commits through
`kcoord serve`; what they committed is then read back through the coordinator."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.groups.harness import kafka_admin
from tests.kcoord_process import KcoordProcess

JS_DIR = Path(__file__).parent / "js"
KAFKAJS_VERSION = "2.2.4"


def _committed(broker: KcoordProcess, group: str) -> dict[tuple[str, int], int]:
    admin = kafka_admin(broker.bootstrap)
    try:
        offsets = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    return {(tp.topic, tp.partition): om.offset for tp, om in offsets.items()}


def _kcat(broker: KcoordProcess, *args: str, stdin: str | None = None) -> str:
    out = subprocess.run(
        ["kcat", "-b", broker.bootstrap, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (apt kcat)")
def test_kcat_produces_consumes_in_a_group_and_resumes(broker: KcoordProcess) -> None:
    lines = "".join(f"k{i}:v{i}\n" for i in range(200))
    _kcat(broker, "-P", "-t", "kc", "-K:", stdin=lines)  # auto-creates the topic
    listed = json.loads(_kcat(broker, "-L", "-J", "-t", "kc"))
    assert [t["topic"] for t in listed["topics"]] == ["kc"]
    group = ("-G", "kc-group", "-X", "auto.offset.reset=earliest", "kc", "-e", "-q")
    first = _kcat(broker, *group, "-f", "%k=%s\n")
    assert sorted(first.split()) == sorted(f"k{i}=v{i}" for i in range(200))
    committed = _committed(broker, "kc-group")
    assert sum(committed.values()) == 200 and {t for t, _ in committed} == {"kc"}
    # The next run of the group starts from its committed offsets: only the new messages.
    _kcat(broker, "-P", "-t", "kc", "-K:", stdin="n1:w1\nn2:w2\n")
    second = _kcat(broker, *group, "-f", "%k=%s\n")
    assert sorted(second.split()) == ["n1=w1", "n2=w2"]
    assert sum(_committed(broker, "kc-group").values()) == 202


@pytest.fixture(scope="session")
def kafkajs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with kafkajs installed from npm (cached between runs in ~/.cache)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js and npm are not installed (apt nodejs npm)")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    root = cache / "kcoord-tests" / f"kafkajs-{KAFKAJS_VERSION}"
    if not (root / "node_modules" / "kafkajs" / "package.json").exists():
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent", f"kafkajs@{KAFKAJS_VERSION}"],
            cwd=root,
            check=True,
            timeout=300,
            capture_output=True,
        )
    return root / "node_modules"


def test_kafkajs_group_consumes_everything_and_commits(
    broker: KcoordProcess, kafkajs: Path
) -> None:
    out = subprocess.run(
        ["node", str(JS_DIR / "group_consumer.js"), broker.bootstrap, "js", "js-group", "1000"],
        env={**os.environ, "NODE_PATH": str(kafkajs)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["consumed"] == 1000
    assert report["committed"] == 1000
    assert (report["liveState"], report["liveMembers"]) == ("Stable", 1)
    assert report["protocol"] == "RoundRobinAssigner"
    assert report["afterState"] == "Empty"
    assert sum(_committed(broker, "js-group").values()) == 1000
