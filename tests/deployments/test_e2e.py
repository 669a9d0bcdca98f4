"""End to end, as an operator runs it: the local stack of ``make serve`` (sandbox, a real
``prefect server start`` on PostgreSQL, bootstrap, ``prefect deploy --all`` of prefect.yaml, a
process worker), then audit-log events in the sandbox that the bridge turns into Prefect
events, which the triggers of prefect.yaml turn into flow runs.

One stack for the module (it takes about a minute to start on a busy machine); every scenario
is set up before the one bridge run, so their flow runs overlap instead of queueing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from deployments.resources import RERUN_DELAY_VARIABLE, RERUN_MAX_ATTEMPTS_VARIABLE
from deployments.stack import DEMO_CLIENT_ID, LocalStack, StackOptions
from sandbox.control import SandboxControl
from tests.fixtures.stack import (
    assert_no_secret_in_prefect_database,
    assert_stop_leaves_no_process,
    eventually,
    final,
    finished,
    flow_runs,
    run_deployment,
    state_of,
)

pytestmark = pytest.mark.timeout(480)

ADD_TO_MANAGED = "POST /v1/discovered-vendors/{discoveredVendorId}/add-to-managed"
BRIDGE = "bridge-event-log/every-3-minutes"
PROMOTE = "Promote discovered vendors/promote-discovered-vendors"
ROUTE = "Route questionnaires to approval/route-questionnaires"
RERUN = "Rerun failed items/rerun-failed-items"
MAX_ATTEMPTS = 2
T = TypeVar("T")


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, postgres_databases: Callable[[], str]
) -> Iterator[LocalStack]:
    options = StackOptions(
        database_url=postgres_databases(),
        state_dir=tmp_path_factory.mktemp("stack"),
        prefect_port=None,
        sandbox_port=None,
        ui=False,
        worker_poll_seconds=1.0,
        variables={RERUN_DELAY_VARIABLE: 2, RERUN_MAX_ATTEMPTS_VARIABLE: MAX_ATTEMPTS},
        startup_timeout=180.0,
    )
    with LocalStack(options) as running:
        yield running


@pytest.fixture(scope="module")
def control(stack: LocalStack) -> Iterator[SandboxControl]:
    client = SandboxControl(stack.sandbox_url)
    yield client
    client.close()


def emit_failed_items_event(stack: LocalStack, run_id: str, attempt: int) -> None:
    """What a write run at ``attempt`` that left a transient failure sends
    (write_engine/reporting.py)."""
    event = {
        "id": str(uuid.uuid4()),
        "occurred": datetime.now(UTC).isoformat(),
        "event": "compliance.write-run.failed-items",
        "resource": {
            "prefect.resource.id": f"prefect.flow-run.{run_id}",
            "prefect.resource.role": "flow-run",
            "compliance.write-flow": "promote-discovered-vendors",
            "compliance.retryable-items": "true",
        },
        "payload": {
            "flow_run_id": run_id,
            "attempt": attempt,
            "failed": 1,
            "retryable": 1,
            "total": 1,
        },
    }
    stack.request("POST", "/events", [event])


def retry_from_the_ui(stack: LocalStack, flow_run_id: str) -> None:
    """What the UI's Retry button sends: the run back to Scheduled (AwaitingRetry), forced."""
    state = {"type": "SCHEDULED", "name": "AwaitingRetry", "message": "Retry from the UI"}
    stack.request("POST", f"/flow_runs/{flow_run_id}/set_state", {"state": state, "force": True})


def promoted(run: dict[str, Any]) -> str:
    return str(run["parameters"]["discovered_vendor_ids"][0])


# ------------------------------------------------------------------------------- the tests
def test_an_entry_logged_before_the_bridges_first_run_is_bridged(
    stack: LocalStack, control: SandboxControl
) -> None:
    """Day one: bootstrap recorded where the bridge starts, so an entry logged after the stack
    came up but before the bridge ever ran still becomes an event and starts its promotion."""
    vendor = control.inject("vendor_discovered")["id"]
    bridge_run = run_deployment(stack, BRIDGE, {})  # its first run, with the deployed defaults
    state = eventually("the bridge run to finish", lambda: finished(stack, bridge_run))
    assert state["type"] == "COMPLETED", state["message"]
    (run,) = eventually(
        "the promotion of that vendor",
        lambda: [r for r in flow_runs(stack, PROMOTE) if promoted(r) == vendor and final([r])],
    )
    assert run["state"]["type"] == "COMPLETED"
    assert control.stats()["write_counts"]["add_to_managed"] == {vendor: 1}


