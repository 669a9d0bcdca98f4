"""Runbook: promote discovered vendors to managed vendors.

With ``from_audit_log`` the run also takes every vendor discovered since this flow's audit-log
checkpoint and moves the checkpoint once all are handled (the deployment's trigger does so).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

from prefect import flow
from prefect.client.schemas.objects import State
from pydantic import BaseModel

from audit_log.checkpoints import PROMOTE_CHECKPOINT_VARIABLE
from audit_log.targets import AuditLogSource, run_on_new_targets
from compliance_api.client import ComplianceClient
from compliance_api.errors import ConflictError
from compliance_api.models import Vendor
from runtime.form import Maybe, title
from tasks.event_logs import logged_targets
from tasks.vendors import promote_discovered_vendor
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
from write_engine.outcomes import ItemResult, Outcome, RunSummary
from write_engine.run import DEFAULT_CONCURRENCY, Concurrency, WriteJob, failure, run_write_job

FLOW_KEY = "promote-discovered-vendors"
#: the audit entry of a vendor newly added to the managed vendors (its target: the discovered one)
ADDED_TO_MANAGED = "VENDOR_ADDED_TO_MANAGED"
#: where ``from_audit_log`` finds its vendors, and which of them are managed already
NEWLY_DISCOVERED = AuditLogSource(
    action="VENDOR_DISCOVERED",
    target_type="DiscoveredVendor",
    checkpoint_variable=PROMOTE_CHECKPOINT_VARIABLE,
    done_action=ADDED_TO_MANAGED,
)


class DiscoveredVendorInput(ItemInput):
    """One discovered vendor to promote."""

    discovered_vendor_id: Identifier

    def key(self) -> str:
        return self.discovered_vendor_id


class ManagedVendor(BaseModel):
    """A promoted vendor as the summary lists it."""

    discovered_vendor_id: str
    vendor_id: str
    name: str
    status: str
    inherent_risk_level: str | None
    residual_risk_level: str | None


class VendorPromotionSummary(RunSummary):
    managed_vendors: list[ManagedVendor] = []


def _risk(value: object) -> str | None:
    return None if value is None else str(getattr(value, "value", value))


def managed_vendor(discovered_vendor_id: str, vendor: Vendor) -> ManagedVendor:
    return ManagedVendor(
        discovered_vendor_id=discovered_vendor_id,
        vendor_id=vendor.id,
        name=vendor.name,
        status=str(getattr(vendor.status, "value", vendor.status)),
        inherent_risk_level=_risk(vendor.inherent_risk_level),
        residual_risk_level=_risk(vendor.residual_risk_level),
    )


class VendorPromotion(WriteJob[DiscoveredVendorInput]):
    flow_key = FLOW_KEY
    item_model = DiscoveredVendorInput

    def plan(self, unit: Sequence[DiscoveredVendorInput]) -> list[ItemResult]:
        return [
            ItemResult(item=item.label(), outcome=Outcome.PLANNED, reason="would add to managed")
            for item in unit
        ]

    async def apply(
        self, client: ComplianceClient, unit: Sequence[DiscoveredVendorInput]
    ) -> list[ItemResult]:
        (item,) = unit
        try:
            vendor = await promote_discovered_vendor(client, item.discovered_vendor_id)
        except ConflictError as error:  # the service may answer 409 for an already managed one
            return [
                ItemResult(
                    item=item.label(),
                    outcome=Outcome.SUCCEEDED,
                    reason=f"already managed ({error.message})",
                )
            ]
        except Exception as error:
            return [failure(item, error)]
        promoted = managed_vendor(item.discovered_vendor_id, vendor)
        return [
            ItemResult(
                item=item.label(),
                outcome=Outcome.SUCCEEDED,
                reason="managed",
                response=(
                    f"vendor {promoted.vendor_id} ({promoted.name}): {promoted.status}, "
                    f"inherent risk {promoted.inherent_risk_level}, "
                    f"residual risk {promoted.residual_risk_level}"
                ),
                details=promoted.model_dump(),
            )
        ]

    async def applied_by_lost_attempt(
        self,
        client: ComplianceClient,
        units: Sequence[Sequence[DiscoveredVendorInput]],
        since: datetime,
    ) -> set[int]:
        """The service logs each vendor it newly adds to the managed ones; one it does not
        show was not added (the lost attempt's calls ended long before this one started)."""
        entries = await logged_targets(client, ADDED_TO_MANAGED, since)
        managed = {vendor for entry in entries for vendor in entry.get("DiscoveredVendor", ())}
        return {
            position
            for position, unit in enumerate(units)
            if all(item.discovered_vendor_id in managed for item in unit)
        }

    def summarize(self, summary: RunSummary, results: Sequence[ItemResult]) -> RunSummary:
        vendors = [ManagedVendor(**r.details) for r in results if r.details]
        return VendorPromotionSummary(**summary.model_dump(), managed_vendors=vendors)


def read_vendor_items(
    discovered_vendor_ids: list[str] | None,
    input_file: str | None,
    *,
    from_audit_log: list[str] | None = None,
    pasted_rows: str | None = None,
) -> ParsedItems[DiscoveredVendorInput]:
    """Ids from the parameter and/or a file: CSV column ``discovered_vendor_id`` or a JSON list
    of ids or of ``{"discovered_vendor_id": ...}`` objects; then those the audit log named
    (``None``: the run does not read the log, so it needs ids or a file)."""
    inline = [
        (f"discovered_vendor_ids[{index}]", {"discovered_vendor_id": value})
        for index, value in enumerate(discovered_vendor_ids or [])
    ]
    inline += [
        (f"audit log ({index})", {"discovered_vendor_id": value})
        for index, value in enumerate(from_audit_log or [])
    ]
    records = collect_records(
        inline,
        input_file,
        what="discovered_vendor_ids, input_file, pasted_rows or from_audit_log",
        columns=["discovered_vendor_id"],
        required=["discovered_vendor_id"],
        scalar_field="discovered_vendor_id",
        allow_empty=from_audit_log is not None,
        pasted_rows=pasted_rows,
    )
    return dedupe(parse_items(DiscoveredVendorInput, records))


@flow(name="promote-discovered-vendors")
async def promote_discovered_vendors(
    discovered_vendor_ids: Annotated[Maybe[list[str]], title("Discovered vendor ids")] = None,
    input_file: Annotated[Maybe[str], title("Input file")] = None,
    pasted_rows: Annotated[Maybe[str], title("Pasted rows (CSV or JSON)")] = None,
    from_audit_log: Annotated[bool, title("Vendors discovered since the last run")] = False,
    dry_run: Annotated[bool, title("Dry run")] = False,
    concurrency: Annotated[Concurrency, title("Concurrency")] = DEFAULT_CONCURRENCY,
    require_approval: RequireApproval = False,
    approval_deadline_hours: ApprovalDeadline = DEFAULT_DEADLINE_HOURS,
) -> RunSummary | State[Any]:
    """Promote discovered vendors to managed vendors.

    Every id is checked before the first call. Vendors already managed count as succeeded;
    unknown ids fail as "not found". The run is Failed (red) if any vendor failed; rerun just
    those with rerun_failed_items.

    Args:
        discovered_vendor_ids: Ids of the discovered vendors to promote, e.g. ['dv-7'].
            Can be combined with an input file; an id given twice is promoted once.
        input_file: Path, on the worker's machine, of a CSV file with a column
            discovered_vendor_id, or of a JSON list of ids or of {"discovered_vendor_id": ...}
            objects.
        pasted_rows: Rows pasted into this form: CSV with a header row discovered_vendor_id
            and one id per line, or a JSON list as for input_file. Checked exactly as a file
            is.
        from_audit_log: Also promote every vendor the audit log reported discovered since
            the last such run (its checkpoint); the deployment's trigger and schedule set it.
            The checkpoint moves on once they are all handled (not in a dry run).
        dry_run: Only report what would be promoted; nothing is written.
        concurrency: How many vendors are promoted at the same time (1 to 32).
    """
    # checked before the first call, also when the log is to be read
    parsed = read_vendor_items(
        discovered_vendor_ids,
        input_file,
        from_audit_log=[] if from_audit_log else None,
        pasted_rows=pasted_rows,
    )
    approval = ApprovalPolicy(require_approval, approval_deadline_hours)
    if not from_audit_log:
        return await run_write_job(
            VendorPromotion(),
            parsed,
            dry_run=dry_run,
            concurrency=concurrency,
            approval=approval,
        )
    return await run_on_new_targets(
        VendorPromotion(),
        NEWLY_DISCOVERED,
        lambda ids: read_vendor_items(
            discovered_vendor_ids, input_file, from_audit_log=ids, pasted_rows=pasted_rows
        ),
        dry_run=dry_run,
        concurrency=concurrency,
        approval=approval,
    )
