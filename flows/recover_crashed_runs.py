"""Runbook: a crashed flow run is started again, a bounded number of times, or reported.

A crashed run emits no failed-items event, so without this its items would never run again.
Every flow is safe to restart: writes skip what the lost attempt sent
(``write_engine/send_record.py``), reads resume from their checkpoints.
"""

from __future__ import annotations

from typing import Annotated, Literal

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from prefect.client.schemas.objects import StateType
from pydantic import BaseModel, Field

from compliance_api.errors import InputError
from runtime.form import title
from tasks.flow_runs import RunHistory, flow_run_uuid, read_run_history, reschedule_run

DEFAULT_MAX_ATTEMPTS = 3

Action = Literal["rescheduled", "not crashed", "given up"]


class RecoveryResult(BaseModel):
    flow_run_id: str
    action: Action
    crashes: int
    started: bool


class RunNotRecovered(RuntimeError):
    """A run crashed ``max_attempts`` times: it waits for an operator."""


def _flow_run_id(value: str) -> str:
    try:
        return str(flow_run_uuid(value))
    except (ValueError, TypeError, AttributeError):
        raise InputError(
            "flow_run_id", value, "must be a flow run id (or prefect.flow-run.<id>)"
        ) from None


@flow(name="recover-crashed-run")
async def recover_crashed_run(
    flow_run_id: Annotated[str, title("Flow run id")],
    max_attempts: Annotated[int, Field(ge=1, le=10), title("Max crashes")] = DEFAULT_MAX_ATTEMPTS,
) -> RecoveryResult:
    """Start a crashed flow run again, at most max_attempts crashes in all, or report it.

    Args:
        flow_run_id: The crashed flow run (its id, or the event resource id
            'prefect.flow-run.<id>').
        max_attempts: Crashes after which the run is left for an operator instead of being
            scheduled again (1 to 10; the first crash counts).
    """
    run_id = _flow_run_id(flow_run_id)
    logger = get_run_logger()
    history = await read_run_history(flow_run_uuid(run_id))
    if history.state_type != StateType.CRASHED:
        logger.info("Run %s is %s now: nothing to recover", history.name, history.state_type)
        return _result(history, "not crashed")
    if history.crashes < max_attempts:
        when = "mid-run" if history.started else "before it started"
        message = (
            f"Rescheduled by crash recovery: crash {history.crashes} of at most "
            f"{max_attempts} ({when})"
        )
        await reschedule_run(flow_run_uuid(run_id), message)
        logger.info("%s: %s", history.name, message)
        return _result(history, "rescheduled")
    await _report_given_up(history, max_attempts)
    raise RunNotRecovered(
        f"Run {history.name} ({run_id}) crashed {history.crashes} times; it is left Crashed for "
        "an operator: find out why (the worker's log), then press Retry on the run"
    )


def _result(history: RunHistory, action: Action) -> RecoveryResult:
    return RecoveryResult(
        flow_run_id=history.flow_run_id,
        action=action,
        crashes=history.crashes,
        started=history.started,
    )


async def _report_given_up(history: RunHistory, max_attempts: int) -> None:
    parameters = "\n".join(
        f"- `{name}`: `{value!r}`"[:500] for name, value in history.parameters.items()
    )
    await acreate_markdown_artifact(
        key=f"crashed-run-{history.flow_run_id[:8]}",
        markdown=(
            f"## Run {history.name} was not recovered\n\n"
            f"It crashed {history.crashes} times (limit {max_attempts}) and is left Crashed.\n\n"
            f"Flow run id: `{history.flow_run_id}`\n\nParameters:\n\n{parameters or '- none'}\n\n"
            "Next: read the worker's log for why it crashed, fix that, then press **Retry** on "
            "the run (every flow is safe to run again)."
        ),
        description=f"Crashed run {history.name}: not rescheduled after {history.crashes} crashes",
    )
