"""The Resume form's schema, as the Prefect server checks an answer against it before storing it
(issue 39: an answer of only spaces was stored, then failed the run on every retry); and the
plan's rows."""

from __future__ import annotations

import pytest
from prefect.utilities.schema_tools.validation import ValidationError, validate

from write_engine.approval import MAX_PLAN_ROWS, ApprovalInput
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
    schema = ApprovalInput.model_json_schema()
    with pytest.raises(ValidationError):
        validate(answer, schema, raise_on_error=True)


def test_the_approver_field_is_a_plain_text_box_only_the_try_out_needs() -> None:
    """Where people sign in it stays empty (the sign-in names the approver): a plain text field
    with an empty default, not a type picker (what an Optional renders as in the UI)."""
    field = ApprovalInput.model_json_schema()["properties"]["approver"]
    assert (field["type"], field["default"]) == ("string", "")
    assert "approver" not in ApprovalInput.model_json_schema().get("required", [])


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
