"""Retry conditions of the write tasks and the document-link ledger (no server needed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from compliance_api.errors import (
    InvalidRequestError,
    NotFoundError,
    RateLimitedError,
    ServerError,
    TransportError,
)
from runtime.retries import retry_if_unapplied, retry_transient
from tasks.documents import create_document_link
from tasks.groups import add_people_to_group
from write_engine.link_ledger import LinkLedger

OP = "op"


def failed(error: BaseException) -> SimpleNamespace:
    return SimpleNamespace(data=error)  # what Prefect hands retry_condition_fn: Failed(data=exc)


@pytest.mark.parametrize(
    ("error", "idempotent", "create"),
    [
        (ServerError("x", operation=OP, status_code=503), True, False),
        (RateLimitedError("x", operation=OP), True, True),
        (TransportError("x", operation=OP, request_sent=True), True, False),
        (TransportError("x", operation=OP, request_sent=False), True, True),
        (NotFoundError("x", operation=OP, status_code=404), False, False),
        (InvalidRequestError("x", operation=OP, status_code=400), False, False),
        (RuntimeError("bug"), False, False),
    ],
)
def test_only_transient_errors_are_retried_and_creates_only_when_unapplied(
    error: BaseException, idempotent: bool, create: bool
) -> None:
    assert retry_transient(None, None, failed(error)) is idempotent
    assert retry_if_unapplied(None, None, failed(error)) is create


def test_tasks_declare_their_retry_policy() -> None:
    assert (
        add_people_to_group.retries == 3
        and add_people_to_group.retry_condition_fn is retry_transient
    )
    assert create_document_link.retry_condition_fn is retry_if_unapplied
    assert create_document_link.persist_result is False


def test_ledger_claims_once_per_tenant_and_survives_reopening(tmp_path: Path) -> None:
    with LinkLedger(tmp_path, "tenant-a") as ledger:
        assert ledger.claim("d-1", "https://x.test/a", "run-1") is None
        earlier = ledger.claim("d-1", "https://x.test/a", "run-2")
        assert earlier is not None and earlier.state == "pending" and earlier.flow_run_id == "run-1"
        ledger.mark_attached("d-1", "https://x.test/a", "link-9", "run-1")
        assert ledger.claim("d-2", "https://x.test/a", "run-1") is None
        ledger.release("d-2", "https://x.test/a")
    with LinkLedger(tmp_path, "tenant-a") as reopened:
        entry = reopened.lookup("d-1", "https://x.test/a")
        assert entry is not None and (entry.state, entry.link_id) == ("attached", "link-9")
        assert reopened.lookup("d-2", "https://x.test/a") is None
        reopened.release("d-1", "https://x.test/a")  # release never forgets an attached link
        assert reopened.lookup("d-1", "https://x.test/a") is not None
    with LinkLedger(tmp_path, "tenant-b") as other:
        assert other.claim("d-1", "https://x.test/a", "run-3") is None
