"""Runbook: a customer disconnects our public integration.

1. Suspend the customer's token at the service (so it stops working at once).
2. Delete every token we stored for the customer.
"""

from __future__ import annotations

from prefect import flow

from tasks.token import suspend_and_delete_tokens


@flow(name="Disconnect customer", log_prints=False)
async def disconnect_customer(source_id: str | None = None) -> bool:
    """Suspend and forget the tokens of one customer (``source_id``; default from settings)."""
    return await suspend_and_delete_tokens(source_id)
