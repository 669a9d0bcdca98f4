"""sandbox.launch: the command line of a sandbox process and the environment of its clients."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from sandbox.__main__ import parse_args
from sandbox.apps import DEMO_MANAGE, DEMO_MANAGE_BASIC, DEMO_PUBLIC, demo_apps
from sandbox.launch import demo_environment, sandbox_command


def test_the_command_runs_the_sandbox_module_with_the_options_it_names() -> None:
    command = sandbox_command(9100, 9200, host="::1", scale=3, latency_ms=2.5, log_level="info")
    assert command[:3] == [sys.executable, "-m", "sandbox"]
    config, log_level = parse_args(command[3:])
    assert (config.host, config.port, config.gov_port) == ("::1", 9100, 9200)
    assert (config.scale, config.latency_ms, log_level) == (3, 2.5, "info")
    assert config.control_token is None


def test_the_defaults_add_no_data_or_latency_options() -> None:
    command = sandbox_command(9100, 9200)
    assert "--scale" not in command and "--latency-ms" not in command
    config, log_level = parse_args(command[3:])
    assert (config.host, config.scale, config.latency_ms) == ("127.0.0.1", 1, 0.0)
    assert log_level == "warning"


def test_the_demo_environment_names_a_manage_app_of_the_sandbox(tmp_path: Path) -> None:
    env = demo_environment("http://127.0.0.1:1", "http://127.0.0.1:2", state_dir=tmp_path)
    assert env == {
        "COMPLIANCE_BASE_URL": "http://127.0.0.1:1",
        "COMPLIANCE_GOV_BASE_URL": "http://127.0.0.1:2",
        "COMPLIANCE_CLIENT_ID": DEMO_MANAGE.client_id,
        "COMPLIANCE_CLIENT_SECRET": DEMO_MANAGE.client_secret,
        "COMPLIANCE_APPLICATION_TYPE": "manage",
        "COMPLIANCE_TOKEN_ENCRYPTION_KEY": env["COMPLIANCE_TOKEN_ENCRYPTION_KEY"],
        "COMPLIANCE_STATE_DIR": str(tmp_path),
    }
    Fernet(env["COMPLIANCE_TOKEN_ENCRYPTION_KEY"])  # a valid key, new for every call
    again = demo_environment("http://127.0.0.1:1", state_dir=tmp_path)
    assert again["COMPLIANCE_TOKEN_ENCRYPTION_KEY"] != env["COMPLIANCE_TOKEN_ENCRYPTION_KEY"]
    assert "COMPLIANCE_GOV_BASE_URL" not in again
    registered = {app.client_id: (app.client_secret, app.app_type) for app in demo_apps()}
    assert registered[env["COMPLIANCE_CLIENT_ID"]] == (env["COMPLIANCE_CLIENT_SECRET"], "manage")


def test_the_demo_environment_takes_a_given_key_and_the_app_without_entitlements() -> None:
    key = Fernet.generate_key().decode()
    env = demo_environment("u", state_dir="s", encryption_key=key, app=DEMO_MANAGE_BASIC)
    assert env["COMPLIANCE_TOKEN_ENCRYPTION_KEY"] == key
    assert env["COMPLIANCE_CLIENT_ID"] == DEMO_MANAGE_BASIC.client_id
    with pytest.raises(ValueError, match=DEMO_PUBLIC.client_id):
        demo_environment("u", state_dir="s", app=DEMO_PUBLIC)
