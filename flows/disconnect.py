"""Runbook: a customer disconnects our public integration: suspend its token at the service,
then delete every token we stored for it.
"""

from __future__ import annotations

from typing import Annotated

from prefect import flow

from runtime.form import Maybe, title
from tasks.token import suspend_and_delete_tokens


@flow(name="disconnect-customer")
async def disconnect_customer(
    source_id: Annotated[Maybe[str], title("Source id")] = None,
) -> bool:
    """Suspend and forget the tokens of one customer of the public integration.

    Args:
        source_id: The customer's source id (their connection to our public integration).
            Empty: COMPLIANCE_SOURCE_ID from the settings.
    """
    return await suspend_and_delete_tokens(source_id)
