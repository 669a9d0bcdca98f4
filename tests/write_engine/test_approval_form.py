"""The Resume form's schema, as the Prefect server checks an answer against it before storing it
(issue 39: an answer of only spaces was stored, then failed the run on every retry); and the
plan's rows."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from prefect.utilities.schema_tools.validation import ValidationError, validate

from write_engine.approval import (
    MAX_PLAN_ROWS,
    ApprovalInput,
    DecisionRefused,
    PlanRecord,
    TypedApprovalInput,
    _typed,
)
from write_engine.attestation import digest_of
from write_engine.outcomes import Done, Outcome
from write_engine.reporting import MAX_OK_ROWS, result_rows


@pytest.mark.parametrize(
    "answer",
    [
        {"approve": "yes", "reason": "   "},
        {"approve": "no", "reason": "\t\n"},
        {"reason": "CHG-1"},
        {"approve": "maybe", "reason": "CHG-1"},
    ],
)
def test_the_server_refuses_a_blank_or_missing_answer(answer: dict[str, str]) -> None:
    for form in (ApprovalInput, TypedApprovalInput):
        with pytest.raises(ValidationError):
            validate(answer, form.model_json_schema(), raise_on_error=True)


def test_where_people_sign_in_the_form_asks_no_name() -> None:
    """The sign-in names the approver: a name field would only invite a different one."""
    assert set(ApprovalInput.model_json_schema()["properties"]) == {"approve", "reason"}


def test_without_sign_in_the_approver_is_a_plain_text_box() -> None:
    """A plain text field with an empty default, not a type picker (what an Optional renders
    as in the UI); the flow refuses an empty one."""
    schema = TypedApprovalInput.model_json_schema()
    field = schema["properties"]["approver"]
    assert (field["type"], field["default"]) == ("string", "")
    assert "approver" not in schema.get("required", [])
    assert list(schema["properties"]) == ["approve", "reason", "approver"]


def test_the_server_takes_a_real_answer_and_the_form_strips_it() -> None:
    schema = ApprovalInput.model_json_schema()
    answer = {"approve": "yes", "reason": "  CHG-1 "}
    validate(answer, schema, raise_on_error=True)
    assert ApprovalInput.model_validate(answer).reason == "CHG-1"


def test_the_plan_lists_up_to_its_own_limit_not_the_results_tables() -> None:
    planned = [Done(f"p-{n}", Outcome.PLANNED) for n in range(MAX_OK_ROWS + 500)]
    rows, hidden = result_rows(planned, max_others=MAX_PLAN_ROWS)
    assert (len(rows), hidden) == (MAX_OK_ROWS + 500, 0)
    assert len(result_rows(planned)[0]) == MAX_OK_ROWS


def test_a_typed_decision_names_who_typed_it_and_says_it_is_unsigned() -> None:
    plan = PlanRecord(
        digest=digest_of(["h1"]),
        total=1,
        counts={"group g": 1},
        planned_at=datetime.now(UTC),
        items=["h1"],
    )
    answer = TypedApprovalInput(approve="no", reason="no ticket", approver="  erin ")
    decision = _typed(answer, plan)
    assert (decision.approver, decision.approved, decision.reason) == ("erin", False, "no ticket")
    assert decision.plan_digest == plan.digest and decision.signature_checked is False
    with pytest.raises(DecisionRefused, match="approver: name yourself"):
        _typed(TypedApprovalInput(approve="yes", reason="CHG-1", approver="  "), plan)
