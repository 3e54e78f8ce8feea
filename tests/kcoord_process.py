"""Starts a real `kcoord serve` process for a test and stops it afterwards."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

READY = re.compile(r"kcoord ready: listening on (\S+):(\d+)")


@dataclass
class KcoordProcess:
    proc: subprocess.Popen
    host: str
    port: int
    data_dir: Path
    log_path: Path
    extra_args: tuple[str, ...] = ()  # what it was started with (e.g. --storage URL)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_kcoord(
    data_dir: Path,
    *settings: str,
    port: int = 0,
    timeout: float = 20,
    extra_args: tuple[str, ...] = (),
) -> KcoordProcess:
    """Run `kcoord serve` on 127.0.0.1 and wait for its ready line; `extra_args` are more
    `kcoord serve` options (e.g. `--metrics 127.0.0.1:0`)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir.parent / f"kcoord-{data_dir.name}.log"
    args = [
        sys.executable,
        "-m",
        "kcoord_admin",
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--data-dir",
        str(data_dir),
    ]
    for s in settings:
        args += ["--set", s]
    args += list(extra_args)
    log_file = open(log_path, "w")  # noqa: SIM115 - the process owns it until it exits
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCOORD_")}
    proc = subprocess.Popen(
        args, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=Path(__file__).parent.parent
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = READY.search(log_path.read_text())
        if m:
            return KcoordProcess(
                proc, m.group(1), int(m.group(2)), data_dir, log_path, tuple(extra_args)
            )
        if proc.poll() is not None:
            raise RuntimeError(f"kcoord exited with {proc.returncode}:\n{log_path.read_text()}")
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"kcoord not ready after {timeout}s:\n{log_path.read_text()}")
