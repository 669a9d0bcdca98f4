"""Four-eyes approval through the deployment, as operators use it (write_engine/approval.py).

A real ``prefect server start`` (PostgreSQL), ``prefect deploy --all`` of prefect.yaml (where
``add-people-to-groups/on-demand`` requires approval), one process worker and the sandbox, behind
the TLS proxy where people sign in as themselves (deployments/identity.py, the access policy).
Runs are started and resumed through the Prefect REST API, exactly what the UI's Run and Resume
buttons send, by people through the proxy (``person``) or by the stack itself; the sandbox counts
every add-people call per group and person.

One stack for the module; the tests use different groups, so the counts stay apart.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import ssl
import stat
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from deployments.automations import WEBHOOK_ENV
from deployments.gatekeeper import IDENTITY_HEADER
from deployments.identity import add_person
from deployments.stack import WORKER_NAME, LocalStack
from sandbox.control import SandboxControl
from tests.deployments.test_access_policy import with_people
from tests.fixtures.stack import (
    assert_no_secret_in_prefect_database,
    deployment_id,
    eventually,
    replace_worker,
    run_deployment,
    stack_options,
    state_of,
    suspended,
)
from tests.fixtures.tls import make_ca, nginx_or_skip
from tests.fixtures.webhooks import Receiver, webhook_receiver
from write_engine.approval import APPROVED_EVENT, AWAITING_EVENT, REJECTED_EVENT

pytestmark = pytest.mark.timeout(600)

ADD = "add-people-to-groups/on-demand"
RERUN = "rerun-failed-items/on-failed-items"
PROMOTE = "promote-discovered-vendors/on-discovery"
ADD_PEOPLE = "POST /v1/groups/{groupId}/add-people"
#: crash detection's grace (the default is 90 s): a wait longer than this proves a suspended
#: run is not taken for a dead one
GRACE_SECONDS = 45
#: who signs in at the proxy, and their roles
PEOPLE = {
    "alice": ["requester", "approver"],  # may decide, but never on her own runs
    "bob": ["approver"],
    "dana": ["approver"],
    "vic": ["viewer"],
    "worker-1": ["worker"],
    WORKER_NAME: ["worker"],  # the stack's worker signs in as itself, through the proxy
}
PASSWORDS = {person: f"{person}-{uuid.uuid4().hex}" for person in PEOPLE}


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with webhook_receiver("approvals") as received:
        yield received


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_databases: Callable[[], str],
    receiver: Receiver,
) -> Iterator[LocalStack]:
    nginx_or_skip()
    secrets = tmp_path_factory.mktemp("sign-in")
    ca = make_ca(secrets)
    certs = ca.issue(secrets / "certs", ["127.0.0.1"])
    people = secrets / "people"
    for person, password in PASSWORDS.items():
        add_person(people, person, password)
    options = stack_options(
        database_url=postgres_databases(),
        state_dir=tmp_path_factory.mktemp("stack"),
        unresponsive_run_grace_seconds=GRACE_SECONDS,
        tls_cert=certs.cert_file,
        tls_key=certs.key_file,
        tls_ca=ca.cert_file,
        people_file=people,
        access_policy=with_people(secrets, PEOPLE),
        worker_passwords={WORKER_NAME: PASSWORDS[WORKER_NAME]},
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(WEBHOOK_ENV, receiver.url)  # read by bootstrap: the notification block
        with LocalStack(options) as running:
            yield running
            assert_no_secret_in_prefect_database(running)


@pytest.fixture(scope="module")
def control(stack: LocalStack) -> Iterator[SandboxControl]:
    client = SandboxControl(stack.sandbox_url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def seed(control: SandboxControl) -> dict[str, Any]:
    return control.seed()


# --------------------------------------------------------------------------- helpers
def added(control: SandboxControl, group: str) -> dict[str, int]:
    """How often each person was sent to ``group``."""
    counts: dict[str, int] = control.stats()["group_add_counts"].get(group, {})
    return counts


def add_calls(control: SandboxControl) -> int:
    return int(control.stats()["route_counts"].get(ADD_PEOPLE, 0))


def csv_rows(pairs: list[tuple[str, str]]) -> str:
    return "person_id,group_id\n" + "".join(f"{person},{group}\n" for group, person in pairs)


def wait_for_approval(stack: LocalStack, run_id: str) -> dict[str, Any]:
    return eventually("the run to wait for approval", lambda: suspended(stack, run_id), 120)


def as_person(stack: LocalStack, person: str) -> httpx.Client:
    """What a person's browser or CLI uses: the proxy, signed in as themself."""
    auth = httpx.BasicAuth(person, PASSWORDS[person])
    verify = ssl.create_default_context(cafile=str(stack.tls_ca))
    return httpx.Client(base_url=stack.api_url, auth=auth, verify=verify, timeout=30)


