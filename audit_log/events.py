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
_ROLE = "prefect.resource.role"


def event_name(action: str) -> str:
    """``compliance.<action, lower-cased>``: the documented naming rule."""
    cleaned = _NAME_UNSAFE.sub("_", action.strip().lower())
    return EVENT_PREFIX + (cleaned or "unknown_action")


def resource_kind(type_name: str) -> str:
    return _KIND_UNSAFE.sub("", type_name.lower()) or "unknown"


def audit_event_id(entry_id: str) -> Any:
    return deterministic_event_id("audit-entry", entry_id)


def target_resource(entry: EventLogEntry, target: EventTarget) -> dict[str, str]:
    return {
        "prefect.resource.id": f"compliance.{resource_kind(target.type)}.{target.id}",
        "prefect.resource.name": f"{target.type} {target.id}",
        "compliance.target.id": target.id,
        "compliance.target.type": target.type,
        "compliance.audit.id": entry.id,
        "compliance.audit.action": entry.action,
    }


def entry_resource(entry: EventLogEntry) -> dict[str, str]:
    return {
        "prefect.resource.id": f"compliance.audit-entry.{entry.id}",
        "prefect.resource.name": f"audit entry {entry.id}",
        "compliance.audit.id": entry.id,
        "compliance.audit.action": entry.action,
    }


def actor_resource(entry: EventLogEntry) -> dict[str, str]:
    actor_type = str(entry.actor.type)
    return {
        "prefect.resource.id": f"compliance.actor.{resource_kind(actor_type)}.{entry.actor.id}",
        "prefect.resource.role": "actor",
        "prefect.resource.name": entry.actor.display_name or f"{actor_type} {entry.actor.id}",
        "compliance.actor.id": entry.actor.id,
        "compliance.actor.type": actor_type,
    }


def audit_event(entry: EventLogEntry) -> Event:
    """The one Prefect event for one audit entry; its payload is the entry exactly as the API
    sent it (camelCase), so nothing is lost in the bridge."""
    targets = entry.targets
    if not targets:
        resource = entry_resource(entry)
        related = [actor_resource(entry)]
    else:
        resource = target_resource(entry, targets[0])
        related = [actor_resource(entry), entry_resource(entry) | {_ROLE: "audit-entry"}]
        related += [
            target_resource(entry, target) | {_ROLE: "target"}
            for target in targets[1 : 1 + MAX_RELATED_TARGETS]
        ]
    return Event(
        id=audit_event_id(entry.id),
        event=event_name(entry.action),
        occurred=entry.date,
        resource=resource,
        related=related,
        payload={"audit_entry": entry.model_dump(mode="json", by_alias=True, exclude_none=True)},
    )
