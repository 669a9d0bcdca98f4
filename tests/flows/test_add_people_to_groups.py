"""Add people to groups against the sandbox, with a real Prefect server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compliance_api.errors import InputError, ServerError
from compliance_api.retry import RetryNotice
from flows.add_people_to_groups import add_people_to_groups
from flows.rerun import rerun_failed_items
from runtime.connection import forget_brokers
from sandbox.runner import SandboxHandle, run_sandbox_in_thread
from tests.fixtures.flows import MAX_SENDS, run_flow, run_id
from tests.fixtures.runs import api_calls, results_table
from tests.fixtures.sandbox import use_demo_app
from write_engine.outcomes import Outcome

ROUTE = "POST /v1/groups/{groupId}/add-people"


async def test_adds_people_in_chunks_of_100(flows_env: SandboxHandle, seed: dict[str, Any]) -> None:
    groups, people = seed["groups"][:2], seed["people"][:150]
    state, summary = await run_flow(add_people_to_groups, group_ids=groups, person_ids=people)
    assert state.is_completed() and summary.counts == {Outcome.SUCCEEDED: 300}
    assert api_calls(flows_env)[ROUTE] == 4  # 100 + 50 per group
    counts = flows_env.control.stats()["group_add_counts"]
    assert all(counts[group] == {person: 1 for person in people} for group in groups)


async def test_chunks_run_with_the_bulk_collector_settings_and_restore_them(
    flows_env: SandboxHandle, seed: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The calls of a write run see the bulk-run collector thresholds; the process gets its
    own back when the run ends."""
    import gc

    from flows.add_people_to_groups import GroupMembership
    from runtime.collector import BULK_RUN_THRESHOLD

    before = gc.get_threshold()
    seen: list[int] = []
    apply = GroupMembership.apply

    async def observed(self: GroupMembership, client: Any, unit: Any) -> Any:
        seen.append(gc.get_threshold()[0])
        return await apply(self, client, unit)

    monkeypatch.setattr(GroupMembership, "apply", observed)
    state, summary = await run_flow(
        add_people_to_groups, group_ids=seed["groups"][:1], person_ids=seed["people"][:150]
    )
    assert state.is_completed() and summary.counts == {Outcome.SUCCEEDED: 150}
    assert seen == [BULK_RUN_THRESHOLD, BULK_RUN_THRESHOLD]
    assert gc.get_threshold() == before != (BULK_RUN_THRESHOLD, *before[1:])


async def test_per_person_errors_are_collected_with_messages(
    flows_env: SandboxHandle, seed: dict[str, Any], tmp_path: Path
) -> None:
    group = seed["groups"][0]
    people_file = tmp_path / "people.csv"
    people_file.write_text("person_id\n" + "\n".join([seed["people"][0], "ghost-1"]) + "\n")
    state, summary = await run_flow(
        add_people_to_groups, group_ids=[group], input_file=str(people_file)
    )
    assert state.is_failed()
    assert summary.counts == {Outcome.SUCCEEDED: 1, Outcome.FAILED: 1}
    (failed,) = summary.failed_items
    assert "ghost-1" in failed.item and "not found" in failed.reason
    assert failed.rerun_input == {"group_id": group, "person_id": "ghost-1"}


