"""Update account tags against the sandbox, with a real Prefect server."""

from __future__ import annotations

from typing import Any

import pytest

from compliance_api.errors import InputError
from flows.account_tags import update_account_tags
from flows.rerun import rerun_failed_items
from sandbox.runner import SandboxHandle
from tests.fixtures.flows import run_flow, run_id
from tests.fixtures.runs import api_calls, write_calls
from write_engine.outcomes import Outcome

PATCH = "PATCH /v1/customer-trust/accounts/{accountId}"


def tagging(seed: dict[str, Any], account: str, **extra: Any) -> dict[str, Any]:
    first, second = list(seed["tags"])[:2]
    return {
        "account_id": account,
        "tags": {first: seed["tags"][first][:2], second: []},
        **extra,
    }


async def test_replaces_tags_per_category(flows_env: SandboxHandle, seed: dict[str, Any]) -> None:
    accounts = [tagging(seed, a, name=f"Renamed {a[:4]}") for a in seed["accounts"][:2]]
    state, summary = await run_flow(update_account_tags, accounts=accounts)
    assert state.is_completed() and summary.counts == {Outcome.SUCCEEDED: 2}
    first, second = list(seed["tags"])[:2]
    calls = api_calls(flows_env)
    assert calls[PATCH] == 2
    assert calls["GET /v1/customer-trust/tag-categories"] == 1
    assert calls["GET /v1/customer-trust/tag-categories/{tagCategoryId}"] == 2
    assert flows_env.control.stats()["write_counts"]["account_patch"] == {
        a: 1 for a in seed["accounts"][:2]
    }


@pytest.mark.parametrize("bad", ["category", "tag"])
async def test_unknown_category_or_tag_stops_before_any_write(
    flows_env: SandboxHandle, seed: dict[str, Any], bad: str
) -> None:
    category = list(seed["tags"])[0]
    tags = {"no-such-category": ["t"]} if bad == "category" else {category: ["no-such-tag"]}
    accounts = [
        tagging(seed, seed["accounts"][0]),
        {"account_id": seed["accounts"][1], "tags": tags},
    ]
    with pytest.raises(InputError) as caught:
        await update_account_tags(accounts=accounts)
    assert caught.value.item == f"account {seed['accounts'][1]}"
    assert caught.value.value == ("no-such-category" if bad == "category" else "no-such-tag")
    assert write_calls(flows_env) == {}


async def test_dry_run_reads_categories_but_writes_nothing(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    state, summary = await run_flow(
        update_account_tags, accounts=[tagging(seed, seed["accounts"][0])], dry_run=True
    )
    assert state.is_completed() and summary.counts == {Outcome.PLANNED: 1}
    assert write_calls(flows_env) == {}


async def test_unknown_account_fails_and_rerun_after_fault_applies_once(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    good = seed["accounts"][:2]
    flows_env.control.set_fault(route=PATCH, status=500, error_rate=1.0)
    accounts = [tagging(seed, a) for a in good] + [tagging(seed, "no-such-account")]
    failed_run, summary = await run_flow(update_account_tags, accounts=accounts)
    assert failed_run.is_failed()
    assert summary.count(Outcome.FAILED_RETRYABLE) == 3
    flows_env.control.clear_faults()
    rerun, rerun_summary = await run_flow(rerun_failed_items, flow_run_id=run_id(failed_run))
    assert rerun.is_failed()
    assert rerun_summary.count(Outcome.SUCCEEDED) == 2
    (missing,) = rerun_summary.failed_items
    assert missing.outcome is Outcome.FAILED and missing.reason.startswith("not found")
    assert flows_env.control.stats()["write_counts"]["account_patch"] == {a: 1 for a in good}


async def test_transient_fault_is_retried(flows_env: SandboxHandle, seed: dict[str, Any]) -> None:
    flows_env.control.set_fault(route=PATCH, status=503, count=1)
    state, _ = await run_flow(update_account_tags, accounts=[tagging(seed, seed["accounts"][0])])
    assert state.is_completed()
    assert api_calls(flows_env)[PATCH] == 2
