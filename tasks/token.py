"""The shared token task every flow uses. Its result is only what is safe to show (fingerprint,
expiry); API calls then go through ``runtime.connection.compliance_client()``'s broker.
"""

from __future__ import annotations

from datetime import datetime

from prefect import task
from prefect.cache_policies import NONE
from prefect.logging import get_run_logger
from pydantic import BaseModel

from compliance_api.settings import Settings
from runtime.connection import shared_broker
from runtime.credentials import load_run_settings


class SharedTokenInfo(BaseModel):
    """Non-secret facts about the token in use, shown in the UI as the task's result."""

    client_id: str
    tier: str
    source_id: str | None
    fingerprint: str
    expires_at: datetime


@task(
    name="Get shared access token",
    cache_policy=NONE,
    persist_result=False,
    retries=2,
    retry_delay_seconds=10,
)
async def get_shared_access_token(settings: Settings | None = None) -> SharedTokenInfo:
    """Obtain (or reuse) the one token of this application; mints only if no one else has."""
    settings = settings or await load_run_settings()
    token = await shared_broker(settings).get_token()
    get_run_logger().info(
        "Using shared token %s (expires %s)", token.fingerprint, token.expires_at.isoformat()
    )
    return SharedTokenInfo(
        client_id=settings.client_id,
        tier=settings.tier,
        source_id=settings.source_id,
        fingerprint=token.fingerprint,
        expires_at=token.expires_at,
    )


@task(name="Suspend and delete customer tokens", cache_policy=NONE, persist_result=False)
async def suspend_and_delete_tokens(source_id: str | None = None) -> bool:
    overrides = {"source_id": source_id} if source_id else {}
    broker = shared_broker(await load_run_settings(**overrides))
    removed = await broker.disconnect()
    message = "suspended and deleted" if removed else "nothing stored for"
    get_run_logger().info("%s %s", message, broker.key.describe())
    return removed
