"""Prefect Variables written safely by several writers and by retries.

``Variable.aset(overwrite=True)`` reads, then creates or updates: two writers (or a create the
client retried after the server had applied it) get ``ObjectAlreadyExists``. Here a create that
already happened is an update, and an update of a missing variable a create.
"""

from __future__ import annotations

from typing import Any

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import VariableCreate, VariableUpdate
from prefect.exceptions import ObjectAlreadyExists, PrefectHTTPStatusError

from runtime.retries import again_when_busy

#: create/update rounds before giving up (each needs another writer to delete in between)
PUT_ROUNDS = 5


@again_when_busy
async def put_variable(name: str, value: Any) -> None:
    """Store ``value`` under ``name``, created or replaced, whoever else writes it (again when
    the server answers 5xx)."""
    async with get_client() as client:
        for _ in range(PUT_ROUNDS):
            try:
                await client.update_variable(VariableUpdate(name=name, value=value))
                return
            except PrefectHTTPStatusError as error:
                if error.response.status_code != 404:
                    raise
            try:
                await client.create_variable(VariableCreate(name=name, value=value))
                return
            except ObjectAlreadyExists:
                continue  # created meanwhile (another writer, or our retried create): update it
    raise RuntimeError(f"the Prefect Variable {name!r} was created and deleted {PUT_ROUNDS} times")
