# Every target that needs Python builds .venv first; the editable install is redone
# only when pyproject.toml changes (the stamp file records the last install).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.kcoord-installed

LISTEN   ?= 127.0.0.1:9092
DATA_DIR ?= ./data

.PHONY: run test lint format bench clean venv

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
	$(VENV)/bin/pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .

bench: $(STAMP)
	@set -e; for f in bench/*.py; do \
		[ -e "$$f" ] || continue; \
		echo "== $$f"; $(PY) "$$f"; \
	done

# Removes the venv, build output and caches; never touches ./data.
clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
