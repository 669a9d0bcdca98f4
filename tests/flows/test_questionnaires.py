"""Route questionnaires to approval against the sandbox, with a real Prefect server."""

from __future__ import annotations

from typing import Any

import pytest

from compliance_api.errors import InputError
from flows.questionnaires import route_questionnaires
from flows.rerun import rerun_failed_items
from runtime.connection import forget_brokers
from sandbox.apps import DEMO_MANAGE_BASIC
from sandbox.runner import SandboxHandle
from tests.fixtures.flows import run_flow, run_id
from tests.fixtures.runs import api_calls, results_table
from write_engine.outcomes import Outcome

PATCH = "PATCH /v1/customer-trust/questionnaires/{questionnaireId}"
APPROVE = "POST /v1/customer-trust/questionnaires/{questionnaireId}/approve"
ROUTE = ["IN_REVIEW", "READY_FOR_REVIEW"]


def writes(sandbox: SandboxHandle) -> tuple[dict[str, int], dict[str, int]]:
    counts = sandbox.control.stats()["write_counts"]
    return counts["questionnaire_patch"], counts["questionnaire_approve"]


async def test_routes_and_approves_then_skips_what_is_done(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    ids = seed["questionnaires"][:2]
    state, summary = await run_flow(
        route_questionnaires, questionnaire_ids=ids, route=ROUTE, approval_message="LGTM"
    )
    assert state.is_completed() and summary.counts == {Outcome.SUCCEEDED: 2}
    patches, approvals = writes(flows_env)
    assert approvals == {q: 1 for q in ids}
    # again, with an owner: the owner update shows they are APPROVED, so nothing else is sent
    state, summary = await run_flow(
        route_questionnaires, questionnaire_ids=ids, route=ROUTE, owner_id=seed["people"][0]
    )
    assert state.is_completed()
    rows, _ = await results_table(run_id(state))
    assert all(
        "skipped (already reached): IN_REVIEW, READY_FOR_REVIEW, approve" in row["reason"]
        for row in rows
    )
    after_patches, after_approvals = writes(flows_env)
    assert after_approvals == approvals
    assert after_patches == {q: patches.get(q, 0) + 1 for q in ids}


async def test_non_settable_status_is_an_input_error(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    with pytest.raises(InputError, match="'COMPLETE' cannot be set by a client"):
        await route_questionnaires(
            questionnaire_ids=seed["questionnaires"][:1], route=["IN_REVIEW", "COMPLETE"]
        )
    assert flows_env.control.stats()["route_counts"] == {}


async def test_dry_run_sends_nothing(flows_env: SandboxHandle, seed: dict[str, Any]) -> None:
    state, summary = await run_flow(
        route_questionnaires,
        questionnaire_ids=seed["questionnaires"][:2],
        route=ROUTE,
        dry_run=True,
    )
    assert state.is_completed() and summary.counts == {Outcome.PLANNED: 2}
    assert flows_env.control.stats()["route_counts"] == {}


async def test_missing_entitlement_for_approver_fails_that_questionnaire(
    flows_env: SandboxHandle, seed: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMPLIANCE_CLIENT_ID", DEMO_MANAGE_BASIC.client_id)
    monkeypatch.setenv("COMPLIANCE_CLIENT_SECRET", DEMO_MANAGE_BASIC.client_secret)
    forget_brokers()
    ids = seed["questionnaires"][:2]
    state, summary = await run_flow(
        route_questionnaires, questionnaire_ids=ids, approver_id=seed["people"][1], route=ROUTE
    )
    assert state.is_failed() and summary.counts == {Outcome.FAILED: 2}
    reason = summary.failed_items[0].reason
    assert "QuestionnaireAutomationAdvanced entitlement" in reason
    assert PATCH in api_calls(flows_env) and APPROVE not in api_calls(flows_env)


async def test_rerun_resumes_at_the_failed_step(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    ids = seed["questionnaires"][2:4]
    flows_env.control.set_fault(route=APPROVE, status=503, error_rate=1.0)
    failed_run, summary = await run_flow(route_questionnaires, questionnaire_ids=ids, route=ROUTE)
    assert failed_run.is_failed() and summary.counts == {Outcome.FAILED_RETRYABLE: 2}
    # what is left to do is the approval only
    assert [r.rerun_input for r in summary.failed_items] == [{"questionnaire_id": q} for q in ids]
    patches, _ = writes(flows_env)
    flows_env.control.clear_faults()
    rerun, rerun_summary = await run_flow(rerun_failed_items, flow_run_id=run_id(failed_run))
    assert rerun.is_completed() and rerun_summary.counts == {Outcome.SUCCEEDED: 2}
    after_patches, approvals = writes(flows_env)
    assert after_patches == patches  # the route was not replayed
    assert approvals == {q: 1 for q in ids}


async def test_transient_fault_is_retried(flows_env: SandboxHandle, seed: dict[str, Any]) -> None:
    flows_env.control.set_fault(route=PATCH, status=502, count=1)
    qid = seed["questionnaires"][4]
    state, summary = await run_flow(
        route_questionnaires, questionnaire_ids=[qid], route=["IN_PROGRESS"], approve=False
    )
    assert state.is_completed() and summary.counts == {Outcome.SUCCEEDED: 1}
    assert api_calls(flows_env)[PATCH] == 2
    assert writes(flows_env) == ({qid: 1}, {})
