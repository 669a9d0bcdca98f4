"""The Prefect server settings the project's stack, demo and benchmarks start their servers with."""

from __future__ import annotations

import pytest
from prefect.settings.models.root import Settings

from deployments.server_settings import SERVER_SETTINGS, apply_server_settings


def test_server_settings_name_real_prefect_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """A misspelt variable would be ignored by Prefect without a word: read them back."""
    for name in SERVER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    env: dict[str, str] = {}
    apply_server_settings(env)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    server = Settings().server
    assert server.services.task_run_recorder.batch_size == 200
    assert server.services.task_run_recorder.flush_interval == 1
    assert server.concurrency.lease_storage.endswith("lease_storage.filesystem")
    assert server.concurrency.maximum_concurrency_slot_wait_seconds == 1
    assert server.database.timeout == 30


def test_an_operators_own_value_is_kept() -> None:
    env = {"PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "50"}
    apply_server_settings(env)
    assert env["PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE"] == "50"
    assert env["PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL"] == "1"
