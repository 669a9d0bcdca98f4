"""Runbook: attach evidence links to documents from a manifest.

The ledger (``write_engine/link_ledger.py``) skips links an earlier run attached and reports a
link whose attempt got no clear answer for review instead of sending it twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any, Literal

from prefect import flow, get_run_logger
from prefect.client.schemas.objects import State
from pydantic import Field, field_validator

from compliance_api.client import ComplianceClient
from compliance_api.errors import APIStatusError, ServerError, TransportError
from compliance_api.models import DocumentLinkCreate
from runtime.credentials import load_run_settings
from runtime.form import Maybe, title
from runtime.settings import runtime_settings
from tasks.documents import create_document_link
from write_engine.approval import (
    DEFAULT_DEADLINE_HOURS,
    ApprovalDeadline,
    ApprovalPolicy,
    RequireApproval,
)
from write_engine.inputs import (
    Identifier,
    ItemInput,
    ParsedItems,
    collect_records,
    dedupe,
    parse_items,
)
from write_engine.link_ledger import LedgerEntry, LinkLedger, ledger_url
from write_engine.outcomes import ItemResult, Outcome, RunSummary
from write_engine.run import (
    DEFAULT_CONCURRENCY,
    Concurrency,
    WriteJob,
    classify,
    current_flow_run_id,
    describe_error,
    run_write_job,
)

FLOW_KEY = "attach-document-links"
#: what to do with links an earlier attempt left unconfirmed (pending in the ledger)
UnconfirmedLinks = Literal["report", "resend", "mark_attached"]


class DocumentLinkInput(ItemInput):
    """One row of the manifest."""

    document_id: Identifier
    url: str
    title: str = Field(min_length=1)
    description: str | None = None
    effective_date: datetime | None = None

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return DocumentLinkCreate.model_validate({"url": value, "title": "-"}).url

    def key(self) -> str:
        return f"{self.document_id} {self.url}"

    def label(self) -> str:
        return f"document {self.document_id} <- {self.url}"

    def body(self) -> DocumentLinkCreate:
        return DocumentLinkCreate(
            url=self.url,
            title=self.title,
            description=self.description,
            effective_date=self.effective_date,
        )


def _review_hint(item: DocumentLinkInput) -> str:
    return (
        f"check whether document {item.document_id} has a link to {item.url}; then run again "
        "with unconfirmed_links='mark_attached' if it has, or 'resend' if it has not"
    )


class DocumentLinks(WriteJob[DocumentLinkInput]):
    flow_key = FLOW_KEY
    item_model = DocumentLinkInput

    def __init__(self, ledger: LinkLedger, unconfirmed: UnconfirmedLinks = "report") -> None:
        self.ledger = ledger
        self.unconfirmed = unconfirmed

    def plan_groups(self, item: DocumentLinkInput) -> tuple[str]:
        return (f"document {item.document_id}",)

    def plan(self, unit: Sequence[DocumentLinkInput]) -> list[ItemResult]:
        (item,) = unit
        entry = self.ledger.lookup(item.document_id, item.url)
        if entry is None or (entry.state == "pending" and self.unconfirmed == "resend"):
            return [_result(item, Outcome.PLANNED, "would attach")]
        if entry.state == "attached":
            return [_result(item, Outcome.SKIPPED, f"already attached ({entry.describe()})")]
        if self.unconfirmed == "mark_attached":
            return [_result(item, Outcome.SKIPPED, "would mark as attached without sending")]
        return [_result(item, Outcome.SKIPPED, f"would report for review ({entry.describe()})")]

    async def apply(
        self, client: ComplianceClient, unit: Sequence[DocumentLinkInput]
    ) -> list[ItemResult]:
        (item,) = unit
        run_id = current_flow_run_id()
        earlier = self.ledger.claim(item.document_id, item.url, run_id)
        if earlier is not None:
            settled = self._settle_earlier(item, earlier, run_id)
            if settled is not None:
                return [settled]
        try:
            link = await create_document_link(client, item.document_id, item.body())
        except Exception as error:
            return [self._failed(item, error)]
        self.ledger.mark_attached(item.document_id, item.url, link.id, run_id)
        return [_result(item, Outcome.SUCCEEDED, "attached", response=f"link {link.id}")]

    def _settle_earlier(
        self, item: DocumentLinkInput, entry: LedgerEntry, run_id: str | None
    ) -> ItemResult | None:
        """The result for a link the ledger already knows, or None to send it (resend)."""
        if entry.state == "attached":
            return _result(item, Outcome.SKIPPED, f"already attached ({entry.describe()})")
        if self.unconfirmed == "resend":
            self.ledger.reclaim(item.document_id, item.url, run_id)
            return None
        if self.unconfirmed == "mark_attached":
            self.ledger.mark_attached(item.document_id, item.url, None, run_id)
            return _result(item, Outcome.SKIPPED, "marked as attached by the operator")
        return _result(
            item,
            Outcome.NEEDS_REVIEW,
            f"an earlier attempt got no clear answer ({entry.describe()}); not resent: "
            + _review_hint(item),
            rerun=True,
        )

    def _failed(self, item: DocumentLinkInput, error: BaseException) -> ItemResult:
        """A refusal frees the ledger entry; an unknown fate keeps it pending for review."""
        refused = isinstance(error, APIStatusError) and not isinstance(error, ServerError)
        unsent = isinstance(error, TransportError) and not error.request_sent
        if refused or unsent:
            self.ledger.release(item.document_id, item.url)
            return _result(item, *classify(error), rerun=True)
        return _result(
            item,
            Outcome.NEEDS_REVIEW,
            f"no clear answer ({describe_error(error)}): the link may have been attached, so "
            "it was not resent; " + _review_hint(item),
            rerun=True,
        )


def _result(
    item: DocumentLinkInput,
    outcome: Outcome,
    reason: str,
    *,
    response: str = "",
    rerun: bool = False,
) -> ItemResult:
    return ItemResult(
        item=item.label(),
        outcome=outcome,
        reason=reason,
        response=response,
        rerun_input=item.as_input() if rerun else None,
    )


@asynccontextmanager
async def document_links_job(
    unconfirmed: UnconfirmedLinks = "report",
) -> AsyncIterator[DocumentLinks]:
    """The job with this tenant's ledger open (the tenant is the API and the application)."""
    settings = await load_run_settings()
    tenant = f"{settings.api_base_url}|{settings.client_id}|{settings.source_id or ''}"
    shared = runtime_settings().link_ledger_url
    url = ledger_url(settings.state_dir, shared.get_secret_value() if shared else None)
    with LinkLedger(url, tenant) as ledger:
        get_run_logger().info("Link ledger: %s", ledger.describe())
        yield DocumentLinks(ledger, unconfirmed)


