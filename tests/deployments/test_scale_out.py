"""Scale-out end to end: Prefect on PostgreSQL, three workers that share nothing but the Prefect
API, a burst of 40 discovered vendors, and the worker running their promotion killed (with its
flow runs) mid-run.

Nothing may be lost: every vendor ends managed, by a run that ends Completed (the coalesced run
the killed worker held is marked Crashed and started again by crash recovery; it reads the
audit log from the checkpoint it had not moved yet), with one token mint for all three
"machines" and no request ever answered 401.

Before the burst the stack's Prefect server is restarted with the lease of a killed lock holder
outstanding: the lock must stay taken through the restart and be free again within 90 s of the
kill. That check waits out the 60 s lease in a thread while the burst runs, so the suite spends
that minute once.
"""

from __future__ import annotations

import asyncio
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest
from prefect.settings import temporary_settings

from deployments.resources import CRASH_MAX_ATTEMPTS_VARIABLE
from deployments.stack import LocalStack
from runtime.locks import LEASE_SECONDS, LockTimeoutError, hold_lock
from sandbox.apps import DEMO_MANAGE
from sandbox.control import SandboxControl
from tests.fixtures.chaos import child_env, kill_hard, start_child
from tests.fixtures.stack import (
    ADD_TO_MANAGED,
    BRIDGE,
    PROMOTE,
    StackWithVariables,
    assert_no_secret_in_prefect_database,
    client_settings,
    deployment_id,
    eventually,
    final,
    finished,
    flow_runs,
    kill_machine,
    managed,
    restart_prefect_server,
    run_deployment,
    stack_options,
    triggered_runs,
)

pytestmark = pytest.mark.timeout(600)

RECOVER = "recover-crashed-run/on-crash"
BURST = 40
#: every promotion call takes this long, so the killed worker's runs are caught mid-run
PROMOTION_LATENCY_MS = 1500
WORKERS = 3
#: shorter than the 90 s default so the test waits less; still longer than the 30 s heartbeat
GRACE_SECONDS = 45
#: the bound the project promises for a crashed lock holder (lease 60 s + repossessor every 15 s)
CRASHED_HOLDER_BOUND_SECONDS = 90


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, postgres_databases: Callable[[], str]
) -> Iterator[LocalStack]:
    options = stack_options(
        state_dir=tmp_path_factory.mktemp("scale-out"),
        unresponsive_run_grace_seconds=GRACE_SECONDS,
        database_url=postgres_databases(),
        workers=WORKERS,
    )
    with StackWithVariables(options, {CRASH_MAX_ATTEMPTS_VARIABLE: 3}) as running:
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


@dataclass
class KilledHolder:
    """A lock whose holder was killed before a server restart, and what became of it."""

    name: str
    killed_at: float
    held_after_restart: bool
    freed_after_seconds: float | None = None
    error: BaseException | None = None
    waiter: threading.Thread = field(init=False)


HOLDER = """
import asyncio
from runtime.locks import hold_lock

async def main():
    async with hold_lock({name!r}, wait_seconds=30, what="the test lock"):
        print("HELD", flush=True)
        await asyncio.sleep(600)

asyncio.run(main())
"""


async def lock_is_taken(stack: LocalStack, name: str) -> bool:
    with temporary_settings(client_settings(stack)):
        try:
            async with hold_lock(name, wait_seconds=1, what="the test lock"):
                return False
        except LockTimeoutError:
            return True


async def wait_for_lock(stack: LocalStack, name: str, wait_seconds: float) -> None:
    with temporary_settings(client_settings(stack)):
        async with hold_lock(name, wait_seconds=wait_seconds, what="the test lock"):
            pass


@pytest.fixture(scope="module")
def killed_lock_holder(stack: LocalStack) -> Iterator[KilledHolder]:
    """A holder of a lock killed hard, then the Prefect server restarted; a thread then waits
    for the lock (at most until 90 s after the kill) and records when it got it."""
    assert LEASE_SECONDS + 15 < CRASHED_HOLDER_BOUND_SECONDS
    name = f"restart-{uuid.uuid4().hex[:8]}"
    code = textwrap.dedent(HOLDER.format(name=name))
    child = start_child(code, child_env(stack.client_env()))
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "HELD"
    kill_hard(child)
    holder = KilledHolder(name, time.monotonic(), held_after_restart=False)
    restart_prefect_server(stack)
    holder.held_after_restart = asyncio.run(lock_is_taken(stack, name))

    def wait() -> None:
        left = CRASHED_HOLDER_BOUND_SECONDS - (time.monotonic() - holder.killed_at)
        try:
            asyncio.run(wait_for_lock(stack, name, left))
            holder.freed_after_seconds = time.monotonic() - holder.killed_at
        except BaseException as error:  # reported by the test, not lost in the thread
            holder.error = error

    holder.waiter = threading.Thread(target=wait, name="lock-waiter", daemon=True)
    holder.waiter.start()
    yield holder
    holder.waiter.join(timeout=CRASHED_HOLDER_BOUND_SECONDS)