def resume(stack: LocalStack, run_id: str, person: str, **answer: Any) -> dict[str, Any]:
    """What the UI's Resume form sends, signed in as ``person``."""
    with as_person(stack, person) as client:
        response = client.post(f"/flow_runs/{run_id}/resume", json={"run_input": answer})
    result: dict[str, Any] = response.json()
    result["http_status"] = response.status_code
    return result


def start_as(stack: LocalStack, person: str, name: str, parameters: dict[str, Any]) -> str:
    """The deployment's Run button, pressed by ``person``."""
    with as_person(stack, person) as client:
        deployment = client.get(f"/deployments/name/{name}").json()["id"]
        response = client.post(
            f"/deployments/{deployment}/create_flow_run", json={"parameters": parameters}
        )
    response.raise_for_status()
    return str(response.json()["id"])


def final_state(stack: LocalStack, run_id: str, timeout: float = 180.0) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        state = state_of(stack, run_id)
        return state if state["type"] in {"COMPLETED", "FAILED", "CANCELLED"} else None

    return eventually("the run's final state", done, timeout)


def history(stack: LocalStack, run_id: str) -> list[str]:
    states = stack.request("GET", f"/flow_run_states/?flow_run_id={run_id}").json()
    return [state["name"] for state in sorted(states, key=lambda s: s["timestamp"])]


def artifact(stack: LocalStack, run_id: str, key: str) -> dict[str, Any]:
    query = {"artifacts": {"flow_run_id": {"any_": [run_id]}, "key": {"any_": [key]}}}
    (found,) = stack.request("POST", "/artifacts/filter", query).json()
    if isinstance(found["data"], str):  # a table artifact's rows, as JSON text
        found["data"] = json.loads(found["data"])
    return dict(found)


def plan_of(stack: LocalStack, run_id: str) -> dict[str, Any]:
    """The plan the run keeps on itself (write_engine/approval.py)."""
    value = stack.request("GET", f"/flow_runs/{run_id}/input/compliance-plan").json()
    return dict(json.loads(value) if isinstance(value, str) else value)


def events(stack: LocalStack, name: str, run_id: str) -> list[dict[str, Any]]:
    query = {
        "filter": {
            "event": {"name": [name]},
            "resource": {"id": [f"prefect.flow-run.{run_id}"]},
        },
        "limit": 10,
    }
    return list(stack.request("POST", "/events/filter", query).json()["events"])


def stored_event(stack: LocalStack, name: str, run_id: str) -> dict[str, Any]:
    (event,) = eventually(f"the {name} event", lambda: events(stack, name, run_id), 60)
    return dict(event)


def flow_run_processes(stack: LocalStack) -> list[Any]:
    """The flow-run processes the worker started (below the worker itself)."""
    (worker,) = stack.workers()
    return worker.tree()[1:]


