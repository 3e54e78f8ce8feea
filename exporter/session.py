"""A SparkSession set up the way these reports need it: quiet logs, loopback-only when local,
workers on this interpreter (they need pyarrow and numpy), few shuffle partitions, and the
kcoord data sources registered.

With ``--master`` pointing at a cluster (or under ``spark-submit``) the local-only settings are
left out and the cluster's own configuration applies.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = error
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = error
"""


def scratch_dir() -> Path:
    """A per-process scratch folder for Spark's local files and Python worker sockets."""
    path = Path(tempfile.gettempdir()) / f"kcoord-spark-{os.getuid()}-{os.getpid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def is_submitted() -> bool:
    """Whether this driver runs under ``spark-submit`` (which then gives the master): its
    Python driver is started with the launcher's gateway in the environment."""
    return (
        "PYSPARK_GATEWAY_PORT" in os.environ
        or "SPARK_SUBMIT_OPTS" in os.environ
        or "spark.master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    )


def cluster_cores(spark: SparkSession, settle: float = 3.0, timeout: float = 60.0) -> int:
    """The executor cores of a cluster, once its executors have registered (their count
    unchanged for ``settle`` seconds; at most ``timeout``): Spark does not wait for them
    before the first job, and counts only those registered."""
    sc = spark.sparkContext
    if sc.master.startswith("local"):
        return sc.defaultParallelism
    status = sc._jsc.sc().getExecutorMemoryStatus  # the driver is listed too
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        n = status().size() - 1
        if n != last:
            last, since = n, time.monotonic()
        elif n > 0 and time.monotonic() - since >= settle:
            break
        time.sleep(0.5)
    return sc.defaultParallelism


def fit_to_cluster(spark: SparkSession, minimum: int = 4) -> int:
    """Two shuffle partitions per executor core, unless ``spark.sql.shuffle.partitions`` was
    set: Spark's fixed 200 is thousands of near-empty tasks on a small cluster (the cached
    tables are not merged by adaptive execution), and a fixed 4 would cap a big cluster's
    history stages at 4 tasks. Returns the cores."""
    cores = cluster_cores(spark)
    if not spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", str(max(minimum, 2 * cores)))
    return cores


def build_session(
    master: str | None = None,
    app_name: str = "kcoord-report",
    *,
    shuffle_partitions: int = 4,
    driver_memory: str = "2g",
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Get or create the session. ``master`` None means local[2] unless spark-submit set one."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    submitted = is_submitted()
    if master is None and not submitted:
        master = DEFAULT_MASTER
    # Under spark-submit (master None) its settings apply as they are: the loopback-only ones
    # would keep executors on other machines from reaching the driver.
    local = master is not None and master.startswith("local")
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    scratch = scratch_dir()
    log4j = scratch / "log4j2.properties"
    log4j.write_text(_LOG4J)
    java_opts = f"-Dlog4j.configurationFile=file:{log4j}"
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Spark starts its Python workers with `python -m pyspark.daemon` in the current
        # folder, which Python would put first on the module path: a stray grp.py there would
        # be imported in place of the standard module. (Only the workers: a driver-wide
        # setting would reach every Python the driver starts.)
        "spark.executorEnv.PYTHONSAFEPATH": "1",
    }
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        conf.update(
            {
                # Two cores: Spark's default of 200 shuffle partitions is pure overhead.
                "spark.sql.shuffle.partitions": str(shuffle_partitions),
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.memory": driver_memory,
                "spark.local.dir": str(scratch),
                "spark.python.unix.domain.socket.enabled": "true",
                "spark.python.unix.domain.socket.dir": str(scratch),
                "spark.pyspark.python": sys.executable,
            }
        )
    conf.update(extra_conf or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not local:
        fit_to_cluster(spark, shuffle_partitions)
    from exporter.datasource import register

    register(spark)
    return spark
