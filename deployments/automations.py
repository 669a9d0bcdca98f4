"""Bootstrap's automations: declared in ``automations.yaml``, filled in from the settings here.

Runs whose process died are marked Crashed (the grace must exceed :data:`HEARTBEAT_SECONDS`);
failed or crashed write runs are notified through ``COMPLIANCE_NOTIFY_WEBHOOK_URL`` (kept as a
secret in a block) or an operator's ``COMPLIANCE_NOTIFY_BLOCK`` (docs/operators.md §7). Nothing
here prints more of a webhook URL than its scheme and host: its path is often its token.
"""

from __future__ import annotations

import re
from pathlib import Path
from string import Template
from typing import Any, TypeVar
from urllib.parse import urlsplit
from uuid import UUID

import yaml
from prefect.blocks.core import Block
from prefect.blocks.notifications import CustomWebhookNotificationBlock, SlackWebhook
from prefect.client.orchestration import get_client
from prefect.events.actions import SendNotification
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
from prefect.exceptions import ObjectNotFound
from prefect.types import SecretDict
from pydantic import SecretStr

from compliance_api.errors import ConfigurationError
from deployments.resources import WORK_POOL_NAME
from deployments.settings import HEARTBEAT_SECONDS as HEARTBEAT_SECONDS
from deployments.settings import deployment_settings

BlockT = TypeVar("BlockT", bound=Block)

DECLARED: dict[str, Any] = yaml.safe_load(Path(__file__).with_name("automations.yaml").read_text())
NOTIFICATION_AUTOMATION_NAME: str = DECLARED["failure_notification"]["name"]
APPROVAL_AUTOMATION_NAME: str = DECLARED["approval_notification"]["name"]

GRACE_ENV = "COMPLIANCE_UNRESPONSIVE_RUN_GRACE_SECONDS"
WEBHOOK_ENV = "COMPLIANCE_NOTIFY_WEBHOOK_URL"
BLOCK_ENV = "COMPLIANCE_NOTIFY_BLOCK"

WEBHOOK_BLOCK_NAME = "compliance-failure-webhook"
#: the URLs Prefect's Slack Webhook block sends to Slack itself (prefect/blocks/notifications.py)
SLACK_WEBHOOK_URL = re.compile(
    r"^https?://hooks\.slack(?:-gov)?\.com/services/[A-Z0-9]+/[A-Z0-9]+/[A-Z0-9]+/?$", re.I
)
#: the Custom Webhook block's URL is a secret value, filled in when the block sends
_URL_SECRET = "webhook_url"  # noqa: S105 - a key name, not a secret
#: JSON the Custom Webhook block POSTs: ``text`` for Slack-format chat webhooks, the parts
#: apart for everything else (``{{name}}`` is the block's own: ``compliance-flows``)
WEBHOOK_JSON = {
    "text": "{{subject}}\n\n{{body}}",
    "subject": "{{subject}}",
    "body": "{{body}}",
    "source": "{{name}}",
}


def _filled(data: Any, values: dict[str, Any]) -> Any:
    """``data`` with each ``${name}`` replaced by ``values[name]``; a string that is only a
    placeholder becomes the value itself (a number stays a number)."""
    if isinstance(data, dict):
        return {key: _filled(value, values) for key, value in data.items()}
    if isinstance(data, list):
        return [_filled(value, values) for value in data]
    if isinstance(data, str):
        if data.startswith("${") and data.endswith("}") and data[2:-1] in values:
            return values[data[2:-1]]
        return Template(data).substitute(values)
    return data


def crash_automations(grace: int, pool: str = WORK_POOL_NAME) -> list[AutomationCore]:
    """Unresponsive runs, runs left Pending, runs Running without a first heartbeat (``pool``)."""
    values = {"grace_seconds": grace, "work_pool": pool}
    return [AutomationCore.model_validate(_filled(a, values)) for a in DECLARED["mark_crashed"]]


def notification_automation(block_document_id: UUID) -> AutomationCore:
    values = {"block_document_id": block_document_id}
    return AutomationCore.model_validate(_filled(DECLARED["failure_notification"], values))


def approval_automation(block_document_id: UUID) -> AutomationCore:
    values = {"block_document_id": block_document_id}
    return AutomationCore.model_validate(_filled(DECLARED["approval_notification"], values))


async def _ensure_notifications(block_id: UUID, label: str) -> str:
    automations = [notification_automation(block_id), approval_automation(block_id)]
    return "; ".join([await _ensure(a, f"sends through {label}", block_id) for a in automations])


async def _ensure(automation: AutomationCore, note: str, block_id: UUID | None = None) -> str:
    """Create the automation unless one of that name exists (an operator's changes are kept);
    with ``block_id``, point an existing one at that block."""
    async with get_client() as client:
        existing = await client.read_automations_by_name(automation.name)
        if not existing:
            await client.create_automation(automation)
            return f"created automation {automation.name!r} ({note})"
        kept = existing[0]
        state = "enabled" if kept.enabled else "paused"
        sends = {a.block_document_id for a in kept.actions if isinstance(a, SendNotification)}
        missing = _missing_expectations(kept, automation)
        retarget = block_id is not None and sends != {block_id}
        if not retarget and not missing:
            return f"kept automation {automation.name!r} ({state})"
        # the API refuses an owner in an update: leave it out, so the automation keeps its own
        updated = AutomationCore.model_validate(kept.model_dump(exclude={"owner_resource"}))
        if missing and isinstance(updated.trigger, EventTrigger):
            updated.trigger.expect = set(updated.trigger.expect) | missing
            note = f"{note}; also ends its wait on {', '.join(sorted(missing))}"
        if retarget:
            updated.actions = [
                a.model_copy(update={"block_document_id": block_id})
                if isinstance(a, SendNotification)
                else a
                for a in updated.actions
            ] + ([] if sends else automation.actions)
        await client.update_automation(kept.id, updated)
    return f"updated automation {automation.name!r} ({state}): now {note}"


