"""Scale-out end to end: Prefect on PostgreSQL, three workers that share nothing but the Prefect
API, a burst of 40 discovered vendors, and one worker killed (with its flow runs) mid-burst.

Nothing may be lost: every vendor ends managed, by a run that ends Completed (a run the killed
worker held is marked Crashed and started again by crash recovery), with one token mint for all
three "machines" and no request ever answered 401.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest

from deployments.resources import CRASH_MAX_ATTEMPTS_VARIABLE
from deployments.stack import DEMO_CLIENT_ID, LocalStack, StackOptions
from sandbox.control import SandboxControl
from tests.fixtures.stack import (
    assert_no_secret_in_prefect_database,
    deployment_id,
    eventually,
    final,
    finished,
    flow_runs,
    run_deployment,
)

pytestmark = pytest.mark.timeout(600)

BRIDGE = "bridge-event-log/every-3-minutes"
PROMOTE = "Promote discovered vendors/promote-discovered-vendors"
RECOVER = "recover-crashed-run/recover-crashed-runs"
#: a deployment of the pool without crash recovery, for a run that never sends a heartbeat
REDELIVER = "redeliver-missed-events/redeliver-missed-events"
BURST = 40
WORKERS = 3
#: shorter than the 90 s default so the test waits less; still longer than the 30 s heartbeat
GRACE_SECONDS = 45


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, postgres_databases: Callable[[], str]
) -> Iterator[LocalStack]:
    options = StackOptions(
        state_dir=tmp_path_factory.mktemp("scale-out"),
        prefect_port=None,
        sandbox_port=None,
        ui=False,
        worker_poll_seconds=1.0,
        unresponsive_run_grace_seconds=GRACE_SECONDS,
        variables={CRASH_MAX_ATTEMPTS_VARIABLE: 3},
        startup_timeout=180.0,
        database_url=postgres_databases(),
        workers=WORKERS,
    )
    with LocalStack(options) as running:
        yield running


def test_workers_share_nothing_but_the_prefect_api(stack: LocalStack) -> None:
    homes = {stack.worker_env(name)["PREFECT_HOME"] for name in stack.worker_names()}
    states = {stack.worker_env(name)["COMPLIANCE_STATE_DIR"] for name in stack.worker_names()}
    assert len(homes) == len(states) == WORKERS
    assert all(Path(home).is_dir() for home in homes)  # Prefect would not create them itself
    assert not any(Path(a) in Path(b).parents for a in states for b in states)
    assert {stack.worker_env(n)["COMPLIANCE_TOKEN_STORE"] for n in stack.worker_names()} == {
        "prefect"
    }


def test_a_burst_with_a_worker_killed_mid_way_loses_nothing(stack: LocalStack) -> None:
    control = SandboxControl(stack.sandbox_url)
    started = datetime.now(UTC) - timedelta(seconds=5)
    vendors = {control.inject("vendor_discovered")["id"] for _ in range(BURST)}
    assert len(vendors) == BURST

    run_deployment(stack, BRIDGE, {"start_date": started.isoformat(), "reset_checkpoint": True})
    silent = started_without_a_heartbeat(stack)
    eventually("the first promotions", lambda: len(managed(control)) >= 5, timeout=240)
    victim = stack.workers()[0]
    tree = eventually("the victim to run flow runs", lambda: (t := victim.tree())[1:] and t)
    for process in tree:  # the worker and every flow run it started: a machine lost
        process.kill()
    psutil.wait_procs(tree, timeout=10)
    assert len(managed(control)) < BURST, "the kill came mid-burst"

    def all_done() -> list[dict[str, Any]] | None:
        runs = flow_runs(stack, PROMOTE)
        done = len(runs) >= BURST and final(runs)
        return runs if done and not busy_recoveries(stack) else None

    runs = eventually("every promotion to end", all_done, timeout=GRACE_SECONDS + 420)
    assert len(runs) == BURST, "one run per discovered vendor, reruns reuse the same run"
    assert {r["parameters"]["discovered_vendor_ids"][0] for r in runs} == vendors
    assert {r["state"]["type"] for r in runs} == {"COMPLETED"}, [
        (r["name"], r["state"]["type"], r["state"].get("message")) for r in runs
    ]
    assert set(managed(control)) == vendors  # every vendor promoted...
    stats = control.stats()
    assert stats["token_mints"] == {DEMO_CLIENT_ID: 1}, "one token for all three machines"
    assert stats["unauthorized"] == 0
    # ...and sent twice only where a crash made the outcome of the first call unknown
    # (a run the worker held may have died before it started: it crashed all the same)
    rerun = {r["parameters"]["discovered_vendor_ids"][0] for r in runs if crashed(stack, r)}
    assert rerun, "the runs the killed worker held crashed and were started again"
    assert {vendor for vendor, calls in managed(control).items() if calls > 1} <= rerun
    # a run whose process died after it set the run Running, before its first heartbeat
    silent_state = eventually(
        "the silent run to be marked Crashed", lambda: finished(stack, silent)
    )
    assert silent_state["type"] == "CRASHED", silent_state
    assert "without a heartbeat" in silent_state["message"]
    assert_no_secret_in_prefect_database(stack)


def started_without_a_heartbeat(stack: LocalStack) -> str:
    """A run of the pool set Running with no process behind it (none will ever send a
    heartbeat): what a worker killed a moment after its flow run started leaves behind."""
    path = f"/deployments/{deployment_id(stack, REDELIVER)}/create_flow_run"
    body = {"state": {"type": "RUNNING", "message": "its process is about to be killed"}}
    return str(stack.request("POST", path, body).json()["id"])


def managed(control: SandboxControl) -> dict[str, int]:
    """Promotion calls per discovered vendor (a repeat after a crash is harmless: the vendor
    is managed once, which is what the sandbox returns again)."""
    counts: dict[str, int] = control.stats()["write_counts"]["add_to_managed"]
    return counts


def crashed(stack: LocalStack, run: dict[str, Any]) -> bool:
    """Whether the run was ever Crashed (and so started again by crash recovery)."""
    history = stack.request("GET", f"/flow_run_states/?flow_run_id={run['id']}").json()
    return any(state["type"] == "CRASHED" for state in history)


def busy_recoveries(stack: LocalStack) -> bool:
    return not final(flow_runs(stack, RECOVER) or [{"state": {"type": "COMPLETED"}}])
