"""The write flow that docs/architecture.md walks a newcomer through, taken from the page and
run against the sandbox: the guide's example works as written."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from sandbox.runner import SandboxHandle
from tests.fixtures.flows import run_flow
from write_engine.outcomes import Outcome

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
BLOCK = re.compile(r"<!-- example: write-flow -->\s*```python\n(.*?)```", re.DOTALL)


@pytest.fixture
def example(tmp_path: Path) -> Iterator[ModuleType]:
    (code,) = BLOCK.findall(GUIDE.read_text())
    path = tmp_path / "approve_questionnaires_example.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(path.stem, None)


async def test_the_guides_write_flow_approves_and_reports_each_item(
    flows_env: SandboxHandle, example: ModuleType
) -> None:
    ready = [flows_env.control.inject("questionnaire_ready_for_review")["id"] for _ in range(2)]
    state, summary = await run_flow(
        example.approve_questionnaires, questionnaire_ids=[*ready, "no-such-questionnaire"]
    )
    assert state.is_failed()  # the unknown one: red, listed, rerunnable
    assert summary.counts == {Outcome.SUCCEEDED: 2, Outcome.FAILED: 1}
    (failed,) = summary.failed_items
    assert failed.item == "no-such-questionnaire" and failed.reason.startswith("not found")
    approvals = flows_env.control.stats()["write_counts"]["questionnaire_approve"]
    assert approvals == dict.fromkeys(ready, 1)


async def test_the_guides_write_flow_checks_input_before_any_call(
    flows_env: SandboxHandle, example: ModuleType
) -> None:
    with pytest.raises(Exception, match=r"questionnaire_ids\[1\]"):
        await example.approve_questionnaires(questionnaire_ids=["q-1", "not/valid"])
    assert flows_env.control.stats()["route_counts"] == {}