MANIFEST_COLUMNS = ["document_id", "url", "title", "description", "effective_date"]


def read_link_items(
    links: list[dict[str, object]] | None,
    input_file: str | None,
    pasted_rows: str | None = None,
) -> ParsedItems[DocumentLinkInput]:
    inline = [(f"links[{index}]", dict(value)) for index, value in enumerate(links or [])]
    records = collect_records(
        inline,
        input_file,
        what="links, input_file (the manifest) or pasted_rows",
        columns=MANIFEST_COLUMNS,
        required=["document_id", "url", "title"],
        pasted_rows=pasted_rows,
    )
    return dedupe(parse_items(DocumentLinkInput, records))


@flow(name="attach-document-links")
async def attach_document_links(
    links: Annotated[Maybe[list[dict[str, object]]], title("Links")] = None,
    input_file: Annotated[Maybe[str], title("Manifest file")] = None,
    pasted_rows: Annotated[Maybe[str], title("Pasted rows (CSV or JSON)")] = None,
    unconfirmed_links: Annotated[UnconfirmedLinks, title("Unconfirmed links")] = "report",
    dry_run: Annotated[bool, title("Dry run")] = False,
    concurrency: Annotated[Concurrency, title("Concurrency")] = DEFAULT_CONCURRENCY,
    require_approval: RequireApproval = False,
    approval_deadline_hours: ApprovalDeadline = DEFAULT_DEADLINE_HOURS,
) -> RunSummary | State[Any]:
    """Attach links to documents from a manifest, never attaching the same link twice.

    A link an earlier run attached is skipped. A link whose earlier attempt got no clear
    answer is reported as needs_review, not sent again: check the document, then run again
    with unconfirmed links 'resend' or 'mark_attached'.

    Args:
        links: The links to attach, each {"document_id": ..., "url": ..., "title": ...,
            "description"?, "effective_date"?}; the url must be http(s), the date ISO 8601.
            E.g. [{"document_id": "doc-1", "url": "https://evidence.example/a", "title": "A"}].
        input_file: Path, on the worker's machine, of the manifest: a CSV/JSON file with the
            columns (or keys) document_id, url, title, description, effective_date.
        pasted_rows: Manifest rows pasted into this form: CSV with a header row and those
            columns, or a JSON list of link objects. Checked exactly as a file is.
        unconfirmed_links: What to do with links needing review: 'report' them again; after
            checking the document, 'resend' them (the link is not there) or 'mark_attached'
            (it is).
        dry_run: Only report what would be attached; nothing is written.
        concurrency: How many links are attached at the same time (1 to 32).
    """
    parsed = read_link_items(links, input_file, pasted_rows)
    async with document_links_job(unconfirmed_links) as job:
        return await run_write_job(
            job,
            parsed,
            dry_run=dry_run,
            concurrency=concurrency,
            approval=ApprovalPolicy(require_approval, approval_deadline_hours),
        )
