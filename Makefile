# Set-up and everyday commands. `make run` and `make test` work on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# One stamp per install set, so `make run` installs only what the broker and the strom command need
# (a small, fast first start), `make demo` adds Spark, and `make test` everything the tests use.
BASE_STAMP := $(VENV)/.installed-base
SPARK_STAMP := $(VENV)/.installed-spark
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test lint typecheck unit install deps zookeeper cluster clean

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(BASE_STAMP): $(PY) pyproject.toml
	$(PIP) install -q -e .
	touch $@

$(SPARK_STAMP): $(BASE_STAMP)
	$(PIP) install -q -e '.[spark]'
	touch $@

$(TEST_STAMP): $(BASE_STAMP)
	$(PIP) install -q -e '.[test]'
	touch $@

install: $(TEST_STAMP)

# Debian packages the tests drive (kcat, chromium for the console test, zookeeper for the cluster
# tests and `make cluster`; openssl for benchmarks/security_bench.py and docs/security.md's test CA);
# installed only when missing.
deps: zookeeper
	@command -v openssl >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q openssl; }
	@command -v kcat >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q kcat; }
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; }

zookeeper:
	@test -x /usr/share/zookeeper/bin/zkServer.sh || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q zookeeper; }

run: $(BASE_STAMP)
	$(VENV)/bin/strom broker

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy

test: $(TEST_STAMP) deps lint
	$(VENV)/bin/pytest -q -p no:cacheprovider tests

clean:
	rm -rf $(VENV) strom-data .pytest_cache .mypy_cache

# A local cluster: ZooKeeper and three brokers on 127.0.0.1:9092-9094; Ctrl-C stops everything.
cluster: $(BASE_STAMP) zookeeper
	$(VENV)/bin/strom dev-cluster 3

# The streaming trucking example: broker (embedded if none answers), simulator, Spark job, live alerts.
.PHONY: demo
demo: $(SPARK_STAMP)
	$(VENV)/bin/strom demo trucking