# --------------------------------------------------------------------------- the tests
def test_an_approved_plan_is_applied_exactly_and_the_wait_holds_no_worker(
    stack: LocalStack, control: SandboxControl, seed: dict[str, Any], receiver: Receiver
) -> None:
    groups, people = seed["groups"], seed["people"]
    plan = [(groups[0], p) for p in people[:120]] + [(groups[1], p) for p in people[120:150]]
    worker = stack.worker_env(WORKER_NAME)  # it runs every flow here through the proxy
    assert stack.auth_string not in json.dumps(worker) and worker["PREFECT_API_URL"].startswith(
        "https://"
    )
    calls_before = add_calls(control)

    run = start_as(stack, "alice", ADD, {"pasted_rows": csv_rows(plan)})
    wait_for_approval(stack, run)
    assert add_calls(control) == calls_before, "nothing is sent before the decision"
    eventually("the run's process to end", lambda: not flow_run_processes(stack), 60)
    own = resume(stack, run, "alice", approve="yes", reason="my own change")
    assert own["http_status"] == 403, own
    assert "alice requested flow run" in own["detail"] and "someone else" in own["detail"]
    assert suspended(stack, run), "the requester's own approval leaves it waiting"

    # the plan an approver reads: counts per group, and the full list
    shown = artifact(stack, run, "add-people-to-groups-plan")
    assert "Plan awaiting approval: 150 item(s)" in shown["description"]
    assert f"| group {groups[0]} | 120 |" in shown["description"]
    assert f"| group {groups[1]} | 30 |" in shown["description"]
    assert len(shown["data"]) == 150

    # the approvers are told, with the counts and the run
    notice = eventually(
        "the approval notification", lambda: receiver.find(lambda p: run in json.dumps(p)), 90
    )
    assert notice["subject"].startswith("[compliance-flows] Approval needed: add-people-to-groups")
    assert "150 item(s)" in notice["subject"]
    assert f"group {groups[0]}: 120, group {groups[1]}: 30" in notice["body"]
    assert f"runs/flow-run/{run}" in notice["body"]

    # the one worker serves another run meanwhile: the waiting run holds no process
    vendor = seed["discovered_vendors"][0]
    other = run_deployment(stack, PROMOTE, {"discovered_vendor_ids": [vendor]})
    assert final_state(stack, other)["type"] == "COMPLETED"
    assert suspended(stack, run), "still waiting"

    # crash detection does not take the waiting run for a dead one, nor does a new worker
    # (the old one's machine lost) lose it
    replace_worker(stack)
    eventually(
        "crash detection's grace to pass", lambda: _older_than(stack, run, GRACE_SECONDS + 15)
    )
    assert suspended(stack, run), "still waiting after the grace and a new worker"

    answer = resume(stack, run, "dana", approve="yes", reason="CHG-1234 onboarding")
    assert answer["status"] == "ACCEPT", answer
    assert final_state(stack, run)["type"] == "COMPLETED"

    assert added(control, groups[0]) == {p: 1 for _, p in plan[:120]}
    assert added(control, groups[1]) == {p: 1 for _, p in plan[120:]}
    assert add_calls(control) - calls_before == 3, "2 chunks + 1 chunk"
    assert history(stack, run).count("Suspended") == 1

    results = artifact(stack, run, "add-people-to-groups-results")
    assert "Approved by dana (requested by alice) at " in results["description"]
    assert "CHG-1234 onboarding" in results["description"]
    approved = stored_event(stack, APPROVED_EVENT, run)
    assert approved["payload"]["approver"] == "dana"
    assert approved["payload"]["requester"] == "alice"
    assert approved["payload"]["signature_checked"] is True
    assert approved["payload"]["reason"] == "CHG-1234 onboarding"
    assert approved["payload"]["total"] == 150
    assert stored_event(stack, AWAITING_EVENT, run)["payload"]["total"] == 150


def _older_than(stack: LocalStack, run_id: str, seconds: float) -> bool:
    state = state_of(stack, run_id)
    entered = datetime.fromisoformat(state["timestamp"])
    return (datetime.now(UTC) - entered).total_seconds() > seconds


