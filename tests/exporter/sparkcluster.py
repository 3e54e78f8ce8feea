"""A Spark standalone cluster on loopback for the tests: a master and workers started from
pyspark's own distribution (``bin/spark-class org.apache.spark.deploy.master.Master`` and
``...worker.Worker``), every port chosen by the system (port 0) and read back from the
master's log and its JSON status page.

Only the processes started here are ever stopped (by their process group).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI = re.compile(r"MasterWebUI.*started at (http://\S+)")


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def cluster_env(scratch: Path) -> dict[str, str]:
    """The environment of the cluster's JVMs and of the drivers that use it: loopback only,
    this interpreter for Python workers, logs and scratch files under ``scratch``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_DIRS=str(scratch / "local"),
        SPARK_LOG_DIR=str(scratch / "logs"),
        SPARK_PID_DIR=str(scratch),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    return env


@dataclass
class StandaloneCluster:
    scratch: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    url: str = ""
    ui: str = ""
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return cluster_env(self.scratch)

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.scratch / f"{name}.log", "wb")  # noqa: SIM115 - the process owns it
        cmd = [str(spark_home() / "bin" / "spark-class"), *args]
        proc = subprocess.Popen(
            cmd,
            env=self.env,
            cwd=self.scratch,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped as one
        )
        self.procs.append(proc)
        return proc

    def _log(self, name: str) -> str:
        return (self.scratch / f"{name}.log").read_text(errors="replace")

    def start(self, timeout: float = 120) -> StandaloneCluster:
        for sub in ("local", "logs", "work"):
            (self.scratch / sub).mkdir(parents=True, exist_ok=True)
        # No REST submission server: it would listen on the fixed port 6066.
        props = self.scratch / "master.properties"
        props.write_text("spark.master.rest.enabled false\n")
        master = self._start(
            "master", "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
            "--properties-file", str(props),
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not (self.url and self.ui):
            text = self._log("master")
            if m := _MASTER_URL.search(text):
                self.url = m.group(1)
            if m := _MASTER_UI.search(text):
                self.ui = m.group(1).rstrip("/")
            if master.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the Spark master did not start:\n{text[-3000:]}")
            time.sleep(0.2)
        for i in range(self.workers):
            self._start(
                f"worker{i}", "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                "--cores", str(self.cores), "--memory", self.memory,
                "--work-dir", str(self.scratch / "work" / f"worker{i}"), self.url,
            )  # fmt: skip
        while len(self.status().get("workers", [])) < self.workers or any(
            w["state"] != "ALIVE" for w in self.status()["workers"]
        ):
            dead = [p for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(self._log(n)[-1500:] for n in ("master", "worker0"))
                self.stop()
                raise RuntimeError(f"the Spark workers did not register:\n{logs}")
            time.sleep(0.3)
        return self

    def status(self) -> dict:
        """The master's JSON status page (workers, running and completed applications)."""
        with urllib.request.urlopen(self.ui + "/json/", timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()
