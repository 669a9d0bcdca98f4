"""Connector-resource digests against the sandbox: counts, ordering, events, bad input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prefect.exceptions import ParameterTypeError

from compliance_api.errors import InputError, NotFoundError
from flows.connector_resources import package_vulnerability_digest, security_training_report
from read_reports.events import TRAINING_OVERDUE, VULNERABILITY_ACTION
from runtime.events import deterministic_event_id
from sandbox.runner import SandboxHandle
from tests.fixtures.runs import calls, no_calls, read_events

pytestmark = pytest.mark.usefixtures("reads_env")

VULNS = "GET /v1/resources/package_vulnerability_connectors"
TRAINING = "GET /v1/resources/user_security_training_status"


def parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


async def test_vulnerability_digest_orders_and_flags_what_needs_action(
    reads_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    resource_id = seed["package_vulnerability_resources"][1]
    rows = reads_env.sandbox.tiers["commercial"].dataset.package_vulnerabilities[resource_id]
    report = await package_vulnerability_digest(resource_id, event_min_severity=7.0)
    expected_action = [r for r in rows if r["severity"] >= 7.0 and r["isReachable"]]
    assert report.summary["findings"] == len(rows)
    assert report.summary["by_severity"].get("critical", 0) == sum(
        1 for r in rows if r["severity"] >= 9.0
    )
    assert report.action_required == report.events_sent == len(expected_action) > 0
    top = report.top_findings
    flags = [(f["reachable"] == "yes", f["resolvable"] == "yes") for f in top]
    assert flags == sorted(flags, reverse=True)  # reachable first, then resolvable
    assert all(f["cve"].startswith("CVE-") and f["cvss3_score"] is not None for f in top)
    assert calls(reads_env, VULNS) == 1

    day = datetime.now(UTC).date().isoformat()
    ids = [
        deterministic_event_id(VULNERABILITY_ACTION, resource_id, r["uniqueId"], day)
        for r in expected_action
    ]
    stored = await read_events(ids=ids, expect=len(ids))
    assert len(stored) == len(ids)
    event = stored[0]
    assert event.event == VULNERABILITY_ACTION
    assert event.payload["is_reachable"] is True and event.payload["severity"] >= 7.0
    assert event.resource_in_role["connector-resource"]["compliance.connector.resource_id"] == (
        resource_id
    )


async def test_training_report_counts_overdue_by_trainee_and_framework(
    reads_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    resource_id = seed["user_security_training_resources"][0]
    rows = reads_env.sandbox.tiers["commercial"].dataset.security_training[resource_id]
    as_of = datetime.now(UTC) + timedelta(days=3)
    report = await security_training_report(resource_id, as_of=as_of.isoformat())
    overdue = [
        r
        for r in rows
        if r["status"] != "COMPLETE" and parse(r["trainingDueTimestamp"]) < as_of  # type: ignore[operator]
    ]
    trainees = {r["traineeEmail"].lower() for r in overdue}
    assert report.summary["assignments"] == len(rows)
    assert report.summary["incomplete"] == sum(r["status"] != "COMPLETE" for r in rows)
    assert report.summary["overdue"] == len(overdue) > 0
    assert report.events_sent == len(trainees)
    soc2 = [r for r in overdue if "SOC2" in r["frameworksFulfilled"]]
    assert report.summary["by_framework"].get("SOC2", {}).get("overdue", 0) == len(soc2)

    ids = [
        deterministic_event_id(TRAINING_OVERDUE, resource_id, t, as_of.date().isoformat())
        for t in trainees
    ]
    stored = await read_events(ids=ids, expect=len(ids))
    assert len(stored) == len(trainees)
    assert all(e.payload["overdue_total"] == len(e.payload["overdue_trainings"]) for e in stored)

    hipaa = await security_training_report(resource_id, frameworks=["HIPAA"], emit_events=False)
    assert set(hipaa.summary["by_framework"]) <= {
        "HIPAA",
        *{f for r in rows for f in r["frameworksFulfilled"]},
    }
    assert hipaa.summary["assignments"] == sum("HIPAA" in r["frameworksFulfilled"] for r in rows)


@pytest.mark.parametrize(
    ("flow", "parameters", "field"),
    [
        (package_vulnerability_digest, {"resource_id": "  "}, "resource_id"),
        (package_vulnerability_digest, {"resource_id": "r", "min_severity": 11}, "min_severity"),
        (package_vulnerability_digest, {"resource_id": "r", "top_n": 0}, "top_n"),
        (security_training_report, {"resource_id": ""}, "resource_id"),
        (security_training_report, {"resource_id": "r", "frameworks": ["SOX"]}, "frameworks"),
        (security_training_report, {"resource_id": "r", "as_of": "31/01/2025"}, "as_of"),
    ],
)
async def test_bad_input_fails_before_any_call(
    reads_env: SandboxHandle, flow: Any, parameters: dict[str, Any], field: str
) -> None:
    with pytest.raises((InputError, ParameterTypeError)) as caught:
        await flow(**parameters)
    assert field in str(caught.value)  # the flow's InputError or Prefect's check
    assert no_calls(reads_env)


async def test_unknown_resource_is_a_clear_not_found(reads_env: SandboxHandle) -> None:
    with pytest.raises(NotFoundError, match="no-such-resource"):
        await security_training_report("no-such-resource")
    assert calls(reads_env, TRAINING) == 1