def test_a_rejected_plan_sends_nothing_and_the_run_ends_cancelled(
    stack: LocalStack, control: SandboxControl, seed: dict[str, Any]
) -> None:
    group, people = seed["groups"][3], seed["people"][:40]
    rows = json.dumps([{"person_id": p, "group_id": group} for p in people])
    calls_before = add_calls(control)

    run = run_deployment(stack, ADD, {"pasted_rows": rows})
    wait_for_approval(stack, run)
    # the form has no default answer: submitted without one, it is refused and the run waits
    unanswered = resume(stack, run, "bob", reason="no ticket")
    assert unanswered["http_status"] == 403 and "approve" in unanswered["detail"]
    blank = resume(stack, run, "bob", approve="no", reason="   ")
    assert blank["http_status"] == 403 and "run_input.reason" in blank["detail"]
    assert suspended(stack, run)
    resume(stack, run, "bob", approve="no", reason="no ticket for this access")
    state = final_state(stack, run)

    assert state["type"] == "CANCELLED"
    assert "Rejected by bob" in state["message"]
    assert "nothing was sent" in state["message"]
    assert add_calls(control) == calls_before and added(control, group) == {}
    results = artifact(stack, run, "add-people-to-groups-results")
    assert (
        "Rejected by bob (requested by an automation or the server itself) at "
        in results["description"]
    )
    assert {row["outcome"] for row in results["data"]} == {"skipped"}
    assert "no ticket for this access" in results["data"][0]["reason"]
    rejected = stored_event(stack, REJECTED_EVENT, run)
    assert rejected["payload"]["approved"] is False
    assert rejected["payload"]["reason"] == "no ticket for this access"

    # nothing to rerun: a rejected plan leaves no failed-items record
    rerun = run_deployment(stack, RERUN, {"flow_run_id": run})
    assert final_state(stack, rerun)["type"] == "FAILED"
    assert add_calls(control) == calls_before


def test_an_unanswered_plan_expires_with_nothing_sent(
    stack: LocalStack, control: SandboxControl, seed: dict[str, Any], receiver: Receiver
) -> None:
    group, people = seed["groups"][4], seed["people"][200:210]
    calls_before = add_calls(control)

    run = run_deployment(
        stack,
        ADD,
        {"group_ids": [group], "person_ids": people, "approval_deadline_hours": 0.002},
    )
    wait_for_approval(stack, run)
    state = final_state(stack, run, timeout=120)

    assert state["type"] == "FAILED"
    assert "paused and never resumed" in state["message"]
    assert add_calls(control) == calls_before and added(control, group) == {}
    failure = eventually(
        "the failure notification",
        lambda: receiver.find(lambda p: run in p["body"] and "Failed" in p["subject"]),
        90,
    )
    assert "No one approved or rejected its plan before the approval deadline" in failure["body"]


def test_pasted_rows_plan_as_the_same_file_and_a_file_changed_since_is_refused(
    stack: LocalStack, control: SandboxControl, seed: dict[str, Any], tmp_path: Path
) -> None:
    group, people = seed["groups"][3], seed["people"][300:320]
    people_file = tmp_path / "people.csv"  # the worker runs on this machine: it reads it
    people_file.write_text("person_id\n" + "\n".join(people) + "\n")
    calls_before = add_calls(control)

    run = run_deployment(stack, ADD, {"group_ids": [group], "input_file": str(people_file)})
    pasted = run_deployment(
        stack, ADD, {"group_ids": [group], "pasted_rows": people_file.read_text()}
    )
    wait_for_approval(stack, run)
    wait_for_approval(stack, pasted)
    assert plan_of(stack, pasted)["digest"] == plan_of(stack, run)["digest"]
    plan_table = artifact(stack, run, "add-people-to-groups-plan")
    assert artifact(stack, pasted, "add-people-to-groups-plan")["data"] == plan_table["data"]
    resume(stack, pasted, "dana", approve="no", reason="the same as the file")
    people_file.write_text("person_id\n" + "\n".join([*people, seed["people"][321]]) + "\n")
    resume(stack, run, "dana", approve="yes", reason="CHG-77")
    state = final_state(stack, run)

    assert state["type"] == "FAILED"
    assert "not the approved plan (20 item(s)" in state["message"]
    assert "now 21 item(s)" in state["message"]
    assert add_calls(control) == calls_before and added(control, group) == {}


