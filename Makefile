# `make run` and `make test` do all set-up on a fresh machine (they create .venv if it is missing).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-newer-python test-deps console-deps cluster-deps pulsar-deps offload-deps cluster-up cluster-down lint typecheck unit proto bench clean compat compat-deps go-load

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m broker standalone $(ARGS)

test: $(STAMP) test-deps console-deps cluster-deps pulsar-deps offload-deps go-load
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m pytest $(PYTEST_ARGS)

# pyproject says Python >= 3.11 and `make test` runs python3: this runs the suite again on the newest Python 3.12+
# on PATH or in pyenv, in its own venv (.venv-newer); the brokers the tests start as processes run on it too. All of
# it but the comparisons with a real Apache Pulsar (marked apache_pulsar: they compare the broker's answers with
# Pulsar's, which a Python version does not change, and each starts Pulsar's JVMs; `make test` runs them).
# Skipped, saying so, when there is none (CI=true: a failure).
NEWER_PYTHON ?= $(shell for p in python3.14 python3.13 python3.12 \
  $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV); do \
  $$p -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null && { echo $$p; break; }; done)
NEWER_VENV := .venv-newer
NEWER_TESTS ?= tests

test-newer-python: test-deps console-deps cluster-deps pulsar-deps offload-deps go-load
	@if [ -z "$(NEWER_PYTHON)" ]; then \
	  echo "test-newer-python: no Python 3.12 or later here: skipped"; [ "$$CI" != true ]; \
	else $(MAKE) --no-print-directory $(NEWER_VENV)/.installed VENV=$(NEWER_VENV) PYTHON=$(NEWER_PYTHON) && \
	  $(NEWER_VENV)/bin/python --version && \
	  $(NEWER_VENV)/bin/python -m pytest -q -m 'not apache_pulsar' $(NEWER_TESTS) $(PYTEST_ARGS); fi

# The fixed-rate load generator (bench/go_load, on the official Go client) that tests/e2e/test_fixed_rate_load.py and
# the benches run, built before the tests: its first build fetches pulsar-client-go from the Go module proxy (Go's
# module cache keeps it), which on a fresh machine takes longer than a test may. Without Go: nothing here (those
# tests skip, or fail under CI=true).
go-load: $(STAMP)
	@if command -v go >/dev/null; then $(PY) -c 'from bench import fixed_rate; print("go-load:", fixed_rate.build())'; \
	else echo "go-load: go is not on PATH: the fixed-rate load tests will be skipped"; fi

# Prometheus's promtool and server for the /metrics tests (Debian package `prometheus`). Idempotent;
# installs only as root with apt-get, otherwise says why and those tests skip.
test-deps:
	@if command -v promtool >/dev/null && command -v prometheus >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus; \
	else echo "test-deps: prometheus is not installed and cannot be installed here (needs root and apt-get);" \
	  "the Prometheus tests will be skipped"; fi

# Headless Chromium for the web console tests (tests/console/, driven over the DevTools protocol from Python):
# Debian's `chromium` package, installed as root with apt-get (idempotent). Without it those tests skip, except
# under CI=true, where they fail.
console-deps:
	@if command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	elif [ "$$CI" = true ]; then echo "console-deps: chromium is not installed and cannot be installed here (needs root and apt-get)" >&2; exit 1; \
	else echo "console-deps: chromium is not installed and cannot be installed here (needs root and apt-get);" \
	  "the console tests will be skipped"; fi

# Real ZooKeeper + BookKeeper for the BookKeeper tests and `make cluster-up` (docs/cluster.md): Debian's `zookeeper`
# package (apt-get as root, idempotent) and bookkeeper-server with its dependencies from Maven Central into
# $(BK_LIB) (ignored by git; ~/.m2 caches the downloads). Without them the BookKeeper tests skip, except under CI=true,
# where they fail.
BK_LIB := .deps/bookkeeper/lib
BK_STAMP := .deps/bookkeeper/.installed
BOOKIES ?= 3
BROKERS ?= 1

