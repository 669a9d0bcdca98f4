"""8 processes x 5 concurrent flow runs against a Prefect server on PostgreSQL: 1 mint, 0 401s,
and no secret anywhere in the Prefect database, the logs or the token store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from prefect.settings import PREFECT_API_URL, temporary_settings

from bench.token_contention import child_env, spawn
from compliance_api.settings import load_settings
from compliance_api.tokens import broker_from_settings
from deployments.bootstrap import ensure_token_rate_limit
from deployments.prefect_server import PrefectServer
from sandbox.apps import DEMO_MANAGE
from tests.fixtures.postgres import database_dump

PROCESSES, RUNS = 8, 5


@pytest.mark.timeout(600)
async def test_eight_processes_five_runs_each_share_one_token(
    postgres_prefect_server: PrefectServer, sandbox_reset: Any, tmp_path: Path
) -> None:
    with temporary_settings({PREFECT_API_URL: postgres_prefect_server.api_url}):
        await ensure_token_rate_limit()
        key = Fernet.generate_key().decode()
        env = child_env(sandbox_reset.url, str(tmp_path / "state"), key)
    env["PREFECT_LOGGING_LEVEL"] = "INFO"  # logs on stderr, scanned below

    reports = spawn("shared", PROCESSES, RUNS, env)

    stats = sandbox_reset.control.stats()
    assert stats["token_mints"] == {DEMO_MANAGE.client_id: 1}
    assert stats["unauthorized"] == 0
    assert len({fp for report in reports for fp in report["fingerprints"]}) == 1
    assert sum(len(report["waits"]) for report in reports) == PROCESSES * RUNS

    # Secret scan: the literal values never reach Prefect, the logs or the store's files.
    settings = load_settings(
        base_url=sandbox_reset.url,
        client_id=DEMO_MANAGE.client_id,
        client_secret=DEMO_MANAGE.client_secret,
        token_encryption_key=key,
        state_dir=tmp_path / "state",
    )
    token = await broker_from_settings(settings).get_token()  # read from the store, no mint
    assert sandbox_reset.control.stats()["token_mints"] == {DEMO_MANAGE.client_id: 1}
    secrets = [DEMO_MANAGE.client_secret, token.value.get_secret_value()]
    files = [Path(root) / name for root, _, names in os.walk(tmp_path / "state") for name in names]
    haystacks = [path.read_bytes() for path in files]
    haystacks.append(database_dump(str(postgres_prefect_server.options.database_url)))
    haystacks += [(r["stdout"] + r["stderr"]).encode() for r in reports]
    assert any(b"Using shared token" in h for h in haystacks)  # the logs were really captured
    for secret in secrets:
        assert not any(secret.encode() in haystack for haystack in haystacks)
