"""The access policy file (deployments/access_policy.yaml): its rules, as the gatekeeper reads them.

The shipped roles against Prefect's own routes: what each role may and may not do; and a policy
file that cannot be used stops with the field and the value named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from deployments.access import DEFAULT_POLICY, AccessPolicy, AccessPolicyError, load_policy

PEOPLE = {
    "vic": ["viewer"],
    "alice": ["requester"],
    "bob": ["approver"],
    "carol": ["admin"],
    "worker-1": ["worker"],
}
RUN = "/api/flow_runs/6a1f2a3e-0000-4000-8000-000000000001"
DEPLOYMENT = "/api/deployments/6a1f2a3e-0000-4000-8000-000000000002"


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> AccessPolicy:
    return load_policy(with_people(tmp_path_factory.mktemp("policy"), PEOPLE))


def with_people(directory: Path, people: dict[str, list[str]]) -> Path:
    """The shipped roles with these people, as an operator would write them."""
    data = yaml.safe_load(DEFAULT_POLICY.read_text())
    data["people"] = people
    path = directory / "access_policy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def allowed(policy: AccessPolicy, person: str, request: str, body: Any = None) -> bool:
    method, path = request.split(" ", 1)
    return policy.rule_for(person, method, path, body) is not None


@pytest.mark.parametrize(
    ("request_line", "who_may"),
    [
        ("POST /api/deployments/filter", {"vic", "alice", "bob", "carol", "worker-1"}),
        (f"GET {RUN}", {"vic", "alice", "bob", "carol", "worker-1"}),
        ("WS /api/events/out", {"vic", "alice", "bob", "carol", "worker-1"}),
        (f"POST {DEPLOYMENT}/create_flow_run", {"alice", "carol"}),
        (f"POST {RUN}/resume", {"bob"}),
        (f"PATCH {DEPLOYMENT}", {"carol"}),
        ("POST /api/automations/", {"carol"}),
        ("POST /api/block_documents/", {"carol"}),
        (f"POST {RUN}/set_state", {"carol", "worker-1"}),
        ("POST /api/work_pools/compliance-process/get_scheduled_flow_runs", {"carol", "worker-1"}),
        ("POST /api/task_runs/", {"worker-1"}),
        ("WS /api/events/in", {"worker-1"}),
        ("GET /api/admin/settings", {"vic", "alice", "bob", "carol", "worker-1"}),
        ("PUT /api/admin/storage", set()),
        ("DELETE /api/admin/storage", set()),
    ],
)
def test_each_role_may_do_what_it_is_for_and_nothing_else(
    policy: AccessPolicy, request_line: str, who_may: set[str]
) -> None:
    assert {person for person in PEOPLE if allowed(policy, person, request_line)} == who_may


def test_a_worker_writes_only_the_projects_own_variables(policy: AccessPolicy) -> None:
    """Pull steps read compliance_project_dir: a worker that could set it would run code on every
    worker. Its send records, token records and checkpoints it may write."""
    create = "POST /api/variables/"
    for name in (
        "compliance_sent_ab12_1__00000001",
        "compliance-token-9f",
        "compliance_x_checkpoint__1",
    ):
        assert allowed(policy, "worker-1", create, {"name": name, "value": 1}), name
    for name in ("compliance_project_dir", "compliance_rerun_delay_minutes", None):
        assert not allowed(policy, "worker-1", create, {"name": name, "value": 1}), name
    assert not allowed(policy, "worker-1", create, None)  # no body, no name: refused
    assert not allowed(policy, "worker-1", "PATCH /api/variables/name/compliance_project_dir")
    assert allowed(policy, "carol", "PATCH /api/variables/name/compliance_project_dir")
    assert policy.needs_body("worker-1", "POST", "/api/variables/")
    assert not policy.needs_body("worker-1", "POST", "/api/deployments/filter")


def test_no_person_writes_a_requester_record_or_a_decision(policy: AccessPolicy) -> None:
    """Only the server (its gatekeeper, which saw both identities) writes these two inputs; a
    worker writes the plan and the approval form's schema."""
    write = f"POST {RUN}/input"
    for person in PEOPLE:
        for key in ("compliance-approval", "compliance-requester", "suspended-approval-response"):
            assert not allowed(policy, person, write, {"key": key, "value": "{}"}), (person, key)
        assert not allowed(policy, person, f"DELETE {RUN}/input/compliance-requester")
    for key in ("compliance-plan", "suspended-approval-schema", "suspended-approval-description"):
        assert allowed(policy, "worker-1", write, {"key": key, "value": "{}"}), key
    assert allowed(policy, "vic", "GET /api/compliance/decision-key")


def test_a_person_without_a_role_may_do_nothing(policy: AccessPolicy) -> None:
    assert policy.roles_of("mallory") == frozenset()
    assert not allowed(policy, "mallory", "POST /api/deployments/filter")
    assert not allowed(policy, "mallory", "GET /api/health")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"people": {"dan": ["superuser"]}}, "people.dan: unknown role 'superuser'"),
        ({"roles": {"a": {"include": ["b"]}}}, "roles.a.include: unknown role 'b'"),
        (
            {"roles": {"a": {"include": ["b"]}, "b": {"include": ["a"]}}},
            "roles.a.include: a cycle (a -> b -> a)",
        ),
        ({"roles": {"a": {"allow": ["FETCH /api/x"]}}}, "roles.a.allow: 'FETCH /api/x'"),
        ({"roles": {"a": {"allow": ["GET api/x"]}}}, "the path must start with /"),
        ({"roles": {"a": {"allow": ["POST /api/x name"]}}}, "expected field=pattern, not 'name'"),
        ({"roles": {"a": {"allw": []}}}, "allw"),
        ({"people": {" ": ["viewer"]}}, "people: an empty identity ' '"),
    ],
)
def test_a_policy_that_cannot_be_used_names_the_field_and_value(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    data = {"roles": {"viewer": {"allow": ["GET /api/**"]}}, "people": {}}
    for key, value in change.items():
        data[key] = {**data[key], **value} if key == "people" else value
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(AccessPolicyError, match=_escaped(message)):
        load_policy(path)


def test_a_missing_policy_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPLIANCE_ACCESS_POLICY", str(tmp_path / "nowhere.yaml"))
    with pytest.raises(AccessPolicyError, match="COMPLIANCE_ACCESS_POLICY=.*nowhere.yaml"):
        load_policy()


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


def test_a_url_password_in_the_servers_settings_is_hidden_from_people() -> None:
    """Prefect hides its secret settings but not a password inside a Redis or docket URL."""
    from deployments.gatekeeper import _without_passwords

    settings = {
        "server": {"docket": {"url": "redis://:s3cret@redis.internal:6379/0"}},
        "redis": ["rediss://prefect:pa55@r.internal:6380/1", "memory://"],
        "ui_url": "https://prefect.internal:4200",
    }
    shown = _without_passwords(settings)
    assert shown["server"]["docket"]["url"] == "redis://:********@redis.internal:6379/0"
    assert shown["redis"] == ["rediss://prefect:********@r.internal:6380/1", "memory://"]
    assert shown["ui_url"] == "https://prefect.internal:4200"