cluster-deps: $(BK_STAMP)
	@if [ -f /usr/share/java/zookeeper.jar ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y zookeeper; \
	else echo "cluster-deps: Debian's zookeeper is not installed and cannot be installed here (needs root and apt-get);" \
	  "the ZooKeeper jars that come with BookKeeper will be used instead"; fi

$(BK_STAMP): cluster/pom.xml
	@if command -v mvn >/dev/null && command -v java >/dev/null && rm -rf $(BK_LIB) && (cd cluster && \
	    mvn -q -B -Dstyle.color=never dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=../$(BK_LIB)); \
	then touch $(BK_STAMP); \
	elif [ "$$CI" = true ]; then echo "cluster-deps: cannot fetch BookKeeper (needs java, mvn and Maven Central)" >&2; exit 1; \
	else echo "cluster-deps: cannot fetch BookKeeper (needs java, mvn and Maven Central); the BookKeeper tests will be skipped"; fi

# Apache Pulsar itself (pulsar-broker 4.0.7 and its runtime dependencies from Maven Central, ~240 MB, into
# $(PULSAR_LIB), ignored by git; ~/.m2 caches the downloads): the benchmark's `pulsar` kind (standalone), the
# mixed-broker BookKeeper test and the comparisons with Pulsar; and Pulsar's proxy (pulsar-proxy, its jar on the same
# 4.0.7 modules: bench/pulsar/pom.xml says why) for tests/security/test_pulsar_proxy_answers.py.
# bench/pulsar/settings.xml keeps Maven on Maven Central (Pulsar's poms name other repositories). Idempotent; without
# java and mvn it says why, and those skip.
PULSAR_LIB := .deps/pulsar/lib
PULSAR_STAMP := .deps/pulsar/.installed

pulsar-deps: $(PULSAR_STAMP)

$(PULSAR_STAMP): bench/pulsar/pom.xml
	@if command -v mvn >/dev/null && command -v java >/dev/null && rm -rf $(PULSAR_LIB) && (cd bench/pulsar && \
	    mvn -q -B -s settings.xml -Dstyle.color=never dependency:copy-dependencies -DincludeScope=runtime \
	    -DoutputDirectory=../../$(PULSAR_LIB)); \
	then touch $(PULSAR_STAMP); \
	elif [ "$$CI" = true ]; then echo "pulsar-deps: cannot fetch Apache Pulsar (needs java, mvn and Maven Central)" >&2; exit 1; \
	else echo "pulsar-deps: cannot fetch Apache Pulsar (needs java, mvn and Maven Central); it is left out of the bench"; fi

# Hadoop's own MapFile/SequenceFile code (the shaded hadoop-client-api + hadoop-client-runtime 3.4.0, ~50 MB, from
# Maven Central into $(HADOOP_LIB), ignored by git; ~/.m2 caches the downloads): tests/offload/java/MapFileCheck.java
# writes and reads MapFiles with it as Pulsar's `filesystem` offloader does, to check ours both ways (file:///, no
# native libraries and no HADOOP_HOME needed). Idempotent; without java and mvn it says why and those tests skip,
# except under CI=true, where it fails.
HADOOP_LIB := .deps/hadoop/lib
HADOOP_STAMP := .deps/hadoop/.installed

# Also S3Proxy (org.gaul:s3proxy, its jar with dependencies: an S3 endpoint in memory for the S3 offloader's tests) into
# $(S3PROXY_DIR), and Pulsar's blob-store offloader (tiered-storage-jcloud with the managed-ledger API, ~145 MB) into
# $(JCLOUD_LIB): tests/offload/java/JCloudCheck.java writes and reads S3 copies with it to check ours both ways.
S3PROXY_VERSION := 2.9.0
S3PROXY_DIR := .deps/s3proxy
S3PROXY_STAMP := $(S3PROXY_DIR)/.installed-$(S3PROXY_VERSION)
JCLOUD_LIB := .deps/jcloud/lib
JCLOUD_STAMP := .deps/jcloud/.installed
# And Azurite (npm: Microsoft's Azure Storage emulator, its blob service) into $(AZURITE_DIR), for the azureblob
# offloader's tests (the npm cache keeps the download).
AZURITE_VERSION := 3.37.0
AZURITE_DIR := .deps/azurite
AZURITE_STAMP := $(AZURITE_DIR)/.installed-$(AZURITE_VERSION)

# And fake-gcs-server (fsouza's Google Cloud Storage emulator, built from the Go module proxy) into $(FAKE_GCS_DIR),
# for the google-cloud-storage offloader's tests (Go's caches keep the download and the build).
FAKE_GCS_VERSION := v1.56.1
FAKE_GCS_DIR := .deps/fake-gcs-server
FAKE_GCS_STAMP := $(FAKE_GCS_DIR)/.installed-$(FAKE_GCS_VERSION)

offload-deps: $(HADOOP_STAMP) $(S3PROXY_STAMP) $(JCLOUD_STAMP) $(AZURITE_STAMP) $(FAKE_GCS_STAMP)

$(FAKE_GCS_STAMP):
	@if command -v go >/dev/null && rm -rf $(FAKE_GCS_DIR) && \
	    GOBIN=$(abspath $(FAKE_GCS_DIR)) go install github.com/fsouza/fake-gcs-server@$(FAKE_GCS_VERSION); \
	then touch $(FAKE_GCS_STAMP); \
	elif [ "$$CI" = true ]; then echo "offload-deps: cannot build fake-gcs-server (needs go and the Go module proxy)" >&2; exit 1; \
	else echo "offload-deps: cannot build fake-gcs-server (needs go and the Go module proxy); the google-cloud-storage offloader tests will be skipped"; fi

$(AZURITE_STAMP):
	@if command -v npm >/dev/null && command -v node >/dev/null && rm -rf $(AZURITE_DIR) && mkdir -p $(AZURITE_DIR) && \
	    npm install --prefix $(AZURITE_DIR) --no-audit --no-fund --silent azurite@$(AZURITE_VERSION); \
	then touch $(AZURITE_STAMP); \
	elif [ "$$CI" = true ]; then echo "offload-deps: cannot fetch Azurite (needs node, npm and the npm registry)" >&2; exit 1; \
	else echo "offload-deps: cannot fetch Azurite (needs node, npm and the npm registry); the azureblob offloader tests will be skipped"; fi

$(S3PROXY_STAMP):
	@if command -v mvn >/dev/null && command -v java >/dev/null && rm -rf $(S3PROXY_DIR) && \
	    mvn -q -B -s bench/pulsar/settings.xml -Dstyle.color=never dependency:copy \
	    -Dartifact=org.gaul:s3proxy:$(S3PROXY_VERSION):jar:jar-with-dependencies -DoutputDirectory=$(S3PROXY_DIR); \
	then touch $(S3PROXY_STAMP); \
	elif [ "$$CI" = true ]; then echo "offload-deps: cannot fetch S3Proxy (needs java, mvn and Maven Central)" >&2; exit 1; \
	else echo "offload-deps: cannot fetch S3Proxy (needs java, mvn and Maven Central); the S3 offloader tests will be skipped"; fi

$(JCLOUD_STAMP): tests/offload/jcloud/pom.xml
	@if command -v mvn >/dev/null && command -v java >/dev/null && rm -rf $(JCLOUD_LIB) && (cd tests/offload/jcloud && \
	    mvn -q -B -s ../../../bench/pulsar/settings.xml -Dstyle.color=never dependency:copy-dependencies \
	    -DincludeScope=runtime -DoutputDirectory=../../../$(JCLOUD_LIB)); \
	then touch $(JCLOUD_STAMP); \
	elif [ "$$CI" = true ]; then echo "offload-deps: cannot fetch Pulsar's jcloud offloader (needs java, mvn and Maven Central)" >&2; exit 1; \
	else echo "offload-deps: cannot fetch Pulsar's jcloud offloader (needs java, mvn and Maven Central); the S3 cross-checks will be skipped"; fi

$(HADOOP_STAMP): tests/offload/java/pom.xml
	@if command -v mvn >/dev/null && command -v java >/dev/null && rm -rf $(HADOOP_LIB) && (cd tests/offload/java && \
	    mvn -q -B -Dstyle.color=never dependency:copy-dependencies -DincludeScope=runtime \
	    -DoutputDirectory=../../../$(HADOOP_LIB)); \
	then touch $(HADOOP_STAMP); \
	elif [ "$$CI" = true ]; then echo "offload-deps: cannot fetch Hadoop (needs java, mvn and Maven Central)" >&2; exit 1; \
	else echo "offload-deps: cannot fetch Hadoop (needs java, mvn and Maven Central); the MapFile cross-checks will be skipped"; fi

# ZooKeeper + $(BOOKIES) bookies + $(BROKERS) brokers (cluster mode: they share the bundles) on free 127.0.0.1 ports;
# .cluster/cluster.json says what runs where.
cluster-up: $(STAMP) cluster-deps
	$(PY) -m cluster up --state .cluster --bookies $(BOOKIES) --brokers $(BROKERS)

cluster-down: $(STAMP)
	$(PY) -m cluster down --state .cluster

# Regenerate broker/protocol/pulsar_{api,markers}_pb2.py(+.pyi) and managed_ledger/bookkeeper/bookkeeper_data_formats_pb2.py(+.pyi)
# and managed_ledger/bookkeeper/ml_data_formats_pb2.py(+.pyi)
# from proto/*.proto.
proto: $(STAMP)
	$(PY) -m pip install -q -e '.[proto]'
	$(PY) -m grpc_tools.protoc -Iproto --python_out=broker/protocol --pyi_out=broker/protocol proto/pulsar_api.proto proto/pulsar_markers.proto
	# Schema.Type.None is a Python keyword: comment it out of the stub so mypy can parse it.
	sed -i -E 's/^( *)None: (.*)$$/\1# None: \2  -- Python keyword; use Schema.Type.Value("None")/' broker/protocol/pulsar_api_pb2.pyi
	$(PY) -m grpc_tools.protoc -Iproto --python_out=managed_ledger/bookkeeper --pyi_out=managed_ledger/bookkeeper proto/bookkeeper_data_formats.proto proto/ml_data_formats.proto

# Benchmarks (not tests): our broker (file ledger; on 3 local bookies) vs Apache Pulsar standalone (when
# `make pulsar-deps` has fetched it) and pulsar-lite side by side, Shared before/after a storm, then topic
# takeover time and a bookie crash under load (bench/bk_faults.py), 1 vs 2 brokers (bench/cluster_scale.py),
# then the cost of one /metrics scrape at 1,000 and 10,000 topics (bench/metrics_scrape.py), and the topic
# creation rate up to 10,000 topics, each with a producer and a subscription (bench/topic_creation.py; Apache
# Pulsar and pulsar-lite at 1,000; TOPIC_CREATION_ARGS sets the options of the first run).
# The fixed-rate latency workloads of bench/compare.py, and its produce and fan-out rows on the Go client, need Go
# (as make compat): bench/fixed_rate.py builds the load generator bench/go_load into bench/go_load/.bin (ignored);
# without Go they are skipped, with the reason.
# A FAILED run of bench.compare (a fixed rate not achieved, e.g. on a loaded machine) does not stop the benches
# after it: it is written to $(BENCH_FAILED), and make bench fails at its end, after the others ran.
TOPIC_CREATION_ARGS ?= --kinds ours --topics 10000 --block 1000
BENCH_FAILED := bench/.failed-runs
bench: $(STAMP) cluster-deps pulsar-deps go-load
	$(PY) -m pip install -q pulsar-lite
	rm -f $(BENCH_FAILED)
	$(PY) -m bench.compare --keep-going $(BENCH_FAILED) $(BENCH_ARGS)
	$(PY) -m bench.raw_publish
	$(PY) -m bench.storm
	$(PY) -m bench.bk_faults $(BK_FAULTS_ARGS)
	$(PY) -m bench.cluster_scale
	$(PY) -m bench.metrics_scrape
	$(PY) -m bench.topic_creation $(TOPIC_CREATION_ARGS)
	$(PY) -m bench.topic_creation --kinds ours,pulsar,lite --topics 1000 --block 250
	@if [ -s $(BENCH_FAILED) ]; then cat $(BENCH_FAILED); echo "make bench: the runs above FAILED"; exit 1; fi

# Client compatibility suite (issue 18): the official Java (Maven) and Go clients, pulsar-rs (cargo)
# and pulsar-flex (npm, pure JS) run the scenarios of compat/scenarios.py against brokers it starts;
# writes compat/results.json and docs/clients.md.
# Needs mvn + JDK 17, go, cargo, node + npm on the PATH, and protoc for pulsar-rs (compat-deps
# installs Debian's protobuf-compiler as root). Maven, Go, cargo and npm fetch the clients into their
# usual caches (npm into compat/js/node_modules; build outputs under compat/*/target; all ignored).
# COMPAT_CLIENTS=java (or go, js, rust) runs one client.
COMPAT_CLIENTS ?= java,go,js,rust
compat: $(STAMP) compat-deps
	$(PY) -m compat.run --clients $(COMPAT_CLIENTS)

compat-deps:
	@if command -v protoc >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y protobuf-compiler; \
	else echo "compat-deps: protoc is missing and cannot be installed here (needs root and apt-get)"; fi

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache .deps
