"""Signed records of who requested a write run and who decided on its plan.

The gatekeeper in the Prefect API server (``deployments/gatekeeper.py``) sees both identities
from the sign-in proxy; it signs each record with the server's Ed25519 key. A flow run verifies
the decision with the server's public key before it sends anything: a missing, unsigned or
forged decision, or one for another run or plan, is refused (docs/access.md#four-eyes).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel

#: the flow-run inputs the gatekeeper writes (people cannot: docs/access.md)
REQUESTER_KEY = "compliance-requester"
DECISION_KEY = "compliance-approval"
#: the plan a run waiting for approval keeps on itself (written by the run)
PLAN_KEY = "compliance-plan"
#: the pause key of a run waiting for approval: fixed, so the resumed run's suspend call
#: returns the answer
PAUSE_KEY = "approval"
#: where the API server's gatekeeper serves its public key (below the API's ``/api``)
DECISION_KEY_ROUTE = "/compliance/decision-key"
#: where a run's requester is when no person started it (an automation, the server itself)
NO_PERSON = "an automation or the server itself"


def digest_of(hashes: Sequence[str]) -> str:
    """The identity of a plan: its items' hashes, in order (write_engine/approval.py)."""
    return hashlib.sha256("".join(f"{h}\n" for h in hashes).encode()).hexdigest()


class NotAttested(ValueError):
    """A record without a valid signature of the server's key."""


class RequesterRecord(BaseModel):
    kind: Literal["requester"] = "requester"
    flow_run_id: str
    requester: str
    requested_at: datetime
    signature: str = ""


class DecisionRecord(BaseModel):
    """The decision on a run's plan: made by ``approver`` (signed in at the proxy) on the plan
    ``plan_digest`` of run ``flow_run_id``, which ``requester`` started."""

    kind: Literal["decision"] = "decision"
    flow_run_id: str
    plan_digest: str
    total: int
    requester: str
    approver: str
    approved: bool
    reason: str
    decided_at: datetime
    signature: str = ""


Record = RequesterRecord | DecisionRecord
R = TypeVar("R", RequesterRecord, DecisionRecord)


def _signed_bytes(record: Record) -> bytes:
    fields = record.model_dump(mode="json", exclude={"signature"})
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def sign(record: R, key: Ed25519PrivateKey) -> R:
    signature = base64.b64encode(key.sign(_signed_bytes(record))).decode()
    return record.model_copy(update={"signature": signature})


def verified(model: type[R], value: Any, public_key: Ed25519PublicKey) -> R:
    """The record in ``value`` if the server's key signed exactly it; ``NotAttested`` if not."""
    try:
        record = model.model_validate(value)
        public_key.verify(base64.b64decode(record.signature, validate=True), _signed_bytes(record))
    except (ValueError, InvalidSignature) as error:
        what = "decision" if model is DecisionRecord else "requester record"
        raise NotAttested(
            f"the {what} is not signed by the Prefect server's key ({type(error).__name__})"
        ) from None
    return record


def public_key_text(key: Ed25519PrivateKey) -> str:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def public_key_from_text(text: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(text, validate=True))


def signing_key(path: Path) -> Ed25519PrivateKey:
    """The server's signing key in ``path``, created once (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(loaded, Ed25519PrivateKey):
            raise ValueError(f"{path}: not an Ed25519 private key") from None
        return loaded
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(pem)
    return key
