"""One ASGI application per tier: OAuth, data and control routes behind the sandbox pipeline."""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from sandbox.control_api import ControlTokenMiddleware, control_router
from sandbox.data_api import data_router
from sandbox.errors import (
    ApiError,
    OAuthError,
    api_error_response,
    json_response,
    oauth_error_response,
)
from sandbox.middleware import RouteTable, SandboxMiddleware
from sandbox.oauth_api import oauth_router
from sandbox.state import Sandbox


def create_app(sandbox: Sandbox, tier_name: str = "commercial") -> FastAPI:
    tier = sandbox.tiers[tier_name]
    app = FastAPI(
        title=f"Compliance API sandbox ({tier_name})",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    table: list[RouteTable] = []

    def route_table() -> RouteTable:
        if not table:
            table.append(RouteTable(app.router.routes))
        return table[0]

    # Routes are added flat (not include_router, which nests them in newer FastAPI) so the
    # middleware's route table sees every path template.
    for router in (
        oauth_router(tier),
        data_router(tier),
        control_router(sandbox, tier, route_table),
    ):
        app.router.routes.extend(router.routes)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        return api_error_response(exc)

    @app.exception_handler(OAuthError)
    async def oauth_error(request: Request, exc: OAuthError) -> Response:
        return oauth_error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return json_response({"error": code, "message": message}, exc.status_code)

    app.add_middleware(SandboxMiddleware, tier=tier, table_source=route_table)
    if sandbox.config.control_token:  # outermost: nothing under /_sandbox/ runs without it
        app.add_middleware(ControlTokenMiddleware, token=sandbox.config.control_token)
    app.state.sandbox = sandbox
    app.state.tier = tier
    return app
