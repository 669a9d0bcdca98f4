"""Failure notifications: a message when a write run ends Failed or Crashed.

Bootstrap creates, when an operator asks for it, a Prefect automation that reacts to the
``prefect.flow-run.Failed`` and ``prefect.flow-run.Crashed`` events of runs tagged ``write``
(every write deployment in prefect.yaml, the reruns included) and sends a notification through a
Prefect notification block. The Prefect server sends it (its automation services render the text
and call the block), so it goes out even when the run's process is gone.

Where it goes, from the process environment (read by bootstrap only):

- ``COMPLIANCE_NOTIFY_WEBHOOK_URL``: an http(s) URL. Bootstrap keeps it as a secret (encrypted
  by the server, shown as ``********`` in the UI) in the block ``compliance-failure-webhook``:
  for a Slack incoming-webhook URL, Prefect's *Slack Webhook* block (it formats the message for
  Slack, and a refused delivery is reported without the URL); for any other URL, a *Custom
  Webhook* block that POSTs JSON (``text``, ``subject``, ``body``, ``source``). Bootstrap never
  prints more of the URL than its scheme and host: a webhook URL's path is often its token.
  (Prefect's Custom Webhook block raises httpx's error when the endpoint answers with an error
  status, and the server logs that error, URL included: docs/operators.md says so.)
- ``COMPLIANCE_NOTIFY_BLOCK``: ``<block-type-slug>/<block-name>`` of a notification block the
  operator created in the UI, e.g. ``slack-webhook/compliance-alerts`` or
  ``sendgrid-email/compliance-oncall``.

The text names the flow, the deployment, the run, its state and state message (a Failed write
run's message holds its counts: ``2 of 5 item(s) failed (...)``), what to do next and the run's
page in the UI; never parameters, never a credential. Bootstrap keeps an existing automation as
the operator left it (paused, texts edited), except that it points it at the configured block
when that changed.
"""

from __future__ import annotations

import os
import re
from typing import Any, TypeVar
from urllib.parse import urlsplit
from uuid import UUID

from prefect.blocks.core import Block
from prefect.blocks.notifications import CustomWebhookNotificationBlock, SlackWebhook
from prefect.client.orchestration import get_client
from prefect.events.actions import SendNotification
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
from prefect.events.schemas.events import ResourceSpecification
from prefect.exceptions import ObjectNotFound
from prefect.types import SecretDict
from pydantic import SecretStr

from compliance_api.errors import ConfigurationError

BlockT = TypeVar("BlockT", bound=Block)

WEBHOOK_ENV = "COMPLIANCE_NOTIFY_WEBHOOK_URL"
BLOCK_ENV = "COMPLIANCE_NOTIFY_BLOCK"

AUTOMATION_NAME = "compliance-flows: notify on failed write runs"
#: the block bootstrap keeps COMPLIANCE_NOTIFY_WEBHOOK_URL in: a Slack Webhook block for a
#: Slack incoming-webhook URL, a Custom Webhook block for any other
WEBHOOK_BLOCK_NAME = "compliance-failure-webhook"
WEBHOOK_BLOCK_SLUG = CustomWebhookNotificationBlock.get_block_type_slug()  # custom-webhook
SLACK_BLOCK_SLUG = SlackWebhook.get_block_type_slug()  # slack-webhook
#: the URLs Prefect's Slack Webhook block sends to Slack itself (prefect/blocks/notifications.py)
SLACK_WEBHOOK_URL = re.compile(
    r"^https?://hooks\.slack(?:-gov)?\.com/services/[A-Z0-9]+/[A-Z0-9]+/[A-Z0-9]+/?$", re.I
)
#: the key of the URL among the block's secret values; the block's ``url`` names it
_URL_SECRET = "webhook_url"  # noqa: S105 - a key name, not a secret

#: the tag every write deployment's runs carry (prefect.yaml)
WRITE_TAG = "write"
NOTIFIED_EVENTS = {"prefect.flow-run.Failed", "prefect.flow-run.Crashed"}

#: what a Failed write run's state message says when it failed because of items
#: (write_engine/outcomes.py, ``ItemsFailed``); other failures stopped before or outside items
ITEMS_FAILED_MARKER = "rerun them with rerun_failed_items"

