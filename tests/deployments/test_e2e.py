"""End to end, as an operator runs it: the local stack of ``make serve`` (sandbox, a real
``prefect server start`` on PostgreSQL, bootstrap, ``prefect deploy --all`` of prefect.yaml, a
process worker, its try-out people signing in as themselves), then audit-log events in the
sandbox that the bridge turns into Prefect events, which the triggers of prefect.yaml turn into
flow runs: one run per burst, which reads every entry since its checkpoint. With the trigger
paused, the catch-up schedule does the same.

One stack for the module (it takes about a minute to start on a busy machine).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import httpx
import pytest

from deployments.resources import RERUN_DELAY_VARIABLE, RERUN_MAX_ATTEMPTS_VARIABLE
from deployments.serve import with_try_out_people
from deployments.stack import LocalStack
from deployments.try_out import PASSWORDS_FILE
from sandbox.apps import DEMO_MANAGE
from sandbox.control import SandboxControl
from tests.fixtures.stack import (
    ADD_TO_MANAGED,
    BRIDGE,
    PROMOTE,
    StackWithVariables,
    assert_no_secret_in_prefect_database,
    assert_private_files,
    assert_stop_leaves_no_process,
    eventually,
    final,
    finished,
    flow_runs,
    run_deployment,
    stack_options,
    state_of,
    suspended,
    triggered_runs,
)

pytestmark = pytest.mark.timeout(480)

ROUTE = "route-questionnaires/on-ready-for-review"
RERUN = "rerun-failed-items/on-failed-items"
ADD = "add-people-to-groups/on-demand"
EXPORT = "export-event-log/daily"
ADD_RESULTS = "add-people-to-groups-results"
PROMOTE_AUTOMATION = "promote-vendors-when-discovered"
MAX_ATTEMPTS = 2
BURST = 40
#: the catch-up interval while the catch-up test runs (the default is 900 s)
SHORT_CATCH_UP_SECONDS = 20
T = TypeVar("T")


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, postgres_databases: Callable[[], str]
) -> Iterator[LocalStack]:
    options, people = with_try_out_people(
        stack_options(database_url=postgres_databases(), state_dir=tmp_path_factory.mktemp("stack"))
    )
    assert people is not None, "make serve signs people in on loopback"
    variables = {RERUN_DELAY_VARIABLE: 2, RERUN_MAX_ATTEMPTS_VARIABLE: MAX_ATTEMPTS}
    with StackWithVariables(options, variables) as running:
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


def caught_up_runs(stack: LocalStack, name: str) -> list[dict[str, Any]]:
    """Runs the deployment's catch-up schedule created that have started."""
    return [
        run
        for run in flow_runs(stack, name)
        if run["auto_scheduled"] and run["state"]["type"] != "SCHEDULED"
    ]


def new_runs(runs: list[dict[str, Any]], before: set[str]) -> list[dict[str, Any]]:
    return [run for run in runs if run["id"] not in before]


def ids_of(runs: list[dict[str, Any]]) -> set[str]:
    return {str(run["id"]) for run in runs}


