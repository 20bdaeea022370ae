# Set-up and everyday commands. `make run` and `make test` work on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# One stamp per install set, so `make run` installs only what the broker and the strom command need
# (a small, fast first start), `make demo` adds Spark, and `make test` everything the tests use.
BASE_STAMP := $(VENV)/.installed-base
SPARK_STAMP := $(VENV)/.installed-spark
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test lint typecheck unit install deps zookeeper librdkafka-tests cluster clean

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
# tests and `make cluster`; openssl for benchmarks/security_bench.py and docs/security.md's test CA)
# and librdkafka's own test programs; installed only when missing.
deps: zookeeper librdkafka-tests
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

# librdkafka's own integration tests (tests/test_librdkafka_suite.py runs them against strom), built
# from Debian's librdkafka source package: the apt sources get a deb-src twin of Debian's entries
# when none has one, `apt-get source` unpacks it under .cache/librdkafka, and the library and its
# test-runner are built there once (a stamp marks a finished build; a failed one stops `make`).
RDKAFKA_VERSION := 2.0.2
RDKAFKA_CACHE := .cache/librdkafka
RDKAFKA_DIR := $(RDKAFKA_CACHE)/librdkafka-$(RDKAFKA_VERSION)
RDKAFKA_STAMP := $(RDKAFKA_DIR)/.strom-built
RDKAFKA_SRC_LIST := /etc/apt/sources.list.d/strom-deb-src

librdkafka-tests: $(RDKAFKA_STAMP)

$(RDKAFKA_STAMP):
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	update=; missing=; \
	for p in dpkg-dev g++ make zlib1g-dev libzstd-dev rapidjson-dev; do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	[ -z "$$missing" ] || update=1; \
	if ! apt-cache showsrc librdkafka 2>/dev/null | grep -q '^Version: $(RDKAFKA_VERSION)-'; then \
	  update=1; \
	  if [ -f /etc/apt/sources.list.d/debian.sources ]; then \
	    [ -f $(RDKAFKA_SRC_LIST).sources ] || sed 's/^Types: deb$$/Types: deb-src/' \
	      /etc/apt/sources.list.d/debian.sources | $$SUDO tee $(RDKAFKA_SRC_LIST).sources >/dev/null; \
	  else \
	    [ -f $(RDKAFKA_SRC_LIST).list ] || grep -h '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' \
	      | $$SUDO tee $(RDKAFKA_SRC_LIST).list >/dev/null; \
	  fi; \
	fi; \
	[ -z "$$update" ] || $$SUDO apt-get update -q; \
	[ -z "$$missing" ] || $$SUDO apt-get install -y -q --no-install-recommends $$missing
	rm -rf $(RDKAFKA_CACHE) && mkdir -p $(RDKAFKA_CACHE)
	cd $(RDKAFKA_CACHE) && apt-get source -q librdkafka
	test -x $(RDKAFKA_DIR)/configure || { echo "apt-get source librdkafka did not give librdkafka $(RDKAFKA_VERSION)" >&2; exit 1; }
	@echo "building librdkafka $(RDKAFKA_VERSION) and its test-runner in $(RDKAFKA_DIR) (log: $(RDKAFKA_CACHE)/build.log)"
	cd $(RDKAFKA_DIR) && { \
	  ./configure --no-download --disable-ssl --disable-gssapi --disable-curl --enable-zstd \
	    --disable-lz4-ext --enable-zlib && \
	  $(MAKE) -j2 -C src && $(MAKE) -j2 -C src-cpp && $(MAKE) -j2 -C tests build; \
	} > ../build.log 2>&1 || { tail -n 40 ../build.log >&2; echo "librdkafka build failed: $(RDKAFKA_CACHE)/build.log" >&2; exit 1; }
	test -x $(RDKAFKA_DIR)/tests/test-runner
	touch $@

run: $(BASE_STAMP)
	$(VENV)/bin/strom broker

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy

test: $(TEST_STAMP) deps lint
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=30 tests

clean:
	rm -rf $(VENV) strom-data .pytest_cache .mypy_cache .cache

# A local cluster: ZooKeeper and three brokers on 127.0.0.1:9092-9094; Ctrl-C stops everything.
cluster: $(BASE_STAMP) zookeeper
	$(VENV)/bin/strom dev-cluster 3

# The streaming trucking example: broker (embedded if none answers), simulator, Spark job, live alerts.
.PHONY: demo
demo: $(SPARK_STAMP)
	$(VENV)/bin/strom demo trucking