#: JSON the Custom Webhook block POSTs: ``text`` for chat webhooks that take Slack's format
#: (Mattermost, Rocket.Chat, ...), the parts apart for everything else (the block fills in
#: ``{{subject}}``, ``{{body}}``, ``{{name}}``)
WEBHOOK_JSON: dict[str, Any] = {
    "text": "{{subject}}\n\n{{body}}",
    "subject": "{{subject}}",
    "body": "{{body}}",
    "source": "{{name}}",
}
WEBHOOK_SOURCE = "compliance-flows"

# The texts are Jinja templates the Prefect server renders when the automation fires, with the
# triggering event and the objects it names: ``flow_run`` (its state is the event's: Failed or
# Crashed, with the event's message, even if the run has moved on since), ``flow``,
# ``deployment`` (None for a run started outside a deployment) and ``variables`` (the Prefect
# Variables). ``ui_url`` builds the run's address from the server's PREFECT_UI_URL.
SUBJECT_TEMPLATE = (
    "[compliance-flows] {{ flow_run.state.name }}: {{ flow.name }} (run {{ flow_run.name }})"
)

_NEXT_CRASHED = (
    "{% if 'crash-recovery' in flow_run.tags %}"
    "Its process died or never started (a worker or its machine was lost, or the server was too "
    "busy to start it). Crash recovery starts this same run again with the same parameters, up "
    "to {{ variables.compliance_crash_max_attempts or 'compliance_crash_max_attempts' }} "
    "crashes in all; each crash sends this message. After the last one the run stays Crashed "
    "with a report from recover-crashed-runs: find the cause in the worker's log, then press "
    "Retry on the run's page."
    "{% else %}"
    "Its process died or never started, and this run is not under crash recovery (no "
    "crash-recovery tag): find the cause in the worker's log, then press Retry on the run's "
    "page (every flow is safe to run again)."
    "{% endif %}"
)
_NEXT_ITEMS_FAILED = (
    "Items that failed for a transient reason are rerun automatically after "
    "compliance_rerun_delay_seconds, up to compliance_rerun_max_attempts attempts in all (a "
    "rerun that fails again sends its own message). For the others (not found, permission "
    "denied, invalid, needs review), fix the cause shown in the run's results table, then run "
    'the deployment "Rerun failed items" with flow_run_id={{ flow_run.id }}: in the UI '
    "Deployments > Rerun failed items > Run > Custom run, or "
    "`prefect deployment run 'Rerun failed items/rerun-failed-items' "
    "-p flow_run_id={{ flow_run.id }}`."
)
_NEXT_OTHER_FAILURE = (
    "The run stopped before or outside its items (the message says why: bad input, a "
    "configuration error, or a rerun refused because it exceeds max_attempts). Fix the cause, "
    "then start the run again (a rerun with a higher max_attempts)."
)
BODY_TEMPLATE = (
    "{% set state = flow_run.state.name %}"
    "{% set message = flow_run.state.message or '(no message)' %}"
    "{% set url = flow_run|ui_url %}"
    "A write run ended {{ state }}.\n"
    "\n"
    "Flow: {{ flow.name }}\n"
    "Deployment: {% if deployment %}{{ flow.name }}/{{ deployment.name }}"
    "{% else %}none (started outside a deployment){% endif %}\n"
    "Run: {{ flow_run.name }} ({{ flow_run.id }})\n"
    "State: {{ state }}: {{ message|truncate(1500) }}\n"
    "\n"
    "What to do next:\n"
    f"{{% if state == 'Crashed' %}}{_NEXT_CRASHED}"
    f"{{% elif '{ITEMS_FAILED_MARKER}' in message %}}{_NEXT_ITEMS_FAILED}"
    f"{{% else %}}{_NEXT_OTHER_FAILURE}{{% endif %}}\n"
    "\n"
    "The run in the Prefect UI: {% if url %}{{ url }}{% else %}runs/flow-run/{{ flow_run.id }} "
    "(set PREFECT_UI_URL on the Prefect server for a full link){% endif %}"
)


