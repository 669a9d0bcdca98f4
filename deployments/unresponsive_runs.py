"""Flow runs whose process died (a killed worker, a lost machine) are marked Crashed.

Without this, a run whose process is gone stays Running (or Pending) in the UI forever: nothing
is left to report its end. Every deployment's runs send a heartbeat every :data:`HEARTBEAT_SECONDS`
(``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` in prefect.yaml's job variables); this automation marks a
run Crashed when a heartbeat is followed by neither another heartbeat nor a final state within
the grace period. This is the automation Prefect documents for self-hosted servers ("detect
zombie flows"). Only runs that have sent a heartbeat are watched, so flows started without
heartbeats (a script, a test) are never touched.

Two more automations cover the moments before the first heartbeat arrives:

- a worker marks a run Pending, then starts its process; a worker that dies in between leaves
  the run Pending with no process at all: Pending for the grace period without starting means
  Crashed;
- the run's process sets it Running, then starts its heartbeats, which reach the server through
  the events connection moments later; a process killed in between leaves a Running run that
  never sent one (a killed worker's freshest runs, in a burst). A run of the project's work pool
  (whose deployments all send heartbeats: prefect.yaml) that is Running for the grace period
  without a heartbeat or a final state is marked Crashed too. Runs of other pools are left
  alone, as they may send no heartbeats at all.

Crashed runs of the deployments are then rescheduled by the crash-recovery flow
(``flows/recover_crashed_runs.py``), a bounded number of times: every flow is safe to rerun.
"""

from __future__ import annotations

import os
from datetime import timedelta

from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import StateType
from prefect.events.actions import ChangeFlowRunState
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
from prefect.events.schemas.events import ResourceSpecification

from compliance_api.errors import ConfigurationError
from deployments.resources import WORK_POOL_NAME

AUTOMATION_NAME = "compliance-flows: mark unresponsive flow runs Crashed"
PENDING_AUTOMATION_NAME = "compliance-flows: mark flow runs that never started Crashed"
SILENT_START_AUTOMATION_NAME = "compliance-flows: mark flow runs without a first heartbeat Crashed"
#: what prefect.yaml sets as PREFECT_FLOWS_HEARTBEAT_FREQUENCY (Prefect's minimum is 30 s)
HEARTBEAT_SECONDS = 30
#: three missed heartbeats: a busy machine may delay one, not three
DEFAULT_GRACE_SECONDS = 90
GRACE_ENV = "COMPLIANCE_UNRESPONSIVE_RUN_GRACE_SECONDS"

_FINAL_EVENTS = {
    "prefect.flow-run.Completed",
    "prefect.flow-run.Failed",
    "prefect.flow-run.Cancelled",
    "prefect.flow-run.Crashed",
}


def grace_seconds() -> int:
    """The grace period, from COMPLIANCE_UNRESPONSIVE_RUN_GRACE_SECONDS (default 90 s)."""
    raw = os.environ.get(GRACE_ENV, str(DEFAULT_GRACE_SECONDS))
    try:
        seconds = int(raw)
    except ValueError:
        raise ConfigurationError(f"{GRACE_ENV}={raw!r} is not a whole number of seconds") from None
    if seconds <= HEARTBEAT_SECONDS:
        raise ConfigurationError(
            f"{GRACE_ENV}={seconds} must be longer than the {HEARTBEAT_SECONDS} s between "
            "heartbeats, or live runs would be marked Crashed"
        )
    return seconds


def unresponsive_run_automation(grace: int) -> AutomationCore:
    return _mark_crashed(
        AUTOMATION_NAME,
        f"A flow run that sent a heartbeat and then nothing for {grace} s (no heartbeat, no "
        "final state) lost its process: it is marked Crashed so it stops showing as Running.",
        after="prefect.flow-run.heartbeat",
        expect={"prefect.flow-run.heartbeat", *_FINAL_EVENTS},
        grace=grace,
        message=f"No heartbeat for {grace} s: the flow run's process is gone.",
    )


def stuck_pending_automation(grace: int) -> AutomationCore:
    return _mark_crashed(
        PENDING_AUTOMATION_NAME,
        f"A flow run that stayed Pending for {grace} s never got its process (the worker "
        "that took it is gone): it is marked Crashed, so crash recovery reschedules it.",
        after="prefect.flow-run.Pending",
        expect={
            "prefect.flow-run.Running",
            "prefect.flow-run.Scheduled",
            "prefect.flow-run.AwaitingRetry",
            "prefect.flow-run.AwaitingConcurrencySlot",
            *_FINAL_EVENTS,
        },
        grace=grace,
        message=f"Pending for {grace} s without starting: its worker is gone.",
    )


def silent_start_automation(grace: int, pool: str = WORK_POOL_NAME) -> AutomationCore:
    return _mark_crashed(
        SILENT_START_AUTOMATION_NAME,
        f"A flow run of the {pool!r} work pool that was Running for {grace} s without a "
        "heartbeat lost its process before its first heartbeat: it is marked Crashed, so "
        "crash recovery reschedules it.",
        after="prefect.flow-run.Running",
        expect={"prefect.flow-run.heartbeat", *_FINAL_EVENTS},
        grace=grace,
        message=f"Running for {grace} s without a heartbeat: the flow run's process is gone.",
        related={"prefect.resource.role": "work-pool", "prefect.resource.name": pool},
    )


def _mark_crashed(
    name: str,
    description: str,
    *,
    after: str,
    expect: set[str],
    grace: int,
    message: str,
    related: dict[str, str] | None = None,
) -> AutomationCore:
    """A flow run that sent ``after`` and then none of ``expect`` for ``grace`` s: Crashed
    (only runs with the ``related`` resource, when given)."""
    return AutomationCore(
        name=name,
        description=description,
        trigger=EventTrigger(
            after={after},
            expect=expect,
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=ResourceSpecification(related or {}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=grace),
        ),
        actions=[ChangeFlowRunState(state=StateType.CRASHED, message=message)],
    )


async def _ensure(automation: AutomationCore, grace: int) -> str:
    """Create the automation unless one of that name exists: an operator may have changed its
    grace period or paused it, and bootstrap keeps operators' changes (delete it to recreate)."""
    async with get_client() as client:
        existing = await client.read_automations_by_name(automation.name)
        if existing:
            state = "enabled" if existing[0].enabled else "paused"
            return f"kept automation {automation.name!r} ({state})"
        await client.create_automation(automation)
    return f"created automation {automation.name!r} (grace {grace} s)"


async def ensure_unresponsive_run_detection() -> str:
    """The three automations: runs whose process died, runs that never got one, and runs whose
    process died before its first heartbeat."""
    grace = grace_seconds()
    running = await _ensure(unresponsive_run_automation(grace), grace)
    pending = await _ensure(stuck_pending_automation(grace), grace)
    silent = await _ensure(silent_start_automation(grace), grace)
    return f"{running}; {pending}; {silent}"
