"""Signed requester records and decisions (write_engine/attestation.py): what the run accepts."""

from __future__ import annotations

import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from write_engine.attestation import (
    DecisionRecord,
    NotAttested,
    RequesterRecord,
    public_key_from_text,
    public_key_text,
    sign,
    signing_key,
    verified,
)


def _decision(**changes: object) -> DecisionRecord:
    fields: dict[str, object] = {
        "flow_run_id": "run-1",
        "plan_digest": "a" * 64,
        "total": 3,
        "requester": "alice",
        "approver": "dana",
        "approved": True,
        "reason": "CHG-1",
        "decided_at": datetime(2026, 11, 28, tzinfo=UTC),
    }
    return DecisionRecord.model_validate(fields | changes)


def test_a_signed_decision_verifies_and_any_change_breaks_it() -> None:
    key = Ed25519PrivateKey.generate()
    public = public_key_from_text(public_key_text(key))
    signed = sign(_decision(), key)
    stored = signed.model_dump(mode="json")
    assert verified(DecisionRecord, stored, public) == signed
    for field, value in [("approver", "alice"), ("approved", False), ("plan_digest", "b" * 64)]:
        with pytest.raises(NotAttested, match="not signed by the Prefect server's key"):
            verified(DecisionRecord, stored | {field: value}, public)


def test_unsigned_another_keys_or_another_kinds_record_is_refused() -> None:
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    public = key.public_key()
    with pytest.raises(NotAttested):
        verified(DecisionRecord, _decision().model_dump(mode="json"), public)
    with pytest.raises(NotAttested):
        verified(DecisionRecord, sign(_decision(), other).model_dump(mode="json"), public)
    requester = sign(
        RequesterRecord(flow_run_id="run-1", requester="alice", requested_at=datetime.now(UTC)),
        key,
    )
    with pytest.raises(NotAttested, match="decision"):  # a requester record is no decision
        verified(DecisionRecord, requester.model_dump(mode="json"), public)
    with pytest.raises(NotAttested):
        verified(DecisionRecord, {"approved": True}, public)


def test_the_signing_key_is_made_once_and_kept_private(tmp_path: Path) -> None:
    path = tmp_path / "server" / "key"
    first = signing_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert public_key_text(signing_key(path)) == public_key_text(first)