# ----------------------------------------------------------------------------- configuration
def webhook_url() -> str | None:
    """COMPLIANCE_NOTIFY_WEBHOOK_URL, checked: an absolute http(s) URL. Errors never repeat the
    URL's path or query (often its secret token)."""
    raw = os.environ.get(WEBHOOK_ENV, "").strip()
    if not raw:
        return None
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        raise ConfigurationError(
            f"{WEBHOOK_ENV} is not a valid URL; expected an absolute http(s) URL such as "
            "https://hooks.slack.com/services/..."
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        scheme = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        host = "a host" if parts.hostname else "no host"
        raise ConfigurationError(
            f"{WEBHOOK_ENV} must be an absolute http(s) URL such as "
            f"https://hooks.slack.com/services/...; it has {scheme} and {host}"
        )
    return raw


def shown(url: str) -> str:
    """What may be printed of a webhook URL: scheme, host and port; never path, query or
    credentials."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}/…"


def named_block() -> tuple[str, str] | None:
    """COMPLIANCE_NOTIFY_BLOCK as (block type slug, block name)."""
    raw = os.environ.get(BLOCK_ENV, "").strip()
    if not raw:
        return None
    slug, slash, name = raw.partition("/")
    if not slash or not slug or not name or "/" in name:
        raise ConfigurationError(
            f"{BLOCK_ENV}={raw!r} must be <block-type-slug>/<block-name> of a notification block, "
            "e.g. slack-webhook/compliance-alerts (`prefect block ls` lists them)"
        )
    return slug, name


# ----------------------------------------------------------------------------- the automation
def failure_notification_automation(block_document_id: UUID) -> AutomationCore:
    return AutomationCore(
        name=AUTOMATION_NAME,
        description=(
            "A run tagged `write` that ends Failed or Crashed sends a notification: flow, "
            "deployment, run, state and message (the counts), what to do next and the run's "
            "link. Pause it to stop the notifications."
        ),
        trigger=EventTrigger(
            expect=set(NOTIFIED_EVENTS),
            match=ResourceSpecification({"prefect.resource.id": "prefect.flow-run.*"}),
            match_related=ResourceSpecification(
                {"prefect.resource.role": "tag", "prefect.resource.id": f"prefect.tag.{WRITE_TAG}"}
            ),
            posture=Posture.Reactive,
            threshold=1,
        ),
        actions=[
            SendNotification(
                block_document_id=block_document_id,
                subject=SUBJECT_TEMPLATE,
                body=BODY_TEMPLATE,
            )
        ],
    )


def is_slack_webhook(url: str) -> bool:
    """A Slack incoming-webhook URL (commercial or GovCloud), as Prefect's Slack block knows it."""
    return SLACK_WEBHOOK_URL.match(url) is not None


async def _load(cls: type[BlockT]) -> BlockT | None:
    """The block of that type named ``compliance-failure-webhook``, or None (a block that exists
    but does not load is an error, not a reason to overwrite it)."""
    async with get_client() as client:
        try:
            await client.read_block_document_by_name(
                WEBHOOK_BLOCK_NAME, block_type_slug=cls.get_block_type_slug(), include_secrets=False
            )
        except ObjectNotFound:
            return None
    return await cls.aload(WEBHOOK_BLOCK_NAME)


async def _ensure_slack_block(url: str) -> tuple[UUID, str, str]:
    block = await _load(SlackWebhook)
    if block is None:
        block = SlackWebhook(url=SecretStr(url), notify_type="failure")
        verb = "created"
    elif block.url.get_secret_value() != url:
        block.url = SecretStr(url)
        verb = "updated"
    else:
        verb = "kept"
    return await _saved(block, verb), SLACK_BLOCK_SLUG, verb


async def _ensure_custom_webhook_block(url: str) -> tuple[UUID, str, str]:
    block = await _load(CustomWebhookNotificationBlock)
    if block is None:
        block = CustomWebhookNotificationBlock(
            name=WEBHOOK_SOURCE,
            # the URL itself is a secret value, filled in when the block sends
            url="{{" + _URL_SECRET + "}}",
            method="POST",
            json_data=WEBHOOK_JSON,
            secrets=SecretDict({_URL_SECRET: url}),
            # an internal relay on a private address is a legitimate target
            allow_private_urls=True,
        )
        verb = "created"
    elif block.secrets.get_secret_value().get(_URL_SECRET) != url:
        block.url = "{{" + _URL_SECRET + "}}"
        block.secrets = SecretDict({**block.secrets.get_secret_value(), _URL_SECRET: url})
        verb = "updated"
    else:
        verb = "kept"
    return await _saved(block, verb), WEBHOOK_BLOCK_SLUG, verb


async def _saved(block: Block, verb: str) -> UUID:
    if verb != "kept":
        return await block.asave(WEBHOOK_BLOCK_NAME, overwrite=True)
    assert block._block_document_id is not None
    return block._block_document_id


async def ensure_webhook_block(url: str) -> tuple[UUID, str]:
    """The block ``compliance-failure-webhook`` that holds ``url`` as a secret: Prefect's Slack
    Webhook block for a Slack URL, a Custom Webhook block (JSON POST) for any other. Returns its
    id and what was done, naming only the URL's scheme and host. An existing block is changed
    only when the URL differs (then only its URL: fields an operator edited in the UI stay)."""
    if is_slack_webhook(url):
        block_id, slug, verb = await _ensure_slack_block(url)
        what = f"Slack incoming webhook at {shown(url)}"
    else:
        block_id, slug, verb = await _ensure_custom_webhook_block(url)
        what = f"JSON POST to {shown(url)}"
    return block_id, f"{verb} notification block {slug}/{WEBHOOK_BLOCK_NAME} ({what})"


async def named_block_id(slug: str, name: str) -> UUID:
    """The id of an operator's notification block, checked to exist and to be one."""
    async with get_client() as client:
        try:
            document = await client.read_block_document_by_name(
                name, block_type_slug=slug, include_secrets=False
            )
        except ObjectNotFound:
            document = None
    if document is None:
        raise ConfigurationError(
            f"{BLOCK_ENV}={slug}/{name}: no such block on the Prefect server; create it in the UI "
            "(Blocks > +) or fix the name (`prefect block ls` lists them)"
        )
    capabilities = document.block_schema.capabilities if document.block_schema else []
    if "notify" not in capabilities:
        raise ConfigurationError(
            f"{BLOCK_ENV}={slug}/{name} is not a notification block (it cannot send messages); "
            "use e.g. a Slack Webhook, Custom Webhook or Sendgrid Email block"
        )
    return document.id


def _notification_block_ids(automation: AutomationCore) -> set[UUID]:
    return {
        action.block_document_id
        for action in automation.actions
        if isinstance(action, SendNotification)
    }


async def _ensure_automation(block_id: UUID, block_label: str) -> str:
    async with get_client() as client:
        existing = await client.read_automations_by_name(AUTOMATION_NAME)
        if not existing:
            await client.create_automation(failure_notification_automation(block_id))
            return f"created automation {AUTOMATION_NAME!r} (sends through {block_label})"
        automation = existing[0]
        state = "enabled" if automation.enabled else "paused"
        if _notification_block_ids(automation) == {block_id}:
            return f"kept automation {AUTOMATION_NAME!r} ({state})"
        # the operator configured another block: point the notifications there, keep the rest
        # (the API refuses an owner in an update: leave it out, so the automation keeps its own)
        updated = AutomationCore.model_validate(automation.model_dump(exclude={"owner_resource"}))
        actions = [
            action.model_copy(update={"block_document_id": block_id})
            if isinstance(action, SendNotification)
            else action
            for action in updated.actions
        ]
        if not any(isinstance(action, SendNotification) for action in actions):
            actions.append(failure_notification_automation(block_id).actions[0])
        updated.actions = actions
        await client.update_automation(automation.id, updated)
    return f"updated automation {AUTOMATION_NAME!r} ({state}): now sends through {block_label}"


async def ensure_failure_notifications() -> str:
    """Bootstrap step: the notification block (from COMPLIANCE_NOTIFY_WEBHOOK_URL) or the
    operator's block (COMPLIANCE_NOTIFY_BLOCK), and the automation that sends through it."""
    url = webhook_url()
    block = named_block()
    if url and block:
        raise ConfigurationError(
            f"set {WEBHOOK_ENV} or {BLOCK_ENV}, not both: which one should notifications use?"
        )
    if url:
        block_id, block_line = await ensure_webhook_block(url)
        slug = SLACK_BLOCK_SLUG if is_slack_webhook(url) else WEBHOOK_BLOCK_SLUG
        return f"{block_line}; {await _ensure_automation(block_id, f'{slug}/{WEBHOOK_BLOCK_NAME}')}"
    if block:
        slug, name = block
        block_id = await named_block_id(slug, name)
        return await _ensure_automation(block_id, f"{slug}/{name}")
    async with get_client() as client:
        existing = await client.read_automations_by_name(AUTOMATION_NAME)
    if existing:
        state = "enabled" if existing[0].enabled else "paused"
        return (
            f"kept automation {AUTOMATION_NAME!r} ({state}) as it is: neither {WEBHOOK_ENV} nor "
            f"{BLOCK_ENV} is set"
        )
    return f"skipped failure notifications: set {WEBHOOK_ENV} or {BLOCK_ENV} to send them"
