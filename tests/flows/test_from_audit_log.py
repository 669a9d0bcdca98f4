"""Event-triggered writes read their work from the audit log (``from_audit_log``): every target
logged since the flow's own checkpoint, once, whatever woke the run; against the sandbox, with a
real Prefect server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import audit_log.targets as targets_module
from audit_log.checkpoints import (
    PROMOTE_CHECKPOINT_VARIABLE,
    ROUTE_CHECKPOINT_VARIABLE,
    VariableCheckpointStore,
)
from compliance_api.errors import InputError
from flows.promote_vendors import promote_discovered_vendors
from flows.questionnaires import route_questionnaires
from flows.rerun import rerun_failed_items
from sandbox.runner import SandboxHandle
from tests.fixtures.flows import run_flow, run_id
from tests.fixtures.runs import results_table
from write_engine.inputs import split_identifiers
from write_engine.outcomes import Outcome
from write_engine.run import unusable_id

ADD_TO_MANAGED = "POST /v1/discovered-vendors/{discoveredVendorId}/add-to-managed"


@pytest.fixture(autouse=True)
async def no_checkpoints() -> AsyncIterator[None]:
    """Each test starts as a new deployment does: no checkpoint (a start 5 minutes back)."""
    for name in (PROMOTE_CHECKPOINT_VARIABLE, ROUTE_CHECKPOINT_VARIABLE):
        await VariableCheckpointStore(name).clear()
    yield
    for name in (PROMOTE_CHECKPOINT_VARIABLE, ROUTE_CHECKPOINT_VARIABLE):
        await VariableCheckpointStore(name).clear()


def discover(sandbox: SandboxHandle, count: int) -> list[str]:
    return [sandbox.control.inject("vendor_discovered")["id"] for _ in range(count)]


def managed(sandbox: SandboxHandle) -> dict[str, int]:
    return dict(sandbox.control.stats()["write_counts"]["add_to_managed"])


async def test_one_run_promotes_every_vendor_discovered_since_its_checkpoint_once(
    flows_env: SandboxHandle,
) -> None:
    vendors = discover(flows_env, 5)
    flows_env.control.inject("questionnaire_ready_for_review")  # another action: not a vendor
    state, summary = await run_flow(promote_discovered_vendors, from_audit_log=True)
    assert state.is_completed(), state.message
    assert summary.counts == {Outcome.SUCCEEDED: 5}
    rows, _ = await results_table(run_id(state))
    assert sorted(row["item"] for row in rows) == sorted(vendors)  # one table for the burst
    assert managed(flows_env) == dict.fromkeys(vendors, 1)

    # the next run (the catch-up, or a late event) finds nothing new and calls nothing
    state, summary = await run_flow(promote_discovered_vendors, from_audit_log=True)
    assert state.is_completed() and summary.total == 0
    later = discover(flows_env, 1)
    state, summary = await run_flow(promote_discovered_vendors, from_audit_log=True)
    assert summary.counts == {Outcome.SUCCEEDED: 1}
    assert managed(flows_env) == dict.fromkeys(vendors + later, 1)


async def test_vendors_the_log_shows_managed_since_the_checkpoint_are_not_sent_again(
    flows_env: SandboxHandle,
) -> None:
    """A run that another run (or a lost attempt of its own) overtook sends nothing twice."""
    vendors = discover(flows_env, 4)
    # another run promoted two of them after the discovery, before this run reads the log
    await run_flow(promote_discovered_vendors, discovered_vendor_ids=vendors[:2])
    state, summary = await run_flow(promote_discovered_vendors, from_audit_log=True)
    assert state.is_completed(), state.message
    assert summary.counts == {Outcome.SKIPPED: 2, Outcome.SUCCEEDED: 2}
    rows, _ = await results_table(run_id(state))
    skipped = {row["item"]: row["reason"] for row in rows if row["outcome"] == "skipped"}
    assert set(skipped) == set(vendors[:2])
    assert all("VENDOR_ADDED_TO_MANAGED" in reason for reason in skipped.values())
    assert managed(flows_env) == dict.fromkeys(vendors, 1)


async def test_ids_given_by_hand_join_the_vendors_from_the_log(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    (logged,) = discover(flows_env, 1)
    by_hand = seed["discovered_vendors"][0]
    state, summary = await run_flow(
        promote_discovered_vendors, discovered_vendor_ids=[by_hand, logged], from_audit_log=True
    )
    assert state.is_completed() and summary.counts == {Outcome.SUCCEEDED: 2}
    assert summary.duplicates_removed == [logged]
    assert managed(flows_env) == {by_hand: 1, logged: 1}


async def test_a_dry_run_or_a_run_that_dies_leaves_the_checkpoint_for_the_next_run(
    flows_env: SandboxHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    vendors = discover(flows_env, 3)
    state, summary = await run_flow(promote_discovered_vendors, from_audit_log=True, dry_run=True)
    assert summary.counts == {Outcome.PLANNED: 3}

    async def dies(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the worker died mid-run")

    with monkeypatch.context() as patch:
        patch.setattr(targets_module, "run_write_job", dies)
        state = await promote_discovered_vendors(from_audit_log=True, return_state=True)
    assert state.is_failed()
    assert managed(flows_env) == {}

    state, summary = await run_flow(promote_discovered_vendors, from_audit_log=True)
    assert summary.counts == {Outcome.SUCCEEDED: 3}
    assert managed(flows_env) == dict.fromkeys(vendors, 1)


async def test_failed_vendors_are_listed_and_rerunnable_and_the_log_moves_on(
    flows_env: SandboxHandle,
) -> None:
    vendors = discover(flows_env, 2)
    flows_env.control.set_fault(route=ADD_TO_MANAGED, status=503, error_rate=1.0)
    first, summary = await run_flow(promote_discovered_vendors, from_audit_log=True)
    assert first.is_failed() and summary.count(Outcome.FAILED_RETRYABLE) == 2
    flows_env.control.clear_faults()

    # the failures are the failed run's to rerun, not the next audit-log run's
    state, summary = await run_flow(promote_discovered_vendors, from_audit_log=True)
    assert state.is_completed() and summary.total == 0
    rerun, rerun_summary = await run_flow(rerun_failed_items, flow_run_id=run_id(first))
    assert rerun.is_completed() and rerun_summary.counts == {Outcome.SUCCEEDED: 2}
    assert managed(flows_env) == dict.fromkeys(vendors, 1)


async def test_bad_input_next_to_the_log_stops_before_any_call(flows_env: SandboxHandle) -> None:
    discover(flows_env, 1)
    before = flows_env.control.stats()["route_counts"]
    with pytest.raises(InputError, match=r"discovered_vendor_ids\[0\]"):
        await promote_discovered_vendors(discovered_vendor_ids=["not ok/1"], from_audit_log=True)
    assert flows_env.control.stats()["route_counts"] == before
    assert await VariableCheckpointStore(PROMOTE_CHECKPOINT_VARIABLE).load() is None


async def test_questionnaires_ready_for_review_are_approved_once_in_one_run(
    flows_env: SandboxHandle,
) -> None:
    ready = [flows_env.control.inject("questionnaire_ready_for_review")["id"] for _ in range(4)]
    discover(flows_env, 1)  # another action
    parameters = {"from_audit_log": True, "route": ["IN_REVIEW"], "approve": True}
    state, summary = await run_flow(route_questionnaires, **parameters)
    assert state.is_completed(), state.message
    assert summary.counts == {Outcome.SUCCEEDED: 4}
    state, summary = await run_flow(route_questionnaires, **parameters)
    assert summary.total == 0
    approvals = flows_env.control.stats()["write_counts"]["questionnaire_approve"]
    assert approvals == dict.fromkeys(ready, 1)


def test_an_id_no_url_path_can_carry_is_a_failed_item_not_a_stuck_run() -> None:
    """Ids come from the service here, not from an operator: one the client would refuse to
    send must not stop the run (nor the catch-up after it) for every other item."""
    usable, unusable = split_identifiers(["dv-1", "a/b", " ", "x" * 300, "dv-2"])
    assert usable == ["dv-1", "dv-2"] and unusable == ["a/b", " ", "x" * 300]
    row = unusable_id("a/b")
    assert row.outcome is Outcome.FAILED and row.rerun_input is None
    assert "cannot be sent in a URL path" in row.reason
