"""The four-eyes decision, attested where both identities are seen: in the API server.

The gatekeeper (``deployments/gatekeeper.py``) calls this when a signed-in person starts a run
(who requested it) and when one resumes a run that waits for approval (who decided, and on
which plan). Both records are signed with the server's key (``write_engine/attestation.py``);
the run verifies the decision before it sends anything. The requester cannot decide on their own
run; a reason of only spaces is refused before Prefect stores the answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from write_engine.attestation import (
    DECISION_KEY,
    NO_PERSON,
    PAUSE_KEY,
    PLAN_KEY,
    REQUESTER_KEY,
    DecisionRecord,
    NotAttested,
    RequesterRecord,
    digest_of,
    sign,
    verified,
)

Client = Callable[[], httpx.AsyncClient]


class Refused(Exception):
    """Why the person's request is refused (the message is shown to them)."""


class Decisions:
    """Signs requester records and decisions with ``key``; ``client()`` reaches the server's own
    API as the server (in process)."""

    def __init__(self, key: Ed25519PrivateKey, client: Client) -> None:
        self.key = key
        self.client = client

    async def record_requester(self, flow_run_id: str, person: str) -> None:
        """Keep who started the run (signed); raises if it could not be kept."""
        record = sign(
            RequesterRecord(
                flow_run_id=flow_run_id, requester=person, requested_at=datetime.now(UTC)
            ),
            self.key,
        )
        async with self.client() as api:
            await _put_input(api, flow_run_id, REQUESTER_KEY, record.model_dump(mode="json"))

    async def decide(self, flow_run_id: str, person: str, run_input: Any) -> None:
        """Before Prefect resumes a run that waits for approval: check the person may decide and
        store the signed decision; ``Refused`` if not. Other pauses are left alone."""
        async with self.client() as api:
            run = await _json(api, "GET", f"/flow_runs/{flow_run_id}")
            if not _waits_for_approval(run):
                return
            approve, reason = _answer(run_input)
            plan = await _input(api, flow_run_id, PLAN_KEY)
            if not isinstance(plan, dict) or not _whole(plan):
                raise Refused(
                    f"flow run {flow_run_id} has no whole plan to decide on (its item list "
                    "does not give its digest): start a new run"
                )
            requester = await self._requester(api, flow_run_id)
            if requester == person:
                raise Refused(
                    f"{person} requested flow run {flow_run_id}: someone else must decide on "
                    "its plan (four eyes); the run keeps waiting"
                )
            decision = DecisionRecord(
                flow_run_id=flow_run_id,
                plan_digest=str(plan["digest"]),
                total=int(plan.get("total", 0)),
                requester=requester,
                approver=person,
                approved=approve,
                reason=reason,
                decided_at=datetime.now(UTC),
            )
            signed = sign(decision, self.key)
            await _put_input(api, flow_run_id, DECISION_KEY, signed.model_dump(mode="json"))

    async def _requester(self, api: httpx.AsyncClient, flow_run_id: str) -> str:
        stored = await _input(api, flow_run_id, REQUESTER_KEY)
        if stored is None:
            return NO_PERSON
        try:
            record = verified(RequesterRecord, stored, self.key.public_key())
        except NotAttested as error:
            raise Refused(f"flow run {flow_run_id}: {error}") from None
        if record.flow_run_id != flow_run_id:
            raise Refused(f"flow run {flow_run_id}: its requester record is another run's")
        return record.requester


def _whole(plan: dict[str, Any]) -> bool:
    """The plan's digest is that of its item list: the signature then covers every item."""
    items = plan.get("items")
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        return False
    whole = plan.get("digest") == digest_of(items) and plan.get("total") == len(items)
    return bool(items) and whole


def _waits_for_approval(run: Any) -> bool:
    state = run.get("state") or {}
    keys = (run.get("empirical_policy") or {}).get("pause_keys") or []
    return state.get("type") == "PAUSED" and PAUSE_KEY in keys


def _answer(run_input: Any) -> tuple[bool, str]:
    """``approve`` (yes/no) and a ``reason`` that is not blank, or ``Refused`` naming the field."""
    if not isinstance(run_input, dict):
        raise Refused("run_input: expected the form's answer {approve, reason}")
    approve = run_input.get("approve")
    if approve not in ("yes", "no"):
        raise Refused(f"run_input.approve={approve!r}: expected 'yes' or 'no'")
    reason = run_input.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise Refused(f"run_input.reason={reason!r}: say why (a change ticket, or why not)")
    return approve == "yes", reason.strip()


async def _json(api: httpx.AsyncClient, method: str, path: str) -> Any:
    response = await api.request(method, path)
    response.raise_for_status()
    return response.json()


async def _input(api: httpx.AsyncClient, flow_run_id: str, key: str) -> Any:
    response = await api.get(f"/flow_runs/{flow_run_id}/input/{key}")
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return json.loads(response.text)


async def _put_input(api: httpx.AsyncClient, flow_run_id: str, key: str, value: Any) -> None:
    """Store ``value`` under ``key``, replacing an earlier one (a decision Prefect refused)."""
    gone = await api.delete(f"/flow_runs/{flow_run_id}/input/{key}")
    if gone.status_code not in (204, 404):
        gone.raise_for_status()
    created = await api.post(
        f"/flow_runs/{flow_run_id}/input", json={"key": key, "value": json.dumps(value)}
    )
    created.raise_for_status()
