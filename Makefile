# Set-up and everyday commands. `make run` and `make test` work on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit install deps clean

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PIP) install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Debian packages the tests drive (kcat, chromium for the console test); installed only when missing.
deps:
	@command -v kcat >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q kcat; }
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; }

run: install
	$(VENV)/bin/strom broker

lint: install
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy

test: install deps lint
	$(VENV)/bin/pytest -q -p no:cacheprovider tests

clean:
	rm -rf $(VENV) strom-data .pytest_cache .mypy_cache

# The streaming trucking example: broker (embedded if none answers), simulator, Spark job, live alerts.
.PHONY: demo
demo: install
	$(VENV)/bin/strom demo trucking