def table_items(stack: LocalStack, flow_run_id: str) -> list[str]:
    """The items of a write run's results table (its artifact)."""
    body = {"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}}
    for artifact in stack.request("POST", "/artifacts/filter", body).json():
        if (artifact.get("key") or "").endswith("-results"):
            return [str(row["item"]) for row in json.loads(artifact["data"])]
    raise AssertionError(f"run {flow_run_id} has no results table")


def bridge(stack: LocalStack, parameters: dict[str, Any]) -> None:
    run = run_deployment(stack, BRIDGE, parameters)
    state = eventually("the bridge run to finish", lambda: finished(stack, run))
    assert state["type"] == "COMPLETED", state


# ------------------------------------------------------------------------------- the tests
def test_an_entry_logged_before_the_bridges_first_run_is_bridged(
    stack: LocalStack, control: SandboxControl
) -> None:
    """Day one: bootstrap recorded where the bridge and the promotion start, so an entry logged
    after the stack came up but before the bridge ever ran still becomes an event, which starts
    a promotion run that finds the vendor in the audit log."""
    vendor = control.inject("vendor_discovered")["id"]
    bridge(stack, {})  # its first run, with the deployed defaults
    (run,) = eventually(
        "the promotion run", lambda: final(r := triggered_runs(stack, PROMOTE)) and r
    )
    assert run["state"]["type"] == "COMPLETED", run["state"]
    assert run["parameters"] == {"from_audit_log": True}
    assert table_items(stack, run["id"]) == [vendor]
    assert control.stats()["write_counts"]["add_to_managed"] == {vendor: 1}


def test_audit_log_events_drive_deployments_end_to_end(
    stack: LocalStack, control: SandboxControl
) -> None:
    started = datetime.now(UTC) - timedelta(seconds=5)
    earlier = ids_of(flow_runs(stack, PROMOTE))
    # The scenarios: two vendors discovered (the first promotion call is refused once, so
    # one vendor fails, and a refusal is left to an operator) and a questionnaire ready for
    # review.
    control.set_fault(ADD_TO_MANAGED, error_rate=1.0, status=403, count=1)
    vendors = {control.inject("vendor_discovered")["id"] for _ in range(2)}
    questionnaire = control.inject("questionnaire_ready_for_review")["id"]

    # Run a deployment by name and see it complete: the bridge turns the entries into events.
    bridge(stack, {"start_date": started.isoformat(), "reset_checkpoint": True})

    # vendors discovered -> one promotion run for both, which fails the refused one
    (promotion,) = eventually(
        "the promotion run to finish",
        lambda: final(r := new_runs(triggered_runs(stack, PROMOTE), earlier)) and r,
    )
    assert promotion["state"]["type"] == "FAILED"
    assert sorted(table_items(stack, promotion["id"])) == sorted(vendors)
    managed = control.stats()["write_counts"]["add_to_managed"]
    (refused_vendor,) = vendors - set(managed)
    assert {v: n for v, n in managed.items() if v in vendors} == dict.fromkeys(
        vendors - {refused_vendor}, 1
    )
    # The run's own event says none of its failures is retryable (a 403), so no automatic
    # rerun. Told that it had a transient failure, the automation reruns it after the delay,
    # sending only retryable items: the refusal is reported again, unsent.
    emit_failed_items_event(stack, promotion["id"], attempt=1)
    # as if the same run had already been rerun up to the last attempt: no rerun may go ahead
    emit_failed_items_event(stack, promotion["id"], attempt=MAX_ATTEMPTS)

    # questionnaire ready for review -> route_questionnaires -> approved in the sandbox
    eventually(
        "the questionnaire to be approved",
        lambda: control.stats()["write_counts"]["questionnaire_approve"].get(questionnaire),
    )
    (route_run,) = eventually(
        "the routing run to finish", lambda: final(r := triggered_runs(stack, ROUTE)) and r
    )
    assert route_run["state"]["type"] == "COMPLETED"
    assert route_run["parameters"]["from_audit_log"] is True
    assert route_run["parameters"]["route"] == ["IN_REVIEW"]
    assert table_items(stack, route_run["id"]) == [f"questionnaire {questionnaire}"]

    # retryable failed items -> an automatic rerun after the delay, of exactly the failed run,
    # of its retryable items only; none for the refusal itself and none beyond max_attempts
    def reruns() -> list[dict[str, Any]] | None:
        runs = flow_runs(stack, RERUN)
        return runs if len(runs) >= 2 and final(runs) else None

    automatic_runs = eventually("the reruns", reruns)
    assert len(automatic_runs) == 2, [r["parameters"] for r in automatic_runs]
    by_attempt = {r["parameters"]["attempt"]: r for r in automatic_runs}
    assert {r["parameters"]["flow_run_id"] for r in by_attempt.values()} == {promotion["id"]}
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
    assert stats["token_mints"] == {DEMO_MANAGE.client_id: 1}
    assert len(flow_runs(stack, RERUN)) == 3  # the rerun by hand's success starts nothing

    # Prefect's own Retry button on the failed promotion runs it again with the same
    # parameters: it reads the audit log from the checkpoint, which its first attempt moved
    # past these vendors, so it sends nothing again (failed items are rerun-failed-items' job)
    failed_state = state_of(stack, promotion["id"])
    retry_from_the_ui(stack, promotion["id"])
    retried = eventually(
        "the retried run to finish",
        lambda: (s := finished(stack, promotion["id"])) and s["id"] != failed_state["id"] and s,
    )
    assert retried["type"] == "COMPLETED", retried
    assert (
        control.stats()["write_counts"]["add_to_managed"] == stats["write_counts"]["add_to_managed"]
    )
    assert len(new_runs(triggered_runs(stack, PROMOTE), earlier)) == 1


def test_a_burst_becomes_one_run_per_deployment_and_every_item_is_applied_once(
    stack: LocalStack, control: SandboxControl
) -> None:
    """40 vendors discovered and 40 questionnaires ready for review at once: at most 3 runs
    each (Prefect's debounce on the trigger), every item in their tables, each applied once."""
    earlier = ids_of(flow_runs(stack, PROMOTE)) | ids_of(flow_runs(stack, ROUTE))
    vendors = {control.inject("vendor_discovered")["id"] for _ in range(BURST)}
    questionnaires = {control.inject("questionnaire_ready_for_review")["id"] for _ in range(BURST)}
    assert len(vendors) == len(questionnaires) == BURST
    bridge(stack, {})

    def done(name: str, items: set[str]) -> list[dict[str, Any]] | None:
        runs = new_runs(triggered_runs(stack, name), earlier)
        if not runs or not final(runs):
            return None
        handled = [item for run in runs for item in table_items(stack, run["id"])]
        return runs if len(handled) >= len(items) else None

    promotions = eventually("the promotion runs", lambda: done(PROMOTE, vendors))
    routings = eventually("the routing runs", lambda: done(ROUTE, questionnaires))
    assert 1 <= len(promotions) <= 3 and 1 <= len(routings) <= 3
    assert {r["state"]["type"] for r in promotions + routings} == {"COMPLETED"}
    listed = sorted(item for run in promotions for item in table_items(stack, run["id"]))
    assert listed == sorted(vendors)
    stats = control.stats()["write_counts"]
    assert {v: n for v, n in stats["add_to_managed"].items() if v in vendors} == dict.fromkeys(
        vendors, 1
    )
    assert {
        q: n for q, n in stats["questionnaire_approve"].items() if q in questionnaires
    } == dict.fromkeys(questionnaires, 1)
    assert control.stats()["token_mints"] == {DEMO_MANAGE.client_id: 1}


def automation_id(stack: LocalStack, name: str) -> str:
    automations = stack.request("POST", "/automations/filter", {}).json()
    (found,) = [a for a in automations if a["name"] == name]
    return str(found["id"])


def set_catch_up_interval(stack: LocalStack, seconds: int) -> None:
    """What an operator does on the deployment page's schedule; Prefect's scheduler looks at
    recently updated deployments every few seconds and creates the schedule's runs."""
    deployment = stack.request("GET", f"/deployments/name/{PROMOTE}").json()
    (schedule,) = [s for s in deployment["schedules"] if s["slug"] == "catch-up"]
    update = {
        "schedule": {"interval": seconds, "timezone": "UTC"},
        "parameters": schedule["parameters"],  # an update without them would clear them
    }
    stack.request("PATCH", f"/deployments/{deployment['id']}/schedules/{schedule['id']}", update)
    stack.request(
        "PATCH", f"/deployments/{deployment['id']}", {"description": deployment["description"]}
    )


def test_with_the_trigger_paused_the_catch_up_handles_every_vendor(
    stack: LocalStack, control: SandboxControl
) -> None:
    """A dropped event, or an automation paused during a burst: the vendors are promoted by
    the next catch-up run all the same, by construction (it reads the audit log)."""
    automation = automation_id(stack, PROMOTE_AUTOMATION)
    stack.request("PATCH", f"/automations/{automation}", {"enabled": False})
    try:
        earlier = ids_of(flow_runs(stack, PROMOTE))
        vendors = {control.inject("vendor_discovered")["id"] for _ in range(5)}
        bridge(stack, {})
        set_catch_up_interval(stack, SHORT_CATCH_UP_SECONDS)

        def caught_up() -> list[dict[str, Any]] | None:
            managed = control.stats()["write_counts"]["add_to_managed"]
            runs = new_runs(caught_up_runs(stack, PROMOTE), earlier)
            return runs if vendors <= set(managed) and final(runs) else None

        runs = eventually("a catch-up run to promote them", caught_up, timeout=240)
        handled = [item for run in runs for item in table_items(stack, run["id"])]
        assert sorted(handled) == sorted(vendors)
        assert {r["parameters"]["from_audit_log"] for r in runs} == {True}
        assert new_runs(triggered_runs(stack, PROMOTE), earlier) == []  # the trigger was off
        managed = control.stats()["write_counts"]["add_to_managed"]
        assert {v: managed[v] for v in vendors} == dict.fromkeys(vendors, 1)
    finally:
        set_catch_up_interval(stack, 900)
        stack.request("PATCH", f"/automations/{automation}", {"enabled": True})


def test_make_serve_signs_its_try_out_people_in_and_keeps_four_eyes(
    stack: LocalStack, control: SandboxControl
) -> None:
    """``make serve`` without ``--people``: nobody signs in with the server's string. dave
    (viewer) cannot start a run; alice starts one that waits; her own approval is refused (she
    may approve, but not her own run); bob approves and exactly the plan is applied, both named
    in the results."""
    lines = (stack.state_dir / PASSWORDS_FILE).read_text().splitlines()
    passwords = dict(line.split(":", 1) for line in lines if not line.startswith("#"))
    assert sorted(passwords) == ["alice", "bob", "carol", "dave"]

    def signed_in(person: str | None) -> httpx.Client:
        auth = None if person is None else httpx.BasicAuth(person, passwords[person])
        return httpx.Client(base_url=stack.api_url, auth=auth, timeout=30)

    with signed_in(None) as anonymous:
        assert anonymous.post("/deployments/filter", json={}).status_code == 401
        assert anonymous.get(stack.ui_url).status_code == 401
    with signed_in("dave") as dave:
        deployment = dave.get(f"/deployments/name/{ADD}").json()["id"]
        refused = dave.post(f"/deployments/{deployment}/create_flow_run", json={})
        assert refused.status_code == 403 and "dave (viewer)" in refused.text

    seed = control.seed()
    group, people = seed["groups"][4], seed["people"][:3]
    rows = "person_id,group_id\n" + "".join(f"{person},{group}\n" for person in people)
    with signed_in("alice") as alice:
        created = alice.post(
            f"/deployments/{deployment}/create_flow_run",
            json={"parameters": {"pasted_rows": rows}},
        )
        run = created.raise_for_status().json()["id"]
        eventually("the run to wait for approval", lambda: suspended(stack, run), 120)
        decision = {"run_input": {"approve": "yes", "reason": "my own change"}}
        own = alice.post(f"/flow_runs/{run}/resume", json=decision)
    assert own.status_code == 403 and "alice requested flow run" in own.text
    assert "someone else" in own.text
    assert suspended(stack, run), "the requester's own approval leaves it waiting"
    assert control.stats()["group_add_counts"].get(group, {}) == {}

    with signed_in("bob") as bob:
        decision = {"run_input": {"approve": "yes", "reason": "CHG-7 try-out"}}
        assert bob.post(f"/flow_runs/{run}/resume", json=decision).json()["status"] == "ACCEPT"
    ended = eventually("the approved run to end", lambda: finished(stack, run), 180)
    assert ended["type"] == "COMPLETED", ended
    assert control.stats()["group_add_counts"][group] == dict.fromkeys(people, 1)
    query = {"artifacts": {"flow_run_id": {"any_": [run]}, "key": {"any_": [ADD_RESULTS]}}}
    (results,) = stack.request("POST", "/artifacts/filter", query).json()
    assert "Approved by bob (requested by alice)" in results["description"]


# ------------------------------------------------------------------------------- last
def test_the_stack_keeps_no_secret_and_stops_cleanly(stack: LocalStack) -> None:
    """After everything above (and a daily export): no secret in the Prefect database, no file
    of the stack readable by other users, and stopping leaves no process behind (this stops the
    module's stack, so it runs last)."""
    export = run_deployment(stack, EXPORT, {})
    state = eventually("the export run", lambda: finished(stack, export), 120)
    assert state["type"] == "COMPLETED", state
    assert list((stack.state_dir / "compliance" / "event-log-export").glob("event-log-*.jsonl"))
    assert_private_files(stack.state_dir)
    assert_no_secret_in_prefect_database(stack)
    assert_stop_leaves_no_process(stack)
