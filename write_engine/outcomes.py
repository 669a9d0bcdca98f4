"""What happened to each item of a write run, and to the run: one vocabulary for every flow.

Nothing here may hold a secret: these objects become Prefect results, artifacts and events.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeAlias

from pydantic import BaseModel, Field


class Outcome(StrEnum):
    """The fate of one item."""

    #: the change was applied (or was already in place, e.g. a vendor already managed)
    SUCCEEDED = "succeeded"
    #: nothing to do: the change was made by an earlier run
    SKIPPED = "skipped"
    #: dry run: the change would be sent
    PLANNED = "planned"
    #: the service refused the item (not found, invalid, not entitled); rerun after fixing
    FAILED = "failed"
    #: a transient failure outlasted every retry; rerunning later is expected to work
    FAILED_RETRYABLE = "failed_retryable"
    #: the request may or may not have been applied; check before sending it again
    NEEDS_REVIEW = "needs_review"

    @property
    def is_failure(self) -> bool:
        """Failures turn the run red and are kept for a rerun."""
        return self in _FAILURES


_FAILURES = frozenset({Outcome.FAILED, Outcome.FAILED_RETRYABLE, Outcome.NEEDS_REVIEW})


class ItemResult(BaseModel):
    """One row of the run's table; ``rerun_input`` (failures only) finishes the item's remaining
    work (for a questionnaire, only the steps not done yet)."""

    item: str
    outcome: Outcome
    reason: str = ""
    response: str = ""
    details: dict[str, Any] = Field(default_factory=dict)
    rerun_input: dict[str, Any] | None = None


@dataclass(slots=True)
class Done:
    """An item needing no follow-up, in brief: cheaper than a validated ItemResult in bulk runs.
    Failures always get a full ItemResult (it carries the rerun input)."""

    item: str
    outcome: Outcome = Outcome.SUCCEEDED
    reason: str = ""
    response: str = ""

    def __post_init__(self) -> None:
        if self.outcome in _FAILURES:
            raise ValueError(f"a {self.outcome.value} item needs an ItemResult (with rerun input)")


#: what a write job reports for one item
AnyResult: TypeAlias = ItemResult | Done


class Approval(BaseModel):
    """Who decided on a run's plan, when and why (write_engine/approval.py)."""

    approved: bool
    #: who decided and who started the run, as signed in at the proxy (docs/access.md)
    approver: str
    requester: str = ""
    reason: str
    decided_at: datetime
    #: the plan decided on: its items' digest and count
    plan_digest: str
    total: int
    #: the decision carried the Prefect server's signature, checked before anything was sent
    signature_checked: bool = False

    def line(self) -> str:
        verb = "Approved" if self.approved else "Rejected"
        when = self.decided_at.isoformat(timespec="seconds")
        asked = f" (requested by {self.requester})" if self.requester else ""
        return f"{verb} by {self.approver}{asked} at {when}: {self.reason}"


class RunSummary(BaseModel):
    """The typed return value of every write flow."""

    flow: str
    flow_run_id: str | None = None
    dry_run: bool = False
    total: int = 0
    counts: dict[Outcome, int] = Field(default_factory=dict)
    duplicates_removed: list[str] = Field(default_factory=list)
    failed_items: list[ItemResult] = Field(default_factory=list)
    rerun_of: str | None = None
    attempt: int = 1
    #: the decision on the plan, for a run that needed approval
    approval: Approval | None = None

    @property
    def failed(self) -> int:
        return len(self.failed_items)

    def count(self, outcome: Outcome) -> int:
        return self.counts.get(outcome, 0)

    def headline(self) -> str:
        """One line for logs, state messages and the demo's printout."""
        parts = [f"{n} {outcome.value}" for outcome, n in self.counts.items() if n]
        counted = ", ".join(parts) or "nothing to do"
        prefix = "dry run: " if self.dry_run else ""
        return f"{prefix}{self.total} item(s): {counted}"


class ItemsFailed(Exception):
    """The data of a run's Failed state when any item failed; ``.summary`` is the RunSummary."""

    def __init__(self, summary: RunSummary) -> None:
        self.summary = summary
        shown = "; ".join(f"{r.item}: {r.reason}" for r in summary.failed_items[:3])
        more = summary.failed - 3
        tail = f"; and {more} more" if more > 0 else ""
        super().__init__(
            f"{summary.failed} of {summary.total} item(s) failed ({shown}{tail}); "
            "see the run's table artifact, rerun them with rerun_failed_items"
        )
