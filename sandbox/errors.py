"""Error responses of the data endpoints: one documented JSON shape.

``{"error": "<code>", "message": "<text>"}`` with codes ``invalid_request`` (400),
``unauthorized`` (401), ``forbidden`` / ``insufficient_scope`` (403), ``not_found`` (404),
``rate_limited`` (429) and ``service_unavailable`` / ``internal_error`` (5xx). The token
endpoint instead answers as OAuth 2.0 does: ``{"error": ..., "error_description": ...}``.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response


class ApiError(Exception):
    """Raised by a data handler; turned into the documented error body."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


class OAuthError(Exception):
    """Raised by the token endpoint; turned into an OAuth 2.0 error body."""

    def __init__(
        self, status: int, code: str, description: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(description)
        self.status = status
        self.code = code
        self.description = description
        self.headers = headers or {}


def bad_request(message: str) -> ApiError:
    return ApiError(400, "invalid_request", message)


def not_found(kind: str, item_id: str) -> ApiError:
    return ApiError(404, "not_found", f"{kind} {item_id} not found")


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """Serialise without validation: the sandbox builds its bodies to the schemas itself."""
    payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(payload, status_code=status, media_type="application/json", headers=headers)


def api_error_response(exc: ApiError) -> Response:
    return json_response({"error": exc.code, "message": exc.message}, exc.status, exc.headers)


def oauth_error_response(exc: OAuthError) -> Response:
    headers = {"Cache-Control": "no-store", **exc.headers}
    return json_response(
        {"error": exc.code, "error_description": exc.description}, exc.status, headers
    )
