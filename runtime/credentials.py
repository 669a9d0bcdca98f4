"""The ``Compliance Credentials`` block: an application's credentials kept on the Prefect server.

Flow runs take them from the block ``COMPLIANCE_CREDENTIALS_BLOCK`` names, else from the
``COMPLIANCE_*`` environment; either way ``compliance_api.settings`` checks them, and an error
names the block's field, never the secret. Only ``CREDENTIAL_FIELDS`` are in the block: the
token encryption key must never be kept in Prefect too (docs/settings.md).

    python -m runtime.credentials save NAME [--overwrite]   # a block from the COMPLIANCE_* env
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from prefect.blocks.core import Block
from prefect.settings import get_current_settings
from pydantic import Field, SecretStr, ValidationError

from compliance_api.errors import ConfigurationError
from compliance_api.settings import (
    DEFAULT_BASE_URL,
    DEFAULT_SCOPE_NAMESPACE,
    ApplicationType,
    Settings,
    load_settings,
    load_settings_from,
)
from runtime.settings import runtime_settings

CREDENTIALS_BLOCK_ENV = "COMPLIANCE_CREDENTIALS_BLOCK"
BLOCK_TYPE_NAME = "Compliance Credentials"
BLOCK_TYPE_SLUG = "compliance-credentials"

#: the Settings fields a block holds; every other setting stays in the environment
CREDENTIAL_FIELDS = (
    "client_id",
    "client_secret",
    "application_type",
    "base_url",
    "gov_base_url",
    "use_gov",
    "auth_url",
    "scope_namespace",
    "scopes",
    "source_id",
    "redirect_uri",
)


class ComplianceCredentials(Block):
    """Credentials of one application of the compliance API, and where the API is.

    Examples:
        Save a block, then set ``COMPLIANCE_CREDENTIALS_BLOCK=compliance-prod`` on the workers:
        ```python
        from runtime.credentials import ComplianceCredentials

        ComplianceCredentials(
            client_id="my-client-id",
            client_secret="my-client-secret",
            base_url="https://api.example.com",
        ).save("compliance-prod")
        settings = ComplianceCredentials.load("compliance-prod").to_settings()
        ```
    """

    _block_type_name = BLOCK_TYPE_NAME
    _block_type_slug = BLOCK_TYPE_SLUG
    _description = (
        "Credentials of one application of the compliance API, used by compliance-flows runs "
        "when COMPLIANCE_CREDENTIALS_BLOCK names the block. The token encryption key stays in "
        "the workers' environment."
    )

    client_id: str = Field(..., min_length=1, title="Client ID")
    client_secret: SecretStr = Field(..., title="Client secret")
    application_type: ApplicationType = Field(
        default=ApplicationType.MANAGE,
        description="manage and auditor apps use client credentials; integration_public uses "
        "the authorization code (and needs a source_id)",
    )
    base_url: str = Field(
        default=DEFAULT_BASE_URL,
        title="Base URL",
        description="The API's base address for data and token calls (the default is the "
        "local sandbox)",
    )
    gov_base_url: str | None = Field(default=None, title="Government tier base URL")
    use_gov: bool = Field(default=False, title="Use the government tier")
    auth_url: str | None = Field(
        default=None,
        title="Consent page host",
        description="Host of {auth_url}/oauth/authorize (public integrations); default: the "
        "API's base address",
    )
    scope_namespace: str = Field(default=DEFAULT_SCOPE_NAMESPACE)
    scopes: list[str] = Field(
        default_factory=list,
        description="Scopes to request; empty: the application type's defaults",
    )
    source_id: str | None = Field(
        default=None,
        title="Source ID",
        description="The customer of a public integration (integration_public only)",
    )
    redirect_uri: str | None = Field(default=None, title="Redirect URI")

    def to_settings(self, **overrides: Any) -> Settings:
        """This block's credentials, ``overrides`` (e.g. ``source_id``) over them, the
        environment for the rest."""
        name = self._block_document_name
        where = f"block {name!r}" if name else "block"
        origin = f"the {BLOCK_TYPE_NAME} {where}" if name else f"an unsaved {BLOCK_TYPE_NAME} block"
        # every credential field, empty ones too, so none comes from the environment
        values = {field: getattr(self, field) for field in CREDENTIAL_FIELDS}
        labels = {field: f"{where} field {field}" for field in values if field not in overrides}
        return load_settings_from(
            values | overrides, labels=labels, origin=f"credentials from {origin}"
        )


async def load_credentials(name: str) -> ComplianceCredentials:
    """Read the block from the Prefect server (no cache); a clear error if it is not there."""
    try:
        return await ComplianceCredentials.aload(name)
    except ValidationError as error:  # a ValueError too: before the not-found case
        problems = [
            f"field {'.'.join(str(part) for part in problem['loc']) or '?'}: {problem['msg']}"
            for problem in error.errors(include_input=False, include_url=False)
        ]
        raise ConfigurationError(
            f"{CREDENTIALS_BLOCK_ENV}={name!r}: the {BLOCK_TYPE_NAME} block is not valid:\n  "
            + "\n  ".join(problems)
        ) from None
    except ValueError:
        where = get_current_settings().api.url or "the Prefect API"
        raise ConfigurationError(
            f"{CREDENTIALS_BLOCK_ENV}={name!r}: there is no {BLOCK_TYPE_NAME} block named "
            f"{name!r} on {where}. Create it in the UI (Blocks → {BLOCK_TYPE_NAME}; "
            "python -m deployments.bootstrap registers the type) or with "
            f"`python -m runtime.credentials save {name}`, or unset {CREDENTIALS_BLOCK_ENV} to "
            "take the credentials from the COMPLIANCE_* environment variables"
        ) from None


_cache: dict[tuple[str, str | None], ComplianceCredentials] = {}
_cache_guard = threading.Lock()
#: one loader per event loop and block at a time (tasks of one flow run share its loop)
_loading: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def _cached(name: str) -> ComplianceCredentials | None:
    with _cache_guard:
        return _cache.get((name, get_current_settings().api.url))


def _loading_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    with _cache_guard:
        lock = _loading.get(loop)
        if lock is None:
            lock = _loading[loop] = asyncio.Lock()
        return lock


async def credentials(name: str) -> ComplianceCredentials:
    """The block, read once per process (per name and Prefect API)."""
    cached = _cached(name)
    if cached is not None:  # read already: no lock to wait for
        return cached
    async with _loading_lock():
        cached = _cached(name)
        if cached is None:
            cached = await load_credentials(name)
            with _cache_guard:
                _cache[(name, get_current_settings().api.url)] = cached
        return cached


def forget_credentials() -> None:
    """Drop the blocks read so far (tests, or after editing a block in a long-lived process)."""
    with _cache_guard:
        _cache.clear()


async def load_run_settings(**overrides: Any) -> Settings:
    """A flow run's settings: the named block's (read once per process) over the environment."""
    name = runtime_settings().credentials_block
    if name is None:
        return load_settings(**overrides)
    return (await credentials(name)).to_settings(**overrides)


def run_settings(**overrides: Any) -> Settings:
    """:func:`load_run_settings` for synchronous code: a block must have been read already."""
    name = runtime_settings().credentials_block
    if name is None:
        return load_settings(**overrides)
    block = _cached(name)
    if block is None:
        raise ConfigurationError(
            f"{CREDENTIALS_BLOCK_ENV}={name!r}: the block is read from the Prefect API by "
            "`await runtime.credentials.load_run_settings()`; call that (or pass settings) "
            "before this synchronous call"
        )
    return block.to_settings(**overrides)


async def save_from_environment(name: str, *, overwrite: bool = False) -> str:
    """Save the COMPLIANCE_* environment's credentials (checked first) as a block."""
    settings = load_settings()
    block = ComplianceCredentials(**{f: getattr(settings, f) for f in CREDENTIAL_FIELDS})
    await block.asave(name, overwrite=overwrite)
    return (
        f"saved {BLOCK_TYPE_NAME} block {name!r}: client id {settings.client_id!r}, "
        f"{settings.application_type.value}, {settings.api_base_url} "
        f"(the secret is not shown); use it with {CREDENTIALS_BLOCK_ENV}={name}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime.credentials")
    commands = parser.add_subparsers(dest="command", required=True)
    save = commands.add_parser(
        "save", help="save the COMPLIANCE_* environment's credentials as a block"
    )
    save.add_argument("name")
    save.add_argument("--overwrite", action="store_true", help="replace a block of that name")
    args = parser.parse_args(argv)
    try:
        print(asyncio.run(save_from_environment(args.name, overwrite=args.overwrite)))
    except (ConfigurationError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
