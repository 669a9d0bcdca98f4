"""``python -m deployments.bootstrap``: create the Prefect server resources this project needs.

Idempotent (run it on every deploy): ``main()`` runs each step in order and prints what it did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from prefect.client.orchestration import get_client
from prefect.exceptions import ObjectNotFound

from deployments.automations import ensure_failure_notifications, ensure_unresponsive_run_detection
from deployments.resources import (
    ensure_audit_log_starts,
    ensure_credentials_block_type,
    ensure_default_variables,
    ensure_project_dir_variable,
    ensure_work_pool,
)
from deployments.settings import deployment_settings

# The token endpoint allows 5 calls a minute (spec §8); a Prefect rate limit is a token bucket
# letting ``limit + 60 * decay`` calls land in a minute.
TOKEN_RATE_LIMIT_SLOTS = 1
TOKEN_RATE_LIMIT_DECAY_PER_SECOND = 1 / 15
assert TOKEN_RATE_LIMIT_SLOTS + 60 * TOKEN_RATE_LIMIT_DECAY_PER_SECOND <= 5


def token_rate_limit_name() -> str:
    """The limit's name, from COMPLIANCE_TOKEN_RATE_LIMIT_NAME without needing credentials."""
    return deployment_settings().token_rate_limit_name


async def ensure_token_rate_limit(name: str | None = None) -> str:
    """The global concurrency limit that throttles every token-endpoint call."""
    name = name or token_rate_limit_name()
    async with get_client() as client:
        try:
            existing = await client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            existing = None
        await client.upsert_global_concurrency_limit_by_name(
            name,
            limit=TOKEN_RATE_LIMIT_SLOTS,
            slot_decay_per_second=TOKEN_RATE_LIMIT_DECAY_PER_SECOND,
        )
    shape = f"limit {TOKEN_RATE_LIMIT_SLOTS}, decay {TOKEN_RATE_LIMIT_DECAY_PER_SECOND:.4f}/s"
    if existing is None:
        return f"created global concurrency limit {name!r} ({shape})"
    unchanged = (
        existing.limit == TOKEN_RATE_LIMIT_SLOTS
        and abs((existing.slot_decay_per_second or 0) - TOKEN_RATE_LIMIT_DECAY_PER_SECOND) < 1e-9
    )
    verb = "kept" if unchanged else "updated"
    return f"{verb} global concurrency limit {name!r} ({shape})"


# Most automations come from prefect.yaml's triggers; run locks are created on first use.
STEPS: list[Callable[[], Awaitable[str]]] = [
    ensure_token_rate_limit,
    ensure_work_pool,
    ensure_project_dir_variable,
    ensure_default_variables,
    ensure_audit_log_starts,
    ensure_unresponsive_run_detection,
    ensure_credentials_block_type,
    ensure_failure_notifications,
]


async def bootstrap() -> list[str]:
    """Run every step in order; returns what each did."""
    return [await step() for step in STEPS]


def main() -> None:
    for line in asyncio.run(bootstrap()):
        print(line)


if __name__ == "__main__":
    main()