def test_audit_log_events_drive_deployments_end_to_end(
    stack: LocalStack, control: SandboxControl
) -> None:
    started = datetime.now(UTC) - timedelta(seconds=5)
    # The scenarios: two vendors discovered (the first promotion call is refused once, so
    # one promotion fails, and a refusal is left to an operator) and a questionnaire ready for
    # review.
    control.set_fault(ADD_TO_MANAGED, error_rate=1.0, status=403, count=1)
    vendors = {control.inject("vendor_discovered")["id"] for _ in range(2)}
    questionnaire = control.inject("questionnaire_ready_for_review")["id"]

    # Run a deployment by name and see it complete: the bridge turns the entries into events.
    bridge_run = run_deployment(
        stack, BRIDGE, {"start_date": started.isoformat(), "reset_checkpoint": True}
    )
    bridge_state = eventually("the bridge run to finish", lambda: finished(stack, bridge_run))
    assert bridge_state["type"] == "COMPLETED", bridge_state

    # vendor discovered -> promote_discovered_vendors for that vendor -> managed in the sandbox
    def promotions_done() -> list[dict[str, Any]] | None:
        runs = [r for r in flow_runs(stack, PROMOTE) if promoted(r) in vendors]
        return runs if len(runs) == len(vendors) and final(runs) else None

    promotions = eventually("the promotion runs to finish", promotions_done)
    assert sorted(r["state"]["type"] for r in promotions) == ["COMPLETED", "FAILED"]
    assert {r["parameters"]["discovered_vendor_ids"][0] for r in promotions} == vendors
    failed_promotion = next(r for r in promotions if r["state"]["type"] == "FAILED")
    refused_vendor = failed_promotion["parameters"]["discovered_vendor_ids"][0]
    managed = control.stats()["write_counts"]["add_to_managed"]
    assert {v: n for v, n in managed.items() if v in vendors} == dict.fromkeys(
        vendors - {refused_vendor}, 1
    )
    # The run's own event says none of its failures is retryable (a 403), so no automatic
    # rerun. Told that it had a transient failure, the automation reruns it after the delay,
    # sending only retryable items: the refusal is reported again, unsent.
    emit_failed_items_event(stack, failed_promotion["id"], attempt=1)
    # as if the same run had already been rerun up to the last attempt: no rerun may go ahead
    emit_failed_items_event(stack, failed_promotion["id"], attempt=MAX_ATTEMPTS)

    # questionnaire ready for review -> route_questionnaires -> approved in the sandbox
    eventually(
        "the questionnaire to be approved",
        lambda: control.stats()["write_counts"]["questionnaire_approve"].get(questionnaire),
    )
    (route_run,) = eventually(
        "the routing run to finish", lambda: final(r := flow_runs(stack, ROUTE)) and r
    )
    assert route_run["state"]["type"] == "COMPLETED"
    assert route_run["parameters"]["questionnaire_ids"] == [questionnaire]
    assert route_run["parameters"]["route"] == ["IN_REVIEW"]

    # retryable failed items -> an automatic rerun after the delay, of exactly the failed run,
    # of its retryable items only; none for the refusal itself and none beyond max_attempts
    def reruns() -> list[dict[str, Any]] | None:
        runs = flow_runs(stack, RERUN)
        return runs if len(runs) >= 2 and final(runs) else None

    automatic_runs = eventually("the reruns", reruns)
    assert len(automatic_runs) == 2, [r["parameters"] for r in automatic_runs]
    by_attempt = {r["parameters"]["attempt"]: r for r in automatic_runs}
    assert {r["parameters"]["flow_run_id"] for r in by_attempt.values()} == {failed_promotion["id"]}
    rerun = by_attempt[2]
    assert rerun["parameters"]["retryable_only"] is True
    assert rerun["state"]["type"] == "FAILED", rerun["state"]  # the refusal, carried unsent
    refused = by_attempt[MAX_ATTEMPTS + 1]
    assert refused["parameters"]["attempt"] == MAX_ATTEMPTS + 1
    assert refused["state"]["type"] == "FAILED"
    assert "max_attempts" in refused["state"]["message"]

    # the operator reruns the last run of the chain by hand (its record still lists the
    # refusal), raising max_attempts: the vendor is promoted now
    by_hand = run_deployment(
        stack, RERUN, {"flow_run_id": rerun["id"], "max_attempts": MAX_ATTEMPTS + 1}
    )
    by_hand_state = eventually("the rerun by hand to finish", lambda: finished(stack, by_hand))
    assert by_hand_state["type"] == "COMPLETED", by_hand_state

    # nothing applied twice; one token for every flow run of every process
    stats = control.stats()
    assert {v: stats["write_counts"]["add_to_managed"][v] for v in vendors} == dict.fromkeys(
        vendors, 1
    )
    assert stats["write_counts"]["questionnaire_approve"][questionnaire] == 1
    assert stats["write_counts"]["questionnaire_patch"][questionnaire] == 1
    assert stats["token_mints"] == {DEMO_CLIENT_ID: 1}
    assert len(flow_runs(stack, RERUN)) == 3  # the rerun by hand's success starts nothing

    # Prefect's own Retry button on the failed promotion reruns the whole flow with the same
    # parameters: safe, the vendor is already managed and add-to-managed is idempotent
    failed_state = state_of(stack, failed_promotion["id"])
    retry_from_the_ui(stack, failed_promotion["id"])
    retried = eventually(
        "the retried run to finish",
        lambda: (
            (s := finished(stack, failed_promotion["id"])) and s["id"] != failed_state["id"] and s
        ),
    )
    assert retried["type"] == "COMPLETED", retried
    after_retry = control.stats()["write_counts"]["add_to_managed"]
    assert after_retry[refused_vendor] == 2  # one more call, answered with the same vendor
    assert len([r for r in flow_runs(stack, PROMOTE) if promoted(r) in vendors]) == 2


