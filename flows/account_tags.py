"""Runbook: set customer-trust account tags (and optionally name, email domain, custom fields).

Unknown categories or tag ids stop the run before any write. The service REPLACES the tags of
every category named for an account; categories not named are untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import anyio
from prefect import flow
from prefect.client.schemas.objects import State
from pydantic import Field, field_validator

from compliance_api.client import ComplianceClient
from compliance_api.errors import InputError
from compliance_api.models import AccountUpdate, CustomerTrustAccount
from runtime.form import Maybe, title
from tasks.accounts import list_tag_categories, read_tag_category, update_account
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
    split_list,
)
from write_engine.outcomes import ItemResult, Outcome, RunSummary
from write_engine.run import DEFAULT_CONCURRENCY, Concurrency, WriteJob, failure, run_write_job

FLOW_KEY = "update-account-tags"
#: in a CSV ``tag_ids`` cell: remove every tag of the category (an empty cell is an error)
CLEAR_TAGS = "NONE"
CUSTOM_FIELD_PREFIX = "custom_field:"
#: parallel reads of tag categories during validation
CATEGORY_READS = 4


class AccountTagsInput(ItemInput):
    """The tags (per category) and optional details to set on one account."""

    account_id: Identifier
    tags: dict[Identifier, list[Identifier]] = Field(default_factory=dict)
    name: str | None = Field(default=None, min_length=1)
    email_domain: str | None = Field(default=None, pattern=r"^[^@\s]+\.[^@\s]+$")
    custom_fields: dict[str, str | list[str]] = Field(default_factory=dict)

    @field_validator("tags", mode="before")
    @classmethod
    def _split_cells(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {category: split_list(tag_ids) for category, tag_ids in value.items()}
        return value

    @field_validator("tags")
    @classmethod
    def _unique_tags(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        return {category: list(dict.fromkeys(tag_ids)) for category, tag_ids in value.items()}

    def key(self) -> str:
        return self.account_id

    def label(self) -> str:
        return f"account {self.account_id}"

    def has_changes(self) -> bool:
        return bool(self.tags or self.name or self.email_domain or self.custom_fields)

    def update(self) -> AccountUpdate:
        fields: dict[str, Any] = {}
        if self.tags:
            fields["tags_by_category"] = [
                {"category_id": category, "tag_ids": tag_ids}
                for category, tag_ids in self.tags.items()
            ]
        if self.name:
            fields["name"] = self.name
        if self.email_domain:
            fields["email_domain"] = self.email_domain
        if self.custom_fields:
            fields["custom_fields"] = [
                {"label": label, "value": value} for label, value in self.custom_fields.items()
            ]
        return AccountUpdate(**fields)

    def describe_change(self) -> str:
        """What the PATCH does, in words (including that tags are replaced per category)."""
        parts = [
            f"replace tags of category {category} with [{', '.join(tag_ids)}]"
            if tag_ids
            else f"remove all tags of category {category}"
            for category, tag_ids in self.tags.items()
        ]
        if self.tags:
            parts.append("other categories unchanged")
        if self.name:
            parts.append(f"name -> {self.name!r}")
        if self.email_domain:
            parts.append(f"email domain -> {self.email_domain}")
        if self.custom_fields:
            parts.append(f"custom fields {', '.join(self.custom_fields)}")
        return "; ".join(parts)


class AccountTags(WriteJob[AccountTagsInput]):
    flow_key = FLOW_KEY
    item_model = AccountTagsInput
    reads_during_validation = True

    async def validate_remotely(
        self, client: ComplianceClient, items: Sequence[AccountTagsInput]
    ) -> None:
        """Every category and tag id must exist: one list call, one read per used category."""
        used = {category for item in items for category in item.tags}
        if not used:
            return
        known = {category.id: category for category in await list_tag_categories(client)}
        for item in items:
            for category in item.tags:
                if category not in known:
                    names = ", ".join(f"{c.id} ({c.display_name})" for c in known.values())
                    problem = f"is not a tag category; known: {names}"
                    raise InputError("tags", category, problem, item=item.label())
        tags_of: dict[str, set[str]] = {}
        limiter = anyio.CapacityLimiter(CATEGORY_READS)

        async def read(category_id: str) -> None:
            async with limiter:
                detail = await read_tag_category(client, category_id)
            tags_of[category_id] = {tag.id for tag in detail.tags}

        async with anyio.create_task_group() as group:
            for category_id in sorted(used):
                group.start_soon(read, category_id)
        for item in items:
            for category, tag_ids in item.tags.items():
                for tag_id in tag_ids:
                    if tag_id not in tags_of[category]:
                        raise InputError(
                            f"tags.{category}",
                            tag_id,
                            f"is not a tag of category {known[category].display_name!r} "
                            f"({category})",
                            item=item.label(),
                        )

    def plan_groups(self, item: AccountTagsInput) -> list[str]:
        """Per tag set (a removal counts under its category), plus other field changes."""
        groups = [
            f"category {category}: tag {tag}" if tag else f"category {category}: remove all"
            for category, tags in item.tags.items()
            for tag in tags or [""]
        ]
        others = item.name or item.email_domain or item.custom_fields
        return groups + (["name, email domain or custom fields"] if others else [])

    def plan(self, unit: Sequence[AccountTagsInput]) -> list[ItemResult]:
        return [
            ItemResult(
                item=item.label(), outcome=Outcome.PLANNED, reason=f"would {item.describe_change()}"
            )
            for item in unit
        ]

    async def apply(
        self, client: ComplianceClient, unit: Sequence[AccountTagsInput]
    ) -> list[ItemResult]:
        (item,) = unit
        try:
            account = await update_account(client, item.account_id, item.update())
        except Exception as error:
            return [failure(item, error)]
        return [
            ItemResult(
                item=item.label(),
                outcome=Outcome.SUCCEEDED,
                reason=item.describe_change(),
                response=_tags_now(account, item),
            )
        ]


def _tags_now(account: CustomerTrustAccount, item: AccountTagsInput) -> str:
    """The account's tags in the categories this run set, as the service now has them."""
    current = {entry.category_id: entry.tag_ids for entry in account.tags_by_category}
    shown = [f"{category}: [{', '.join(current.get(category, []))}]" for category in item.tags]
    return f"{account.name}; tags now " + "; ".join(shown) if shown else account.name