async def test_bad_input_and_dry_run_make_no_call(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    with pytest.raises(InputError, match=r"person_ids\[1\]"):
        await add_people_to_groups(group_ids=[seed["groups"][0]], person_ids=["p-1", ""])
    state, summary = await run_flow(
        add_people_to_groups,
        group_ids=seed["groups"][:1],
        person_ids=seed["people"][:120],
        dry_run=True,
    )
    assert state.is_completed() and summary.counts == {Outcome.PLANNED: 120}
    assert flows_env.control.stats()["route_counts"] == {}


async def test_transient_chunk_failures_are_retried(
    flows_env: SandboxHandle, seed: dict[str, Any], client_retries: list[RetryNotice]
) -> None:
    flows_env.control.set_fault(route=ROUTE, status=503, count=2)
    state, summary = await run_flow(
        add_people_to_groups, group_ids=seed["groups"][:1], person_ids=seed["people"][:10]
    )
    assert state.is_completed() and summary.counts == {Outcome.SUCCEEDED: 10}
    assert api_calls(flows_env)[ROUTE] == 3
    # recovered by the client's retries, the one layer (logged on the task run)
    assert [(n.operation, n.attempt) for n in client_retries] == [
        ("add_people_to_group", 1),
        ("add_people_to_group", 2),
    ]
    assert all(isinstance(n.error, ServerError) for n in client_retries)


async def test_a_persistent_5xx_sends_one_chunk_at_most_six_times(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    """One retry layer with a bounded total: the client's 6 sends of the chunk, and no task
    retries on top (stacked, 4 task attempts of 6 sends each sent it 24 times)."""
    group, people = seed["groups"][0], seed["people"][:5]
    flows_env.control.set_fault(route=ROUTE, status=503, error_rate=1.0)
    state, summary = await run_flow(add_people_to_groups, group_ids=[group], person_ids=people)
    assert api_calls(flows_env)[ROUTE] == MAX_SENDS == 6
    assert state.is_failed() and summary.counts == {Outcome.FAILED_RETRYABLE: len(people)}
    rerunnable = {f.rerun_input["person_id"] for f in summary.failed_items if f.rerun_input}
    assert rerunnable == set(people)
    assert all("503" in f.reason for f in summary.failed_items)
    flows_env.control.clear_faults()
    rerun, rerun_summary = await run_flow(rerun_failed_items, flow_run_id=run_id(state))
    assert rerun.is_completed() and rerun_summary.counts == {Outcome.SUCCEEDED: len(people)}
    assert api_calls(flows_env)[ROUTE] == MAX_SENDS + 1
    assert flows_env.control.stats()["group_add_counts"][group] == dict.fromkeys(people, 1)


async def test_failed_chunk_is_retryable_and_rerun_applies_each_person_once(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    group, people = seed["groups"][0], seed["people"][:130]
    # the first chunk goes through; every later call fails (so the second chunk does, 6 times)
    first, summary = await run_flow(
        add_people_to_groups, group_ids=[group], person_ids=people[:100], concurrency=1
    )
    assert first.is_completed()
    flows_env.control.set_fault(route=ROUTE, status=503, error_rate=1.0)
    failed_run, summary = await run_flow(
        add_people_to_groups, group_ids=[group], person_ids=people[100:], concurrency=1
    )
    assert failed_run.is_failed() and summary.counts == {Outcome.FAILED_RETRYABLE: 30}
    assert "after retries" in summary.failed_items[0].reason
    assert api_calls(flows_env)[ROUTE] == 1 + MAX_SENDS
    flows_env.control.clear_faults()
    rerun, rerun_summary = await run_flow(rerun_failed_items, flow_run_id=run_id(failed_run))
    assert rerun.is_completed() and rerun_summary.counts == {Outcome.SUCCEEDED: 30}
    counts = flows_env.control.stats()["group_add_counts"][group]
    assert counts == {person: 1 for person in people}
    # nothing is left to rerun: a second rerun of the rerun sends nothing
    before = api_calls(flows_env)[ROUTE]
    again, again_summary = await run_flow(rerun_failed_items, flow_run_id=run_id(rerun))
    assert again.is_completed() and again_summary.total == 0
    assert api_calls(flows_env)[ROUTE] == before


async def test_ten_thousand_people_take_exactly_100_calls(
    test_token_limit: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    with run_sandbox_in_thread(seed=7, scale=20) as big:
        use_demo_app(monkeypatch, big, tmp_path / "state")
        monkeypatch.setenv("COMPLIANCE_TOKEN_RATE_LIMIT_NAME", test_token_limit)
        forget_brokers()
        people = big.control.seed()["people"]
        assert len(people) == 10_000
        people_file = tmp_path / "people.json"
        people_file.write_text(__import__("json").dumps(people))
        group = big.control.seed()["groups"][0]
        state, summary = await run_flow(
            add_people_to_groups, group_ids=[group], input_file=str(people_file), concurrency=16
        )
        assert state.is_completed() and summary.counts == {Outcome.SUCCEEDED: 10_000}
        assert big.control.stats()["route_counts"][ROUTE] == 100
        rows, description = await results_table(run_id(state))
        assert len(rows) == 1000 and "9000 succeeded/skipped row(s) not shown" in description
        forget_brokers()