def _missing_expectations(kept: AutomationCore, declared: AutomationCore) -> set[str]:
    """Events a newer release declares that an existing proactive automation lacks (e.g.
    ``Suspended``, or a run waiting for approval would be marked Crashed)."""
    if not isinstance(kept.trigger, EventTrigger) or not isinstance(declared.trigger, EventTrigger):
        return set()
    if declared.trigger.posture != Posture.Proactive:
        return set()
    return set(declared.trigger.expect) - set(kept.trigger.expect)


def grace_seconds() -> int:
    """The grace period, from COMPLIANCE_UNRESPONSIVE_RUN_GRACE_SECONDS (default 90 s)."""
    return deployment_settings().unresponsive_run_grace_seconds


async def ensure_unresponsive_run_detection() -> str:
    """Bootstrap step: the automations that mark runs whose process died Crashed."""
    grace = grace_seconds()
    return "; ".join([await _ensure(a, f"grace {grace} s") for a in crash_automations(grace)])


def shown(url: str) -> str:
    """What may be printed of a webhook URL: scheme, host and port."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}/…"


async def _load(cls: type[BlockT]) -> BlockT | None:
    """The ``compliance-failure-webhook`` block of that type, or None (one that exists but does
    not load is an error, not a reason to overwrite it)."""
    async with get_client() as client:
        try:
            await client.read_block_document_by_name(
                WEBHOOK_BLOCK_NAME, block_type_slug=cls.get_block_type_slug(), include_secrets=False
            )
        except ObjectNotFound:
            return None
    return await cls.aload(WEBHOOK_BLOCK_NAME)


async def ensure_webhook_block(url: str) -> tuple[UUID, str, str]:
    """The ``compliance-failure-webhook`` block holding ``url`` as a secret (an existing one gets
    only a changed URL); returns its id, ``slug/name`` and what was done."""
    verb = "updated"
    if SLACK_WEBHOOK_URL.match(url):
        what = f"Slack incoming webhook at {shown(url)}"
        slack = await _load(SlackWebhook)
        if slack is None:
            slack, verb = SlackWebhook(url=SecretStr(url), notify_type="failure"), "created"
        elif slack.url.get_secret_value() == url:
            verb = "kept"
        else:
            slack.url = SecretStr(url)
        block: Block = slack
    else:
        what = f"JSON POST to {shown(url)}"
        custom = await _load(CustomWebhookNotificationBlock)
        secrets = {_URL_SECRET: url}
        if custom is None:
            verb = "created"
            custom = CustomWebhookNotificationBlock(
                name="compliance-flows",
                url="{{" + _URL_SECRET + "}}",
                method="POST",
                json_data=WEBHOOK_JSON,
                secrets=SecretDict(secrets),
                # an internal relay on a private address is a legitimate target
                allow_private_urls=True,
            )
        elif custom.secrets.get_secret_value().get(_URL_SECRET) == url:
            verb = "kept"
        else:
            custom.url = "{{" + _URL_SECRET + "}}"
            custom.secrets = SecretDict({**custom.secrets.get_secret_value(), **secrets})
        block = custom
    block_id = block._block_document_id
    if verb != "kept":
        block_id = await block.asave(WEBHOOK_BLOCK_NAME, overwrite=True)
    assert block_id is not None
    label = f"{block.get_block_type_slug()}/{WEBHOOK_BLOCK_NAME}"
    return block_id, label, f"{verb} notification block {label} ({what})"


async def named_block_id(slug: str, name: str) -> UUID:
    """The id of an operator's notification block, checked to exist and to be one."""
    async with get_client() as client:
        try:
            document = await client.read_block_document_by_name(
                name, block_type_slug=slug, include_secrets=False
            )
        except ObjectNotFound:
            raise ConfigurationError(
                f"{BLOCK_ENV}={slug}/{name}: no such block on the Prefect server; create it in "
                "the UI (Blocks > +) or fix the name (`prefect block ls` lists them)"
            ) from None
    capabilities = document.block_schema.capabilities if document.block_schema else []
    if "notify" not in capabilities:
        raise ConfigurationError(
            f"{BLOCK_ENV}={slug}/{name} is not a notification block (it cannot send messages); "
            "use e.g. a Slack Webhook, Custom Webhook or Sendgrid Email block"
        )
    return document.id


async def ensure_failure_notifications() -> str:
    """Bootstrap step: the notification block (ours or the operator's) and the automations
    that send through it."""
    settings = deployment_settings()  # both checked: an absolute http(s) URL, a slug/name
    url, block = settings.notify_webhook_url, settings.notify_block
    if url is not None and block is not None:
        raise ConfigurationError(
            f"set {WEBHOOK_ENV} or {BLOCK_ENV}, not both: which one should notifications use?"
        )
    if url is not None:
        block_id, label, block_line = await ensure_webhook_block(url.get_secret_value())
        return f"{block_line}; {await _ensure_notifications(block_id, label)}"
    if block is not None:
        slug, _, name = block.partition("/")
        return await _ensure_notifications(await named_block_id(slug, name), block)
    async with get_client() as client:
        existing = await client.read_automations_by_name(NOTIFICATION_AUTOMATION_NAME)
    if existing:
        state = "enabled" if existing[0].enabled else "paused"
        return (
            f"kept automation {NOTIFICATION_AUTOMATION_NAME!r} ({state}) as it is: neither "
            f"{WEBHOOK_ENV} nor {BLOCK_ENV} is set"
        )
    return f"skipped failure notifications: set {WEBHOOK_ENV} or {BLOCK_ENV} to send them"
