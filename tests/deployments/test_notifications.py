"""Failure notifications (deployments/automations.py and automations.yaml).

The templates and the checks of the settings run here directly; the automation runs on a real
``prefect server start`` (on PostgreSQL, whose triggers and actions services send the
notification) against a local webhook receiver.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from prefect import flow, tags
from prefect.blocks.notifications import CustomWebhookNotificationBlock, SlackWebhook
from prefect.blocks.system import Secret
from prefect.client.orchestration import get_client
from prefect.events.actions import SendNotification
from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter
from prefect.events.schemas.automations import EventTrigger
from prefect.events.schemas.events import Event
from prefect.exceptions import ObjectNotFound
from prefect.server.events.actions import JinjaTemplateAction
from prefect.server.schemas.core import Flow
from prefect.server.schemas.responses import DeploymentResponse, FlowRunResponse
from prefect.server.schemas.states import State, StateType
from prefect.server.utilities.user_templates import render_user_template
from prefect.settings import PREFECT_API_URL, PREFECT_UI_URL, temporary_settings
from prefect.states import Crashed, Failed, Running
from prefect.types import SecretDict

import deployments.stack as stack_module
from compliance_api.errors import ConfigurationError
from deployments.automations import (
    APPROVAL_AUTOMATION_NAME,
    BLOCK_ENV,
    WEBHOOK_BLOCK_NAME,
    WEBHOOK_ENV,
    approval_automation,
    crash_automations,
    ensure_failure_notifications,
    ensure_unresponsive_run_detection,
    notification_automation,
)
from deployments.automations import NOTIFICATION_AUTOMATION_NAME as AUTOMATION_NAME
from deployments.prefect_server import PrefectServer, PrefectServerOptions
from deployments.stack import LocalStack, StackOptions
from sandbox.apps import DEMO_MANAGE
from tests.fixtures.webhooks import DELIVERY_TIMEOUT, Receiver, webhook_receiver
from write_engine.outcomes import ItemResult, ItemsFailed, Outcome, RunSummary

pytestmark = pytest.mark.timeout(300)

#: the part of a webhook URL that is its secret (as in a Slack incoming-webhook URL)
TOKEN = f"T0FAKE/B0FAKE/fake-webhook-token-{uuid.uuid4().hex}"
#: a parameter value the notification must not repeat (parameters are never copied into it)
PARAMETER_MARKER = f"parameter-{uuid.uuid4().hex}"
#: after a notification arrived, how long we wait for one that must not come
QUIET_SECONDS = 5.0

ITEMS_FAILED_MESSAGE = str(
    ItemsFailed(
        RunSummary(
            flow="promote_vendors",
            total=5,
            counts={Outcome.SUCCEEDED: 3, Outcome.FAILED: 1, Outcome.FAILED_RETRYABLE: 1},
            failed_items=[
                ItemResult(item="dv-404", outcome=Outcome.FAILED, reason="not found: no vendor"),
                ItemResult(
                    item="dv-503",
                    outcome=Outcome.FAILED_RETRYABLE,
                    reason="503 service_unavailable: try later",
                ),
            ],
        )
    )
)
CRASH_MESSAGE = "No heartbeat for 90 s: the flow run's process is gone."
#: the texts as declared (deployments/automations.yaml)
(SENDS,) = notification_automation(uuid.uuid4()).actions
assert isinstance(SENDS, SendNotification)
SUBJECT_TEMPLATE, BODY_TEMPLATE = SENDS.subject, SENDS.body
#: what the body looks for in a Failed run's message to tell that items failed
ITEMS_FAILED_MARKER = re.findall(r"\{% elif '([^']+)' in message %\}", BODY_TEMPLATE)[0]


# --------------------------------------------------------------------------- the templates
def _context(
    state: StateType,
    message: str,
    run_tags: list[str],
    *,
    deployment: bool = True,
) -> dict[str, Any]:
    """What the Prefect server puts in the templates' context for a flow-run state event."""
    flow_id = uuid.uuid4()
    run = FlowRunResponse(
        id=uuid.uuid4(),
        name="clever-fox",
        flow_id=flow_id,
        tags=run_tags,
        state=State(type=state, name=state.value.title(), message=message),
    )
    return {
        "flow": Flow(id=flow_id, name="promote-discovered-vendors"),
        "flow_run": run,
        "deployment": (
            DeploymentResponse(id=uuid.uuid4(), name="on-discovery", flow_id=flow_id)
            if deployment
            else None
        ),
        "variables": {"compliance_crash_max_attempts": 3},
    }


