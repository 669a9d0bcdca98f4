"""The project's orchestration rule, in every Prefect server its environment runs: a finished
flow run stays finished.

Prefect accepts a state from a process that is no longer the run's current attempt
(PrefectHQ/prefect#16429), and its own crash handling proposes ``Crashed`` with ``force=True``,
which skips the usual rules: a process cut off from the server, back after another attempt
finished the run, turned Completed into Crashed, and crash recovery started it a third time.
Here no proposal, forced or not, replaces a terminal state, except a deliberate new start
(Scheduled, e.g. crash recovery or Retry) of a run that did not complete: a Completed run is never
started again. Installed by the server entry (``deployments.prefect_entry``) and, for any server
started in this environment (the tests' too), through Prefect's ``prefect.collections`` entry
point, which the server loads at start. docs/write-flows.md#a-finished-run-stays-finished.
"""

from __future__ import annotations

import sys
from typing import Any

_installed = False


def install() -> None:
    """Add the rule to every flow-run state proposal this process's server handles (idempotent).
    Rebinds the global policy ``set_flow_run_state`` applies to forced proposals too."""
    global _installed
    if _installed:
        return
    from prefect.server.models import flow_runs
    from prefect.server.orchestration.global_policy import GlobalFlowPolicy

    rule = _finished_runs_stay_finished()
    base: Any = getattr(flow_runs, "GlobalFlowPolicy")  # noqa: B009 - not re-exported

    class ProjectGlobalFlowPolicy(GlobalFlowPolicy):
        @staticmethod
        def priority() -> list[Any]:
            return [rule, *base.priority()]

    setattr(flow_runs, "GlobalFlowPolicy", ProjectGlobalFlowPolicy)  # noqa: B010
    _installed = True


def _finished_runs_stay_finished() -> Any:
    from prefect.server.orchestration.rules import FlowRunOrchestrationRule
    from prefect.server.schemas.states import StateType

    terminal = {StateType.COMPLETED, StateType.CANCELLED, StateType.FAILED, StateType.CRASHED}

    class FinishedRunsStayFinished(FlowRunOrchestrationRule):
        """No state replaces a terminal one, but Scheduled for a run that did not complete."""

        FROM_STATES = set(terminal)
        TO_STATES = set(StateType) | {None}

        async def before_transition(
            self, initial_state: Any, proposed_state: Any, context: Any
        ) -> None:
            if initial_state is None or proposed_state is None:
                return
            if (
                proposed_state.type is StateType.SCHEDULED
                and initial_state.type is not StateType.COMPLETED
            ):
                return  # crash recovery, an automatic rerun's retry, an operator's Retry
            await self.reject_transition(
                state=None,
                reason=(
                    f"The run is already {initial_state.type.value}: a finished run stays "
                    f"finished ({proposed_state.type.value} refused)"
                ),
            )

    return FinishedRunsStayFinished


def load_collection() -> None:
    """The ``prefect.collections`` entry point: install in a server process, nowhere else."""
    if "prefect.server.api.server" in sys.modules:
        install()


load_collection()
