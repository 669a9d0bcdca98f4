"""``make serve``'s banner: what it reports comes from the Prefect API, not from parsed output.

No processes are started: the stack is built but not started, and its Prefect API is an
``httpx.MockTransport``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from deployments.resources import WORK_POOL_NAME
from deployments.serve import banner, deployment_count, parse_args
from deployments.stack import LocalStack, StackOptions

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
            ["--api-replicas", "2", "--database-url", "postgresql+asyncpg://u@h/d"],
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