async def _render(context: dict[str, Any], ui_url: str | None = "http://ui.test") -> list[str]:
    JinjaTemplateAction._register_filters_if_needed()  # as the server does before rendering
    # Prefect infers a UI URL from PREFECT_API_URL when none is set: clear both for "none"
    settings: dict[Any, Any] = {PREFECT_UI_URL: ui_url}
    if ui_url is None:
        settings[PREFECT_API_URL] = None
    with temporary_settings(settings):
        return [await render_user_template(t, context) for t in (SUBJECT_TEMPLATE, BODY_TEMPLATE)]


async def test_a_failed_write_run_s_text_names_the_run_its_counts_and_the_rerun() -> None:
    context = _context(StateType.FAILED, ITEMS_FAILED_MESSAGE, ["compliance", "write"])
    run_id = context["flow_run"].id
    subject, body = await _render(context)

    assert subject == "[compliance-flows] Failed: promote-discovered-vendors (run clever-fox)"
    assert "Flow: promote-discovered-vendors\n" in body
    assert "Deployment: promote-discovered-vendors/on-discovery\n" in body
    assert f"Run: clever-fox ({run_id})\n" in body
    assert "State: Failed: 2 of 5 item(s) failed (dv-404: not found: no vendor;" in body
    assert "rerun automatically after compliance_rerun_delay_seconds" in body
    rerun = "prefect deployment run 'rerun-failed-items/on-failed-items'"
    assert f"{rerun} -p flow_run_id={run_id}`" in body
    assert body.endswith(f"\n\nThe run in the Prefect UI: http://ui.test/runs/flow-run/{run_id}")


async def test_a_failure_before_the_items_says_to_fix_the_cause_and_start_again() -> None:
    message = "flow_run_id='x': exceeds max_attempts=3 (the original run is attempt 1)"
    _, body = await _render(_context(StateType.FAILED, message, ["write"], deployment=False))
    assert "Deployment: none (started outside a deployment)\n" in body
    assert "The run stopped before or outside its items" in body
    assert "rerun-failed-items" not in body


async def test_an_expired_approval_s_text_says_nothing_was_sent_and_how_to_start_again() -> None:
    message = "The flow was paused and never resumed."  # the Prefect server's own words
    _, body = await _render(_context(StateType.FAILED, message, ["write"]))
    assert "No one approved or rejected its plan before the approval deadline" in body
    assert "rerun-failed-items" not in body


async def test_the_approval_notice_names_the_run_the_counts_and_where_to_decide() -> None:
    (action,) = approval_automation(uuid.uuid4()).actions
    assert isinstance(action, SendNotification)
    context = _context(StateType.PAUSED, "", ["write"])
    context["event"] = Event(
        event="compliance.write-run.awaiting-approval",
        resource={"prefect.resource.id": f"prefect.flow-run.{context['flow_run'].id}"},
        payload={
            "flow": "add-people-to-groups",
            "total": 150,
            "counts_text": "group g-1: 120, group g-2: 30",
            "deadline_seconds": 86400,
        },
    )
    JinjaTemplateAction._register_filters_if_needed()
    with temporary_settings({PREFECT_UI_URL: "http://ui.test"}):
        subject = await render_user_template(action.subject, context)
        body = await render_user_template(action.body, context)
    assert subject == (
        "[compliance-flows] Approval needed: promote-discovered-vendors (run clever-fox), "
        "150 item(s)"
    )
    assert "Plan: 150 item(s): group g-1: 120, group g-2: 30\n" in body
    assert "Deadline: 24.0 h from " in body
    assert "read the artifact add-people-to-groups-plan" in body
    assert "press Resume and fill in approve, approver and reason" in body
    assert body.endswith(f"http://ui.test/runs/flow-run/{context['flow_run'].id}")


