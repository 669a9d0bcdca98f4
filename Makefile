# Every target bootstraps itself on a machine that has only python3:
# uv is installed into .tools/ if missing, then the locked environment is synced.
SHELL := /bin/bash
UV_SYSTEM := $(shell command -v uv 2>/dev/null)
UV := $(if $(UV_SYSTEM),$(UV_SYSTEM),$(CURDIR)/.tools/bin/uv)
RUN := $(UV) run --locked --no-sync

export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_CLI_PROMPT ?= false
# the slow fault-tolerance scenarios too (tests/chaos): every target's pytest runs the whole suite
export CHAOS_FULL ?= 1

.PHONY: test quick demo serve bench lint typecheck pytest sync bytecode clean nginx

$(CURDIR)/.tools/bin/uv:
	python3 -m venv .tools
	.tools/bin/python -m pip install --quiet --disable-pip-version-check uv

# --compile-bytecode: where PYTHONDONTWRITEBYTECODE is set, every new process (Prefect server,
# worker, flow run) would otherwise compile Prefect from source: seconds each.
.venv/.synced: uv.lock pyproject.toml | $(UV)
	$(UV) sync --locked --all-groups --compile-bytecode
	@touch $@

sync: .venv/.synced

# The same for the project's own modules, which every server, worker, flow run and test session
# imports: where PYTHONDONTWRITEBYTECODE is set each process would compile them again (0.3 to
# 0.4 s of CPU, about 200 processes in a test run). Up-to-date files are skipped; a file edited
# since is compiled again by the process that imports it (Python checks its time stamp).
PROJECT_SOURCES := compliance_api sandbox flows tasks runtime write_engine audit_log read_reports \
	deployments bench tests
bytecode: sync
	@$(RUN) python -m compileall -q -j 0 $(PROJECT_SOURCES)

LINT := $(RUN) ruff check . && $(RUN) ruff format --check .
TYPECHECK := $(RUN) mypy

lint: sync
	$(LINT)

typecheck: sync
	$(TYPECHECK)

# The stack and chaos tests spend most of their time waiting on Prefect's timers (crash
# detection, leases, heartbeats) and on frozen or cut-off servers, so the suite runs as five
# pytest sessions at once, each with its own servers, each printing its own result (the slowest
# tests too), balanced by their measured durations (docs/testing.md). PYTEST_ARGS (e.g. a test
# file) runs one session with those arguments instead.
STACK_TESTS := tests/deployments
CHAOS_TESTS := tests/chaos
# the long waits in two sessions, each waiting while the others work: the hosts on a network,
# and the crashed workers
NETWORK_WAITS := $(addprefix $(STACK_TESTS)/,test_multi_host.py test_hosts.py)
SCALE_OUT := $(STACK_TESTS)/test_scale_out.py
LONG_WAITS := $(NETWORK_WAITS) $(SCALE_OUT)
BESIDE_CRASHES := $(addprefix $(STACK_TESTS)/,test_replicas.py)
# the end-to-end stack beside the hosts on a network, which wait on cut-off connections most of
# their time (beside the unit tests it made theirs the longest session on a slow machine)
BESIDE_NETWORK := $(addprefix $(STACK_TESTS)/,test_e2e.py)
OTHER_STACKS := $(filter-out $(LONG_WAITS) $(BESIDE_CRASHES) $(BESIDE_NETWORK),$(sort $(wildcard $(STACK_TESTS)/test_*.py)))
PYTEST_SESSION := $(RUN) pytest -q -p no:cacheprovider --durations=5
# a chaos scenario with a stack of its own: beside the long waits, which leave the cores idle most
BESIDE_LONG_WAITS := $(CHAOS_TESTS)/test_worker_crash.py
CRASH_WAITS := $(SCALE_OUT) $(BESIDE_LONG_WAITS)
# the replicas test beside the crashed workers, not the frozen server: how long a frozen SQLite
# server takes to answer again varies (91 to 285 s measured; Prefect's client backs off 2^n s);
# the crash and chaos sessions end with the secret scan over their state directories
SESSIONS := "$(NETWORK_WAITS) $(BESIDE_NETWORK)" "$(CRASH_WAITS) $(BESIDE_CRASHES) tests/secrets" \
	"$(CHAOS_TESTS) --ignore=$(BESIDE_LONG_WAITS) tests/secrets" \
	"$(OTHER_STACKS)" \
	"tests $(addprefix --ignore=,$(CHAOS_TESTS) $(LONG_WAITS) $(BESIDE_CRASHES) $(BESIDE_NETWORK) $(OTHER_STACKS))"
