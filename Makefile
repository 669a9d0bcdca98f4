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

.PHONY: test demo serve bench lint typecheck pytest sync clean nginx

$(CURDIR)/.tools/bin/uv:
	python3 -m venv .tools
	.tools/bin/python -m pip install --quiet --disable-pip-version-check uv

# --compile-bytecode: where PYTHONDONTWRITEBYTECODE is set, every new process (Prefect server,
# worker, flow run) would otherwise compile Prefect from source: seconds each.
.venv/.synced: uv.lock pyproject.toml | $(UV)
	$(UV) sync --locked --all-groups --compile-bytecode
	@touch $@

sync: .venv/.synced

lint: sync
	$(RUN) ruff check .
	$(RUN) ruff format --check .

typecheck: sync
	$(RUN) mypy

# The stack tests (tests/deployments: real servers, workers and hosts) spend most of their time
# waiting on Prefect's timers (crash detection, leases, heartbeats), so they run beside the rest
# of the suite instead of after it: three pytest sessions at once, each with its own servers,
# and each printing its own result (the slowest tests too). PYTEST_ARGS (e.g. a test file) runs
# one session with those arguments instead.
STACK_TESTS := tests/deployments
LONG_WAITS := $(addprefix $(STACK_TESTS)/,test_multi_host.py test_scale_out.py test_replicas.py test_hosts.py)
PYTEST_SESSION := $(RUN) pytest -q -p no:cacheprovider --durations=5
pytest: sync
	@if [ -n "$(PYTEST_ARGS)" ]; then exec $(RUN) pytest -q $(PYTEST_ARGS); fi; \
	waits=$$(mktemp); stacks=$$(mktemp); \
	$(PYTEST_SESSION) $(LONG_WAITS) > "$$waits" 2>&1 & waits_pid=$$!; \
	$(PYTEST_SESSION) $(STACK_TESTS) $(addprefix --ignore=,$(LONG_WAITS)) > "$$stacks" 2>&1 & stacks_pid=$$!; \
	$(PYTEST_SESSION) --ignore=$(STACK_TESTS); rest=$$?; \
	wait $$waits_pid; waits_status=$$?; wait $$stacks_pid; stacks_status=$$?; \
	echo "== $(LONG_WAITS) (run beside the rest) =="; cat "$$waits"; \
	echo "== the other $(STACK_TESTS) tests (run beside the rest) =="; cat "$$stacks"; \
	rm -f "$$waits" "$$stacks"; \
	[ $$rest -eq 0 ] && [ $$waits_status -eq 0 ] && [ $$stacks_status -eq 0 ]

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

## make test: lint, type-check and the whole test suite (what CI runs)
test: nginx lint typecheck pytest

## make demo: the main job against the embedded sandbox and a local Prefect server
demo: sync
	$(RUN) python -m deployments.demo

## make serve: sandbox + Prefect server + worker + deployments, until Ctrl-C
serve: sync
	$(RUN) python -m deployments.serve

## make bench: benchmarks against a plain httpx baseline; appends bench/runs.json, writes RESULTS.md
bench: sync
	$(RUN) python -m bench

clean:
	rm -rf .venv .tools .mypy_cache .ruff_cache .pytest_cache