async def test_a_crashed_run_s_text_explains_crash_recovery_or_the_retry_button() -> None:
    _, recovered = await _render(
        _context(StateType.CRASHED, CRASH_MESSAGE, ["write", "crash-recovery"])
    )
    assert f"State: Crashed: {CRASH_MESSAGE}\n" in recovered
    assert "Crash recovery starts this same run again" in recovered
    assert "up to 3 crashes in all" in recovered
    assert "press Retry on the run's page" in recovered

    _, unrecovered = await _render(_context(StateType.CRASHED, CRASH_MESSAGE, ["write"]))
    assert "not under crash recovery" in unrecovered


async def test_without_a_ui_url_the_text_says_which_setting_gives_the_link() -> None:
    context = _context(StateType.FAILED, ITEMS_FAILED_MESSAGE, ["write"])
    _, body = await _render(context, ui_url=None)
    assert f"runs/flow-run/{context['flow_run'].id} (set PREFECT_UI_URL" in body


def test_the_marker_is_what_a_failed_write_run_s_message_says() -> None:
    assert ITEMS_FAILED_MARKER in ITEMS_FAILED_MESSAGE


# --------------------------------------------------------------------------- the settings
@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (f"hooks.slack.com/services/{TOKEN}", "no scheme and no host"),
        (f"ftp://files.example/{TOKEN}", "scheme 'ftp'"),
        (f"https:///services/{TOKEN}", "no host"),
        (f"https://hooks.example:port/{TOKEN}", "not a valid URL"),
    ],
)
async def test_a_bad_webhook_url_is_refused_by_name_without_repeating_it(
    url: str, problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WEBHOOK_ENV, url)
    with pytest.raises(ConfigurationError, match=WEBHOOK_ENV) as refused:
        await ensure_failure_notifications()
    assert problem in str(refused.value)
    assert "fake-webhook-token" not in str(refused.value)


@pytest.mark.parametrize("value", ["compliance-alerts", "slack-webhook/", "/x", "a/b/c"])
async def test_a_block_name_without_its_type_is_refused(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BLOCK_ENV, value)
    with pytest.raises(ConfigurationError, match=f"{BLOCK_ENV}=.*<block-type-slug>/<block-name>"):
        await ensure_failure_notifications()


async def test_both_variables_at_once_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WEBHOOK_ENV, f"https://hooks.example/{TOKEN}")
    monkeypatch.setenv(BLOCK_ENV, "slack-webhook/compliance-alerts")
    with pytest.raises(ConfigurationError, match="not both"):
        await ensure_failure_notifications()


def test_make_serve_passes_the_variables_to_bootstrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, str] = {}

    def run(*args: object, env: dict[str, str], **kwargs: object) -> str:
        seen.update(env)
        return ""

    monkeypatch.setattr(stack_module, "run_to_completion", run)
    monkeypatch.setenv(WEBHOOK_ENV, "https://hooks.example/x")
    monkeypatch.setenv(BLOCK_ENV, "slack-webhook/y")
    LocalStack(StackOptions(state_dir=tmp_path)).bootstrap()
    assert seen[WEBHOOK_ENV] == "https://hooks.example/x"
    assert seen[BLOCK_ENV] == "slack-webhook/y"


def test_the_servers_the_project_starts_know_their_ui_url(tmp_path: Path) -> None:
    server = PrefectServer(PrefectServerOptions(port=4321, home=tmp_path), base_env={})
    assert server.env()["PREFECT_UI_URL"] == "http://127.0.0.1:4321"


# --------------------------------------------------------------------------- a real server
@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with webhook_receiver(f"services/{TOKEN}") as received:
        yield received


async def _remove_notifications() -> None:
    async with get_client() as client:
        for name in (AUTOMATION_NAME, APPROVAL_AUTOMATION_NAME):
            for automation in await client.read_automations_by_name(name):
                await client.delete_automation(automation.id)
        for slug, name in [
            ("custom-webhook", WEBHOOK_BLOCK_NAME),
            ("slack-webhook", WEBHOOK_BLOCK_NAME),
            ("custom-webhook", "operators-own"),
        ]:
            try:
                document = await client.read_block_document_by_name(name, slug)
            except ObjectNotFound:
                continue
            await client.delete_block_document(document.id)


