"""``source_id`` belongs to public integrations only: one application, one token key.

A client_credentials application has one active token per application (spec §5.6). A
``source_id`` on such an application would give it a second token key, so two brokers (with and
without one) would each mint and supersede the other's token; the settings refuse it instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from compliance_api.cli import main as cli_main
from compliance_api.errors import ConfigurationError
from compliance_api.settings import ApplicationType, load_settings
from compliance_api.tokens import CustomerKey
from sandbox.apps import DEMO_AUDITOR, DEMO_MANAGE, DEMO_PRIVATE, DEMO_PUBLIC
from tests.fixtures.tokens import make_broker, token_requests

CLIENT_CREDENTIALS_APPS = {
    "manage": DEMO_MANAGE,
    "integration_private": DEMO_PRIVATE,
    "auditor": DEMO_AUDITOR,
}


@pytest.mark.parametrize("app_type", sorted(CLIENT_CREDENTIALS_APPS))
def test_source_id_is_refused_for_client_credentials_apps(
    make_settings: Any, app_type: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        app = CLIENT_CREDENTIALS_APPS[app_type]
        make_settings(app, application_type=app_type, source_id="acme")
    message = str(caught.value)
    assert "COMPLIANCE_SOURCE_ID" in message
    assert app_type in message and "integration_public" in message
    assert "secret-not-real" not in message


def test_source_id_from_the_environment_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("COMPLIANCE_CLIENT_ID", DEMO_MANAGE.client_id)
    monkeypatch.setenv("COMPLIANCE_CLIENT_SECRET", DEMO_MANAGE.client_secret)
    monkeypatch.setenv("COMPLIANCE_SOURCE_ID", "acme")
    monkeypatch.chdir(tmp_path)  # no .env
    with pytest.raises(ConfigurationError, match="COMPLIANCE_SOURCE_ID='acme'.*manage"):
        load_settings()


def test_a_blank_source_id_counts_as_unset(make_settings: Any) -> None:
    assert make_settings(source_id="").source_id is None
    assert make_settings(source_id="  ").source_id is None


def test_public_integrations_still_need_and_keep_their_source_id(make_settings: Any) -> None:
    settings = make_settings(DEMO_PUBLIC)
    assert settings.application_type is ApplicationType.INTEGRATION_PUBLIC
    assert CustomerKey.from_settings(settings).source_id == "acme"
    with pytest.raises(ConfigurationError, match="COMPLIANCE_SOURCE_ID is required"):
        make_settings(DEMO_PUBLIC, source_id=None)


async def test_one_client_credentials_app_has_one_token_key(
    make_settings: Any, sandbox_reset: Any
) -> None:
    settings = make_settings()
    token = await make_broker(settings).get_token()
    with pytest.raises(ConfigurationError, match="COMPLIANCE_SOURCE_ID"):
        make_settings(source_id="acme")
    # Settings built around validation still map to the application's one key.
    bypassed = settings.model_copy(update={"source_id": "acme"})
    assert CustomerKey.from_settings(bypassed) == CustomerKey.from_settings(settings)
    assert (await make_broker(bypassed).get_token()).fingerprint == token.fingerprint
    assert token_requests(sandbox_reset, DEMO_MANAGE.client_id) == 1


async def test_cli_source_id_option_is_refused_for_a_manage_app(
    manage_env: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    manage_env.control.reset()
    code = await asyncio.to_thread(cli_main, ["token-status", "--source-id", "acme"])
    assert code == 1
    error = capsys.readouterr().err
    assert "COMPLIANCE_SOURCE_ID" in error and "--source-id" in error and "manage" in error
    assert "secret-not-real" not in error
    assert token_requests(manage_env, DEMO_MANAGE.client_id) == 0
