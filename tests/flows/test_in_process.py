"""A run started in this process (the demo, the tests) keeps its summary when the server's answer
to the final state was lost and Prefect's client proposed it again."""

from __future__ import annotations

from typing import Any

import pytest
from prefect.client.orchestration import PrefectClient
from prefect.client.schemas.objects import StateType
from prefect.exceptions import FailedRun, MissingResult

from flows.questionnaires import route_questionnaires
from sandbox.runner import SandboxHandle
from write_engine.in_process import run_in_process
from write_engine.outcomes import ItemsFailed, Outcome


@pytest.fixture
def final_answer_lost(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every final proposal reaches the server twice, as when the client resends after a read
    timeout: the server accepts the first and answers the second with the state it holds."""
    original = PrefectClient.set_flow_run_state
    answers: list[str] = []

    async def twice(self: PrefectClient, flow_run_id: Any, state: Any, force: bool = False) -> Any:
        if not state.is_final():
            return await original(self, flow_run_id, state, force=force)
        await original(self, flow_run_id, state, force=force)
        again = await original(self, flow_run_id, state, force=force)
        answers.append(again.status.value)
        return again

    monkeypatch.setattr(PrefectClient, "set_flow_run_state", twice)
    return answers


async def test_summary_survives_a_resent_final_state(
    flows_env: SandboxHandle, seed: dict[str, Any], final_answer_lost: list[str]
) -> None:
    parameters: dict[str, Any] = {"route": ["IN_PROGRESS"], "approve": False}
    first, second = seed["questionnaires"][5:7]
    state = await route_questionnaires(questionnaire_ids=[first], **parameters, return_state=True)
    assert final_answer_lost == ["REJECT"]  # the server kept its own Completed state
    with pytest.raises(MissingResult):  # which carries no result: why run_in_process exists
        await state.result()

    state, summary = await run_in_process(
        route_questionnaires, questionnaire_ids=[second], **parameters
    )
    assert final_answer_lost == ["REJECT", "REJECT"]
    assert state.type is StateType.COMPLETED and summary.counts == {Outcome.SUCCEEDED: 1}
    assert summary.flow_run_id == str(state.state_details.flow_run_id)


async def test_failed_items_survive_a_resent_final_state(
    flows_env: SandboxHandle, seed: dict[str, Any], final_answer_lost: list[str]
) -> None:
    """A Failed state the server already held comes back without its ``ItemsFailed``: the
    engine raises a bare ``FailedRun``, and ``run_in_process`` still returns the summary."""
    missing = "0" * 24  # well formed, unknown to the service: the item fails with 404
    parameters: dict[str, Any] = {"route": ["IN_PROGRESS"], "approve": False}
    with pytest.raises(FailedRun) as raised:
        await route_questionnaires(questionnaire_ids=[missing], **parameters)
    assert final_answer_lost == ["REJECT"] and not isinstance(raised.value, ItemsFailed)

    state, summary = await run_in_process(
        route_questionnaires, questionnaire_ids=[seed["questionnaires"][7], missing], **parameters
    )
    assert final_answer_lost == ["REJECT", "REJECT"]
    assert state.type is StateType.FAILED
    assert summary.counts == {Outcome.SUCCEEDED: 1, Outcome.FAILED: 1}, summary.counts
    rerun = [failed.rerun_input for failed in summary.failed_items]
    assert rerun == [{"questionnaire_id": missing, **parameters}]
    assert summary.flow_run_id == str(state.state_details.flow_run_id)
