"""``make demo``: the five write flows on seeded sandbox data, a few items deliberately bad.

Runs the flows as an operator would (inline ids, CSV and JSON files, a dry run, injected faults,
a rerun) against a sandbox thread and a temporary Prefect server with its own random auth string,
and prints what happened. Exits 0 when every flow behaved as expected, 1 otherwise. The app,
``demo-manage-basic``, lacks QuestionnaireAutomationAdvanced, so assigning an approver fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployments.auth import CLIENT_AUTH_ENV, SERVER_AUTH_ENV, generate_auth_string
from deployments.server_settings import apply_server_settings
from sandbox.apps import DEMO_MANAGE_BASIC
from sandbox.launch import demo_environment
from sandbox.runner import SandboxHandle, run_sandbox_in_thread

UNKNOWN_VENDOR = "0000000000000000000000ff"
UNKNOWN_PERSON = "0000000000000000000000aa"
UNKNOWN_ACCOUNT = "0000000000000000000000cc"
ADD_PEOPLE = "POST /v1/groups/{groupId}/add-people"
CREATE_LINK = "POST /v1/documents/{documentId}/links"


@dataclass
class Step:
    """One flow run of the demo and what the demo expected of it."""

    title: str
    state: Any
    summary: Any
    expect: str
    ok: bool
    notes: list[str]


def _prepare_environment(workdir: Path) -> None:
    """Before Prefect is imported: a private home, quiet logs (overridable) and this run's auth
    string for the temporary server and the demo's client."""
    os.environ["PREFECT_HOME"] = str(workdir / "prefect")
    auth_string = generate_auth_string()
    os.environ[SERVER_AUTH_ENV] = auth_string
    os.environ[CLIENT_AUTH_ENV] = auth_string
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ["PREFECT_CLI_PROMPT"] = "false"
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
    apply_server_settings()  # read by the temporary server the demo starts
    for name in list(os.environ):
        if name.startswith("COMPLIANCE_") or name == "PREFECT_API_URL":
            del os.environ[name]


async def _run(flow: Any, **parameters: Any) -> tuple[Any, Any]:
    from write_engine.in_process import run_in_process

    return await run_in_process(flow, **parameters)


def _files(workdir: Path, seed: dict[str, Any]) -> dict[str, Path]:
    """The input files an operator would prepare: people CSV, questionnaires JSON, manifest."""
    people = workdir / "people.csv"
    people.write_text(
        "person_id\n" + "\n".join([*seed["people"][:250], UNKNOWN_PERSON]) + "\n",
        encoding="utf-8-sig",  # as spreadsheets save it, with a BOM
    )
    questionnaires = workdir / "questionnaires.json"
    rows: list[dict[str, Any]] = [{"questionnaire_id": q} for q in seed["questionnaires"][:3]]
    rows[2]["approver_id"] = seed["people"][0]  # needs an entitlement the demo app lacks
    questionnaires.write_text(json.dumps(rows, indent=2))
    manifest = workdir / "manifest.csv"
    lines = ["document_id,url,title,description,effective_date"]
    for index, document in enumerate(seed["documents"][:3]):
        lines.append(
            f"{document},https://evidence.example/soc2/{index},SOC 2 evidence {index},"
            f"Quarterly export {index},2026-01-01T00:00:00Z"
        )
    manifest.write_text("\n".join(lines) + "\n")
    return {"people": people, "questionnaires": questionnaires, "manifest": manifest}


