"""``make serve``'s banner: what it reports comes from the Prefect API, not from parsed output.

No processes are started: the stack is built but not started, and its Prefect API is an
``httpx.MockTransport``.
"""

from __future__ import annotations

import base64
import json
import stat
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from deployments.access import load_policy
from deployments.auth import SERVER_AUTH_ENV
from deployments.identity import Verifier, add_person, read_people
from deployments.resources import WORK_POOL_NAME
from deployments.serve import banner, deployment_count, parse_args, with_try_out_people
from deployments.stack import LocalStack, StackOptions
from deployments.try_out import PASSWORDS_FILE, PEOPLE_FILE

Handler = Callable[[httpx.Request], httpx.Response]


def _stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handler: Handler) -> LocalStack:
    stack = LocalStack(StackOptions(state_dir=tmp_path))
    stack.prefect_port = 4200
    transport = httpx.MockTransport(handler)
    monkeypatch.setattr(
        stack, "api", lambda: httpx.Client(base_url=stack.api_url, transport=transport)
    )
    return stack


def test_the_banner_counts_the_deployments_the_prefect_api_has_on_the_work_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, object]] = []

    def prefect_api(request: httpx.Request) -> httpx.Response:
        seen.append((f"{request.method} {request.url.path}", json.loads(request.content)))
        return httpx.Response(200, json=14)

    stack = _stack(tmp_path, monkeypatch, prefect_api)
    # what `prefect deploy` printed is not a count of deployments (it said 12 of 14)
    stack.deploy_output = "Deployment 'x' successfully created\n" * 12
    text = banner(stack, 42.0)
    line = next(line for line in text.splitlines() if "Deployments:" in line)
    assert f"Deployments:   14 on work pool {WORK_POOL_NAME!r}" in line
    assert seen == [
        (
            "POST /api/deployments/count",
            {"work_pools": {"name": {"any_": [WORK_POOL_NAME]}}},
        )
    ]


@pytest.mark.parametrize(
    "answer",
    [
        lambda request: httpx.Response(500, json={"detail": "boom"}),
        lambda request: httpx.Response(200, json={"count": 14}),
        lambda request: httpx.Response(200, text="not json"),
    ],
    ids=["server-error", "not-a-number", "not-json"],
)
def test_an_unknown_count_shows_as_a_question_mark_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: Handler
) -> None:
    stack = _stack(tmp_path, monkeypatch, answer)
    assert deployment_count(stack) is None
    assert f"Deployments:   ? on work pool {WORK_POOL_NAME!r}" in banner(stack, 1.0)


def test_an_unreachable_server_gives_an_unknown_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    assert deployment_count(_stack(tmp_path, monkeypatch, unreachable)) is None


