"""Runbook: a customer disconnects our public integration.

1. Suspend the customer's token at the service (so it stops working at once).
2. Delete every token we stored for the customer.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NONE
from prefect.logging import get_run_logger

from compliance_api.settings import load_settings
from runtime.connection import shared_broker


@task(name="Suspend and delete customer tokens", cache_policy=NONE, persist_result=False)
async def suspend_and_delete_tokens(source_id: str | None = None) -> bool:
    overrides = {"source_id": source_id} if source_id else {}
    broker = shared_broker(load_settings(**overrides))
    removed = await broker.disconnect()
    message = "suspended and deleted" if removed else "nothing stored for"
    get_run_logger().info("%s %s", message, broker.key.describe())
    return removed


@flow(name="Disconnect customer", log_prints=False)
async def disconnect_customer(source_id: str | None = None) -> bool:
    """Suspend and forget the tokens of one customer (``source_id``; default from settings)."""
    return await suspend_and_delete_tokens(source_id)