async def _demo(sandbox: SandboxHandle, workdir: Path) -> list[Step]:
    from compliance_api.errors import InputError
    from deployments.bootstrap import ensure_token_rate_limit
    from flows.account_tags import update_account_tags
    from flows.add_people_to_groups import add_people_to_groups
    from flows.document_links import attach_document_links
    from flows.promote_vendors import promote_discovered_vendors
    from flows.questionnaires import route_questionnaires
    from flows.rerun import rerun_failed_items
    from write_engine.outcomes import Outcome

    await ensure_token_rate_limit()
    seed = sandbox.control.seed()
    files = _files(workdir, seed)
    steps: list[Step] = []

    def record(
        title: str, state: Any, summary: Any, expect: str, ok: bool, notes: Sequence[str] = ()
    ) -> None:
        steps.append(Step(title, state, summary, expect, ok, list(notes)))

    state, summary = await _run(
        promote_discovered_vendors,
        discovered_vendor_ids=[*seed["discovered_vendors"][:3], UNKNOWN_VENDOR],
    )
    record(
        "Promote discovered vendors (3 seeded ids + 1 unknown)",
        state,
        summary,
        "3 managed, the unknown id fails as not found",
        summary.counts == {Outcome.SUCCEEDED: 3, Outcome.FAILED: 1},
        notes=[
            f"managed: {v.name} -> vendor {v.vendor_id}, {v.status}, risk "
            f"{v.inherent_risk_level}/{v.residual_risk_level}"
            for v in summary.managed_vendors
        ],
    )

    sandbox.control.set_fault(route=ADD_PEOPLE, status=503, count=2)
    state, summary = await _run(
        add_people_to_groups, group_ids=seed["groups"][:2], input_file=str(files["people"])
    )
    sandbox.control.clear_faults()
    calls = sandbox.control.stats()["route_counts"].get(ADD_PEOPLE, 0)
    record(
        "Add people to groups (people.csv: 250 people + 1 unknown, 2 groups, 2 injected 503s)",
        state,
        summary,
        "500 added in 6 chunks (2 transient 503s retried), the unknown person fails per group",
        summary.counts == {Outcome.SUCCEEDED: 500, Outcome.FAILED: 2} and calls == 8,
        notes=[f"{calls} add-people calls: 6 chunks of <=100 + 2 retries"],
    )

    categories = list(seed["tags"])
    accounts = [
        {"account_id": account, "tags": {categories[0]: seed["tags"][categories[0]][:2]}}
        for account in [*seed["accounts"][:2], UNKNOWN_ACCOUNT]
    ]
    bad = [{"account_id": seed["accounts"][0], "tags": {categories[0]: ["no-such-tag"]}}]
    writes_before = sum(sandbox.control.stats()["write_counts"]["account_patch"].values())
    try:
        await update_account_tags(accounts=bad)
        rejected = "not rejected"
    except InputError as error:
        rejected = str(error)
    writes_after = sum(sandbox.control.stats()["write_counts"]["account_patch"].values())
    state, summary = await _run(update_account_tags, accounts=accounts)
    record(
        "Update account tags (2 seeded accounts + 1 unknown; before that, an unknown tag id)",
        state,
        summary,
        "unknown tag stops its run before any write; 2 accounts updated, the unknown one fails",
        rejected != "not rejected"
        and writes_before == writes_after
        and summary.counts == {Outcome.SUCCEEDED: 2, Outcome.FAILED: 1},
        notes=[f"input check, no write made: {rejected}"],
    )

    dry_state, dry = await _run(
        route_questionnaires,
        input_file=str(files["questionnaires"]),
        route=["IN_REVIEW", "READY_FOR_REVIEW"],
        dry_run=True,
    )
    state, summary = await _run(
        route_questionnaires,
        input_file=str(files["questionnaires"]),
        route=["IN_REVIEW", "READY_FOR_REVIEW"],
        approval_message="Reviewed by the security team",
    )
    record(
        "Route questionnaires (questionnaires.json: 3, one assigns an approver)",
        state,
        summary,
        "dry run plans 3; 2 routed and approved, the approver assignment fails (entitlement)",
        dry.counts == {Outcome.PLANNED: 3}
        and summary.counts == {Outcome.SUCCEEDED: 2, Outcome.FAILED: 1},
    )

    sandbox.control.set_fault(route=CREATE_LINK, status=503, count=1)
    state, summary = await _run(
        attach_document_links, input_file=str(files["manifest"]), concurrency=1
    )
    sandbox.control.clear_faults()
    record(
        "Attach document links (manifest.csv: 3 links, 1 injected 503)",
        state,
        summary,
        "2 attached; the link whose answer was a 503 is for review, not resent",
        summary.counts == {Outcome.SUCCEEDED: 2, Outcome.NEEDS_REVIEW: 1},
    )
    links_run = str(state.state_details.flow_run_id)

    state, summary = await _run(
        rerun_failed_items, flow_run_id=links_run, unconfirmed_links="resend"
    )
    again_state, again = await _run(attach_document_links, input_file=str(files["manifest"]))
    link_writes = sandbox.control.stats()["write_counts"]["document_link"]
    record(
        "Rerun the failed link after checking it (unconfirmed_links='resend'), then the "
        "whole manifest again",
        state,
        summary,
        "the rerun attaches it; the full manifest is then all skipped; each link sent once",
        summary.counts == {Outcome.SUCCEEDED: 1}
        and again.counts == {Outcome.SKIPPED: 3}
        and sorted(link_writes.values()) == [1, 1, 1],
        notes=[f"second manifest run: {again.headline()}"],
    )
    return steps