COLUMNS = ["account_id", "category_id", "tag_ids", "name", "email_domain", "tags", "custom_fields"]
CSV_REQUIRED = ["account_id"]


def _account_records(
    records: list[tuple[str, dict[str, Any]]],
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """Fold CSV-style rows (one per account and category) into one record per account.

    Returns the records and the rows dropped as exact repeats. Rows of one account must agree
    on name, email domain and custom fields, and a category may appear once per account.
    """
    whole: list[tuple[str, dict[str, Any]]] = []
    rows: dict[str, tuple[str, dict[str, Any]]] = {}
    repeats: list[str] = []
    for where, record in records:
        if "category_id" in record or "tag_ids" in record:
            _fold_row(rows, repeats, where, record)
        else:  # a whole account (inline or JSON); repeats are handled by dedupe()
            whole.append((where, record))
    return whole + list(rows.values()), repeats


def _fold_row(
    merged: dict[str, tuple[str, dict[str, Any]]],
    repeats: list[str],
    where: str,
    row: dict[str, Any],
) -> None:
    account = row.get("account_id")
    if not account:
        raise InputError("account_id", None, "is required", item=where)
    category, tag_cell = row.get("category_id"), row.get("tag_ids")
    if not category:
        raise InputError("category_id", None, "is required when tag_ids is given", item=where)
    if tag_cell is None:
        raise InputError(
            "tag_ids",
            None,
            f"is empty: list the tag ids separated by ';', or write {CLEAR_TAGS} to remove "
            "every tag of the category",
            item=f"{where} (account_id={account})",
        )
    tag_ids = [] if tag_cell == CLEAR_TAGS else split_list(tag_cell)
    details = {name: value for name, value in row.items() if name in ("name", "email_domain")}
    custom = {
        name.removeprefix(CUSTOM_FIELD_PREFIX): value
        for name, value in row.items()
        if name.startswith(CUSTOM_FIELD_PREFIX)
    }
    if custom:
        details["custom_fields"] = custom
    first_where, record = merged.setdefault(account, (where, {"account_id": account, "tags": {}}))
    for name, value in details.items():
        if record.get(name, value) != value:
            raise InputError(
                name,
                value,
                f"differs from {record[name]!r} given for the same account in {first_where}",
                item=f"{where} (account_id={account})",
            )
        record[name] = value
    tags: dict[str, Any] = record["tags"]
    if category in tags:
        if tags[category] == tag_ids:
            repeats.append(f"{where} (account_id={account}, category_id={category})")
            return
        raise InputError(
            "category_id",
            category,
            f"appears twice for the account with different tag_ids (also in {first_where})",
            item=f"{where} (account_id={account})",
        )
    tags[category] = tag_ids


def read_account_items(
    accounts: list[dict[str, Any]] | None,
    input_file: str | None,
    pasted_rows: str | None = None,
) -> ParsedItems[AccountTagsInput]:
    inline = [(f"accounts[{index}]", dict(value)) for index, value in enumerate(accounts or [])]
    records = collect_records(
        inline,
        input_file,
        what="accounts, input_file or pasted_rows",
        columns=COLUMNS,
        required=CSV_REQUIRED,
        column_prefixes=[CUSTOM_FIELD_PREFIX],
        pasted_rows=pasted_rows,
    )
    folded, repeats = _account_records(records)
    parsed = dedupe(parse_items(AccountTagsInput, folded))
    for item in parsed.items:
        if not item.has_changes():
            raise InputError("tags", {}, "nothing to change for this account", item=item.label())
    return ParsedItems(parsed.items, repeats + parsed.duplicates)


@flow(name="update-account-tags")
async def update_account_tags(
    accounts: Annotated[Maybe[list[dict[str, Any]]], title("Accounts")] = None,
    input_file: Annotated[Maybe[str], title("Input file")] = None,
    pasted_rows: Annotated[Maybe[str], title("Pasted rows (CSV or JSON)")] = None,
    dry_run: Annotated[bool, title("Dry run")] = False,
    concurrency: Annotated[Concurrency, title("Concurrency")] = DEFAULT_CONCURRENCY,
    require_approval: RequireApproval = False,
    approval_deadline_hours: ApprovalDeadline = DEFAULT_DEADLINE_HOURS,
) -> RunSummary | State[Any]:
    """Set tags per category (and optionally name, email domain, custom fields) on accounts.

    Category and tag ids are checked against the service's tag categories before any write.
    The service REPLACES an account's tags in each category named (an empty list removes them
    all); categories not named are left as they are.

    Args:
        accounts: The accounts to change, each {"account_id": ..., "tags": {category_id:
            [tag_id, ...]}, "name"?, "email_domain"?, "custom_fields"?: {label: value}}, e.g.
            [{"account_id": "acc-1", "tags": {"cat-1": ["tag-1"]}}].
        input_file: Path, on the worker's machine, of a CSV file with one row per account and
            category: account_id, category_id, tag_ids (separated by ';', or NONE to remove
            all of the category's tags), optional name, email_domain and custom_field:<label>
            columns; or of a JSON list of account objects as above.
        pasted_rows: Rows pasted into this form, e.g. from a spreadsheet: CSV with a header
            row and the columns of input_file, or a JSON list of account objects. Checked
            exactly as a file is.
        dry_run: Only report what would change; nothing is written.
        concurrency: How many accounts are updated at the same time (1 to 32).
    """
    parsed = read_account_items(accounts, input_file, pasted_rows)
    return await run_write_job(
        AccountTags(),
        parsed,
        dry_run=dry_run,
        concurrency=concurrency,
        approval=ApprovalPolicy(require_approval, approval_deadline_hours),
    )