@asynccontextmanager
async def on(server: PrefectServer) -> AsyncIterator[None]:
    """Talk to ``server``; no notification automation or block before or after."""
    with temporary_settings({PREFECT_API_URL: server.api_url}):
        await _remove_notifications()
        try:
            yield
        finally:
            await _remove_notifications()


@flow(name="notify-test-write")
async def write_flow(note: str) -> Any:
    """Ends as a write run with failed items does (write_engine/run.py)."""
    return Failed(message=ITEMS_FAILED_MESSAGE)


@flow(name="notify-test-read")
async def read_flow(note: str) -> Any:
    return Failed(message="a read report failed")


async def _stored_event(name: str, run_id: uuid.UUID) -> Event:
    """The event as the server stored it (its event persister writes in batches)."""
    query = EventFilter(
        event=EventNameFilter(name=[name]),
        resource=EventResourceFilter(id=[f"prefect.flow-run.{run_id}"]),
    )
    deadline = time.monotonic() + DELIVERY_TIMEOUT
    async with get_client() as client:
        while not (page := await client.read_events(query, limit=10)).events:
            assert time.monotonic() < deadline, f"no {name} event of {run_id} stored"
            await asyncio.sleep(0.5)
    (event,) = page.events
    return event


def _about(run_id: uuid.UUID) -> Callable[[dict[str, Any]], bool]:
    return lambda post: str(run_id) in json.dumps(post)


