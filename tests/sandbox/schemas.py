"""Validators for the published schemas (tests/fixtures/spec.py), keyed by "METHOD /path"."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from tests.fixtures import spec

_formats = FormatChecker()


@_formats.checks("date-time", raises=ValueError)
def _is_datetime(value: object) -> bool:
    if not isinstance(value, str):
        return True
    parsed = datetime.fromisoformat(value)
    return "T" in value and parsed.tzinfo is not None


@cache
def operations() -> dict[str, dict[str, Any]]:
    return {spec.route_of(document): document for document in spec.schema_files().values()}


@cache
def _validator(route: str, part: str) -> Draft202012Validator:
    schema = operations()[route][part]
    return Draft202012Validator(schema, format_checker=_formats)


def validate_response(route: str, body: Any) -> None:
    """Raise jsonschema.ValidationError if ``body`` breaks the published response schema."""
    _validator(route, "response").validate(body)


def validate_request(route: str, body: Any) -> None:
    _validator(route, "request_body").validate(body)


def expected_status(route: str) -> int:
    return spec.EXPECTED_STATUS[route]


ERROR_BODY = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
    "required": ["error", "message"],
    "additionalProperties": False,
}
OAUTH_ERROR_BODY = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "error_description": {"type": "string"}},
    "required": ["error", "error_description"],
    "additionalProperties": False,
}
TOKEN_BODY = {
    "type": "object",
    "properties": {
        "access_token": {"type": "string", "minLength": 20},
        "refresh_token": {"type": "string", "minLength": 20},
        "expires_in": {"const": 3599},
        "token_type": {"const": "Bearer"},
    },
    "required": ["access_token", "expires_in", "token_type"],
    "additionalProperties": False,
}
