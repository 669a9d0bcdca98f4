"""prefect.yaml and the stack's process handling, checked without starting a server.

The triggers' parameters are rendered the way the Prefect server renders them for a
RunDeployment action, so a template mistake fails here in a second, not in the e2e test.
"""

from __future__ import annotations

import contextlib
import copy
import os
import stat
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
from prefect.cli.deploy._triggers import DeploymentTriggerAdapter
from prefect.flows import Flow, load_flow_from_entrypoint
from prefect.server.events.actions import RunDeployment
from prefect.server.events.jinja_filters import all_filters
from prefect.server.events.schemas.events import (
    ReceivedEvent,
    RelatedResource,
    Resource,
    ResourceSpecification,
)
from prefect.server.schemas.actions import DeploymentScheduleCreate
from prefect.server.utilities.user_templates import register_user_template_filters
from prefect.utilities.schema_tools.hydration import HydrationContext, hydrate
from prefect.utilities.templating import apply_values

from deployments.processes import ChildProcess
from deployments.resources import PROJECT_DIR, WORK_POOL_NAME
from deployments.stack import encryption_key
from tests.fixtures.prefect_yaml import CONFIG, DEPLOYMENTS
from write_engine.reporting import RETRYABLE_LABEL

WRITE_FLOWS = {
    "promote_discovered_vendors",
    "add_people_to_groups",
    "update_account_tags",
    "route_questionnaires",
    "attach_document_links",
    "rerun_failed_items",
}


def deployment(function: str) -> dict[str, Any]:
    (found,) = [d for d in DEPLOYMENTS if d["entrypoint"].endswith(f":{function}")]
    return dict(found)


def render(parameters: dict[str, Any], event: ReceivedEvent) -> dict[str, Any]:
    """What the automation's RunDeployment action sends, after `prefect deploy` templating."""
    deployed = apply_values(copy.deepcopy(parameters), dict(os.environ), remove_notset=False)
    RunDeployment._upgrade_v1_templates(deployed)
    register_user_template_filters(all_filters)
    context = HydrationContext(
        raise_on_error=True, render_jinja=True, jinja_context={"event": event}
    )
    return dict(hydrate(deployed, context))


def received(name: str, resource: dict[str, str], payload: dict[str, Any]) -> ReceivedEvent:
    return ReceivedEvent(
        occurred=datetime.now(UTC),
        event=name,
        resource=resource,
        payload=payload,
        id=uuid.uuid4(),
    )


def audit_resource(kind: str, type_name: str, target: str) -> dict[str, str]:
    return {
        "prefect.resource.id": f"compliance.{kind}.{target}",
        "compliance.target.id": target,
        "compliance.target.type": type_name,
    }


def test_every_deployment_loads_its_flow_on_the_process_pool() -> None:
    assert CONFIG["build"] is None and CONFIG["push"] is None
    (pull,) = CONFIG["pull"]
    directory = pull["prefect.deployments.steps.set_working_directory"]["directory"]
    assert directory == "{{ prefect.variables.compliance_project_dir }}"
    names = set()
    for spec in DEPLOYMENTS:
        assert spec["work_pool"]["name"] == WORK_POOL_NAME
        assert spec["description"].strip()
        assert "compliance" in spec["tags"]
        loaded = load_flow_from_entrypoint(str(PROJECT_DIR / spec["entrypoint"]))
        assert isinstance(loaded, Flow)
        names.add((loaded.name, spec["name"]))
    assert len(names) == len(DEPLOYMENTS)  # flow/deployment names are unique
    functions = {spec["entrypoint"].split(":")[1] for spec in DEPLOYMENTS}
    assert WRITE_FLOWS | {"bridge_event_log", "knowledge_base_freshness"} <= functions


async def test_the_server_computes_the_dates_of_every_schedule() -> None:
    """Each schedule, as `prefect deploy` sends it, yields its next runs with the installed
    Prefect server (3.9.1's cron dates fail on Python < 3.13, so none is a cron), daily ones
    at the time they name."""
    for spec in DEPLOYMENTS:
        for raw in spec.get("schedules", []):
            selector = {key: raw[key] for key in ("cron", "interval", "rrule") if key in raw}
            schedule = DeploymentScheduleCreate(schedule=selector | {"timezone": "UTC"})
            dates = await schedule.schedule.get_dates(n=2)
            assert len(dates) == 2, (spec["name"], raw)
            if "rrule" in raw:
                assert (dates[1] - dates[0]).total_seconds() == 24 * 3600
                hour = int(raw["rrule"].split("BYHOUR=")[1].split(";")[0])
                assert dates[0].hour == hour