@pytest.mark.usefixtures("prefect_server")
async def test_the_count_query_is_one_a_real_prefect_server_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the deployments of the named pool count (the session's server has others)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.settings import PREFECT_API_URL

    pool, other = (f"pool-{uuid.uuid4().hex[:8]}" for _ in range(2))
    async with get_client() as client:
        for name in (pool, other):
            await client.create_work_pool(WorkPoolCreate(name=name, type="process"))
        flow_id = await client.create_flow_from_name(f"flow-{pool}")
        for index, name in enumerate([pool, pool, pool, other]):
            await client.create_deployment(flow_id, f"d{index}", work_pool_name=name)

    stack = LocalStack(StackOptions(state_dir=tmp_path))
    api_url = PREFECT_API_URL.value()
    monkeypatch.setattr(stack, "api", lambda: httpx.Client(base_url=api_url, timeout=30.0))
    assert deployment_count(stack, pool) == 3
    assert deployment_count(stack, other) == 1


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--api-replicas", "2"], "need PostgreSQL (database_url) and Redis (redis_url)"),
        (
            ["--api-replicas", "2", "--database-url", "postgresql+asyncpg://u@127.0.0.1/d"],
            "need PostgreSQL (database_url) and Redis (redis_url)",
        ),
        (["--api-replicas", "0"], "api_replicas=0: must be a whole number from 1 to 8"),
        (["--redis-url", "http://cache:6379"], "must be a redis:// or rediss:// URL"),
        (["--redis-url", "mem://u:hunter2@cache"], "mem://u:***@cache"),
    ],
)
def test_serve_refuses_a_replica_setup_that_cannot_work_before_starting_anything(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    error = capsys.readouterr().err
    assert words in error and "hunter2" not in error


def test_serve_takes_the_replica_setup_the_scaling_recipe_names() -> None:
    options = parse_args(
        [
            "--database-url",
            "postgresql+asyncpg://postgres@127.0.0.1:5432/prefect",
            "--redis-url",
            "redis://127.0.0.1:6379/0",
            "--api-replicas",
            "2",
            "--workers",
            "3",
        ]
    )
    assert (options.api_replicas, options.workers) == (2, 3)
    assert options.redis_url == "redis://127.0.0.1:6379/0"


# --------------------------------------------------------------------------- try-out people
def test_without_people_serve_signs_in_try_out_people_from_private_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make serve`` on loopback: four people with their own passwords (0600 files), the
    shipped policy giving each one role; a second start keeps the passwords."""
    monkeypatch.delenv(SERVER_AUTH_ENV, raising=False)
    options, people = with_try_out_people(parse_args(["--state-dir", str(tmp_path)]))
    assert people is not None
    assert options.people_file == people.people_file == tmp_path / PEOPLE_FILE
    assert options.access_policy == people.policy_file
    for path in (people.passwords_file, people.people_file, people.policy_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    passwords = _passwords(people.passwords_file)
    verifier = Verifier(read_people(people.people_file))
    for name, password in passwords.items():
        assert verifier.identity(_basic(name, password)) == name
        assert verifier.identity(_basic(name, password + "x")) is None
    policy = load_policy(people.policy_file)
    assert {name: set(policy.roles_of(name)) for name in passwords} == {
        "alice": {"requester", "approver"},
        "bob": {"requester", "approver"},
        "carol": {"admin"},
        "dave": {"viewer"},
    }
    assert policy.rule_for("bob", "POST", "/api/flow_runs/x/resume") is not None
    assert policy.rule_for("dave", "POST", "/api/flow_runs/x/resume") is None
    assert with_try_out_people(parse_args(["--state-dir", str(tmp_path)]))[1] == people
    assert _passwords(people.passwords_file) == passwords, "a restart keeps the passwords"


def test_try_out_people_need_loopback_or_tls_and_a_policy_needs_its_people(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(SERVER_AUTH_ENV, raising=False)
    beyond = parse_args(["--state-dir", str(tmp_path), "--host", "10.213.0.1"])
    assert with_try_out_people(beyond) == (beyond, None)  # no person's password over plain HTTP
    assert not (tmp_path / PASSWORDS_FILE).exists()
    own = tmp_path / "people"
    add_person(own, "erin", "erin's long password!")
    given = parse_args(["--state-dir", str(tmp_path), "--people", str(own)])
    assert with_try_out_people(given) == (given, None)
    with pytest.raises(SystemExit):
        parse_args(["--access-policy", str(own)])
    assert "--access-policy: give --people too" in capsys.readouterr().err


def test_the_banner_names_the_try_out_people_and_where_their_passwords_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SERVER_AUTH_ENV, raising=False)
    options, people = with_try_out_people(parse_args(["--state-dir", str(tmp_path)]))
    assert people is not None
    stack = LocalStack(options)
    stack.prefect_port = 4200
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=14))
    monkeypatch.setattr(
        stack, "api", lambda: httpx.Client(base_url=stack.api_url, transport=transport)
    )
    text = banner(stack, 1.0, people)
    who = "alice (requester, approver), bob (requester, approver), carol (admin), dave (viewer)"
    assert f"sign in as {who}" in text
    assert f"passwords in {people.passwords_file}" in text
    assert f'export PREFECT_API_AUTH_STRING="$(grep ^carol: {people.passwords_file})"' in text
    for password in _passwords(people.passwords_file).values():
        assert password not in text
    assert str(stack.auth_file) not in text and stack.auth_string not in text


def _passwords(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split(":", 1) for line in lines if not line.startswith("#"))


def _basic(name: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()
