# Headway — the two commands a newcomer needs are `make run` and `make test`.
# Each installs what is missing first: Debian packages via apt-get, and the Python test
# and benchmark tools into a virtual environment under .build/venv (never the system Python).

SWIFT ?= swift
LISTEN ?= 127.0.0.1:8080
DB ?= ./headway.db
VENV := .build/venv
PYTHON := $(VENV)/bin/python3
# Warnings fail the build in CI (.ci/run sets CI=true); locally they stay warnings.
SWIFT_FLAGS := $(if $(filter true 1,$(CI)),-Xswiftc -warnings-as-errors,)

# The suites that run a second time against PostgreSQL (HEADWAY_TEST_DB=postgres: each
# daemon of a test gets a fresh database on the server scripts/with-postgres.sh starts).
POSTGRES_SUITES := TaskAPITests|EventStreamTests|LivenessAPITests|ListingTests|CatchUpTests|TokenTests|MetricsTests|TreeLimitsAPITests|PrefixSubtreeTests|OrphanRepairTests|ErrorRepliesLiveTests|OpenAPITests|BatchProgressTests|ParentTruthAPITests|OutputSearchTests|OverdueAPITests

.PHONY: run test build release deps test-deps migrations dashboard bench bench-redis bench-streams bench-postgres bench-abuse bench-python python-client crash-proof soak clean fuzz sanitize

## Build and start the daemon on $(LISTEN) with the database $(DB). Ctrl-C stops it.
run: deps release
	.build/release/headwayd --listen $(LISTEN) --db $(DB)