def _print_report(steps: list[Step], sandbox_url: str, timings: dict[str, float]) -> None:
    print(f"\ncompliance-flows demo (sandbox {sandbox_url}, temporary Prefect server)\n")
    for number, step in enumerate(steps, start=1):
        summary = step.summary
        print(f"{number}. {step.title}")
        print(f"   {step.state.type.value}: {summary.headline()}")
        for failed in summary.failed_items:
            print(f"   - {failed.item}: {failed.outcome.value} - {failed.reason}")
        for note in step.notes:
            print(f"   * {note}")
        expectation = "as expected" if step.ok else "NOT AS EXPECTED"
        print(f"   expected: {step.expect} -> {expectation}")
        if summary.failed and summary.flow_run_id:
            print(f"   rerun: python -m flows.rerun {summary.flow_run_id}")
        print()
    print(
        "How to rerun failures: every write run records its failed items in Prefect. Against "
        "a running stack (make serve), run `python -m flows.rerun <flow_run_id>` or start the "
        "'rerun-failed-items/on-failed-items' deployment with that flow_run_id; only the failed "
        "items are sent. The stack also reruns failed_retryable items on its own after a delay; "
        "refusals wait for you. Links reported needs_review are resent only with "
        "unconfirmed_links='resend' (after checking the document) or settled with "
        "'mark_attached'. This demo's Prefect server was temporary, so its run ids are gone now."
    )
    print(
        f"\nDemo finished in {timings['total']:.1f} s (starting the sandbox and Prefect server: "
        f"{timings['startup']:.1f} s; the flow runs: {timings['flows']:.1f} s)."
    )


def main() -> int:
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="compliance-flows-demo-"))
    try:
        _prepare_environment(workdir)
        print("Starting the sandbox and a temporary Prefect server ...", flush=True)
        from prefect.testing.utilities import prefect_test_harness

        with (
            run_sandbox_in_thread(seed=42) as sandbox,
            prefect_test_harness(server_startup_timeout=60),
        ):
            os.environ.update(
                demo_environment(
                    sandbox.url, sandbox.gov_url, state_dir=workdir / "state", app=DEMO_MANAGE_BASIC
                )
            )
            ready = time.monotonic()
            steps = asyncio.run(_demo(sandbox, workdir))
            done = time.monotonic()
            timings = {"startup": ready - started, "flows": done - ready, "total": done - started}
            _print_report(steps, sandbox.url, timings)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if all(step.ok for step in steps):
        return 0
    print("The demo did not behave as expected (see NOT AS EXPECTED above).", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
