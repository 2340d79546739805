# pgshovel2 — see README.rst. Ports and folders: scripts/env.sh (override from the environment).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install stack-up stack-down stack-status spark-up spark-down demo test test-spark test-matrix chaos test-compose unit native-test lint docs bench clean

install:
	scripts/install.sh

stack-up: install
	scripts/stack.sh up

stack-down:
	scripts/stack.sh down

stack-status:
	scripts/stack.sh status

# A Spark standalone cluster (master + 2 workers on 127.0.0.1) for spark-submit --master spark://...
spark-up: install
	scripts/stack.sh spark-up

spark-down:
	scripts/stack.sh spark-down

demo: stack-up
	$(PY) scripts/demo.py

# The test suite starts its own stack (ports +1000, state in .stack-test) and stops it; with
# TEST_WORKERS > 1 (pytest-xdist, whole files per worker) each worker has its own (tests/workers.py).
# The Spark jobs run as a user runs them (spark_job: spark/*.py in its own JVM; spark_cluster:
# spark-submit to a standalone cluster) run in test-spark. --durations: what to move out next.
TEST_WORKERS ?= 2
test: install
	$(PY) -m pytest -ra --durations=25 -n $(TEST_WORKERS) --dist loadfile -m "not spark_cluster and not spark_job" tests

test-spark: install
	$(PY) -m pytest -ra -m "spark_cluster or spark_job" tests

# The tests marked stock (they run on stock PostgreSQL servers, tests/stock.py) on every stock
# major; make test runs them on PGSHOVEL2_TEST_STOCK (default 14,17).
test-matrix: install
	PGSHOVEL2_TEST_STOCK=14,16,17,18 $(PY) -m pytest -ra -m stock tests

# The fault-injection run at full length (100 relay kills); report in bench/results/.
chaos: install
	mkdir -p bench/results
	PGSHOVEL2_CHAOS_KILLS=$${KILLS:-100} PGSHOVEL2_CHAOS_REPORT=bench/results/chaos-$$(date -u +%Y%m%dT%H%M%SZ).json \
		$(PY) -m pytest -ra -s tests/integration/test_chaos.py

# Every GOALS.md figure measurable so far, against its reference: bench/results/<time>.json + PNGs.
# QUICK=1 for a short run; ONLY=debezium (comma-separated sections) runs those alone. The debezium
# section fetches Kafka Connect and Debezium with Maven (scripts/debezium/install.sh) on first use.
bench: stack-up
	$(PY) -m bench.peer.run $(if $(QUICK),--quick) $(if $(ONLY),--only $(ONLY))

# The images of docker-compose.yml built with podman from a debootstrap'd Debian bookworm base, the
# stack brought up with podman-compose, the demo flow run inside it, the stack taken down (root; ~15 min
# on a first build, layers cached after).
test-compose:
	scripts/containers/test.sh

unit: install
	$(PY) -m pytest -ra tests/unit

# The native module's Rust unit tests (native/src: its parsers), with the toolchain scripts/install.sh
# builds the module with (rustup's ~/.cargo/bin first); after make install (.ci/run: after make lint).
native-test:
	PATH="$$HOME/.cargo/bin:$$PATH" cargo test -q --manifest-path native/Cargo.toml

# ruff, and the layer contracts of .importlinter (every import points down).
lint: install
	$(VENV)/bin/ruff check pgshovel2 tests scripts bench spark
	$(VENV)/bin/lint-imports

# The docs site (docs/_build/html: README.rst and docs/*.rst) with Sphinx, every warning an error
# (-n: every reference resolves), then the internal link check (scripts/docs_check.py: the paths and
# sections the pages name exist; no link leaves the repository). External URLs are not fetched.
docs: install
	$(VENV)/bin/sphinx-build -W --keep-going -n -q -b html docs docs/_build/html
	$(PY) scripts/docs_check.py

requirements.txt: setup.py
	scripts/requirements.sh > requirements.txt.new && mv requirements.txt.new requirements.txt

clean: stack-down
	rm -rf .stack .stack-test .stack-test-*