def test_a_crash_after_approval_is_recovered_without_asking_again_or_adding_twice(
    stack: LocalStack, control: SandboxControl, seed: dict[str, Any]
) -> None:
    group, people = seed["groups"][2], seed["people"][:400]
    control.set_fault(route=ADD_PEOPLE, latency_ms=800)
    try:
        run = run_deployment(
            stack, ADD, {"group_ids": [group], "person_ids": people, "concurrency": 1}
        )
        wait_for_approval(stack, run)
        resume(stack, run, "dana", approve="yes", reason="CHG-9")
        eventually("the first chunk", lambda: len(added(control, group)) >= 100, 120)
        processes = flow_run_processes(stack)
        # one process per run, the engine itself: no workspace supervisor importing Prefect
        # first (prefect.yaml's command)
        assert [p.cmdline()[-2:] for p in processes] == [["-m", "prefect.engine"]], processes
        for process in processes:
            os.kill(process.pid, signal.SIGKILL)  # as if its machine died mid-run
    finally:
        control.clear_faults()
    sent = added(control, group)
    assert 100 <= len([p for p in people if p in sent]) < len(people), "killed mid-run"

    state = final_state(stack, run, timeout=300)
    assert state["type"] == "COMPLETED", state
    names = history(stack, run)
    assert "Crashed" in names, names
    assert names.count("Suspended") == 1, f"asked only once: {names}"
    sent = added(control, group)
    assert all(sent.get(p) == 1 for p in people), "everybody added, nobody twice"
    assert len(events(stack, APPROVED_EVENT, run)) == 1


def test_a_rerun_of_an_approved_run_needs_no_second_approval(
    stack: LocalStack, control: SandboxControl, seed: dict[str, Any]
) -> None:
    group, people = seed["groups"][1], seed["people"][450:460]
    unknown = "person-that-does-not-exist"
    plan = [(group, p) for p in people] + [(group, unknown)]

    run = run_deployment(stack, ADD, {"pasted_rows": csv_rows(plan)})
    wait_for_approval(stack, run)
    resume(stack, run, "dana", approve="yes", reason="CHG-12")
    assert final_state(stack, run)["type"] == "FAILED", "the unknown person failed"
    assert all(added(control, group).get(p) == 1 for p in people)
    calls_before = add_calls(control)

    rerun = run_deployment(stack, RERUN, {"flow_run_id": run})
    state = final_state(stack, rerun)
    assert state["type"] == "FAILED", "the person is still unknown"
    assert "Suspended" not in history(stack, rerun)
    assert add_calls(control) - calls_before == 1, "only the failed item, in one call"
    assert all(added(control, group).get(p) == 1 for p in people)


def test_the_run_form_offers_pasted_rows_and_approval(stack: LocalStack) -> None:
    deployment = stack.request("GET", f"/deployments/name/{ADD}").json()
    properties = deployment["parameter_openapi_schema"]["properties"]
    assert deployment["parameters"]["require_approval"] is True
    assert "person_id and optional group_id" in properties["pasted_rows"]["description"]
    assert properties["approval_deadline_hours"]["exclusiveMinimum"] == 0
    assert properties["require_approval"]["default"] is False  # the flow's own default


def test_a_decision_not_signed_by_the_server_is_refused_with_nothing_sent(
    stack: LocalStack, control: SandboxControl, seed: dict[str, Any]
) -> None:
    """Whoever resumes past the sign-in proxy (here the stack, with the server's own string)
    leaves no signed decision: the run refuses it before any call. A decision stored before the
    run asked for one is refused too."""
    group, people = seed["groups"][4], seed["people"][470:475]
    calls_before = add_calls(control)

    run = run_deployment(stack, ADD, {"group_ids": [group], "person_ids": people})
    wait_for_approval(stack, run)
    answer = {"run_input": {"approve": "yes", "reason": "x"}}
    stack.request("POST", f"/flow_runs/{run}/resume", answer)
    state = final_state(stack, run)
    assert state["type"] == "FAILED"
    assert "without a decision signed by the Prefect server" in state["message"]

    # created to start in an hour, a decision stored meanwhile, then started now
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    create = f"/deployments/{deployment_id(stack, ADD)}/create_flow_run"
    parameters = {"group_ids": [group], "person_ids": people}
    scheduled = {"type": "SCHEDULED", "state_details": {"scheduled_time": later}}
    early = stack.request("POST", create, {"parameters": parameters, "state": scheduled}).json()
    forged = {"approved": True, "approver": "dana", "reason": "x", "plan_digest": "0" * 64}
    stored = {"key": "compliance-approval", "value": json.dumps(forged)}
    stack.request("POST", f"/flow_runs/{early['id']}/input", stored)
    now = {"state": {"type": "SCHEDULED"}, "force": True}
    stack.request("POST", f"/flow_runs/{early['id']}/set_state", now)
    state = final_state(stack, early["id"])
    assert state["type"] == "FAILED"
    assert "stored before it asked for one" in state["message"]
    assert add_calls(control) == calls_before and added(control, group) == {}


