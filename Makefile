# Set-up and everyday commands. `make run` and `make test` work on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# One stamp per install set, so `make run` installs only what the broker and the strom command need
# (a small, fast first start), `make demo` adds Spark, and `make test` everything the tests use.
BASE_STAMP := $(VENV)/.installed-base
SPARK_STAMP := $(VENV)/.installed-spark
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test check lint typecheck unit install deps zookeeper librdkafka-tests cluster clean jvm

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
# from Debian's librdkafka source package: Debian 13's 2.8.0, fetched from Debian's archive whatever
# release this machine runs. Its .dsc is checked against the checksum below and the tarballs against
# the .dsc (dpkg-source). Not Debian 12's 2.0.2: a consumer of that version could hang in close()
# when the topic of a partition assigned to it had just been deleted (fixed in 2.1.0), which
# 0098_consumer_txn does dozens of times. The library and its test-runner are built once under
# .cache/librdkafka (a stamp marks a finished build; a failed one stops `make`). The fixes in
# tests/librdkafka_patches are applied to the unpacked source first; a changed patch rebuilds.
RDKAFKA_VERSION := 2.8.0
RDKAFKA_DEBIAN := $(RDKAFKA_VERSION)-1
RDKAFKA_DSC_SHA256 := 0e9f099090072fe33da42303e1878f7f4713f91b94aa6523a9d630fe67eb2b51
RDKAFKA_POOL := https://deb.debian.org/debian/pool/main/libr/librdkafka
RDKAFKA_CACHE := .cache/librdkafka
RDKAFKA_DIR := $(RDKAFKA_CACHE)/librdkafka-$(RDKAFKA_VERSION)
RDKAFKA_STAMP := $(RDKAFKA_DIR)/.strom-built
RDKAFKA_PATCHES := $(sort $(wildcard tests/librdkafka_patches/*.patch))

librdkafka-tests: $(RDKAFKA_STAMP)

$(RDKAFKA_STAMP): $(RDKAFKA_PATCHES)
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	missing=; \
	for p in curl dpkg-dev patch g++ make zlib1g-dev libzstd-dev rapidjson-dev; do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	[ -z "$$missing" ] || { $$SUDO apt-get update -q && $$SUDO apt-get install -y -q --no-install-recommends $$missing; }
	rm -rf $(RDKAFKA_CACHE) && mkdir -p $(RDKAFKA_CACHE)
	cd $(RDKAFKA_CACHE) && for f in librdkafka_$(RDKAFKA_DEBIAN).dsc librdkafka_$(RDKAFKA_VERSION).orig.tar.gz \
	    librdkafka_$(RDKAFKA_DEBIAN).debian.tar.xz; do \
	  curl -fsS --retry 3 -m 300 -O $(RDKAFKA_POOL)/$$f || { echo "could not fetch $(RDKAFKA_POOL)/$$f" >&2; exit 1; }; \
	done
	cd $(RDKAFKA_CACHE) && echo "$(RDKAFKA_DSC_SHA256)  librdkafka_$(RDKAFKA_DEBIAN).dsc" | sha256sum -c --quiet - \
	  || { echo "librdkafka_$(RDKAFKA_DEBIAN).dsc is not the one this Makefile expects" >&2; exit 1; }
	@# gpgv cannot check the .dsc's signature without Debian's keyring: the checksum above pins it instead.
	cd $(RDKAFKA_CACHE) && dpkg-source -q -x librdkafka_$(RDKAFKA_DEBIAN).dsc librdkafka-$(RDKAFKA_VERSION) \
	  >dpkg-source.log 2>&1 || { cat dpkg-source.log >&2; exit 1; }
	test -x $(RDKAFKA_DIR)/configure || { echo "dpkg-source did not unpack librdkafka $(RDKAFKA_VERSION)" >&2; exit 1; }
	for f in $(RDKAFKA_PATCHES); do patch -s -p1 -d $(RDKAFKA_DIR) < $$f || exit 1; done
	@echo "building librdkafka $(RDKAFKA_VERSION) and its test-runner in $(RDKAFKA_DIR) (log: $(RDKAFKA_CACHE)/build.log)"
	cd $(RDKAFKA_DIR) && { \
	  ./configure --no-download --disable-ssl --disable-gssapi --disable-curl --enable-zstd \
	    --disable-lz4-ext --enable-zlib && \
	  $(MAKE) -j2 -C src && $(MAKE) -j2 -C src-cpp && $(MAKE) -j2 -C tests build; \
	} > ../build.log 2>&1 || { tail -n 40 ../build.log >&2; echo "librdkafka build failed: $(RDKAFKA_CACHE)/build.log" >&2; exit 1; }
	test -x $(RDKAFKA_DIR)/tests/test-runner
	touch $@

# strom's Spark functions in the JVM (jvm/: from_avro's decoder, a Java UDF over the Apache Avro that
# PySpark ships), compiled against the installed PySpark's jars into build/jvm (git-ignored, never
# committed; `make test` and `make demo` build it after installing PySpark). strom.spark.local_session
# puts the jar on the session's spark.jars; without it from_avro takes its Arrow UDF path. javac comes
# with a JDK (Debian's default-jdk-headless, installed when missing).
JVM_JAR := build/jvm/strom-spark.jar
JVM_SRC := $(wildcard jvm/strom/spark/*.java)
jvm: $(JVM_JAR)

$(JVM_JAR): $(JVM_SRC)
	@command -v javac >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q --no-install-recommends default-jdk-headless; }
	rm -rf build/jvm/classes && mkdir -p build/jvm/classes
	javac --release 17 -nowarn -d build/jvm/classes \
	  -cp "$$($(PY) -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')/*" \
	  $(JVM_SRC)
	jar --create --file $@ -C build/jvm/classes .

run: $(BASE_STAMP)
	$(VENV)/bin/strom broker --override schema.registry.listeners=http://127.0.0.1:8081

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy

# The whole suite, spread over pytest-xdist workers (docs/testing.md, "How the suite runs"): tests
# of a module with a module-wide broker or cluster, and of the shared cluster and Spark session, keep
# together (xdist groups); the rest go one by one. A JUnit report is left in test-artifacts/, and the
# 30 slowest tests are printed. A worker that dies ends the run at once (a crash is a bug to find;
# a replaced worker can sit idle under loadgroup while the run waits for it).
TEST_WORKERS ?= 3
PYTEST_RUN := $(VENV)/bin/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup --max-worker-restart=0 \
	--durations=30 --junitxml=test-artifacts/junit.xml
test: $(TEST_STAMP) deps lint jvm
	$(PYTEST_RUN) tests

# The edit-test loop: lint, types and the tests that need no cluster, Spark, browser or librdkafka build.
check: $(TEST_STAMP) lint
	$(PYTEST_RUN) --ignore=tests/cluster --ignore=tests/spark --ignore=tests/test_librdkafka_suite.py \
	  --ignore=tests/test_console.py --ignore=tests/test_cluster_bench.py tests

clean:
	rm -rf $(VENV) strom-data .pytest_cache .mypy_cache .cache

# A local cluster: ZooKeeper and three brokers on 127.0.0.1:9092-9094; Ctrl-C stops everything.
cluster: $(BASE_STAMP) zookeeper
	$(VENV)/bin/strom dev-cluster 3

# The streaming trucking example: broker (embedded if none answers), simulator, Spark job, live alerts.
.PHONY: demo
demo: $(SPARK_STAMP) jvm
	$(VENV)/bin/strom demo trucking