# $(call run_sessions,"SESSION" ...[,CHECKS]): the sessions (and the CHECKS command) at once, then
# each one's output in turn; fails if any failed. They share one directory for the migrated
# SQLite template database, which the first session to need it builds
# (tests/fixtures/templates.py).
run_sessions = logs=$$(mktemp -d); pids=(); index=0; status=0; \
	export TEST_DATABASE_TEMPLATES="$$logs/templates"; mkdir "$$TEST_DATABASE_TEMPLATES"; \
	$(if $(2),( $(2) ) > "$$logs/checks" 2>&1 & checks=$$!;) \
	for session in $(1); do \
		$(PYTEST_SESSION) $$session > "$$logs/$$index" 2>&1 & pids+=($$!); index=$$((index + 1)); \
	done; \
	$(if $(2),wait $$checks || status=1; echo "== lint and type checks =="; cat "$$logs/checks";) \
	index=0; \
	for session in $(1); do \
		wait $${pids[$$index]} || status=1; \
		echo "== pytest $$session =="; cat "$$logs/$$index"; index=$$((index + 1)); \
	done; \
	rm -rf "$$logs"; exit $$status
pytest: bytecode
	@if [ -n "$(PYTEST_ARGS)" ]; then exec $(RUN) pytest -q $(PYTEST_ARGS); fi; \
	$(call run_sessions,$(SESSIONS))

# The developer's loop: everything but the stack and chaos tests (they start servers of their
# own and wait on timers), as two sessions at once: the flows with the Prefect test server, and
# the rest.
QUICK_SESSIONS := "tests/flows" "--ignore=$(STACK_TESTS) --ignore=$(CHAOS_TESTS) --ignore=tests/flows"
quick: bytecode
	@$(call run_sessions,$(QUICK_SESSIONS))

# nginx (Debian's nginx-light) for the TLS proxy in front of Prefect (deployments/tls_proxy.py)
# and its tests: installed when missing if we are root and have apt-get; otherwise it says what
# to install (the TLS tests then skip, and fail under CI=true).
NGINX_PACKAGE := nginx-light
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends
nginx:
	@if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing $(NGINX_PACKAGE) (the TLS proxy and its tests need nginx) ..."; \
		$(APT_INSTALL) $(NGINX_PACKAGE) \
			|| { apt-get update && $(APT_INSTALL) $(NGINX_PACKAGE); }; \
	else \
		echo "nginx is missing: the TLS proxy tests skip (under CI=true they fail)."; \
		echo "Install it as root: apt-get install -y --no-install-recommends $(NGINX_PACKAGE)"; \
	fi

## make test: lint, type-check and the whole test suite (what CI runs), all at once
CHECKS := $(LINT) && $(TYPECHECK)
test: nginx bytecode
	@$(call run_sessions,$(SESSIONS),$(CHECKS))

## make demo: the main job against the embedded sandbox and a local Prefect server
demo: bytecode
	$(RUN) python -m deployments.demo

## make serve: sandbox + Prefect server + worker + deployments, until Ctrl-C
serve: bytecode
	$(RUN) python -m deployments.serve

## make bench: benchmarks against a plain httpx baseline; appends bench/runs.json, writes RESULTS.md
bench: bytecode
	$(RUN) python -m bench

clean:
	rm -rf .venv .tools .mypy_cache .ruff_cache .pytest_cache
