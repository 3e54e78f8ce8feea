"""The container path, end to end, on a real Docker engine (started here when none runs).

Builds the images, brings docker-compose.yml up (broker, demo producer, two demo consumers),
runs the group scenarios inside the compose network against broker:9092, restarts the broker
container, checks that offsets and groups survived, runs the Spark report job, tears down.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compose.engine import (
    IMAGES,
    REPO,
    Compose,
    Engine,
    build_images,
    docker_config,
    ensure_base_image,
    log,
    start_engine,
)


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    out = subprocess.run(
        [str(hadolint), "--failure-threshold", "warning", str(REPO / "Dockerfile")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_compose_file_is_valid() -> None:
    env = {**os.environ, "DOCKER_CONFIG": str(docker_config())}
    everything = ["--profile", "report", "--profile", "test", "--profile", "postgres",
                  "--profile", "secure", "--profile", "spark"]  # fmt: skip
    for profiles in ([], everything + ["--profile", "cluster"]):
        out = subprocess.run(
            [
                "docker",
                "compose",
                "-f",
                str(REPO / "docker-compose.yml"),
                *profiles,
                "config",
                "-q",
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = start_engine()
    try:
        ensure_base_image(engine)
        build_images(engine)
        yield engine
    finally:
        log("timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in engine.timings.items()))
        engine.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def topology(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Compose]:
    reports = tmp_path_factory.mktemp("reports")
    reports.chmod(0o777)  # the report job runs as the image's uid 1000
    env = {**engine.env, "BASE_IMAGE": engine.base_image, "REPORTS_DIR": str(reports)}
    # The spark profile publishes the Spark UI on the host: a free port, not 8080, so that
    # another stack on this machine (a run left over, someone's own Spark) does not fail it.
    env.setdefault("SPARK_UI_PORT", str(free_port()))
    compose = Compose(engine, f"kcoord-test-{uuid.uuid4().hex[:8]}", env)
    t0 = time.monotonic()
    try:
        compose("up", "-d", "--no-build", "--wait", "--wait-timeout", "120", timeout=180)
        engine.timings["up"] = time.monotonic() - t0
        yield compose
    finally:
        if compose("ps", "-a", "-q", check=False).stdout.strip():
            logs = compose("logs", "--no-color", "--tail", "60", check=False)
            log("compose logs (tail):\n" + logs.stdout[-6000:])
        t1 = time.monotonic()
        compose(
            "--profile", "postgres", "--profile", "cluster", "--profile", "secure",
            "--profile", "spark", "down", "-v", "--remove-orphans", "-t", "10", check=False,
        )  # fmt: skip
        engine.timings["down"] = time.monotonic() - t1


def test_images_run_as_non_root_with_a_healthcheck(engine: Engine) -> None:
    info = json.loads(engine.docker("image", "inspect", IMAGES["broker"]))[0]["Config"]
    assert info["User"] == "1000:1000"
    assert "9092/tcp" in info["ExposedPorts"]
    assert "/var/lib/kcoord/data" in info["Volumes"]
    assert info["Healthcheck"]["Test"] == [
        "CMD",
        "kcoord",
        "health",
        "--bootstrap",
        "127.0.0.1:9092",
    ]
    for image in (IMAGES["tools"], IMAGES["report"]):
        assert json.loads(engine.docker("image", "inspect", image))[0]["Config"]["User"]


def run_scenario(compose: Compose, phase: str) -> dict:
    out = compose("run", "--rm", "-T", "runner", phase, check=False, timeout=300)
    assert out.returncode == 0, f"{phase} failed:\n{out.stdout}\n{out.stderr}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_broker_is_healthy(topology: Compose) -> None:
    topology.wait_healthy("broker")
    health = topology("exec", "-T", "broker", "kcoord", "health", "--bootstrap", "broker:9092")
    assert health.startswith("ok:")


def test_group_scenarios_in_the_compose_network(topology: Compose) -> None:
    t0 = time.monotonic()
    summary = run_scenario(topology, "before-restart")
    topology.engine.timings["scenarios before restart"] = time.monotonic() - t0
    assert summary["kafka-python"]["consumed"] >= 400
    assert summary["confluent-kafka"]["consumed"] >= 400
    assert summary["demo"] == {**summary["demo"], "state": "Stable", "members": 2}


def test_metrics_endpoint_in_the_compose_network(topology: Compose) -> None:
    script = (
        "import urllib.request;"
        "print(urllib.request.urlopen('http://broker:9404/metrics', timeout=10).read().decode())"
    )
    text = topology(
        "run", "--rm", "-T", "--no-deps", "--entrypoint", "python3", "runner", "-c", script
    )
    samples = dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
    )
    assert float(samples['kcoord_rebalances_total{type="classic"}']) >= 3
    assert float(samples['kcoord_groups{state="Stable",type="classic"}']) >= 1
    assert float(samples["kcoord_offset_commits_total"]) > 0
    assert float(samples['kcoord_requests_total{api="JOIN_GROUP"}']) > 0


def test_offsets_and_groups_survive_a_broker_restart(topology: Compose) -> None:
    t0 = time.monotonic()
    topology("stop", "-t", "20", "broker")
    stopped_in = time.monotonic() - t0
    state = topology.container("broker")["State"]
    assert state["ExitCode"] == 0, state  # SIGTERM handled: a clean exit, not a kill
    assert stopped_in < 15, f"stopping the broker took {stopped_in:.1f}s"
    logs = topology("logs", "--no-color", "broker")
    assert "received SIGTERM, shutting down" in logs
    topology("start", "broker")
    topology.wait_healthy("broker")
    topology.engine.timings["broker restart"] = time.monotonic() - t0
    t1 = time.monotonic()
    summary = run_scenario(topology, "after-restart")
    topology.engine.timings["scenarios after restart"] = time.monotonic() - t1
    assert summary["kafka-python"]["resumed_with"] == 10
    assert summary["confluent-kafka"]["resumed_with"] == 10
    assert summary["demo"]["committed"] > summary["demo"]["committed_before"]


def run_pg_scenario(
    compose: Compose, phase: str, bootstrap: str = "broker-pg:9092", state: str = "pg"
) -> dict:
    out = compose(
        "run", "--rm", "-T", "--entrypoint", "python3", "runner",
        "/opt/kcoord-scenarios/groups.py", "--bootstrap", bootstrap,
        "--state", f"/var/lib/kcoord/scenarios/{state}", "--no-demo", phase,
        check=False, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, f"{phase} on {bootstrap} failed:\n{out.stdout}\n{out.stderr}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_postgres_profile_keeps_offsets_across_a_restart(topology: Compose) -> None:
    """broker-pg keeps its logs in the profile's PostgreSQL: the group scenarios pass on it,
    and after both containers restart the offsets and groups are still there."""
    t0 = time.monotonic()
    pg = ("--profile", "postgres")
    topology(*pg, "up", "-d", "--no-build", "--wait", "--wait-timeout", "120",
             "postgres", "broker-pg", timeout=180)  # fmt: skip
    topology.engine.timings["postgres profile up"] = time.monotonic() - t0
    logs = topology(*pg, "logs", "--no-color", "broker-pg")
    assert "logs in PostgreSQL" in logs, logs[-2000:]
    before = run_pg_scenario(topology, "before-restart")
    assert before["kafka-python"]["consumed"] >= 400
    assert before["confluent-kafka"]["consumed"] >= 400
    topology(*pg, "restart", "-t", "20", "postgres", timeout=120)
    topology(*pg, "restart", "-t", "20", "broker-pg", timeout=120)
    topology(*pg, "up", "-d", "--no-build", "--wait", "--wait-timeout", "120",
             "postgres", "broker-pg", timeout=180)  # fmt: skip
    after = run_pg_scenario(topology, "after-restart")
    assert after["kafka-python"]["resumed_with"] == 10
    assert after["confluent-kafka"]["resumed_with"] == 10
    assert after["kafka-python"]["committed"] == before["kafka-python"]["committed"]


@pytest.fixture(scope="module")
def cluster_groups(topology: Compose) -> dict:
    """The cluster profile up (three nodes over its PostgreSQL) and the group scenarios run
    through all three: what they report. The spark profile reports on what they committed."""
    t0 = time.monotonic()
    topology("--profile", "cluster", "up", "-d", "--no-build", "--wait", "--wait-timeout", "180",
             "cluster-db", "node1", "node2", "node3", timeout=240)  # fmt: skip
    topology.engine.timings["cluster profile up"] = time.monotonic() - t0
    nodes = "node1:9092,node2:9092,node3:9092"
    return run_pg_scenario(topology, "before-restart", nodes, "cluster")


def test_the_cluster_profile_fails_over_when_a_node_is_killed(
    topology: Compose, cluster_groups: dict
) -> None:
    """The group scenarios passed through all three nodes; node1 is SIGKILLed, and on the two
    left the groups are there with their offsets and new members resume after them."""
    t0 = time.monotonic()
    before = cluster_groups
    assert before["kafka-python"]["consumed"] >= 400
    assert before["confluent-kafka"]["consumed"] >= 400
    topology("--profile", "cluster", "kill", "-s", "SIGKILL", "node1", timeout=60)
    after = run_pg_scenario(topology, "after-restart", "node2:9092,node3:9092", "cluster")
    assert after["kafka-python"]["resumed_with"] == 10
    assert after["confluent-kafka"]["resumed_with"] == 10
    assert after["kafka-python"]["committed"] == before["kafka-python"]["committed"]
    topology.engine.timings["cluster scenarios"] = time.monotonic() - t0


def spark_master_status(compose: Compose, wait_workers: int = 0) -> dict:
    """The Spark master's JSON status page, read inside the network (once ``wait_workers``
    workers are alive, or a minute passed)."""
    script = (
        "import json, time, urllib.request\n"
        "for _ in range(120):\n"
        "    s = json.load(urllib.request.urlopen('http://spark-master:8080/json/', timeout=5))\n"
        f"    if sum(w['state'] == 'ALIVE' for w in s['workers']) >= {wait_workers}:\n"
        "        break\n"
        "    time.sleep(0.5)\n"
        "print(json.dumps(s))\n"
    )
    out = compose("run", "--rm", "-T", "--no-deps", "--entrypoint", "python3", "runner", "-c",
                  script)  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def test_the_spark_profile_reports_on_the_cluster_database(
    topology: Compose, cluster_groups: dict
) -> None:
    """A Spark master and two workers from the report image; the spark-report job runs
    `kcoord report --master spark://spark-master:7077` over cluster-db (where the cluster
    profile's groups committed): both workers run its executors, and the tables and the page
    land in REPORTS_DIR, written by the driver and the executors."""
    reports = Path(topology.env["REPORTS_DIR"])
    t0 = time.monotonic()
    prof = ("--profile", "cluster", "--profile", "spark")
    services = ("cluster-db", "spark-master", "spark-worker-1", "spark-worker-2")
    topology(*prof, "up", "-d", "--no-build", "--wait", "--wait-timeout", "180", *services,
             timeout=240)  # fmt: skip
    topology.engine.timings["spark profile up"] = time.monotonic() - t0
    workers = spark_master_status(topology, wait_workers=2)["workers"]
    assert sorted(w["host"] for w in workers if w["state"] == "ALIVE") == [
        "spark-worker-1",
        "spark-worker-2",
    ]
    port = topology("port", "spark-master", "8080").strip()
    assert port.endswith(":" + topology.env["SPARK_UI_PORT"]), port
    events = reports / "events"
    events.mkdir(mode=0o777)
    events.chmod(0o777)
    log_events = (
        "--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file:///reports/events"
        " --conf spark.eventLog.compress=false --conf spark.eventLog.rolling.enabled=false"
    )
    out = topology(*prof, "run", "--rm", "-T", "-e", f"KCOORD_REPORT_ARGS={log_events}",
                   "spark-report", check=False, timeout=900)  # fmt: skip
    topology.engine.timings["spark report job"] = time.monotonic() - t0
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    html = (reports / "report.html").read_text()
    assert "compose-kp-group" in html and "postgresql://kcoord@cluster-db" in html
    assert (reports / "partition_lag.parquet").exists()
    finished = spark_master_status(topology)
    [app] = [a for a in finished["completedapps"] if a["name"] == "kcoord-report"]
    assert app["state"] == "FINISHED", app
    # Both workers' executors ran tasks (Spark's event log, written by the driver).
    executors = {
        e["Task Info"]["Executor ID"]
        for f in events.iterdir()
        for e in map(json.loads, f.read_text().splitlines())
        if e.get("Event") == "SparkListenerTaskEnd"
    }
    assert executors == {"0", "1"}, executors


def run_secure_scenario(compose: Compose, phase: str) -> dict:
    out = compose(
        "--profile", "secure", "run", "--rm", "-T", "-e", f"PHASE={phase}", "runner-secure",
        check=False, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, f"{phase} over SASL_SSL failed:\n{out.stdout}\n{out.stderr}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_secure_profile_serves_groups_over_sasl_ssl(topology: Compose) -> None:
    """broker-secure: certificates from `kcoord dev-certs`, its super user created through the
    loopback listener, and the group scenarios over SASL_SSL with SCRAM-SHA-512 before and
    after a restart; plaintext and unauthenticated metrics scrapes are refused."""
    t0 = time.monotonic()
    sec = ("--profile", "secure")
    topology(*sec, "up", "-d", "--no-build", "--wait", "--wait-timeout", "120",
             "broker-secure", timeout=180)  # fmt: skip
    topology.engine.timings["secure profile up"] = time.monotonic() - t0
    before = run_secure_scenario(topology, "before-restart")
    assert before["kafka-python"]["consumed"] >= 400
    assert before["confluent-kafka"]["consumed"] >= 400
    probe = (
        "import socket, ssl, urllib.request, urllib.error\n"
        "s = socket.create_connection(('broker-secure', 9093), timeout=10)\n"
        "s.sendall(b'\\x00\\x00\\x00\\x0a' + bytes(10))\n"  # not a TLS ClientHello
        "try:\n"
        "    r = s.recv(16)\n"
        "except ConnectionError:\n"
        "    r = b''\n"
        "print('plaintext', r == b'' or r[:1] == b'\\x15')\n"  # closed, or a TLS alert
        "ctx = ssl.create_default_context(cafile='/var/lib/kcoord/certs/ca.pem')\n"
        "try:\n"
        "    urllib.request.urlopen('https://broker-secure:9404/metrics', context=ctx)\n"
        "except urllib.error.HTTPError as e:\n"
        "    print('metrics', e.code)\n"
    )
    out = topology(
        *sec, "run", "--rm", "-T", "--no-deps", "--entrypoint", "python3", "runner-secure",
        "-c", probe,
    )  # fmt: skip
    assert "plaintext True" in out and "metrics 401" in out, out
    topology(*sec, "restart", "-t", "20", "broker-secure", timeout=120)
    topology.wait_healthy("broker-secure")
    after = run_secure_scenario(topology, "after-restart")
    assert after["kafka-python"]["resumed_with"] == 10
    assert after["confluent-kafka"]["resumed_with"] == 10
    assert after["kafka-python"]["committed"] == before["kafka-python"]["committed"]
    topology.engine.timings["secure scenarios"] = time.monotonic() - t0


def test_every_rebalance_is_logged_once_with_its_fields(topology: Compose) -> None:
    events = [
        line.split("|", 1)[1]
        for line in topology("logs", "--no-color", "broker").splitlines()
        if 'msg="rebalance completed"' in line
    ]
    assert events, "no rebalance logged"
    for line in events:
        for key in ("group=", "generation=", "members=", "reason=", "duration_ms="):
            assert key in line, line
    scenario = [e for e in events if "group=compose-kp-group" in e]
    generations = [int(e.split("generation=")[1].split()[0]) for e in scenario]
    assert generations == sorted(set(generations)), "a generation logged twice"


def test_report_job_writes_the_html_report(topology: Compose) -> None:
    reports = Path(topology.env["REPORTS_DIR"])
    t0 = time.monotonic()
    out = topology("--profile", "report", "run", "--rm", "-T", "report", check=False, timeout=600)
    topology.engine.timings["report job"] = time.monotonic() - t0
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    html = (reports / "report.html").read_text()
    for group in ("compose-kp-group", "compose-ck-group", "demo-group"):
        assert group in html
    assert (reports / "partition_lag.parquet").exists()