def test_a_worker_or_a_viewer_can_neither_decide_nor_edit_and_a_forged_name_is_ignored(
    stack: LocalStack, seed: dict[str, Any]
) -> None:
    group, people = seed["groups"][4], seed["people"][480:482]
    run = run_deployment(stack, ADD, {"group_ids": [group], "person_ids": people})
    wait_for_approval(stack, run)
    deployment = stack.request("GET", f"/deployments/name/{ADD}").json()["id"]
    for person in ("worker-1", "vic"):
        assert resume(stack, run, person, approve="yes", reason="x")["http_status"] == 403
        with as_person(stack, person) as client:
            edit = client.patch(f"/deployments/{deployment}", json={"parameters": {}})
            assert edit.status_code == 403
            decision = {"key": "compliance-approval", "value": "{}"}
            assert client.post(f"/flow_runs/{run}/input", json=decision).status_code == 403
    with as_person(stack, "vic") as vic:
        forged = vic.post(
            f"/flow_runs/{run}/resume",
            json={"run_input": {"approve": "yes", "reason": "x"}},
            headers={IDENTITY_HEADER: "dana"},
        )
    assert forged.status_code == 403 and "vic (viewer)" in forged.text
    assert suspended(stack, run)
    resume(stack, run, "bob", approve="no", reason="only a test of who may decide")
    assert final_state(stack, run)["type"] == "CANCELLED"


def test_a_run_cannot_turn_off_its_deployments_approval(
    stack: LocalStack, control: SandboxControl, seed: dict[str, Any]
) -> None:
    """require_approval: true on the deployment is its policy: a requester's run that sets it
    false still waits, and nothing is sent until someone else decides."""
    group, people = seed["groups"][4], seed["people"][490:493]
    calls_before = add_calls(control)
    parameters = {"group_ids": [group], "person_ids": people, "require_approval": False}

    run = start_as(stack, "alice", ADD, parameters)
    wait_for_approval(stack, run)
    assert add_calls(control) == calls_before
    resume(stack, run, "bob", approve="yes", reason="CHG-31")
    assert final_state(stack, run)["type"] == "COMPLETED"
    assert added(control, group) == dict.fromkeys(people, 1)


def test_a_requester_cannot_choose_the_command_or_environment_a_worker_runs(
    stack: LocalStack, tmp_path: Path
) -> None:
    """Job variables set the process worker's ``command`` and ``env``: a requester's run that
    sets them is refused at the server, names the field, and no run is created."""
    marker = tmp_path / "ran"
    deployment = deployment_id(stack, ADD)
    runs_of = {"flow_runs": {"deployment_id": {"any_": [deployment]}}}
    before = stack.request("POST", "/flow_runs/count", runs_of).json()
    for job_variables in ({"command": f"touch {marker}"}, {"env": {"HTTPS_PROXY": "x:1"}}):
        with as_person(stack, "alice") as alice:
            response = alice.post(
                f"/deployments/{deployment}/create_flow_run",
                json={"parameters": {}, "job_variables": job_variables},
            )
        assert response.status_code == 403, response.text
        assert "job_variables" in response.json()["detail"]
    assert stack.request("POST", "/flow_runs/count", runs_of).json() == before
    assert not marker.exists()