#: the event-triggered writes: their schedule is the catch-up
AUDIT_LOG_WRITES = {"promote_discovered_vendors", "route_questionnaires"}


def test_schedules_bridge_often_reports_daily_writes_on_demand_or_catching_up() -> None:
    (bridge,) = deployment("bridge_event_log")["schedules"]
    assert 120 <= bridge["interval"] <= 300 and bridge["active"]
    for function in ("knowledge_base_freshness", "export_event_log"):
        (daily,) = deployment(function)["schedules"]
        assert daily["rrule"].startswith("FREQ=DAILY;")
    for function in WRITE_FLOWS - AUDIT_LOG_WRITES:
        assert not deployment(function).get("schedules")


@pytest.mark.parametrize("function", sorted(AUDIT_LOG_WRITES))
def test_an_event_triggered_write_catches_up_on_a_schedule_one_run_at_a_time(
    function: str,
) -> None:
    """Whatever no event woke a run for is read from the audit log within 15 minutes, by the
    same run the trigger starts; runs queue instead of overlapping."""
    spec = deployment(function)
    (catch_up,) = spec["schedules"]
    assert catch_up["active"] and 0 < catch_up["interval"] <= 15 * 60
    (trigger,) = spec["triggers"]
    assert catch_up["parameters"] == trigger["parameters"]
    assert catch_up["parameters"]["from_audit_log"] is True
    assert spec["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}


@pytest.mark.parametrize("function", sorted(AUDIT_LOG_WRITES))
def test_a_burst_of_entries_starts_one_run_after_the_burst(function: str) -> None:
    """Prefect's debounce: fire on the first event, not again for `within` seconds, and start
    the run no earlier than the end of that window, so it reads every entry of the window."""
    (trigger,) = deployment(function)["triggers"]
    assert trigger["posture"] == "Reactive" and trigger["threshold"] == 1
    assert 0 < trigger["within"] <= trigger["schedule_after"] <= 60


def test_every_trigger_is_a_valid_deployment_trigger() -> None:
    triggers = [t for spec in DEPLOYMENTS for t in spec.get("triggers", [])]
    assert len(triggers) == 4
    for trigger in triggers:
        spec = copy.deepcopy(trigger)
        if isinstance(spec.get("schedule_after"), str):
            spec["schedule_after"] = 0  # a variable placeholder until `prefect deploy`
        parsed = DeploymentTriggerAdapter.validate_python(spec)
        assert parsed.enabled


def test_vendor_discovered_starts_a_promotion_of_what_the_audit_log_has() -> None:
    (trigger,) = deployment("promote_discovered_vendors")["triggers"]
    assert trigger["expect"] == ["compliance.vendor_discovered"]
    event = received(
        "compliance.vendor_discovered",
        audit_resource("discoveredvendor", "DiscoveredVendor", "dv-7"),
        {},
    )
    assert render(trigger["parameters"], event) == {"from_audit_log": True}


def test_questionnaire_ready_for_review_is_routed_to_approval() -> None:
    (trigger,) = deployment("route_questionnaires")["triggers"]
    assert trigger["expect"] == ["compliance.questionnaire_ready_for_review"]
    event = received(
        "compliance.questionnaire_ready_for_review",
        audit_resource("questionnaire", "Questionnaire", "q-9"),
        {},
    )
    rendered = render(trigger["parameters"], event)
    assert rendered["from_audit_log"] is True and "questionnaire_ids" not in rendered
    assert rendered["route"] == ["IN_REVIEW"] and rendered["approve"] is True


def test_failed_items_rerun_the_same_run_with_the_next_attempt_after_a_delay() -> None:
    (trigger,) = deployment("rerun_failed_items")["triggers"]
    assert trigger["expect"] == ["compliance.write-run.failed-items"]
    assert trigger["schedule_after"] == "{{ prefect.variables.compliance_rerun_delay_seconds }}"
    run_id = str(uuid.uuid4())
    event = received(
        "compliance.write-run.failed-items",
        {"prefect.resource.id": f"prefect.flow-run.{run_id}"},
        {"flow_run_id": run_id, "attempt": 2, "failed": 1},
    )
    parameters = dict(trigger["parameters"])
    parameters["max_attempts"] = 3  # resolved from the variable by `prefect deploy`
    assert render(parameters, event) == {
        "flow_run_id": run_id,
        "attempt": 3,
        "max_attempts": 3,
        "retryable_only": True,
    }


def test_only_runs_with_retryable_failures_are_rerun_automatically() -> None:
    (trigger,) = deployment("rerun_failed_items")["triggers"]
    spec = ResourceSpecification.model_validate(trigger["match"])
    run = f"prefect.flow-run.{uuid.uuid4()}"
    for label, matches in [("true", True), ("false", False), (None, False)]:
        labels = {"prefect.resource.id": run}
        if label is not None:
            labels[RETRYABLE_LABEL] = label
        assert spec.matches(Resource(root=labels)) is matches, label


def crashed_event(tags: list[str]) -> ReceivedEvent:
    run_id = uuid.uuid4()
    event = received(
        "prefect.flow-run.Crashed", {"prefect.resource.id": f"prefect.flow-run.{run_id}"}, {}
    )
    related = [
        {"prefect.resource.id": f"prefect.tag.{tag}", "prefect.resource.role": "tag"}
        for tag in tags
    ]
    return event.model_copy(update={"related": [RelatedResource(root=r) for r in related]})


def test_a_crashed_run_of_any_deployment_but_the_recovery_ones_is_recovered() -> None:
    """Not recovered: crash recovery itself."""
    (trigger,) = deployment("recover_crashed_run")["triggers"]
    assert trigger["expect"] == ["prefect.flow-run.Crashed"]
    match = ResourceSpecification.model_validate(trigger["match"])
    related = ResourceSpecification.model_validate(trigger["match_related"])
    recovery = {deployment("recover_crashed_run")["entrypoint"]}
    for spec in DEPLOYMENTS:
        event = crashed_event(spec["tags"])
        assert match.matches(event.resource)
        recovered = any(related.matches(resource) for resource in event.related)
        assert recovered is (spec["entrypoint"] not in recovery), spec["entrypoint"]
    event = crashed_event(["compliance", "crash-recovery"])
    parameters = dict(trigger["parameters"])
    parameters["max_attempts"] = 3  # resolved from the variable by `prefect deploy`
    assert render(parameters, event) == {"flow_run_id": event.resource.id, "max_attempts": 3}


def test_audit_log_readers_run_one_at_a_time_and_runs_retry_a_busy_server() -> None:
    for function in ("bridge_event_log", "export_event_log", *AUDIT_LOG_WRITES):
        limit = deployment(function)["concurrency_limit"]
        assert limit == {"limit": 1, "collision_strategy": "ENQUEUE"}
    for spec in DEPLOYMENTS:
        env = spec["work_pool"]["job_variables"]["env"]
        assert int(env["PREFECT_CLIENT_MAX_RETRIES"]) >= 10


def test_encryption_key_is_created_once_and_readable_only_by_us(tmp_path: Path) -> None:
    first = encryption_key(tmp_path)
    assert encryption_key(tmp_path) == first
    mode = stat.S_IMODE((tmp_path / "token-encryption.key").stat().st_mode)
    assert mode == 0o600


def test_stop_kills_grandchildren_in_their_own_process_group(tmp_path: Path) -> None:
    # like a worker's flow run: a grandchild in a new session ignores the child's group signal
    script = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
        " start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    child = ChildProcess(
        "parent",
        [sys.executable, "-c", script],
        env=dict(os.environ),
        cwd=tmp_path,
        log_path=tmp_path / "parent.log",
    )
    log = tmp_path / "parent.log"
    deadline = time.monotonic() + 30
    while not log.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = psutil.Process(int(log.read_text().split()[0]))
    assert grandchild.is_running()
    child.stop(grace_seconds=2)
    assert not child.alive()
    gone, _ = psutil.wait_procs([grandchild], timeout=5)
    assert gone or grandchild.status() == psutil.STATUS_ZOMBIE


def test_stop_kills_what_the_child_starts_while_it_shuts_down(tmp_path: Path) -> None:
    # like a worker that starts one more flow run after SIGTERM, in a session of its own, and
    # exits a moment later: that run is no longer below the child when the child is gone
    script = (
        "import signal, subprocess, sys, time\n"
        "def late(*_):\n"
        "    p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
        " start_new_session=True)\n"
        "    print(p.pid, flush=True)\n"
        "    time.sleep(1)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, late)\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    log = tmp_path / "parent.log"
    child = ChildProcess(
        "parent", [sys.executable, "-c", script], env=dict(os.environ), cwd=tmp_path, log_path=log
    )
    deadline = time.monotonic() + 30
    while "ready" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    child.stop(grace_seconds=5)
    assert not child.alive()
    with contextlib.suppress(psutil.NoSuchProcess):  # killed and reaped already: gone
        late = psutil.Process(int(log.read_text().split()[1]))
        gone, _ = psutil.wait_procs([late], timeout=5)
        assert gone or late.status() == psutil.STATUS_ZOMBIE, "the late grandchild outlived stop()"
