"""Questionnaire writes: one API operation per task."""

from __future__ import annotations

from prefect import task

from compliance_api.client import ComplianceClient
from compliance_api.models import Questionnaire, QuestionnaireUpdate
from runtime.retries import API_CALL


@task(name="Update questionnaire", task_run_name="update-{questionnaire_id}-{step}", **API_CALL)
async def update_questionnaire(
    client: ComplianceClient, questionnaire_id: str, update: QuestionnaireUpdate, step: str
) -> Questionnaire:
    """PATCH one questionnaire (status, assignments, due date, tags); a repeat is harmless."""
    return await client.update_questionnaire(questionnaire_id, update)


@task(name="Approve questionnaire", task_run_name="approve-{questionnaire_id}", **API_CALL)
async def approve_questionnaire(
    client: ComplianceClient, questionnaire_id: str, status_change_message: str | None
) -> Questionnaire:
    """Approve one questionnaire with the reason recorded in its status log."""
    return await client.approve_questionnaire(questionnaire_id, status_change_message)
