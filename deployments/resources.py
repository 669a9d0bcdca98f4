"""The Prefect server resources ``prefect.yaml`` relies on; each ``ensure_*`` is a bootstrap step.

Idempotent, and operators' changes are kept: an existing variable is never overwritten (except
a project directory missing on this machine), an existing work pool only checked for its type.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.exceptions import ObjectNotFound
from prefect.variables import Variable
from prefect.workers.process import ProcessWorker

from audit_log.checkpoints import (
    READER_CHECKPOINT_VARIABLES,
    START_MARGIN,
    EventLogCheckpoint,
    VariableCheckpointStore,
)
from compliance_api.errors import ConfigurationError
from deployments.settings import deployment_settings
from runtime.credentials import (
    BLOCK_TYPE_NAME,
    BLOCK_TYPE_SLUG,
    CREDENTIALS_BLOCK_ENV,
    ComplianceCredentials,
)

WORK_POOL_NAME = "compliance-process"
WORK_POOL_TYPE = "process"

#: the checkout that holds prefect.yaml and flows/ (this file is deployments/resources.py)
PROJECT_DIR = Path(__file__).resolve().parent.parent

PROJECT_DIR_VARIABLE = "compliance_project_dir"
RERUN_DELAY_VARIABLE = "compliance_rerun_delay_seconds"
RERUN_MAX_ATTEMPTS_VARIABLE = "compliance_rerun_max_attempts"
EXPORT_DIR_VARIABLE = "compliance_event_log_export_dir"
CRASH_MAX_ATTEMPTS_VARIABLE = "compliance_crash_max_attempts"

#: seconds between a write run with failed items and its automatic rerun: a transient outage
#: usually clears within minutes; a rerun sooner would mostly fail again
DEFAULT_RERUN_DELAY_SECONDS = 120
#: attempts in total, the original run included: two automatic reruns, then an operator
DEFAULT_RERUN_MAX_ATTEMPTS = 3
#: crashes of one run, the first included, before crash recovery leaves it to an operator
DEFAULT_CRASH_MAX_ATTEMPTS = 3
WORK_POOL_CONCURRENCY_ENV = "COMPLIANCE_WORK_POOL_CONCURRENCY"


def _listed(*groups: tuple[str, list[str]]) -> str:
    """``"<heading><item>, <item>; ..."`` for each group that has items."""
    return "; ".join(heading + ", ".join(items) for heading, items in groups if items)


def work_pool_concurrency() -> int:
    """COMPLIANCE_WORK_POOL_CONCURRENCY (default 8): flow runs of the pool at once."""
    return deployment_settings().work_pool_concurrency


async def ensure_work_pool(name: str = WORK_POOL_NAME) -> str:
    """The process work pool of every deployment, with a concurrency limit so a burst of runs
    queues up instead of overrunning the server."""
    limit = work_pool_concurrency()
    async with get_client() as client:
        try:
            pool = await client.read_work_pool(name)
        except ObjectNotFound:
            pool = None
        if pool is not None:
            if pool.type != WORK_POOL_TYPE:
                raise ConfigurationError(
                    f"work pool {name!r} exists with type {pool.type!r}; prefect.yaml needs a "
                    f"{WORK_POOL_TYPE!r} pool: delete it or rename the pool in prefect.yaml"
                )
            return (
                f"kept work pool {name!r} (type {pool.type}, "
                f"concurrency limit {pool.concurrency_limit})"
            )
        await client.create_work_pool(
            WorkPoolCreate(
                name=name,
                type=WORK_POOL_TYPE,
                description="compliance-flows: flow runs as local processes of each worker",
                base_job_template=ProcessWorker.get_default_base_job_template(),
                concurrency_limit=limit,
            )
        )
    return f"created work pool {name!r} (type {WORK_POOL_TYPE}, concurrency limit {limit})"


def _is_directory(value: object) -> bool:
    return isinstance(value, str) and Path(value).is_dir()


async def ensure_project_dir_variable(project_dir: Path = PROJECT_DIR) -> str:
    """Where workers find the flow code (prefect.yaml's pull step); kept if it names a directory
    that exists here, replaced otherwise (e.g. the checkout moved)."""
    current: Any = await Variable.aget(PROJECT_DIR_VARIABLE, default=None)
    if _is_directory(current):
        note = "" if Path(current) == project_dir else f" (this checkout is {project_dir})"
        return f"kept variable {PROJECT_DIR_VARIABLE}={current}{note}"
    await Variable.aset(PROJECT_DIR_VARIABLE, str(project_dir), overwrite=True)
    verb = "created" if current is None else f"replaced missing directory {current!r} with"
    return f"{verb} variable {PROJECT_DIR_VARIABLE}={project_dir}"


async def ensure_default_variables() -> str:
    """Settings that prefect.yaml reads at deploy time; existing values are left alone."""
    defaults: dict[str, str | int] = {
        RERUN_DELAY_VARIABLE: DEFAULT_RERUN_DELAY_SECONDS,
        RERUN_MAX_ATTEMPTS_VARIABLE: DEFAULT_RERUN_MAX_ATTEMPTS,
        CRASH_MAX_ATTEMPTS_VARIABLE: DEFAULT_CRASH_MAX_ATTEMPTS,
        # where the daily audit-log export writes its JSON Lines files
        EXPORT_DIR_VARIABLE: str(deployment_settings().state_dir / "event-log-export"),
    }
    created: list[str] = []
    kept: list[str] = []
    for name, value in defaults.items():
        current: Any = await Variable.aget(name, default=None)
        if current is None:
            await Variable.aset(name, value)
            created.append(f"{name}={value}")
        else:
            kept.append(f"{name}={current}")
    return _listed(("created variables ", created), ("kept variables ", kept))


async def ensure_audit_log_starts(now: datetime | None = None) -> str:
    """Every audit-log reader's checkpoint, once: a few minutes before bootstrap, so an entry
    logged before a reader's first run is still read. Existing checkpoints are kept."""
    start = (now or datetime.now(UTC)) - START_MARGIN
    created: list[str] = []
    kept: list[str] = []
    for name in READER_CHECKPOINT_VARIABLES:
        store = VariableCheckpointStore(name)
        if await store.load() is not None:
            kept.append(name)
            continue
        await store.save(EventLogCheckpoint(start_date=start))
        created.append(name)
    return _listed(
        (f"created audit-log checkpoints from {start.isoformat()}: ", created),
        ("kept audit-log checkpoints ", kept),
    )


async def ensure_credentials_block_type() -> str:
    """Register the ``Compliance Credentials`` block type, so operators can create one in the UI
    (a new schema only when the block's fields change)."""
    async with get_client() as client:
        try:
            await client.read_block_type_by_slug(BLOCK_TYPE_SLUG)
            existed = True
        except ObjectNotFound:
            existed = False
        await ComplianceCredentials.aregister_type_and_schema(client=client)
    verb = "kept" if existed else "registered"
    return (
        f"{verb} block type {BLOCK_TYPE_NAME!r} (optional: flows use a block of it when "
        f"{CREDENTIALS_BLOCK_ENV} names one)"
    )