# ---------------------------------------------------------------- events the triggers missed
REDELIVER = "redeliver-missed-events/redeliver-missed-events"
SENT = "compliance.redelivery.sent"
GAVE_UP = "compliance.redelivery.gave-up"
PROMOTE_AUTOMATION = "promote-vendor-when-discovered"


def unpromoted_vendor(stack: LocalStack, control: SandboxControl) -> str:
    """A seeded discovered vendor that no promotion run has named yet."""
    named = {promoted(run) for run in flow_runs(stack, PROMOTE)}
    return next(v for v in reversed(control.seed()["discovered_vendors"]) if v not in named)


def emit_vendor_discovered(stack: LocalStack, vendor: str, *, follows: str | None = None) -> str:
    """The event the bridge sends for a vendor_discovered entry (audit_log/events.py); returns
    its id once the server has stored it."""
    event_id = str(uuid.uuid4())
    event = {
        "id": event_id,
        "follows": follows,
        "occurred": datetime.now(UTC).isoformat(),
        "event": "compliance.vendor_discovered",
        "resource": {
            "prefect.resource.id": f"compliance.discoveredvendor.{vendor}",
            "compliance.target.id": vendor,
            "compliance.target.type": "DiscoveredVendor",
        },
        "payload": {},
    }
    stack.request("POST", "/events", [event])
    eventually("the event to be stored", lambda: events_about(stack, [], event_id=event_id))
    return event_id


def events_about(
    stack: LocalStack, names: list[str], *, event_id: str | None = None, resource: str = ""
) -> list[dict[str, Any]]:
    since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    event_filter: dict[str, Any] = {"occurred": {"since": since}}
    if names:
        event_filter["event"] = {"name": names}
    if event_id:
        event_filter["id"] = {"id": [event_id]}
    if resource:
        event_filter["resource"] = {"id": [resource]}
    body = {"filter": event_filter, "limit": 50}
    return list(stack.request("POST", "/events/filter", body).json()["events"])


def redeliver(stack: LocalStack, **parameters: Any) -> dict[str, Any]:
    """A redelivery run's final state, with its log lines under ``"logs"``."""
    run_id = run_deployment(stack, REDELIVER, {"grace_minutes": 0, **parameters})
    state = eventually("the redelivery run to finish", lambda: finished(stack, run_id))
    query = {"logs": {"flow_run_id": {"any_": [run_id]}}, "sort": "TIMESTAMP_ASC"}
    logs = stack.request("POST", "/logs/filter", query).json()
    return {**state, "logs": [line["message"] for line in logs]}


def promotions_of(stack: LocalStack, vendor: str) -> list[dict[str, Any]]:
    return [run for run in flow_runs(stack, PROMOTE) if promoted(run) == vendor]