def test_a_burst_with_a_worker_killed_mid_way_loses_nothing(
    stack: LocalStack, killed_lock_holder: KilledHolder
) -> None:
    control = SandboxControl(stack.sandbox_url)
    control.set_fault(ADD_TO_MANAGED, latency_ms=PROMOTION_LATENCY_MS)
    started = datetime.now(UTC) - timedelta(seconds=5)
    vendors = {control.inject("vendor_discovered")["id"] for _ in range(BURST)}
    assert len(vendors) == BURST

    run_deployment(stack, BRIDGE, {"start_date": started.isoformat(), "reset_checkpoint": True})
    silent = started_without_a_heartbeat(stack)
    eventually("the first promotions", lambda: len(managed(control)) >= 2, timeout=240)
    promote = deployment_id(stack, PROMOTE)
    tree = eventually("the worker running the promotion", lambda: running_promotion(stack, promote))
    kill_machine(tree[0])
    assert len(managed(control)) < BURST, "the kill came mid-burst"

    seen: list[dict[str, Any]] = []

    def all_done() -> list[dict[str, Any]] | None:
        seen[:] = runs = triggered_runs(stack, PROMOTE)
        done = bool(runs) and final(runs) and set(managed(control)) >= vendors
        return runs if done and not busy_recoveries(stack) else None

    try:
        runs = eventually("every promotion to end", all_done, timeout=GRACE_SECONDS + 420)
    except AssertionError as timeout:
        states = Counter(run["state"]["type"] for run in seen)
        missing = vendors - set(managed(control))
        raise AssertionError(
            f"{timeout}: runs {dict(states)}, vendors not managed {missing}"
        ) from None
    assert len(runs) <= 3, "a burst is one run (or a few), restarted in place after a crash"
    assert {r["state"]["type"] for r in runs} == {"COMPLETED"}, [
        (r["name"], r["state"]["type"], r["state"].get("message")) for r in runs
    ]
    assert set(managed(control)) == vendors  # every vendor promoted
    stats = control.stats()
    assert stats["token_mints"] == {DEMO_MANAGE.client_id: 1}, "one token for all three machines"
    assert stats["unauthorized"] == 0
    assert any(crashed(stack, r) for r in runs), "the killed run crashed and was started again"
    # a run whose process died after it set the run Running, before its first heartbeat
    silent_state = eventually(
        "the silent run to be marked Crashed", lambda: finished(stack, silent)
    )
    assert silent_state["type"] == "CRASHED", silent_state
    assert "without a heartbeat" in silent_state["message"]
    assert_no_secret_in_prefect_database(stack)


def started_without_a_heartbeat(stack: LocalStack) -> str:
    """A run of the pool set Running with no process behind it (none will ever send a
    heartbeat): what a worker killed a moment after its flow run started leaves behind. A run
    of crash recovery itself, which is not recovered, so it stays Crashed."""
    path = f"/deployments/{deployment_id(stack, RECOVER)}/create_flow_run"
    body = {
        "state": {"type": "RUNNING", "message": "its process is about to be killed"},
        "parameters": {"flow_run_id": str(uuid.uuid4())},
    }
    return str(stack.request("POST", path, body).json()["id"])


def running_promotion(stack: LocalStack, promote: str) -> list[psutil.Process] | None:
    """The worker (and its flow-run processes) one of whose processes runs a run of the
    deployment ``promote`` that is Running now (a kill then surely interrupts it: a process
    whose run has just ended would not)."""
    for worker in stack.workers():
        tree = worker.tree()
        for process in tree[1:]:
            try:
                run_id = process.environ().get("PREFECT__FLOW_RUN_ID")
            except psutil.Error:  # gone already, or not a flow run
                continue
            if run_id:
                run = stack.request("GET", f"/flow_runs/{run_id}").json()
                if run["deployment_id"] == promote and run["state"]["type"] == "RUNNING":
                    return tree
    return None


def crashed(stack: LocalStack, run: dict[str, Any]) -> bool:
    """Whether the run was ever Crashed (and so started again by crash recovery)."""
    history = stack.request("GET", f"/flow_run_states/?flow_run_id={run['id']}").json()
    return any(state["type"] == "CRASHED" for state in history)


def busy_recoveries(stack: LocalStack) -> bool:
    return not final(flow_runs(stack, RECOVER) or [{"state": {"type": "COMPLETED"}}])


def test_a_killed_lock_holder_blocks_others_for_at_most_90_s_even_across_a_restart(
    killed_lock_holder: KilledHolder,
) -> None:
    """The restart did not forget the dead holder's lease, nor keep its slot for ever."""
    assert killed_lock_holder.held_after_restart
    killed_lock_holder.waiter.join(timeout=CRASHED_HOLDER_BOUND_SECONDS)
    assert killed_lock_holder.error is None, repr(killed_lock_holder.error)
    assert killed_lock_holder.freed_after_seconds is not None  # within the waiter's bound
