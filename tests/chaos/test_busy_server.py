"""A busy Prefect server costs time, never items: several processes each start several
promotions at once, and the server stops answering for longer than the old fence's 30 s limit.

Each child process calls the flow function directly, as scripts do (no deployment: no one could
start these runs again, so none may be given up for slowness). Mid-run the Prefect server is
frozen (SIGSTOP) for ``FROZEN_SECONDS``: no confirmation, no Variable write, no log gets an
answer. Once it answers again every run must finish: each vendor promoted exactly once (the
sandbox counts the calls), every run Completed on the server and in its caller, no run aborted
and no ``BaseException`` in any caller. On the SQLite default and on PostgreSQL.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from deployments.prefect_server import PrefectServer, PrefectServerOptions
from deployments.stack import free_port
from sandbox.runner import SandboxHandle
from tests.fixtures.chaos import child_env, slow, start_child
from tests.fixtures.flows import TEST_TOKEN_LIMIT
from tests.fixtures.stack import managed

#: only ends a hung test: the server's start (up to 130 s on a starved 2-core machine) counts
#: too, and after the thaw Prefect's client backs off 2, 4, 8 ... s per retry (475 s seen once)
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(1200)]

PROCESSES = 4
RUNS_PER_PROCESS = 5
VENDORS_PER_RUN = 2
#: longer than the 30 s after which the old fence gave a run up
FROZEN_SECONDS = 40
ROUTE = "POST /v1/discovered-vendors/{discoveredVendorId}/add-to-managed"

CHILD = """
import asyncio, json, sys
from flows.promote_vendors import promote_discovered_vendors

async def main(chunks):
    async def one(ids):
        try:
            summary = await promote_discovered_vendors(discovered_vendor_ids=ids)
            counts = {k.value: v for k, v in summary.counts.items()}
            return {"ids": ids, "ok": True, "counts": counts}
        except Exception as error:  # a BaseException would end the process: the test sees it
            return {"ids": ids, "ok": False, "error": f"{type(error).__name__}: {error}"}
    for result in await asyncio.gather(*(one(ids) for ids in chunks)):
        print("RESULT " + json.dumps(result), flush=True)

asyncio.run(main(json.loads(CHUNKS_JSON)))
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def busy_server(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    postgres_databases: Callable[[], str],
) -> Iterator[PrefectServer]:
    """A Prefect server of the project's own (its orchestration rule included) on each backend."""
    base_env = {
        name: value for name, value in os.environ.items() if not name.startswith("PREFECT_")
    } | {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING"}
    options = PrefectServerOptions(
        port=free_port(),
        home=tmp_path / "prefect",
        log_path=tmp_path / "server.log",
        database_url=postgres_databases() if request.param == "postgresql" else None,
    )
    server = PrefectServer(options, base_env=base_env)
    server.start()
    try:
        limit = {"name": TEST_TOKEN_LIMIT, "limit": 100, "slot_decay_per_second": 100.0}
        created = httpx.post(f"{server.api_url}/v2/concurrency_limits/", json=limit, timeout=30)
        created.raise_for_status()  # the token endpoint's throttle, as bootstrap would create
        yield server
    finally:
        server.stop()


def frozen(server: PrefectServer) -> list[psutil.Process]:
    """The server's processes (its uvicorn, in the process it starts), all stopped."""
    assert server.child is not None
    root = psutil.Process(server.child.process.pid)
    processes = [root, *root.children(recursive=True)]
    for process in processes:
        process.send_signal(signal.SIGSTOP)
    return processes


def thaw(processes: list[psutil.Process]) -> None:
    for process in processes:
        process.send_signal(signal.SIGCONT)


@slow
def test_a_frozen_server_costs_time_not_items(
    chaos_env: SandboxHandle, seed: dict[str, Any], busy_server: PrefectServer
) -> None:
    total = PROCESSES * RUNS_PER_PROCESS * VENDORS_PER_RUN
    vendors = seed["discovered_vendors"][:total]
    assert len(vendors) == total
    chaos_env.control.set_fault(ROUTE, latency_ms=1000)
    env = child_env({"PREFECT_API_URL": busy_server.api_url})
    per_process = RUNS_PER_PROCESS * VENDORS_PER_RUN
    children = []
    for number in range(PROCESSES):
        mine = vendors[number * per_process : (number + 1) * per_process]
        chunks = [mine[i : i + VENDORS_PER_RUN] for i in range(0, per_process, VENDORS_PER_RUN)]
        code = CHILD.replace("CHUNKS_JSON", repr(json.dumps(chunks)))
        children.append(start_child(code, env))

    deadline = time.monotonic() + 180
    while sum(managed(chaos_env.control).values()) < PROCESSES and time.monotonic() < deadline:
        time.sleep(0.2)
    processes = frozen(busy_server)
    time.sleep(FROZEN_SECONDS)
    thaw(processes)

    outputs = [child.communicate(timeout=300) for child in children]
    results = [
        json.loads(line.removeprefix("RESULT "))
        for out, _ in outputs
        for line in out.splitlines()
        if line.startswith("RESULT ")
    ]
    errors = "\n".join(err[-2000:] for _, err in outputs)
    assert [child.returncode for child in children] == [0] * PROCESSES, errors
    assert len(results) == PROCESSES * RUNS_PER_PROCESS, errors
    assert [r for r in results if not r["ok"]] == [], errors
    assert all(r["counts"] == {"succeeded": VENDORS_PER_RUN} for r in results), results
    assert managed(chaos_env.control) == {vendor: 1 for vendor in vendors}
    assert "no longer this process's" not in errors
    assert "has not confirmed flow run" in errors  # runs did wait for the frozen server
    runs = httpx.post(f"{busy_server.api_url}/flow_runs/filter", json={}, timeout=30).json()
    started = [run["state"]["type"] for run in runs if run["run_count"] >= 1]
    assert started == ["COMPLETED"] * PROCESSES * RUNS_PER_PROCESS, started
    # Prefect's client resends a create that timed out (httpx.ReadTimeout): a frozen server that
    # applied the first one late leaves a copy no engine runs, Pending; it holds no item
    ghosts = [run for run in runs if run["run_count"] == 0]
    assert all(run["state"]["type"] == "PENDING" for run in ghosts), ghosts