@pytest.fixture
def failing_automation(stack: LocalStack) -> Iterator[str]:
    """An automation whose action always fails (its deployment does not exist), for
    ``compliance.test_never_acted`` events; yields its name."""
    name = "test-action-always-fails"
    body = {
        "name": name,
        "trigger": {
            "type": "event",
            "expect": ["compliance.test_never_acted"],
            "match": {"prefect.resource.id": "compliance.test.*"},
            "posture": "Reactive",
            "threshold": 1,
            "within": 0,
        },
        "actions": [
            {"type": "run-deployment", "source": "selected", "deployment_id": str(uuid.uuid4())}
        ],
    }
    automation = stack.request("POST", "/automations/", body).json()
    yield name
    stack.request("DELETE", f"/automations/{automation['id']}")


def emit_never_acted(stack: LocalStack) -> str:
    event_id = str(uuid.uuid4())
    event = {
        "id": event_id,
        "occurred": datetime.now(UTC).isoformat(),
        "event": "compliance.test_never_acted",
        "resource": {"prefect.resource.id": f"compliance.test.{event_id}"},
    }
    stack.request("POST", "/events", [event])
    return event_id


def records(stack: LocalStack, name: str, event_id: str) -> list[dict[str, Any]]:
    """The redelivery's records (``compliance.redelivery.*``) about one event."""
    return events_about(stack, [name], resource=f"prefect.event.{event_id}")


def test_events_the_triggers_missed_are_resent_or_reported_once(
    stack: LocalStack, control: SandboxControl, failing_automation: str
) -> None:
    """Two events no automation acted on, checked by the same redelivery runs:

    - a vendor discovered while the server went down before its triggers acted (the event
      follows one the server has not seen, so its triggers hold it back in memory, and the
      restart forgets it): resent, the automation starts the promotion it never started, and
      the next check sends nothing more;
    - an event whose automation's action always fails: after the last resend it is reported
      (the run ends Failed), and the next run leaves it alone.
    """
    vendor = unpromoted_vendor(stack, control)
    dropped = emit_vendor_discovered(stack, vendor, follows=str(uuid.uuid4()))
    stack.restart_prefect_server()
    failing = emit_never_acted(stack)
    eventually(
        "the failing automation's action to fail",
        lambda: [
            e
            for e in events_about(stack, ["prefect.automation.action.failed"])
            if e["resource"]["prefect.resource.name"] == failing_automation
        ],
    )
    assert promotions_of(stack, vendor) == []

    state = redeliver(stack, max_attempts=1)
    assert state["type"] == "COMPLETED", state["logs"]
    (sent,) = eventually("the resend's record", lambda: records(stack, SENT, dropped))
    assert sent["payload"]["attempt"] == 1
    assert sent["payload"]["automations"] == [PROMOTE_AUTOMATION]
    assert sent["payload"]["copy_id"] != dropped  # a copy: the server may ignore the original
    (sent,) = eventually("the other resend's record", lambda: records(stack, SENT, failing))
    assert sent["payload"]["automations"] == [failing_automation]
    (run,) = eventually(
        "the promotion started by the resent event",
        lambda: [r for r in promotions_of(stack, vendor) if final([r])],
    )
    assert run["state"]["type"] == "COMPLETED"
    assert control.stats()["write_counts"]["add_to_managed"][vendor] == 1

    state = redeliver(stack, max_attempts=1)
    assert state["type"] == "FAILED", state["logs"]
    assert "still have no run after up to 1 resends" in state["message"]
    (gave_up,) = eventually("the record of giving up", lambda: records(stack, GAVE_UP, failing))
    assert gave_up["payload"]["event_resource"] == f"compliance.test.{failing}"
    assert gave_up["payload"]["reason"] == "no run after the last resend"

    state = redeliver(stack, max_attempts=1)
    assert state["type"] == "COMPLETED", state["logs"]
    assert len(records(stack, SENT, dropped)) == 1
    assert records(stack, GAVE_UP, dropped) == []
    assert len(records(stack, GAVE_UP, failing)) == 1
    assert len(promotions_of(stack, vendor)) == 1


# ------------------------------------------------------------------------------- last
def test_the_stack_keeps_no_secret_and_stops_cleanly(stack: LocalStack) -> None:
    """After everything above: no secret in the Prefect database, and stopping leaves no
    process behind (this stops the module's stack, so it runs last)."""
    assert_no_secret_in_prefect_database(stack)
    assert_stop_leaves_no_process(stack)
