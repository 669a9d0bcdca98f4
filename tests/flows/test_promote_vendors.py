"""Promote discovered vendors against the sandbox, with a real Prefect server."""

from __future__ import annotations

from typing import Any

import pytest

from compliance_api.errors import InputError
from flows.promote_vendors import VendorPromotionSummary, promote_discovered_vendors
from flows.rerun import rerun_failed_items
from sandbox.runner import SandboxHandle
from tests.fixtures.flows import run_flow, run_id
from tests.fixtures.runs import api_calls, results_table
from write_engine.outcomes import Outcome

ROUTE = "POST /v1/discovered-vendors/{discoveredVendorId}/add-to-managed"


async def test_promotes_and_lists_managed_vendors_with_risk(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    ids = seed["discovered_vendors"][:3]
    state, summary = await run_flow(promote_discovered_vendors, discovered_vendor_ids=ids)
    assert state.is_completed()
    assert isinstance(summary, VendorPromotionSummary)
    assert summary.counts == {Outcome.SUCCEEDED: 3}
    assert [v.discovered_vendor_id for v in summary.managed_vendors] == ids
    assert all(v.status == "MANAGED" and v.inherent_risk_level for v in summary.managed_vendors)
    assert flows_env.control.stats()["write_counts"]["add_to_managed"] == {i: 1 for i in ids}


async def test_unknown_vendor_fails_red_with_reason_and_already_managed_succeeds(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    known = seed["discovered_vendors"][0]
    await run_flow(promote_discovered_vendors, discovered_vendor_ids=[known])
    state, summary = await run_flow(
        promote_discovered_vendors, discovered_vendor_ids=[known, "no-such-vendor"]
    )
    assert state.is_failed()
    assert summary.count(Outcome.SUCCEEDED) == 1
    (failed,) = summary.failed_items
    assert failed.outcome is Outcome.FAILED and failed.reason.startswith("not found")
    rows, description = await results_table(run_id(state))
    assert {"item": "no-such-vendor", "outcome": "failed"}.items() <= rows[0].items()
    assert "python -m flows.rerun" in description


async def test_bad_input_makes_no_api_call(flows_env: SandboxHandle) -> None:
    with pytest.raises(InputError, match=r"discovered_vendor_ids\[1\]"):
        await promote_discovered_vendors(discovered_vendor_ids=["ok-1", "not ok/2"])
    stats = flows_env.control.stats()
    assert stats["route_counts"] == {} and stats["token_requests"] == {}


async def test_dry_run_calls_nothing(flows_env: SandboxHandle, seed: dict[str, Any]) -> None:
    state, summary = await run_flow(
        promote_discovered_vendors,
        discovered_vendor_ids=seed["discovered_vendors"][:2],
        dry_run=True,
    )
    assert state.is_completed() and summary.counts == {Outcome.PLANNED: 2}
    assert flows_env.control.stats()["route_counts"] == {}


async def test_transient_faults_are_retried(flows_env: SandboxHandle, seed: dict[str, Any]) -> None:
    flows_env.control.set_fault(route=ROUTE, status=503, count=2)
    ids = seed["discovered_vendors"][:1]
    state, summary = await run_flow(promote_discovered_vendors, discovered_vendor_ids=ids)
    assert state.is_completed() and summary.counts == {Outcome.SUCCEEDED: 1}
    assert api_calls(flows_env)[ROUTE] == 3


async def test_rerun_sends_only_the_failed_vendors(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    ids = seed["discovered_vendors"][:4]
    flows_env.control.set_fault(route=ROUTE, status=503, error_rate=1.0)
    first, summary = await run_flow(
        promote_discovered_vendors, discovered_vendor_ids=ids[:2], concurrency=1
    )
    assert first.is_failed() and summary.count(Outcome.FAILED_RETRYABLE) == 2
    flows_env.control.clear_faults()
    await run_flow(promote_discovered_vendors, discovered_vendor_ids=ids[2:])
    rerun, rerun_summary = await run_flow(rerun_failed_items, flow_run_id=run_id(first))
    assert rerun.is_completed()
    assert rerun_summary.rerun_of == run_id(first) and rerun_summary.total == 2
    assert flows_env.control.stats()["write_counts"]["add_to_managed"] == {i: 1 for i in ids}
