"""Runs whose process died are marked Crashed: the heartbeats prefect.yaml asks for, and the
automation bootstrap creates (against the session's real Prefect server)."""

from __future__ import annotations

from uuid import uuid4

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import StateType
from prefect.events.schemas.automations import AutomationCore

from compliance_api.errors import ConfigurationError
from deployments.automations import (
    GRACE_ENV,
    HEARTBEAT_SECONDS,
    crash_automations,
    ensure_unresponsive_run_detection,
    grace_seconds,
    notification_automation,
)
from deployments.resources import WORK_POOL_NAME
from tests.fixtures.prefect_yaml import DEPLOYMENTS

AUTOMATION_NAME = crash_automations(120)[0].name


def stuck_pending_automation(grace: int) -> AutomationCore:
    return crash_automations(grace)[1]


def silent_start_automation(grace: int) -> AutomationCore:
    return crash_automations(grace)[2]


def test_the_declared_automations_take_the_values_of_the_settings() -> None:
    """deployments/automations.yaml's placeholders are all filled, with values of their type."""
    automations = [*crash_automations(120, pool="another-pool"), notification_automation(uuid4())]
    for automation in automations:
        assert "${" not in automation.model_dump_json(), automation.name
    assert len({automation.name for automation in automations}) == 4
    assert all(a.trigger.within.total_seconds() == 120 for a in automations[:3])
    assert "'another-pool' work pool" in automations[2].description
    assert automations[2].trigger.match_related.model_dump()["prefect.resource.name"] == (
        "another-pool"
    )


def test_every_deployment_sends_heartbeats_the_automation_expects() -> None:
    for deployment in DEPLOYMENTS:
        env = deployment["work_pool"]["job_variables"]["env"]
        assert env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == str(HEARTBEAT_SECONDS), deployment


@pytest.mark.parametrize(("raw", "problem"), [("abc", "whole number"), ("30", "longer than")])
def test_a_grace_period_that_would_crash_live_runs_is_refused(
    raw: str, problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(GRACE_ENV, raw)
    with pytest.raises(ConfigurationError, match=rf"{GRACE_ENV}=.*{problem}"):
        grace_seconds()


@pytest.mark.usefixtures("prefect_server")
async def test_bootstrap_creates_the_automation_once_and_keeps_an_operators_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(GRACE_ENV, "120")
    async with get_client() as client:
        for old in await client.read_automations_by_name(AUTOMATION_NAME):
            await client.delete_automation(old.id)

    assert (await ensure_unresponsive_run_detection()).startswith("created")
    async with get_client() as client:
        (automation,) = await client.read_automations_by_name(AUTOMATION_NAME)
        trigger = automation.trigger
        assert trigger.posture == "Proactive"
        assert trigger.after == {"prefect.flow-run.heartbeat"}
        assert {"prefect.flow-run.heartbeat", "prefect.flow-run.Completed"} <= trigger.expect
        assert trigger.for_each == {"prefect.resource.id"}
        assert trigger.within.total_seconds() == 120
        (action,) = automation.actions
        assert action.state == StateType.CRASHED
        await client.pause_automation(automation.id)

    assert "paused" in await ensure_unresponsive_run_detection()
    async with get_client() as client:
        (kept,) = await client.read_automations_by_name(AUTOMATION_NAME)
    assert kept.id == automation.id and not kept.enabled


def test_a_run_left_pending_by_a_dead_worker_is_marked_crashed_after_the_grace() -> None:
    automation = stuck_pending_automation(120)
    trigger = automation.trigger
    assert trigger.posture == "Proactive" and trigger.after == {"prefect.flow-run.Pending"}
    assert {"prefect.flow-run.Running", "prefect.flow-run.Crashed"} <= trigger.expect
    assert "prefect.flow-run.Pending" not in trigger.expect  # staying Pending is the symptom
    assert trigger.for_each == {"prefect.resource.id"} and trigger.within.total_seconds() == 120
    (action,) = automation.actions
    assert action.state == StateType.CRASHED and "Pending for 120 s" in action.message


def test_a_run_of_the_pool_killed_before_its_first_heartbeat_is_marked_crashed() -> None:
    """The window between Running and the first heartbeat reaching the server (the scale-out
    test sees the real thing: a run set Running with no process)."""
    automation = silent_start_automation(120)
    trigger = automation.trigger
    assert trigger.posture == "Proactive" and trigger.after == {"prefect.flow-run.Running"}
    assert {"prefect.flow-run.heartbeat", "prefect.flow-run.Completed"} <= trigger.expect
    assert "prefect.flow-run.Running" not in trigger.expect
    # runs of other pools may send no heartbeats at all: only the project's pool is watched
    assert trigger.match_related.model_dump() == {
        "prefect.resource.role": "work-pool",
        "prefect.resource.name": WORK_POOL_NAME,
    }
    for deployment in DEPLOYMENTS:  # ...every deployment of which sends heartbeats
        assert deployment["work_pool"]["name"] == WORK_POOL_NAME
    (action,) = automation.actions
    assert action.state == StateType.CRASHED and "without a heartbeat" in action.message