## Run the whole test suite: Swift (unit, store, live HTTP and SSE, process, OpenAPI), then
## the API, event, liveness and token suites again on a private PostgreSQL server
## (scripts/with-postgres.sh), then the integration tests with a
## third-party SSE client, a real nginx, a headless Chromium and schemathesis against the
## OpenAPI contract, and the Python client (clients/python, its wheel installed into the venv);
## the dashboard's pure modules are unit-tested by `node --test` (Tests/js).
test: test-deps
	$(SWIFT) build --build-tests $(SWIFT_FLAGS)
	HEADWAY_PYTHON=$(PYTHON) scripts/with-postgres.sh sh -c '$(SWIFT) test --skip-build && \
		HEADWAY_TEST_DB=postgres $(SWIFT) test --skip-build --filter "$(POSTGRES_SUITES)"'
	$(MAKE) fuzz
	node --test Tests/js/*.test.js
	$(MAKE) python-client
	$(PYTHON) -m pytest -q Tests/integration

build: deps
	$(SWIFT) build $(SWIFT_FLAGS)

release: deps
	$(SWIFT) build -c release $(SWIFT_FLAGS)

deps:
	@scripts/install-deps.sh

test-deps:
	@HEADWAY_TEST_TOOLS=1 scripts/install-deps.sh

## The Python client's wheel in clients/python/dist (built by pip with hatchling, fetched
## from PyPI), installed into the venv the tests and benchmarks run in.
python-client:
	@[ -x $(PYTHON) ] || HEADWAY_TEST_TOOLS=1 scripts/install-deps.sh
	rm -rf clients/python/dist
	$(PYTHON) -m pip wheel --quiet --disable-pip-version-check --no-deps -w clients/python/dist ./clients/python
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps clients/python/dist/headway-*.whl

## Regenerate the compiled copy of dashboard/* (a test fails if it is stale, so a change
## to dashboard/ without this fails `make test`).
dashboard:
	@python3 scripts/embed-dashboard.py

## Regenerate the compiled copy of migrations/*.sql (a test fails if it is stale).
migrations:
	@python3 scripts/embed-migrations.py

## headwayd beside nginx+nchan and Redis, then bench-postgres's figures: prints the tables
## and writes docs/benchmarks.md (about 30 minutes).
bench:
	@HEADWAY_BENCH=1 scripts/install-deps.sh
	$(SWIFT) build -c release $(SWIFT_FLAGS)
	$(PYTHON) bench/suite.py
	$(MAKE) bench-python

## The Python client's cost per update() beside plain tqdm, and the requests a tight loop
## makes: prints the rows and writes their section of docs/benchmarks.md (about a minute).
bench-python:
	@HEADWAY_BENCH=1 scripts/install-deps.sh
	$(SWIFT) build -c release --product headwayd $(SWIFT_FLAGS)
	$(MAKE) python-client
	$(PYTHON) bench/python-client.py --write-doc

## Only headwayd's updates/s (full, normal; full in batches of 200) beside Redis running
## BullMQ's updateProgress script (appendfsync always, everysec), alternately: prints the
## rows and writes their section of docs/benchmarks.md (about 5 minutes).
bench-redis:
	@HEADWAY_BENCH=1 scripts/install-deps.sh
	$(SWIFT) build -c release $(SWIFT_FLAGS)
	$(PYTHON) bench/suite.py --redis-only

## Figures 3 to 5 alone with 50,000 event-stream subscribers, headwayd and nginx+nchan
## alternately (fewer where the open-file limit cannot hold them: the section says so);
## prints the rows and writes their section of docs/benchmarks.md (about 10 minutes).
bench-streams:
	@HEADWAY_BENCH=1 scripts/install-deps.sh
	$(SWIFT) build -c release --product headwayd $(SWIFT_FLAGS)
	$(PYTHON) bench/suite.py --streams-only --subscribers 50000

## One headwayd on SQLite, one on PostgreSQL, two sharing one PostgreSQL database (a private
## server): updates/s, fan-out latency (across daemons too), CPU per update of the daemon and
## of PostgreSQL, three rounds; prints the tables and writes their section of docs/benchmarks.md
## (about 10 minutes).
bench-postgres:
	@HEADWAY_BENCH=1 scripts/install-deps.sh
	$(SWIFT) build -c release $(SWIFT_FLAGS)
	$(PYTHON) bench/postgres-scaling.py --write-doc

## Hostile clients against honest runners and subscribers, one fresh daemon per
## attack: prints a table with PASS/FAIL per attack (about 5 minutes). ABUSE_ARGS="--json out.json"
bench-abuse:
	@HEADWAY_BENCH=1 scripts/install-deps.sh
	$(SWIFT) build -c release $(SWIFT_FLAGS)
	$(PYTHON) bench/abuse.py $(ABUSE_ARGS)

## headwayd killed with SIGKILL under load, 200 rounds in each durability mode, then 100
## kills while it creates a new database: every acknowledged update checked, the figures
## printed (docs/crash-proof.md; about half an hour). CRASH_ARGS="--rounds 20 --seed N"
crash-proof:
	@HEADWAY_BENCH=1 scripts/install-deps.sh
	$(SWIFT) build -c release $(SWIFT_FLAGS)
	$(PYTHON) bench/crash-proof.py $(CRASH_ARGS)

## An hour of steady load (runners, 1,000 subscribers, stalls, retention), the daemon's RSS,
## open files, database and WAL sizes and latencies sampled every minute: writes
## docs/soak.csv and docs/soak.png and prints a verdict per measure. SOAK_ARGS="--minutes 12 --sample-seconds 30"
soak:
	@HEADWAY_BENCH=1 scripts/install-deps.sh
	$(SWIFT) build -c release $(SWIFT_FLAGS)
	$(PYTHON) bench/soak.py --out docs/soak $(SOAK_ARGS)

## A short, repeatable libFuzzer run of each target in Fuzz/ (seed 1, a fixed count of
## inputs); `scripts/fuzz.sh SECONDS` is the long run (see docs/fuzzing.md).
fuzz: deps
	@scripts/fuzz.sh --runs 10000

## The Swift suite under ThreadSanitizer, then AddressSanitizer (both run even if the first
## fails). Each has its own build folder (.build/tsan, .build/asan), so the normal build is
## untouched, and the process tests start the daemon and the command built with the same
## sanitizer (HEADWAYD, HEADWAY_BUILD_DIR), beside a private PostgreSQL server (so the tests
## of several writers on one database run too); each is a full build, so this is slow. docs/fuzzing.md says what they reported.
sanitize: test-deps
	@status=0; \
	for sanitizer in thread:tsan address:asan; do \
	  echo "== swift test --sanitize=$${sanitizer%%:*}"; \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/Tests/sanitizers/lsan.supp \
	  HEADWAY_PYTHON=$(PYTHON) HEADWAYD=$(CURDIR)/.build/$${sanitizer##*:}/debug/headwayd \
	  HEADWAY_BUILD_DIR=$(CURDIR)/.build/$${sanitizer##*:}/debug \
	    scripts/with-postgres.sh $(SWIFT) test --sanitize=$${sanitizer%%:*} --scratch-path .build/$${sanitizer##*:} $(SWIFT_FLAGS) \
	    || status=1; \
	done; \
	exit $$status

clean:
	rm -rf .build
