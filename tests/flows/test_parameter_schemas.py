"""The run form of every deployed flow, as Prefect builds it (no server needed).

``prefect deploy`` stores ``parameter_schema(flow)`` of each entrypoint, and the UI's run form
(Deployments → Run → Custom run) is drawn from it: the help text of a field is the parameter's
entry in the ``Args:`` section of the docstring, the label is the field's title, an ``enum``
is a select, and an optional field opens on the ``anyOf`` branch its default matches. The same
schema is what the Prefect server checks a deployment run's parameters against.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import uuid
from pathlib import Path
from typing import Any, get_args, get_type_hints

import pytest
import yaml
from prefect.exceptions import ParameterTypeError
from prefect.flows import Flow, load_flow_from_entrypoint
from prefect.utilities.callables import (
    parameter_docstrings,
    parameter_schema,
    parameter_schema_from_entrypoint,
)
from prefect.utilities.schema_tools.validation import validate

from compliance_api.models import KnowledgeBaseResourceType
from flows.connector_resources import KNOWN_FRAMEWORKS
from flows.document_links import UnconfirmedLinks
from flows.knowledge_base import SOURCES
from flows.questionnaires import SETTABLE, ActorKind

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENTS: list[dict[str, Any]] = yaml.safe_load((ROOT / "prefect.yaml").read_text())[
    "deployments"
]
ENTRYPOINTS = sorted({deployment["entrypoint"] for deployment in DEPLOYMENTS})

RERUN = "flows/rerun.py:rerun_failed_items"
KB = "flows/knowledge_base.py:knowledge_base_freshness"
QUESTIONNAIRES = "flows/questionnaires.py:route_questionnaires"
TRAINING = "flows/connector_resources.py:security_training_report"
LINKS = "flows/document_links.py:attach_document_links"

#: parameters the form must offer as a select (or a multi-select), with their choices
CHOICES: dict[tuple[str, str], set[str]] = {
    (RERUN, "unconfirmed_links"): set(get_args(UnconfirmedLinks)),
    (LINKS, "unconfirmed_links"): set(get_args(UnconfirmedLinks)),
    (QUESTIONNAIRES, "owner_type"): set(get_args(ActorKind)),
    (QUESTIONNAIRES, "approver_type"): set(get_args(ActorKind)),
    (QUESTIONNAIRES, "route"): set(SETTABLE),
    (KB, "types"): {member.value for member in KnowledgeBaseResourceType},
    (KB, "sources"): set(SOURCES),
    (TRAINING, "frameworks"): set(KNOWN_FRAMEWORKS),
}

#: ``int | None = None`` parameters: an integer field that may be left empty
OPTIONAL_INTS = [
    (RERUN, "attempt"),
    ("flows/event_bridge.py:bridge_event_log", "max_pages"),
    ("flows/event_log_export.py:export_event_log", "max_pages"),
]

#: values the form would refuse but the flow takes (its own check answers: test_bad_inputs.py)
LEFT_TO_THE_FLOW = [
    (QUESTIONNAIRES, {"route": ["FINISHED", "APPROVED", "in_review"]}),
]

#: limits the types declare: (entrypoint, parameter, a value out of range, the server's words)
LIMITS = [
    (LINKS, "concurrency", 500, "500 is greater than the maximum of 32"),
    (LINKS, "concurrency", 0, "0 is less than the minimum of 1"),
    (KB, "page_size", 1000, "1000 is greater than the maximum of 100"),
    (KB, "top_n", 0, "0 is less than the minimum of 1"),
    (KB, "expiring_within_days", -1, "-1 is less than the minimum of 0"),
    (KB, "sources", [], "[] is not valid"),
    (TRAINING, "top_n", -3, "-3 is less than the minimum of 1"),
    ("flows/connector_resources.py:package_vulnerability_digest", "min_severity", 11, "11"),
    ("flows/event_bridge.py:bridge_event_log", "max_pages", 0, "0 is not valid"),
    ("flows/event_bridge.py:bridge_event_log", "checkpoint_variable", "My Var", "'My Var'"),
    ("flows/event_log_export.py:export_event_log", "lock_wait_seconds", -1, "-1 is less"),
    ("flows/recover_crashed_runs.py:recover_crashed_run", "max_attempts", 11, "11 is greater"),
    (RERUN, "max_attempts", 0, "0 is less than the minimum of 1"),
]


@functools.cache
def load(entrypoint: str) -> Flow[..., Any]:
    # no placeholder: a flow that does not import must fail here, not give a different schema
    return load_flow_from_entrypoint(str(ROOT / entrypoint), use_placeholder_flow=False)


@functools.cache
def schema(entrypoint: str) -> dict[str, Any]:
    return parameter_schema(load(entrypoint)).model_dump_for_openapi()


def prop(entrypoint: str, name: str) -> dict[str, Any]:
    field: dict[str, Any] = schema(entrypoint)["properties"][name]
    return field


def branches(field: dict[str, Any]) -> list[dict[str, Any]]:
    return list(field.get("anyOf", [field]))


def is_null(branch: dict[str, Any]) -> bool:
    return branch.get("type") == "null" or branch.get("enum") == [None]


def choices(field: dict[str, Any]) -> set[str]:
    """The choices of a select: the field's ``enum``, or its items' (a multi-select)."""
    found: set[str] = set()
    for branch in branches(field):
        if is_null(branch):
            continue
        found.update(branch.get("enum", []))
        found.update(branch.get("items", {}).get("enum", []))
    return found


def test_every_flow_in_flows_is_deployed() -> None:
    """So the tests below see every flow an operator can run."""
    declared = set()
    for path in sorted((ROOT / "flows").glob("*.py")):
        module = importlib.import_module(f"flows.{path.stem}")
        declared |= {
            f"flows/{path.name}:{name}"
            for name, value in vars(module).items()
            if isinstance(value, Flow) and value.__module__ == module.__name__
        }
    assert declared == set(ENTRYPOINTS)


@pytest.mark.parametrize("entrypoint", ENTRYPOINTS)
def test_every_parameter_has_help_text_and_a_label(entrypoint: str) -> None:
    flow = load(entrypoint)
    properties = schema(entrypoint)["properties"]
    assert properties, "a deployed flow without parameters?"
    for name, field in properties.items():
        assert field.get("description", "").strip(), f"{name}: no entry in the Args: section"
        label = field.get("title", "")
        assert label != name and label[:1].isupper(), f"{name}: no readable title ({label!r})"
    # every Args: entry names a parameter (a renamed one would lose its help text silently)
    documented = set(parameter_docstrings(inspect.getdoc(flow)))
    assert documented <= set(properties)
    # the others are the parameters flows share (approval): their help is declared in the type
    hints = get_type_hints(flow.fn, include_extras=True)
    for name in set(properties) - documented:
        declared = [getattr(meta, "json_schema_extra", None) for meta in get_args(hints[name])]
        assert any(isinstance(extra, dict) and extra.get("description") for extra in declared), (
            f"{name}: no entry in the Args: section and no form_field help in its type"
        )


@pytest.mark.parametrize("entrypoint", ENTRYPOINTS)
def test_the_schema_from_source_is_the_same(entrypoint: str) -> None:
    """What Prefect falls back to when it cannot import the flow (it reads the file)."""
    from_source = parameter_schema_from_entrypoint(str(ROOT / entrypoint))
    assert from_source.model_dump_for_openapi() == schema(entrypoint)


@pytest.mark.parametrize(("entrypoint", "name"), sorted(CHOICES), ids=lambda x: str(x))
def test_choice_parameters_are_selects(entrypoint: str, name: str) -> None:
    assert choices(prop(entrypoint, name)) == CHOICES[entrypoint, name]


@pytest.mark.parametrize(("entrypoint", "name"), OPTIONAL_INTS, ids=lambda x: str(x))
def test_optional_numbers_are_integers_that_may_be_left_empty(entrypoint: str, name: str) -> None:
    field = prop(entrypoint, name)
    assert field["default"] is None
    assert branches(field)[0]["type"] == "integer"  # the branch the form opens on
    full = schema(entrypoint)
    for ok in (3, None):
        assert validate({name: ok}, full, ignore_required=True) == [], ok
    assert validate({name: "three"}, full, ignore_required=True)


@pytest.mark.parametrize("entrypoint", ENTRYPOINTS)
def test_optional_fields_open_on_their_value(entrypoint: str) -> None:
    """Both Prefect UIs open an ``anyOf`` field on the branch its value (the default) matches:
    ``{"type": "null"}`` showed 'Property is type "None"' instead of an input. None stays
    allowed, as ``{"enum": [null]}``, and comes last."""
    for name, field in schema(entrypoint)["properties"].items():
        if "anyOf" not in field:
            continue
        options = field["anyOf"]
        assert not is_null(options[0]), f"{name} opens on None"
        assert {"type": "null"} not in options, name
        if field.get("default", ...) is None:
            assert is_null(options[-1]), f"{name}: None is not allowed"


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=lambda d: d["entrypoint"])
def test_prefect_yaml_parameters_fit_the_schemas(deployment: dict[str, Any]) -> None:
    """The server checks a deployment run's parameters against the schema: what prefect.yaml
    sends (the deployment's and its triggers' parameters) must pass. Templates are filled in
    by Prefect first, so they are left out here."""
    sets = [deployment.get("parameters") or {}]
    sets += [trigger.get("parameters") or {} for trigger in deployment.get("triggers", [])]
    for parameters in sets:
        concrete = {k: v for k, v in parameters.items() if "{{" not in str(v)}
        errors = validate(concrete, schema(deployment["entrypoint"]), ignore_required=True)
        assert errors == [], [error.message for error in errors]


@pytest.mark.parametrize(("entrypoint", "parameters"), LEFT_TO_THE_FLOW, ids=lambda x: str(x))
def test_choices_in_the_schema_do_not_change_direct_calls(
    entrypoint: str, parameters: dict[str, Any]
) -> None:
    """A direct call validates by the annotations, which stay wide: the flow's own check
    answers a wrong choice with an error naming the field and the choices."""
    assert load(entrypoint).validate_parameters(parameters)
    assert validate(parameters, schema(entrypoint), ignore_required=True)  # the form refuses


@pytest.mark.parametrize(("entrypoint", "name", "value", "words"), LIMITS, ids=lambda x: str(x))
def test_limits_are_declared_where_the_form_and_the_server_see_them(
    entrypoint: str, name: str, value: Any, words: str
) -> None:
    """The server refuses a deployment run out of range, naming the field and the value, before
    a run exists; a direct call fails Prefect's validation naming the field, before the flow's
    first line (the bad-input catalogue runs those)."""
    errors = validate({name: value}, schema(entrypoint), ignore_required=True)
    assert errors, f"{name}={value!r} passed the schema"
    message = " ".join(error.message for error in errors)
    assert words in message, message
    # a UUID-looking string passes every required parameter (ids, paths, run ids)
    required = {key: str(uuid.uuid4()) for key in schema(entrypoint).get("required", [])}
    with pytest.raises(ParameterTypeError, match=f"{name}: "):
        load(entrypoint).validate_parameters(required | {name: value})
    assert load(entrypoint).validate_parameters(required)  # only the bad value is refused
