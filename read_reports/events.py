"""Events the read reports emit for items someone has to act on (shapes: docs/read-flows.md).

Ids are uuid5 of (what, which item, report day): a rerun the same day sends nothing new, the next
day's run reminds again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from prefect.events import Event

from compliance_api.models import PackageVulnerability
from read_reports.freshness import FreshnessRules, KbItem, Reason
from runtime.events import deterministic_event_id

KB_EXPIRING_SOON = "compliance.knowledge_base.expiring_soon"
KB_EXPIRED = "compliance.knowledge_base.expired"
VULNERABILITY_ACTION = "compliance.vulnerability.action_required"
TRAINING_OVERDUE = "compliance.security_training.overdue"

_KB_EVENT = {Reason.EXPIRING_SOON: KB_EXPIRING_SOON, Reason.EXPIRED: KB_EXPIRED}


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def connector_resource(resource_id: str, kind: str) -> dict[str, str]:
    return {
        "prefect.resource.id": f"compliance.connector-resource.{resource_id}",
        "prefect.resource.role": "connector-resource",
        "compliance.connector.resource_id": resource_id,
        "compliance.connector.kind": kind,
    }


def kb_item_event(item: KbItem, reason: Reason, rules: FreshnessRules) -> Event:
    """One event for one expiring (or expired) item, with its owner as a related resource."""
    name = _KB_EVENT[reason]
    resource = {
        "prefect.resource.id": item.resource_id,
        "prefect.resource.name": item.title[:200],
        "compliance.item.kind": item.kind.value,
        "compliance.item.id": item.id,
        "compliance.expiration_date": _iso(item.expiration_date) or "",
    }
    related: list[dict[str, str]] = []
    if item.owner.id:
        related.append(
            {
                "prefect.resource.id": f"compliance.owner.{item.owner.id}",
                "prefect.resource.role": "owner",
                "prefect.resource.name": item.owner.name,
                "compliance.owner.id": item.owner.id,
                "compliance.owner.type": item.owner.type or "",
            }
        )
    payload: dict[str, Any] = {
        "kind": item.kind.value,
        "id": item.id,
        "title": item.title,
        "expiration_date": _iso(item.expiration_date),
        "days_left": rules.days_left(item),
        "last_verified": _iso(item.last_verified),
        "owner": {"id": item.owner.id, "type": item.owner.type, "name": item.owner.name},
        "as_of": rules.as_of.isoformat(),
    }
    if item.url:
        payload["url"] = item.url
    return Event(
        id=deterministic_event_id(name, item.kind.value, item.id, rules.as_of.date().isoformat()),
        event=name,
        resource=resource,
        related=related,
        payload=payload,
    )


def vulnerability_event(
    vulnerability: PackageVulnerability, resource_id: str, severity_band: str, as_of: datetime
) -> Event:
    resource = {
        "prefect.resource.id": f"compliance.package-vulnerability.{vulnerability.unique_id}",
        "prefect.resource.name": vulnerability.display_name[:200],
        "compliance.vulnerability.id": vulnerability.unique_id,
        "compliance.vulnerability.cve": vulnerability.cve_id or "",
        "compliance.vulnerability.severity_band": severity_band,
    }
    payload = {
        "unique_id": vulnerability.unique_id,
        "cve_id": vulnerability.cve_id,
        "severity": vulnerability.severity,
        "severity_band": severity_band,
        "cvss3_score": vulnerability.cvss3_score,
        "cvss3_vector": vulnerability.cvss3_vector,
        "package": vulnerability.package_name,
        "version": vulnerability.package_version,
        "is_reachable": vulnerability.is_reachable,
        "is_resolvable": vulnerability.is_resolvable,
        "remediation": vulnerability.remediation_instructions,
        "external_url": vulnerability.external_url,
        "connector_resource_id": resource_id,
    }
    return Event(
        id=deterministic_event_id(
            VULNERABILITY_ACTION, resource_id, vulnerability.unique_id, as_of.date().isoformat()
        ),
        event=VULNERABILITY_ACTION,
        resource=resource,
        related=[connector_resource(resource_id, "package_vulnerability")],
        payload=payload,
    )


def training_overdue_event(
    trainee_key: str,
    trainee: dict[str, Any],
    overdue: Sequence[dict[str, Any]],
    overdue_total: int,
    resource_id: str,
    as_of: datetime,
) -> Event:
    resource = {
        "prefect.resource.id": f"compliance.trainee.{trainee_key}",
        "prefect.resource.name": trainee.get("name") or trainee_key,
        "compliance.trainee.email": trainee.get("email") or "",
        "compliance.trainee.account": trainee.get("account") or "",
    }
    payload = {
        "trainee": trainee,
        "overdue_trainings": list(overdue),
        "overdue_total": overdue_total,
        "connector_resource_id": resource_id,
        "as_of": as_of.isoformat(),
    }
    return Event(
        id=deterministic_event_id(
            TRAINING_OVERDUE, resource_id, trainee_key, as_of.date().isoformat()
        ),
        event=TRAINING_OVERDUE,
        resource=resource,
        related=[connector_resource(resource_id, "user_security_training")],
        payload=payload,
    )