async def test_a_failed_write_run_notifies_the_webhook_and_a_read_run_does_not(
    postgres_prefect_server: PrefectServer,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(WEBHOOK_ENV, receiver.url)
    async with on(postgres_prefect_server):
        started = time.monotonic()
        done = await ensure_failure_notifications()
        assert done.startswith(f"created notification block custom-webhook/{WEBHOOK_BLOCK_NAME}")
        port = receiver.url.split(":")[2].split("/")[0]
        assert f"(JSON POST to http://127.0.0.1:{port}/…)" in done
        assert f"created automation {AUTOMATION_NAME!r}" in done
        assert "fake-webhook-token" not in done

        with tags("read", "compliance"):
            read_state = await read_flow(note=PARAMETER_MARKER, return_state=True)
        with tags("write", "compliance"):
            write_state = await write_flow(note=PARAMETER_MARKER, return_state=True)
        assert read_state.is_failed() and write_state.is_failed()
        write_id = write_state.state_details.flow_run_id
        assert write_id is not None

        post = await receiver.wait_for("for the write run", _about(write_id))
        delivered = time.monotonic() - started
        await asyncio.sleep(QUIET_SECONDS)  # the read run failed first: its message would be here

        async with get_client() as client:
            run = await client.read_flow_run(write_id)
            event = await _stored_event("prefect.flow-run.Failed", write_id)
        # what the trigger matched: the run's tag, as a related resource of its state event
        assert any(r.id == "prefect.tag.write" and r.role == "tag" for r in event.related)
        assert [p["subject"] for p in receiver.posts] == [
            f"[compliance-flows] Failed: notify-test-write (run {run.name})"
        ]
        body = post["body"]
        assert "A write run ended Failed." in body
        assert "Flow: notify-test-write\n" in body
        assert "Deployment: none (started outside a deployment)\n" in body
        assert f"Run: {run.name} ({write_id})\n" in body
        assert "State: Failed: 2 of 5 item(s) failed (dv-404: not found: no vendor;" in body
        assert f"-p flow_run_id={write_id}`" in body
        assert body.endswith(f" {postgres_prefect_server.ui_url}/runs/flow-run/{write_id}")
        assert post["text"] == f"{post['subject']}\n\n{body}"  # what Slack shows
        assert post["source"] == "compliance-flows"
        assert post["_path"] == f"/services/{TOKEN}"  # the block sent to the secret URL...
        for raw in receiver.raw:  # ...and never put it, a secret or a parameter in the text
            text = raw.split(b"\n", 1)[1]
            for secret in (TOKEN, DEMO_MANAGE.client_secret, PARAMETER_MARKER):
                assert secret.encode() not in text
        print(f"notification delivered {delivered:.1f} s after bootstrap's step began")

        # the URL is kept as a secret value: not shown through the API or in the automation
        async with get_client() as client:
            document = await client.read_block_document_by_name(
                WEBHOOK_BLOCK_NAME, "custom-webhook", include_secrets=False
            )
            (automation,) = await client.read_automations_by_name(AUTOMATION_NAME)
        assert "fake-webhook-token" not in document.model_dump_json()
        assert "fake-webhook-token" not in automation.model_dump_json()


async def test_a_crashed_write_run_notifies_with_the_crash_text(
    postgres_prefect_server: PrefectServer,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(WEBHOOK_ENV, receiver.url)
    async with on(postgres_prefect_server):
        await ensure_failure_notifications()
        async with get_client() as client:
            run = await client.create_flow_run(
                write_flow,
                parameters={"note": PARAMETER_MARKER},
                tags=["compliance", "write", "crash-recovery"],
            )
            await client.set_flow_run_state(run.id, Running(), force=True)
            await client.set_flow_run_state(run.id, Crashed(message=CRASH_MESSAGE), force=True)

        post = await receiver.wait_for("for the crashed run", _about(run.id))
        assert post["subject"] == f"[compliance-flows] Crashed: notify-test-write (run {run.name})"
        assert f"State: Crashed: {CRASH_MESSAGE}\n" in post["body"]
        assert "Crash recovery starts this same run again" in post["body"]
        assert post["body"].endswith(f"{postgres_prefect_server.ui_url}/runs/flow-run/{run.id}")
        assert PARAMETER_MARKER not in json.dumps(post)


async def test_bootstrap_skips_keeps_updates_and_uses_an_operators_block(
    postgres_prefect_server: PrefectServer,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with on(postgres_prefect_server):
        assert (await ensure_failure_notifications()).startswith("skipped failure notifications")

        monkeypatch.setenv(WEBHOOK_ENV, receiver.url)
        assert "created automation" in await ensure_failure_notifications()
        again = await ensure_failure_notifications()
        assert again.startswith("kept notification block") and "kept automation" in again
        async with get_client() as client:
            (automation,) = await client.read_automations_by_name(AUTOMATION_NAME)
            await client.pause_automation(automation.id)

        # a new URL: the block changes, the operator's paused automation stays as it is
        monkeypatch.setenv(WEBHOOK_ENV, receiver.url + "-rotated")
        rotated = await ensure_failure_notifications()
        assert rotated.startswith("updated notification block") and "(paused)" in rotated
        assert "rotated" not in rotated
        block = await CustomWebhookNotificationBlock.aload(WEBHOOK_BLOCK_NAME)
        assert block.secrets.get_secret_value()["webhook_url"].endswith("-rotated")

        # neither variable: whatever exists is left alone
        monkeypatch.delenv(WEBHOOK_ENV)
        assert "(paused) as it is" in await ensure_failure_notifications()

        # the operator's own notification block, by type and name
        monkeypatch.setenv(BLOCK_ENV, "custom-webhook/no-such-block")
        with pytest.raises(ConfigurationError, match=f"{BLOCK_ENV}=.*no such block"):
            await ensure_failure_notifications()
        own = CustomWebhookNotificationBlock(
            name="operators-own",
            url="{{url}}",
            json_data={"operator": "{{subject}}", "message": "{{body}}"},
            secrets=SecretDict({"url": receiver.url}),
        )
        own_id = await own.asave("operators-own", overwrite=True)
        monkeypatch.setenv(BLOCK_ENV, "custom-webhook/operators-own")
        switched = await ensure_failure_notifications()
        assert switched == (
            f"updated automation {AUTOMATION_NAME!r} (paused): now sends through "
            f"custom-webhook/operators-own; updated automation {APPROVAL_AUTOMATION_NAME!r} "
            "(enabled): now sends through custom-webhook/operators-own"
        )
        async with get_client() as client:
            (kept,) = await client.read_automations_by_name(AUTOMATION_NAME)
            assert kept.id == automation.id and not kept.enabled
            (action,) = kept.actions
            assert isinstance(action, SendNotification) and action.block_document_id == own_id
            await client.resume_automation(kept.id)

        with tags("write"):
            state = await write_flow(note="x", return_state=True)
        run_id = state.state_details.flow_run_id
        assert run_id is not None
        post = await receiver.wait_for(
            "through the operator's block", lambda p: str(run_id) in p.get("message", "")
        )
        assert post["operator"].startswith("[compliance-flows] Failed: notify-test-write")


async def test_a_block_that_cannot_notify_is_refused(
    postgres_prefect_server: PrefectServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"notify-test-{uuid.uuid4().hex[:8]}"
    async with on(postgres_prefect_server):
        block_id = await Secret(value="not-a-notifier").asave(name)
        try:
            monkeypatch.setenv(BLOCK_ENV, f"secret/{name}")
            with pytest.raises(ConfigurationError, match="is not a notification block"):
                await ensure_failure_notifications()
        finally:
            async with get_client() as client:
                await client.delete_block_document(block_id)


async def test_a_slack_url_is_kept_in_prefect_s_slack_block(
    postgres_prefect_server: PrefectServer,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slack = f"https://hooks.slack.com/services/T0FAKE/B0FAKE/{uuid.uuid4().hex}"
    monkeypatch.setenv(WEBHOOK_ENV, slack)
    async with on(postgres_prefect_server):
        done = await ensure_failure_notifications()
        assert done == (
            f"created notification block slack-webhook/{WEBHOOK_BLOCK_NAME} (Slack incoming "
            f"webhook at https://hooks.slack.com/…); created automation {AUTOMATION_NAME!r} "
            f"(sends through slack-webhook/{WEBHOOK_BLOCK_NAME}); created automation "
            f"{APPROVAL_AUTOMATION_NAME!r} (sends through slack-webhook/{WEBHOOK_BLOCK_NAME})"
        )
        block = await SlackWebhook.aload(WEBHOOK_BLOCK_NAME)
        assert block.url.get_secret_value() == slack
        async with get_client() as client:
            shown = await client.read_block_document_by_name(
                WEBHOOK_BLOCK_NAME, "slack-webhook", include_secrets=False
            )
            (automation,) = await client.read_automations_by_name(AUTOMATION_NAME)
        assert slack.rsplit("/", 1)[1] not in shown.model_dump_json()
        (action,) = automation.actions
        assert isinstance(action, SendNotification) and action.block_document_id == shown.id

        # another kind of URL: another block, and the automation follows it
        monkeypatch.setenv(WEBHOOK_ENV, receiver.url)
        moved = await ensure_failure_notifications()
        assert moved.startswith(f"created notification block custom-webhook/{WEBHOOK_BLOCK_NAME}")
        assert moved.endswith(f"now sends through custom-webhook/{WEBHOOK_BLOCK_NAME}")


async def test_bootstrap_adds_a_newly_declared_end_of_wait_to_an_existing_crash_automation(
    postgres_prefect_server: PrefectServer,
) -> None:
    """An install from before approvals has crash automations that do not know Suspended: a
    waiting run would be marked Crashed. Bootstrap adds it, keeping the operator's edits."""
    declared = crash_automations(90)[0]
    assert isinstance(declared.trigger, EventTrigger)
    new = {"prefect.flow-run.Suspended", "prefect.flow-run.Paused"}
    old = declared.model_copy(deep=True)
    assert isinstance(old.trigger, EventTrigger)
    old.trigger.expect = set(declared.trigger.expect) - new
    old.description = "edited by an operator"
    with temporary_settings({PREFECT_API_URL: postgres_prefect_server.api_url}):
        async with get_client() as client:
            for existing in await client.read_automations_by_name(declared.name):
                await client.delete_automation(existing.id)
            await client.create_automation(old)
        done = await ensure_unresponsive_run_detection()
        assert (
            f"updated automation {declared.name!r} (enabled): now grace 90 s; also ends its "
            "wait on prefect.flow-run.Paused, prefect.flow-run.Suspended"
        ) in done
        async with get_client() as client:
            (kept,) = await client.read_automations_by_name(declared.name)
        assert isinstance(kept.trigger, EventTrigger)
        assert set(kept.trigger.expect) == set(declared.trigger.expect)
        assert kept.description == "edited by an operator"
        assert f"kept automation {declared.name!r}" in await ensure_unresponsive_run_detection()
