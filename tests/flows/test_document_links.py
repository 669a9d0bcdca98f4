"""Attach document links against the sandbox, with a real Prefect server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compliance_api.errors import InputError, RateLimitedError
from compliance_api.retry import RetryNotice
from flows.document_links import attach_document_links
from flows.rerun import rerun_failed_items
from sandbox.runner import SandboxHandle
from tests.fixtures.flows import RETRY_AFTER_CAP_SECONDS, run_flow, run_id
from tests.fixtures.runs import api_calls
from write_engine.outcomes import Outcome

ROUTE = "POST /v1/documents/{documentId}/links"


def manifest(seed: dict[str, Any], count: int = 2) -> list[dict[str, Any]]:
    return [
        {
            "document_id": seed["documents"][index],
            "url": f"https://evidence.example/{index}",
            "title": f"Evidence {index}",
            "effective_date": "2026-01-01T00:00:00Z",
        }
        for index in range(count)
    ]


def link_writes(sandbox: SandboxHandle) -> dict[str, int]:
    return sandbox.control.stats()["write_counts"]["document_link"]


async def test_attaches_from_a_csv_manifest_and_never_twice(
    flows_env: SandboxHandle, seed: dict[str, Any], tmp_path: Path
) -> None:
    rows = manifest(seed)
    path = tmp_path / "manifest.csv"
    path.write_text(
        "document_id,url,title,description,effective_date\n"
        + "".join(
            f"{r['document_id']},{r['url']},{r['title']},,{r['effective_date']}\n" for r in rows
        ),
        encoding="utf-8-sig",
    )
    state, summary = await run_flow(attach_document_links, input_file=str(path))
    assert state.is_completed() and summary.counts == {Outcome.SUCCEEDED: 2}
    again, again_summary = await run_flow(attach_document_links, links=rows)
    assert again.is_completed() and again_summary.counts == {Outcome.SKIPPED: 2}
    assert link_writes(flows_env) == {f"{r['document_id']} {r['url']}": 1 for r in rows}


async def test_ambiguous_failure_is_for_review_and_not_resent(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    rows = manifest(seed, 1)
    flows_env.control.set_fault(route=ROUTE, status=503, count=1)
    first, summary = await run_flow(attach_document_links, links=rows)
    assert first.is_failed() and summary.counts == {Outcome.NEEDS_REVIEW: 1}
    assert api_calls(flows_env)[ROUTE] == 1  # no blind retry of a create
    # a rerun reports it again without sending; resending is the operator's explicit choice
    rerun, rerun_summary = await run_flow(rerun_failed_items, flow_run_id=run_id(first))
    assert rerun.is_failed() and rerun_summary.counts == {Outcome.NEEDS_REVIEW: 1}
    assert api_calls(flows_env)[ROUTE] == 1
    resent, resent_summary = await run_flow(
        rerun_failed_items, flow_run_id=run_id(rerun), unconfirmed_links="resend"
    )
    assert resent.is_completed() and resent_summary.counts == {Outcome.SUCCEEDED: 1}
    assert (rerun_summary.attempt, resent_summary.attempt) == (2, 3)
    assert link_writes(flows_env) == {f"{rows[0]['document_id']} {rows[0]['url']}": 1}


async def test_rate_limited_create_is_retried(
    flows_env: SandboxHandle, seed: dict[str, Any], client_retries: list[RetryNotice]
) -> None:
    """A 429 applied nothing, so the client sends the create again, after the Retry-After."""
    flows_env.control.set_fault(route=ROUTE, status=429, count=2)
    state, summary = await run_flow(attach_document_links, links=manifest(seed, 1))
    assert state.is_completed() and summary.counts == {Outcome.SUCCEEDED: 1}
    assert api_calls(flows_env)[ROUTE] == 3
    assert sum(link_writes(flows_env).values()) == 1
    # the sandbox says Retry-After: 1; the tests cap it (the backoff alone would be 0 here)
    assert [(n.attempt, n.wait_seconds) for n in client_retries] == [
        (1, RETRY_AFTER_CAP_SECONDS),
        (2, RETRY_AFTER_CAP_SECONDS),
    ]
    assert all(isinstance(n.error, RateLimitedError) for n in client_retries)


async def test_refused_link_fails_and_can_be_sent_later(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    rows = [
        *manifest(seed, 1),
        {"document_id": "no-such-doc", "url": "https://e.example/x", "title": "X"},
    ]
    state, summary = await run_flow(attach_document_links, links=rows)
    assert state.is_failed()
    assert summary.counts == {Outcome.SUCCEEDED: 1, Outcome.FAILED: 1}
    assert summary.failed_items[0].reason.startswith("not found")
    # the refusal left no pending ledger entry: a rerun sends it again (and fails again)
    rerun, _ = await run_flow(rerun_failed_items, flow_run_id=run_id(state))
    assert rerun.is_failed() and api_calls(flows_env)[ROUTE] == 3


async def test_bad_input_and_dry_run_send_nothing(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    bad = [
        *manifest(seed, 1),
        {"document_id": seed["documents"][1], "url": "not a url", "title": "T"},
    ]
    with pytest.raises(InputError, match=r"links\[1\]"):
        await attach_document_links(links=bad)
    state, summary = await run_flow(attach_document_links, links=manifest(seed), dry_run=True)
    assert state.is_completed() and summary.counts == {Outcome.PLANNED: 2}
    assert flows_env.control.stats()["route_counts"] == {}
