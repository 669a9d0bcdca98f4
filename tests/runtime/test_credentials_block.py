"""The ``Compliance Credentials`` block against the session's Prefect server and sandbox: a
write flow that takes its credentials from the block alone, the errors a missing or wrong block
gives before any API call, and where the block's secret is (and is not) stored."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from prefect.client.orchestration import get_client
from prefect.exceptions import ObjectNotFound

from compliance_api.errors import ConfigurationError
from compliance_api.settings import Settings
from deployments.resources import ensure_credentials_block_type
from flows.document_links import attach_document_links
from flows.promote_vendors import promote_discovered_vendors
from flows.rerun import rerun_failed_items
from runtime import credentials as credentials_module
from runtime.credentials import (
    BLOCK_TYPE_SLUG,
    CREDENTIAL_FIELDS,
    ComplianceCredentials,
    load_run_settings,
    main,
)
from sandbox.apps import DEMO_MANAGE
from sandbox.runner import SandboxHandle
from tests.fixtures.credentials import credentials_block, demo_credentials
from tests.fixtures.flows import run_flow, run_id
from tests.fixtures.prefect import prefect_database_files
from tests.fixtures.runs import artifacts_of, unique_name
from write_engine.outcomes import Outcome

ADD_TO_MANAGED = "POST /v1/discovered-vendors/{discoveredVendorId}/add-to-managed"


# --------------------------------------------------------------------------- no server needed
def test_the_block_holds_exactly_the_credential_settings() -> None:
    """Same names and defaults as Settings; the secret a SecretStr; nothing else (the token
    encryption key, the state directory and the timeouts stay in the environment)."""
    assert set(ComplianceCredentials.model_fields) == set(CREDENTIAL_FIELDS)
    for name in CREDENTIAL_FIELDS:
        block_field = ComplianceCredentials.model_fields[name]
        settings_field = Settings.model_fields[name]
        assert block_field.is_required() == settings_field.is_required(), name
        if not block_field.is_required():
            assert block_field.get_default(call_default_factory=True) == (
                settings_field.get_default(call_default_factory=True)
            ), name
    assert ComplianceCredentials.model_json_schema()["secret_fields"] == ["client_secret"]
    assert "token_encryption_key" not in ComplianceCredentials.model_fields
    assert ComplianceCredentials.get_block_type_slug() == BLOCK_TYPE_SLUG
    assert "ComplianceCredentials(" in (ComplianceCredentials.get_code_example() or "")


def test_settings_are_checked_by_settings_and_errors_name_the_block_field(
    sandbox: SandboxHandle,
) -> None:
    block = demo_credentials(sandbox, application_type="integration_public")
    block._block_document_name = "prod"
    with pytest.raises(ConfigurationError) as error:
        block.to_settings()
    message = str(error.value)
    assert "block 'prod' field source_id is required" in message
    assert "COMPLIANCE_SOURCE_ID" not in message and DEMO_MANAGE.client_secret not in message
    # a flow's own source_id (the disconnect flow's parameter) goes over the block's
    assert block.to_settings(source_id="customer-1").source_id == "customer-1"
    scopes = demo_credentials(sandbox, scopes=["auditor-api.audit:read"])
    with pytest.raises(ConfigurationError, match="block field scopes has auditor-api"):
        scopes.to_settings()


# --------------------------------------------------------------------------- with the server
needs_server = pytest.mark.usefixtures("prefect_server")


@needs_server
async def test_bootstrap_registers_the_block_type_once() -> None:
    async with get_client() as client:
        with contextlib.suppress(ObjectNotFound):
            block_type = await client.read_block_type_by_slug(BLOCK_TYPE_SLUG)
            await client.delete_block_type(block_type.id)
    assert (await ensure_credentials_block_type()).startswith("registered block type")
    assert (await ensure_credentials_block_type()).startswith("kept block type")
    async with get_client() as client:
        block_type = await client.read_block_type_by_slug(BLOCK_TYPE_SLUG)
        schema = await client.get_most_recent_block_schema_for_block_type(block_type.id)
    assert block_type.name == "Compliance Credentials" and block_type.code_example
    assert schema is not None and schema.fields["secret_fields"] == ["client_secret"]


async def test_a_write_flow_runs_on_the_block_credentials_alone(
    write_flow_env: SandboxHandle, seed: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    ids = seed["discovered_vendors"][:2]
    async with credentials_block(write_flow_env):
        assert "COMPLIANCE_CLIENT_SECRET" not in os.environ
        assert "COMPLIANCE_CLIENT_ID" not in os.environ
        assert "COMPLIANCE_BASE_URL" not in os.environ
        with caplog.at_level(logging.INFO, logger="prefect"):  # the run's logs reach the API
            state, summary = await run_flow(promote_discovered_vendors, discovered_vendor_ids=ids)
    assert state.is_completed(), state.message
    assert summary.counts == {Outcome.SUCCEEDED: 2}
    stats = write_flow_env.control.stats()
    assert stats["token_mints"] == {DEMO_MANAGE.client_id: 1}
    assert stats["write_counts"]["add_to_managed"] == {vendor: 1 for vendor in ids}
    assert stats["route_counts"][ADD_TO_MANAGED] == 2
    await _assert_run_has_no_secret(run_id(state), summary)
    assert caplog.records and DEMO_MANAGE.client_secret not in caplog.text


async def test_document_links_and_their_rerun_use_the_block(
    write_flow_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    """The document-link ledger is per tenant (API address and client id): from the block too,
    also when a rerun opens it."""
    link = {"document_id": seed["documents"][0], "url": "https://evidence.example/block"}
    links = [link | {"title": "Evidence"}, {**link, "document_id": "no-such-document"}]
    links[1]["title"] = "Evidence"
    async with credentials_block(write_flow_env):
        state, summary = await run_flow(attach_document_links, links=links)
        assert state.is_failed() and summary.counts[Outcome.SUCCEEDED] == 1
        rerun, rerun_summary = await run_flow(rerun_failed_items, flow_run_id=run_id(state))
        again, again_summary = await run_flow(attach_document_links, links=links[:1])
    assert rerun.is_failed() and rerun_summary.count(Outcome.FAILED) == 1
    assert again.is_completed() and again_summary.counts == {Outcome.SKIPPED: 1}
    stats = write_flow_env.control.stats()
    assert stats["token_mints"] == {DEMO_MANAGE.client_id: 1}
    assert stats["write_counts"]["document_link"] == {f"{link['document_id']} {link['url']}": 1}


@needs_server
async def test_a_missing_block_fails_before_any_api_call(write_flow_env: SandboxHandle) -> None:
    async with credentials_block(write_flow_env, name="no-such-credentials", save=False):
        with pytest.raises(ConfigurationError) as error:
            await promote_discovered_vendors(discovered_vendor_ids=["vendor-1"])
    message = str(error.value)
    assert "COMPLIANCE_CREDENTIALS_BLOCK='no-such-credentials'" in message
    assert "no Compliance Credentials block named 'no-such-credentials'" in message
    stats = write_flow_env.control.stats()
    assert stats["route_counts"] == {} and stats["token_requests"] == {}


@needs_server
async def test_a_source_id_on_a_manage_block_is_refused_naming_the_field(
    write_flow_env: SandboxHandle,
) -> None:
    async with credentials_block(write_flow_env, source_id="customer-1") as name:
        with pytest.raises(ConfigurationError) as error:
            await promote_discovered_vendors(discovered_vendor_ids=["vendor-1"])
    message = str(error.value)
    assert f"block {name!r} field source_id='customer-1' is only for integration_public" in message
    assert f"Compliance Credentials block {name!r}" in message
    assert DEMO_MANAGE.client_secret not in message
    stats = write_flow_env.control.stats()
    assert stats["route_counts"] == {} and stats["token_requests"] == {}


@needs_server
async def test_the_block_is_read_once_per_process(
    flow_env: SandboxHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = 0
    aload = ComplianceCredentials.aload

    async def counting_aload(name: str) -> ComplianceCredentials:
        nonlocal reads
        reads += 1
        return await aload(name)

    async with credentials_block(flow_env) as name:
        monkeypatch.setattr(ComplianceCredentials, "aload", counting_aload)
        first, *others = await asyncio.gather(*(load_run_settings() for _ in range(5)))
        again = await load_run_settings()
        assert reads == 1
        assert first.client_id == DEMO_MANAGE.client_id and first.base_url == flow_env.url
        assert first.client_secret.get_secret_value() == DEMO_MANAGE.client_secret
        assert all(settings == first for settings in [*others, again])
        assert credentials_module._cached(name) is not None


@needs_server
async def test_the_secret_is_encrypted_in_the_prefect_database(
    sandbox: SandboxHandle, tmp_path: Path
) -> None:
    """The block document's data is Fernet ciphertext in the database file; without
    PREFECT_SERVER_ENCRYPTION_KEY the key that decrypts it is in the same database
    (``configuration`` row ``ENCRYPTION_KEY``), which is what docs/operators.md says."""
    name = unique_name("credentials")
    block_id = await demo_credentials(sandbox).asave(name)
    try:
        files = prefect_database_files()
        assert files, "the test server's SQLite database must be found"
        data = b"".join(path.read_bytes() for path in files)
        assert name.encode() in data  # the row was written where we look
        assert DEMO_MANAGE.client_secret.encode() not in data
        async with get_client() as client:  # what the API serves by default: masked
            masked = await client.read_block_document(block_id, include_secrets=False)
        assert DEMO_MANAGE.client_secret not in json.dumps(masked.data)
        if "PREFECT_SERVER_ENCRYPTION_KEY" not in os.environ:
            stored = _decrypt_with_the_database_key(files[0], block_id)
            assert stored["client_secret"] == DEMO_MANAGE.client_secret
    finally:
        await ComplianceCredentials.adelete(name)


@needs_server
def test_save_from_the_environment(
    manage_env: SandboxHandle, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique_name("credentials")
    try:
        assert main(["save", name]) == 0
        output = capsys.readouterr().out
        assert f"block {name!r}" in output and DEMO_MANAGE.client_secret not in output
        saved = ComplianceCredentials.load(name)
        assert saved.client_secret.get_secret_value() == DEMO_MANAGE.client_secret
        assert saved.base_url == manage_env.url and saved.source_id is None
        assert main(["save", name]) == 2  # exists: only with --overwrite
        assert main(["save", name, "--overwrite"]) == 0
    finally:
        with contextlib.suppress(ValueError):
            ComplianceCredentials.delete(name)


# --------------------------------------------------------------------------- helpers
def _decrypt_with_the_database_key(database: Path, block_id: uuid.UUID) -> dict[str, Any]:
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        (key,) = db.execute(
            "SELECT value FROM configuration WHERE key = 'ENCRYPTION_KEY'"
        ).fetchone()
        (token,) = db.execute(
            "SELECT data FROM block_document WHERE id = ?", (str(block_id),)
        ).fetchone()
    fernet = Fernet(json.loads(key)["fernet_key"].encode())
    return dict(json.loads(fernet.decrypt(json.loads(token).encode())))


async def _assert_run_has_no_secret(flow_run_id: str, summary: Any) -> None:
    """Not in the run's logs, artifacts, flow run and task runs, or its result."""
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        LogFilter,
        LogFilterFlowRunId,
    )
    from prefect.logging.handlers import APILogHandler

    await APILogHandler.aflush()
    run = uuid.UUID(flow_run_id)
    texts = [summary.model_dump_json()]
    async with get_client() as client:
        logs = await client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run]))
        )
        texts += [log.message for log in logs]
        texts.append((await client.read_flow_run(run)).model_dump_json())
        task_runs = await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run]))
        )
        texts += [task_run.model_dump_json() for task_run in task_runs]
    texts += [f"{a.key} {a.description} {a.data!r}" for a in await artifacts_of(flow_run_id)]
    assert logs and len(texts) > 3
    assert not [text for text in texts if DEMO_MANAGE.client_secret in text]
