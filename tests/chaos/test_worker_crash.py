"""A worker killed mid-run together with the flow run it started (SIGKILL to the whole process
tree, as when its machine dies), then what an operator sees and does.

* The run stays Running until its heartbeats stop long enough: then the unresponsive-run
  automation that bootstrap creates marks it Crashed (deployments/automations.yaml).
* Crash recovery (flows/recover_crashed_runs.py) schedules the same run again, and the new
  worker finishes it. The new attempt starts from what the killed one recorded
  (write_engine/send_record.py) and the audit log's GROUP_PEOPLE_ADDED entries: every person
  is added exactly once in all, nobody is lost, and the stored token is reused.

Its own local stack (a real ``prefect server start``, ``prefect deploy --all``, a process
worker), so it is one of the slow scenarios (``CHAOS_FULL=1``, set by ``make test``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from deployments.stack import LocalStack
from sandbox.apps import DEMO_MANAGE
from sandbox.control import SandboxControl
from tests.fixtures.chaos import ADD_PEOPLE, slow
from tests.fixtures.stack import (
    assert_no_secret_in_prefect_database,
    deployment_id,
    eventually,
    kill_machine,
    replace_worker,
    run_deployment,
    stack_options,
    state_of,
)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

DEPLOYMENT = "add-people-to-groups/on-demand"
#: shorter than the 90 s default so the test waits less; still longer than the 30 s heartbeat
GRACE_SECONDS = 45


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LocalStack]:
    options = stack_options(
        state_dir=tmp_path / "stack",
        unresponsive_run_grace_seconds=GRACE_SECONDS,
    )
    with LocalStack(options) as running:
        yield running


@slow
def test_worker_killed_mid_run_is_marked_crashed_and_the_rerun_finishes(
    stack: LocalStack,
) -> None:
    control = SandboxControl(stack.sandbox_url)
    seed = control.seed()
    group, people = seed["groups"][0], seed["people"][:400]
    parameters = {
        "group_ids": [group],
        "person_ids": people,
        "concurrency": 1,
    }
    # this test is about the crash, not the approval: the deployment's policy off (an admin's
    # change; a run's own require_approval: false would not do)
    deployment = deployment_id(stack, DEPLOYMENT)
    policy = {"parameters": {"require_approval": False}}
    stack.request("PATCH", f"/deployments/{deployment}", policy)
    control.set_fault(route=ADD_PEOPLE, latency_ms=500)

    killed_run = run_deployment(stack, DEPLOYMENT, parameters)
    # the bound only ends a hung run: on a starved machine the run's start alone took over 120 s
    eventually("the first chunks", lambda: len(adds(control, group)) >= 100, timeout=300)
    (worker,) = stack.workers()
    tree = kill_machine(psutil.Process(worker.pid))
    assert len(tree) >= 2, "the worker and the flow run process it started"
    control.clear_faults()
    before = adds(control, group)
    assert 100 <= len(before) < len(people) and max(before.values()) == 1
    assert state_of(stack, killed_run)["type"] == "RUNNING", "nothing is left to report its end"

    # A new worker (the machine back); the dead run is marked Crashed, crash recovery
    # schedules the same run again, and the new worker finishes it.
    replace_worker(stack, worker.name)
    finished = eventually(
        "the killed run to be recovered",
        lambda: (s := state_of(stack, killed_run))["type"] in {"COMPLETED", "FAILED"} and s,
        timeout=GRACE_SECONDS + 240,
    )
    assert finished["type"] == "COMPLETED", finished
    # nobody lost and nobody sent twice: what the killed attempt applied is not sent again
    assert adds(control, group) == {person: 1 for person in people}
    assert control.stats()["token_mints"] == {DEMO_MANAGE.client_id: 1}, (
        "the stored token is reused"
    )
    history = stack.request("GET", f"/flow_run_states/?flow_run_id={killed_run}").json()
    states = [state["type"] for state in history]
    assert "CRASHED" in states  # marked Crashed (no heartbeat), then scheduled again
    assert_no_secret_in_prefect_database(stack)  # nor after a crash and a new worker


def adds(control: SandboxControl, group: str) -> dict[str, int]:
    counts: dict[str, int] = control.stats()["group_add_counts"].get(group, {})
    return counts
