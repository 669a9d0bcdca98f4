"""Runbooks over connector resources: package vulnerabilities and security-training status.

These endpoints return the whole list in one response (spec §4.7/§4.8); the digests keep
counters and a bounded number of rows, and send one event per finding or trainee to act on.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, get_args

from prefect import flow, get_run_logger
from prefect.events import Event
from pydantic import BaseModel, Field

from read_reports.connector_digests import (
    MAX_LISTED_PER_TRAINEE,
    SEVERITY_BANDS,
    TrainingDigest,
    VulnerabilityDigest,
    severity_of,
)
from read_reports.events import training_overdue_event, vulnerability_event
from read_reports.filters import parse_timestamp
from read_reports.tables import (
    artifact_key,
    markdown_table,
    publish_markdown,
    publish_table,
    shown_note,
)
from runtime.connection import compliance_client
from runtime.events import EventSink
from runtime.form import AtLeastOne, Maybe, NonBlank, Severity, title
from runtime.task_inputs import unwalked
from tasks.connector_resources import read_package_vulnerabilities, read_security_training
from tasks.events import send_events

Framework = Literal["SOC2", "ISO27001", "HIPAA", "PCI", "GDPR", "CCPA"]
KNOWN_FRAMEWORKS: tuple[Framework, ...] = get_args(Framework)


class VulnerabilityReport(BaseModel):
    resource_id: str
    summary: dict[str, Any]
    events_sent: int
    action_required: int
    top_findings: list[dict[str, Any]] = Field(default_factory=list)


class TrainingReport(BaseModel):
    resource_id: str
    as_of: datetime
    summary: dict[str, Any]
    events_sent: int
    trainees: list[dict[str, Any]] = Field(default_factory=list)


@flow(name="package-vulnerability-digest")
async def package_vulnerability_digest(
    resource_id: Annotated[NonBlank, title("Connector resource id")],
    min_severity: Annotated[Severity, title("Minimum severity")] = 0.0,
    event_min_severity: Annotated[Severity, title("Action severity")] = 9.0,
    event_reachable_only: Annotated[bool, title("Reachable findings only")] = True,
    emit_events: Annotated[bool, title("Send events")] = True,
    top_n: Annotated[AtLeastOne, title("Findings listed")] = 100,
) -> VulnerabilityReport:
    """Digest one connector resource's vulnerable packages; events for what needs action now.

    Args:
        resource_id: The registered connector resource to read (its id from the developer
            console).
        min_severity: Findings below this severity (0 to 10) are left out of the digest and
            only counted.
        event_min_severity: A finding at or above this severity (0 to 10; 9 is critical)
            needs action.
        event_reachable_only: Only reachable findings need action. Off: every finding at or
            above the action severity does.
        emit_events: Send one compliance.vulnerability.action_required event per finding that
            needs action.
        top_n: How many findings the table lists, reachable and resolvable first, then by
            severity.
    """
    as_of = datetime.now(UTC)
    digest = VulnerabilityDigest(top_n=top_n, min_severity=min_severity)
    events: list[Event] = []
    action_required = 0
    async with compliance_client() as client:
        findings = await read_package_vulnerabilities(client, resource_id)
    for vulnerability in findings:
        band = digest.add(vulnerability)
        score = severity_of(vulnerability)
        needs_action = (
            band is not None
            and score is not None
            and score >= event_min_severity
            and (vulnerability.is_reachable or not event_reachable_only)
        )
        if needs_action:
            action_required += 1
            if emit_events:
                events.append(vulnerability_event(vulnerability, resource_id, band or "", as_of))
    del findings
    sent = 0
    if events:
        async with EventSink() as sink:
            sent = await send_events(sink, unwalked(events))
    await _publish_vulnerabilities(resource_id, digest, action_required, event_min_severity)
    get_run_logger().info(
        "%s findings for %s; %s need action (%s events sent)",
        digest.total,
        resource_id,
        action_required,
        sent,
    )
    return VulnerabilityReport(
        resource_id=resource_id,
        summary=digest.summary(),
        events_sent=sent,
        action_required=action_required,
        top_findings=digest.findings.rows()[:10],
    )


async def _publish_vulnerabilities(
    resource_id: str, digest: VulnerabilityDigest, action_required: int, action_floor: float
) -> None:
    rows = digest.findings.rows()
    note = shown_note(len(rows), digest.findings.seen, "findings")
    bands = ", ".join(f"{name} >= {floor:g}" for name, floor in SEVERITY_BANDS)
    await publish_table(
        artifact_key("package-vulnerabilities", resource_id),
        rows,
        f"Vulnerable packages of connector resource {resource_id}, reachable and resolvable "
        f"first, then by severity and CVSS. {note}",
    )
    lines = [
        f"# Package vulnerabilities: {resource_id}",
        "",
        f"{digest.total} findings ({digest.below_threshold} below the minimum severity). "
        f"{action_required} reachable findings at severity >= {action_floor:g} need action.",
        f"Severity bands (0-10): {bands}.",
        "",
        markdown_table(digest.band_rows()),
        "",
        "## Most urgent",
        "",
        note,
        "",
        markdown_table(
            rows[:20],
            ["severity", "score", "reachable", "resolvable", "cve", "cvss3_score", "package"],
        ),
    ]
    await publish_markdown(
        artifact_key("package-vulnerabilities-summary", resource_id),
        "\n".join(lines),
        f"Vulnerability digest for connector resource {resource_id}",
    )


@flow(name="security-training-report")
async def security_training_report(
    resource_id: Annotated[NonBlank, title("Connector resource id")],
    frameworks: Annotated[Maybe[list[Framework]], title("Frameworks")] = None,
    as_of: Annotated[Maybe[str], title("Report time")] = None,
    emit_events: Annotated[bool, title("Send events")] = True,
    top_n: Annotated[AtLeastOne, title("Trainees listed")] = 100,
) -> TrainingReport:
    """Incomplete and overdue security training by trainee and framework; events per trainee.

    Args:
        resource_id: The registered connector resource to read (its id from the developer
            console).
        frameworks: Only assignments fulfilling any of these frameworks (SOC2, ISO27001,
            HIPAA, PCI, GDPR, CCPA). Empty: all assignments.
        as_of: The time "overdue" is measured at (ISO 8601, e.g. '2025-01-31'). Empty: now.
        emit_events: Send one compliance.security_training.overdue event per trainee with
            overdue training (listing what is overdue).
        top_n: How many trainees the table lists, most overdue first.
    """
    moment = parse_timestamp("as_of", as_of) or datetime.now(UTC)
    digest = TrainingDigest(as_of=moment, frameworks=frozenset(frameworks or ()) or None)
    async with compliance_client() as client:
        rows = await read_security_training(client, resource_id)
    for row in rows:
        digest.add(row)
    del rows
    sent = 0
    if emit_events:
        events = [
            training_overdue_event(
                key,
                trainee.identity(),
                trainee.overdue_trainings[:MAX_LISTED_PER_TRAINEE],
                trainee.overdue,
                resource_id,
                moment,
            )
            for key, trainee in digest.overdue_trainees()
        ]
        if events:
            async with EventSink() as sink:
                sent = await send_events(sink, unwalked(events))
    await _publish_training(resource_id, digest, top_n)
    summary = digest.summary()
    get_run_logger().info(
        "%s assignments for %s: %s incomplete, %s overdue (%s trainees); %s events sent",
        summary["assignments"],
        resource_id,
        summary["incomplete"],
        summary["overdue"],
        summary["trainees_overdue"],
        sent,
    )
    return TrainingReport(
        resource_id=resource_id,
        as_of=moment,
        summary=summary,
        events_sent=sent,
        trainees=digest.trainee_rows(10),
    )


async def _publish_training(resource_id: str, digest: TrainingDigest, top_n: int) -> None:
    trainees = digest.trainee_rows(top_n)
    needing = sum(1 for t in digest.trainees.values() if t.incomplete)
    note = shown_note(len(trainees), needing, "trainees with incomplete training")
    await publish_table(
        artifact_key("security-training-by-trainee", resource_id),
        trainees,
        f"Incomplete and overdue security training for {resource_id} as of "
        f"{digest.as_of:%Y-%m-%d}, most overdue first. {note}",
    )
    await publish_table(
        artifact_key("security-training-by-framework", resource_id),
        digest.framework_rows(),
        f"Security training per framework for {resource_id} as of {digest.as_of:%Y-%m-%d}.",
    )
    summary = digest.summary()
    lines = [
        f"# Security training: {resource_id} ({digest.as_of:%Y-%m-%d})",
        "",
        f"{summary['assignments']} assignments for {summary['trainees']} trainees: "
        f"{summary['incomplete']} incomplete, {summary['overdue']} overdue "
        f"({summary['trainees_overdue']} trainees overdue).",
        "",
        "## By framework",
        "",
        markdown_table(digest.framework_rows()),
        "",
        "## Trainees",
        "",
        note,
        "",
        markdown_table(trainees[:25]),
    ]
    await publish_markdown(
        artifact_key("security-training-summary", resource_id),
        "\n".join(lines),
        f"Security-training report for connector resource {resource_id}",
    )
