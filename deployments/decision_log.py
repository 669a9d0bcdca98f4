"""The decisions on write runs' plans, as a CSV file an auditor can be handed.

``python -m deployments.decision_log --since 2026-11-01 --out decisions.csv`` (against the Prefect
API of ``PREFECT_API_URL``, as the server's own process or a person with the viewer role): one
row per decided run since that day, with who requested it, who decided, the answer, the reason,
the plan's digest and size, and whether the server's signature holds (``verified``), the run's
decision was typed without sign-in (``unsigned``) or it does not hold (``INVALID``). Flow runs
are kept as long as the Prefect database keeps them; the file is 0640.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any

from prefect.client.orchestration import PrefectClient, get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterStartTime
from prefect.client.schemas.objects import FlowRun
from prefect.client.schemas.sorting import FlowRunSort
from prefect.input.actions import aread_flow_run_input

from write_engine.approval import server_signing
from write_engine.attestation import DECISION_KEY, PAUSE_KEY, DecisionRecord, NotAttested, verified

COLUMNS = (
    "decided_at",
    "flow_run_id",
    "run_name",
    "deployment_id",
    "approved",
    "requester",
    "approver",
    "reason",
    "plan_digest",
    "items",
    "signature",
)
PAGE = 200


async def decision_rows(since: date) -> list[dict[str, Any]]:
    """One row per run since ``since`` (UTC) that waited for approval and was decided."""
    rows: list[dict[str, Any]] = []
    async with get_client() as client:
        key = (await server_signing()).public_key
        async for run in _runs_since(client, since):
            if PAUSE_KEY not in (run.empirical_policy.pause_keys or set()):
                continue
            stored = await aread_flow_run_input(DECISION_KEY, flow_run_id=run.id)
            if stored is not None:
                rows.append(_row(run, stored, key))
    return sorted(rows, key=lambda row: str(row["decided_at"]))


async def _runs_since(client: PrefectClient, since: date) -> AsyncIterator[FlowRun]:
    after = datetime.combine(since, time.min, tzinfo=UTC)
    flow_runs = FlowRunFilter(start_time=FlowRunFilterStartTime(after_=after))
    offset = 0
    while True:
        page = await client.read_flow_runs(
            flow_run_filter=flow_runs, sort=FlowRunSort.START_TIME_ASC, limit=PAGE, offset=offset
        )
        for run in page:
            yield run
        if len(page) < PAGE:
            return
        offset += PAGE


def _row(run: FlowRun, stored: Any, key: Any) -> dict[str, Any]:
    base = {"flow_run_id": str(run.id), "run_name": run.name, "deployment_id": run.deployment_id}
    fields = stored if isinstance(stored, dict) else {}
    if "signature" not in fields:
        signature = "unsigned (typed in the form: no sign-in)"
    else:
        try:
            fields = verified(DecisionRecord, stored, key).model_dump(mode="json")
            signature = "verified"
        except NotAttested as error:
            signature = f"INVALID: {error}"
    values = {column: fields.get(column, "") for column in COLUMNS}
    return values | base | {"items": fields.get("total", ""), "signature": signature}


def write_csv(rows: list[dict[str, Any]], out: Path) -> None:
    descriptor = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
    with os.fdopen(descriptor, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    os.chmod(out, 0o640)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deployments.decision_log", description=__doc__)
    parser.add_argument("--since", type=date.fromisoformat, required=True, help="YYYY-MM-DD (UTC)")
    parser.add_argument("--out", type=Path, required=True, help="the CSV file to write")
    args = parser.parse_args(argv)
    rows = asyncio.run(decision_rows(args.since))
    write_csv(rows, args.out)
    invalid = sum(1 for row in rows if str(row["signature"]).startswith("INVALID"))
    print(f"{len(rows)} decision(s) since {args.since} in {args.out}; {invalid} invalid")
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main())
