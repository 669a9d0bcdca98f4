"""A small synchronous client for the ``/_sandbox/`` control API (tests, demo, benchmarks).

A sandbox that listens beyond loopback requires a bearer token on its control API: pass it as
``control_token`` (it is sent as ``Authorization: Bearer <token>``).
"""

from __future__ import annotations

import time
from typing import Any

import httpx


class SandboxControlError(RuntimeError):
    pass


class SandboxControl:
    def __init__(
        self, url: str, *, timeout: float = 30.0, control_token: str | None = None
    ) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {control_token}"} if control_token else {}
        self._http = httpx.Client(base_url=f"{self.url}/_sandbox", timeout=timeout, headers=headers)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self._http.request(method, path, json=body)
        if response.status_code >= 400:
            raise SandboxControlError(
                f"{method} /_sandbox{path} -> {response.status_code}: {response.text}"
            )
        return response.json()

    def wait_until_up(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._call("GET", "/health")
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def health(self) -> dict[str, Any]:
        return dict(self._call("GET", "/health"))

    def stats(self) -> dict[str, Any]:
        return dict(self._call("GET", "/stats"))

    def reset(self) -> dict[str, Any]:
        return dict(self._call("POST", "/reset"))

    def seed(self) -> dict[str, Any]:
        return dict(self._call("GET", "/seed"))

    def issued_credentials(self) -> dict[str, list[str]]:
        """``{access_tokens, refresh_tokens, client_secrets}`` handed out since the sandbox
        started (resets included): the literal values a secret scan looks for."""
        return dict(self._call("GET", "/issued-credentials"))

    def apps(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/apps"))

    def app(self, client_id: str) -> dict[str, Any]:
        for app in self.apps():
            if app["client_id"] == client_id:
                return app
        raise KeyError(client_id)

    def faults(self) -> dict[str, Any]:
        return dict(self._call("GET", "/faults"))

    def set_fault(self, route: str = "*", **rule: Any) -> dict[str, Any]:
        """``route`` is ``"METHOD /template"`` or ``"*"``; see sandbox.faults.FaultRule."""
        return dict(self._call("POST", "/faults", {"route": route, **rule}))

    def clear_faults(self) -> dict[str, Any]:
        return dict(self._call("DELETE", "/faults"))

    def token_outage(
        self, status: int = 503, count: int | None = None, seconds: float | None = None
    ) -> dict[str, Any]:
        body = {"status": status, "count": count, "seconds": seconds}
        return dict(self._call("POST", "/token-outage", body))

    def end_token_outage(self) -> dict[str, Any]:
        return dict(self._call("DELETE", "/token-outage"))

    def revoke(self, client_id: str, source_id: str | None = None) -> bool:
        return bool(
            self._call("POST", "/revoke", {"client_id": client_id, "source_id": source_id})[
                "revoked"
            ]
        )

    def advance_clock(self, seconds: float) -> dict[str, Any]:
        return dict(self._call("POST", "/clock/advance", {"seconds": seconds}))

    def clock(self) -> dict[str, Any]:
        return dict(self._call("GET", "/clock"))

    def inject(self, kind: str, **fields: Any) -> dict[str, Any]:
        return dict(self._call("POST", "/events", {"kind": kind, **fields}))

    def rotate_secret(self, client_id: str) -> str:
        return str(self._call("POST", f"/apps/{client_id}/rotate-secret")["client_secret"])

    def approve_authorization(
        self,
        client_id: str = "demo-public",
        redirect_uri: str | None = None,
        scope: str = "connectors.self:read-resource self:read-document self:write-document",
        state: str = "state",
        source_id: str = "source-1",
    ) -> dict[str, Any]:
        """Non-interactive consent: ``{code, state, redirect_url}``."""
        body = {
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "scope": scope,
            "state": state,
            "source_id": source_id,
        }
        return dict(self._call("POST", "/authorize/approve", body))
