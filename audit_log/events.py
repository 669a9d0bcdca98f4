"""How one audit-log entry becomes one Prefect event: the bridge's naming rule, documented for
automation authors in docs/read-flows.md#event-naming-rule (keep the two in step).
"""

from __future__ import annotations

import re
from typing import Any

from prefect.events import Event

from compliance_api.models import EventLogEntry, EventTarget
from runtime.events import deterministic_event_id

EVENT_PREFIX = "compliance."
_NAME_UNSAFE = re.compile(r"[^a-z0-9_.]")
_KIND_UNSAFE = re.compile(r"[^a-z0-9]")
#: targets beyond this many are left out of ``related`` (Prefect allows 100 related resources)
MAX_RELATED_TARGETS = 50


def event_name(action: str) -> str:
    """``compliance.<action, lower-cased>``: the documented naming rule."""
    cleaned = _NAME_UNSAFE.sub("_", action.strip().lower())
    return EVENT_PREFIX + (cleaned or "unknown_action")


def resource_kind(type_name: str) -> str:
    return _KIND_UNSAFE.sub("", type_name.lower()) or "unknown"


def audit_event_id(entry_id: str) -> Any:
    return deterministic_event_id("audit-entry", entry_id)


def target_resource(entry: EventLogEntry, target: EventTarget, role: str | None) -> dict[str, str]:
    resource = {
        "prefect.resource.id": f"compliance.{resource_kind(target.type)}.{target.id}",
        "prefect.resource.name": f"{target.type} {target.id}",
        "compliance.target.id": target.id,
        "compliance.target.type": target.type,
        "compliance.audit.id": entry.id,
        "compliance.audit.action": entry.action,
    }
    if role:
        resource["prefect.resource.role"] = role
    return resource


def entry_resource(entry: EventLogEntry, role: str | None) -> dict[str, str]:
    resource = {
        "prefect.resource.id": f"compliance.audit-entry.{entry.id}",
        "prefect.resource.name": f"audit entry {entry.id}",
        "compliance.audit.id": entry.id,
        "compliance.audit.action": entry.action,
    }
    if role:
        resource["prefect.resource.role"] = role
    return resource


def actor_resource(entry: EventLogEntry) -> dict[str, str]:
    actor_type = str(entry.actor.type)
    return {
        "prefect.resource.id": f"compliance.actor.{resource_kind(actor_type)}.{entry.actor.id}",
        "prefect.resource.role": "actor",
        "prefect.resource.name": entry.actor.display_name or f"{actor_type} {entry.actor.id}",
        "compliance.actor.id": entry.actor.id,
        "compliance.actor.type": actor_type,
    }


def audit_entry_payload(entry: EventLogEntry) -> dict[str, Any]:
    """The entry exactly as the API sent it (camelCase), so nothing is lost in the bridge."""
    return entry.model_dump(mode="json", by_alias=True, exclude_none=True)


def audit_event(entry: EventLogEntry) -> Event:
    """The one Prefect event for one audit entry."""
    targets = list(entry.targets)
    if targets:
        resource = target_resource(entry, targets[0], role=None)
        related = [actor_resource(entry), entry_resource(entry, role="audit-entry")]
        related += [
            target_resource(entry, target, role="target")
            for target in targets[1 : 1 + MAX_RELATED_TARGETS]
        ]
    else:
        resource = entry_resource(entry, role=None)
        related = [actor_resource(entry)]
    return Event(
        id=audit_event_id(entry.id),
        event=event_name(entry.action),
        occurred=entry.date,
        resource=resource,
        related=related,
        payload={"audit_entry": audit_entry_payload(entry)},
    )
