# `make run` and `make test` do all set-up on a fresh machine (they create .venv if it is missing).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-deps lint typecheck unit proto bench clean compat compat-deps

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m broker standalone $(ARGS)

test: $(STAMP) test-deps
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m pytest $(PYTEST_ARGS)

# Prometheus's promtool and server for the /metrics tests (Debian package `prometheus`). Idempotent;
# installs only as root with apt-get, otherwise says why and those tests skip.
test-deps:
	@if command -v promtool >/dev/null && command -v prometheus >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus; \
	else echo "test-deps: prometheus is not installed and cannot be installed here (needs root and apt-get);" \
	  "the Prometheus tests will be skipped"; fi

# Regenerate broker/protocol/pulsar_{api,markers}_pb2.py(+.pyi) from proto/*.proto.
proto: $(STAMP)
	$(PY) -m pip install -q -e '.[proto]'
	$(PY) -m grpc_tools.protoc -Iproto --python_out=broker/protocol --pyi_out=broker/protocol proto/pulsar_api.proto proto/pulsar_markers.proto
	# Schema.Type.None is a Python keyword: comment it out of the stub so mypy can parse it.
	sed -i -E 's/^( *)None: (.*)$$/\1# None: \2  -- Python keyword; use Schema.Type.Value("None")/' broker/protocol/pulsar_api_pb2.pyi

# Benchmarks (not tests): our broker vs pulsar-lite side by side, then Shared before/after a storm.
bench: $(STAMP)
	$(PY) -m pip install -q pulsar-lite
	$(PY) -m bench.compare $(BENCH_ARGS)
	$(PY) -m bench.raw_publish
	$(PY) -m bench.storm

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
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache
