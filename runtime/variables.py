"""Prefect Variables kept as write-once versions: safe under several writers and a busy server.

An update (``PATCH``) or a delete by name reads first, then writes: on a busy SQLite server it
fails at once with "database is locked" (503), and Prefect's client waits seconds before it tries
again. ``Variable.aset(overwrite=True)`` also races with other writers (``ObjectAlreadyExists``).
A create writes first, so it waits for the lock instead; and it cannot race. So a value that
changes is stored as new Variables, ``<base>__<version>``; the highest version is the value.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import VariableCreate
from prefect.exceptions import ObjectAlreadyExists
from prefect.variables import Variable

from runtime.retries import again_when_busy

#: rows per filter read (the server's default limit is 200)
PAGE = 200
VERSION_SEPARATOR = "__"


@again_when_busy
async def create_once(name: str, value: Any) -> None:
    """Create ``name``; one that exists already (our retried create, applied before the client
    gave up on its answer) is left as it is: a version is written by one writer only."""
    async with get_client() as client:
        with contextlib.suppress(ObjectAlreadyExists):
            await client.create_variable(VariableCreate(name=name, value=value))


@again_when_busy
async def variables_starting(prefix: str) -> list[tuple[str, Any]]:
    """Every Variable whose name starts with ``prefix``: (name, value), by name. A read, so a
    5xx of a busy or just-thawed server is asked again, not taken as the run's end."""
    rows: list[tuple[str, Any]] = []
    async with get_client() as client:
        while True:
            response = await client.request(
                "POST",
                "/variables/filter",
                json={
                    "variables": {"name": {"like_": prefix}},
                    "sort": "NAME_ASC",
                    "offset": len(rows),
                    "limit": PAGE,
                },
            )
            page = response.json()
            rows += [(row["name"], row["value"]) for row in page]
            if len(page) < PAGE:
                break
    return [(name, value) for name, value in rows if name.startswith(prefix)]


async def delete_all(names: Iterable[str]) -> None:
    for name in names:
        await Variable.aunset(name)


def versioned(base: str, version: int) -> str:
    """The Variable that holds ``version`` of ``base`` (zero-padded: names sort as versions)."""
    return f"{base}{VERSION_SEPARATOR}{version:08d}"


def version_of(name: str, base: str) -> int | None:
    """The version ``name`` holds of ``base``: 0 for ``base`` itself, None for another name."""
    if name == base:
        return 0
    suffix = name.removeprefix(base + VERSION_SEPARATOR)
    return int(suffix) if suffix != name and suffix.isdigit() else None