def test_a_rerun_sends_only_items_of_the_approved_plan(
    stack: LocalStack, control: SandboxControl, seed: dict[str, Any]
) -> None:
    """Bypass #4 of issue 39: a failed-items record made up for an approved run. A person cannot
    make one (no artifact rule); a machine that does gets only the approved items rerun."""
    group, people = seed["groups"][4], seed["people"][494:496]
    unknown = "person-that-does-not-exist-either"
    run = start_as(
        stack, "alice", ADD, {"pasted_rows": csv_rows([(group, p) for p in [*people, unknown]])}
    )
    wait_for_approval(stack, run)
    resume(stack, run, "bob", approve="yes", reason="CHG-44")
    assert final_state(stack, run)["type"] == "FAILED", "the unknown person failed"

    intruder = seed["people"][497]
    rows = [
        {
            "item": name,
            "outcome": "failed",
            "reason": "x",
            "attempt": 1,
            "rerun_input": json.dumps({"person_id": name, "group_id": group}, sort_keys=True),
        }
        for name in (unknown, intruder)
    ]
    forged = {
        "key": "failed-items-add-people-to-groups",
        "type": "table",
        "data": rows,
        "flow_run_id": run,
    }
    with as_person(stack, "alice") as alice:
        assert alice.post("/artifacts/", json=forged).status_code == 403
    stack.request("POST", "/artifacts/", forged)  # as a machine that holds the server's string
    calls_before = add_calls(control)

    rerun = run_deployment(stack, RERUN, {"flow_run_id": run})
    assert final_state(stack, rerun)["type"] == "FAILED"
    results = artifact(stack, rerun, "add-people-to-groups-results")
    reasons = {row["item"]: row["reason"] for row in results["data"]}
    assert f"not in the plan approved for run {run}" in str(reasons)
    assert intruder not in added(control, group), "the made-up item is never sent"
    assert add_calls(control) - calls_before == 1, "only the approved failed item"


def test_the_decision_log_lists_who_requested_and_who_decided_and_checks_each(
    stack: LocalStack, tmp_path: Path, seed: dict[str, Any]
) -> None:
    """The file an auditor is handed: every decided run, both names, the signature checked; a
    decision altered afterwards shows up INVALID and the command fails."""
    group, people = seed["groups"][4], seed["people"][498:499]
    run = start_as(stack, "alice", ADD, {"group_ids": [group], "person_ids": people})
    wait_for_approval(stack, run)
    resume(stack, run, "dana", approve="yes", reason="CHG-50")
    assert final_state(stack, run)["type"] == "COMPLETED"
    out = tmp_path / "decisions.csv"

    assert _decision_log(stack, out) == 0
    rows = {row["flow_run_id"]: row for row in csv.DictReader(out.open())}
    mine = rows[run]
    assert (mine["requester"], mine["approver"], mine["approved"]) == ("alice", "dana", "True")
    assert (mine["reason"], mine["items"], mine["signature"]) == ("CHG-50", "1", "verified")
    assert stat.S_IMODE(out.stat().st_mode) == 0o640

    stored = stack.request("GET", f"/flow_runs/{run}/input/compliance-approval").json()
    altered = {**(json.loads(stored) if isinstance(stored, str) else stored), "approver": "bob"}
    stack.request("DELETE", f"/flow_runs/{run}/input/compliance-approval")
    value = {"key": "compliance-approval", "value": json.dumps(altered)}
    stack.request("POST", f"/flow_runs/{run}/input", value)
    assert _decision_log(stack, out) == 1
    rows = {row["flow_run_id"]: row for row in csv.DictReader(out.open())}
    assert rows[run]["signature"].startswith("INVALID")


def _decision_log(stack: LocalStack, out: Path) -> int:
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    from deployments.decision_log import main

    settings = {PREFECT_API_URL: stack.own_api_url, PREFECT_API_AUTH_STRING: stack.auth_string}
    with temporary_settings(settings):
        return main(["--since", datetime.now(UTC).date().isoformat(), "--out", str(out)])
