"""Registered applications: who may ask for tokens, with which grant, scopes and entitlements.

The built-in demo set has one application of each type (plus a manage app without
entitlements and one for the government tier). Their credentials are fake and public on
purpose: they exist only inside the sandbox. ``--apps FILE`` replaces the set with a JSON list
of objects with the same fields as :class:`Application` (``type`` instead of ``app_type``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

APP_TYPES = ("manage", "integration_private", "integration_public", "auditor")
TIERS = ("commercial", "gov")
ADVANCED_ENTITLEMENT = "QuestionnaireAutomationAdvanced"

# §5.7 plus the real service's vendor-specific manage scopes, in both the specification's
# namespace (service-api) and the real one (vanta-api).
_MANAGE_SUFFIXES = (
    "all:read",
    "all:write",
    "documents:upload",
    "documents:read",
    "documents:list",
    "documents:write",
    "vendors:read",
    "vendors:write",
)
_INTEGRATION_SCOPES = (
    "connectors.self:read-resource",
    "connectors.self:write-resource",
    "self:read-document",
    "self:write-document",
)
_AUDITOR_SCOPES = (
    "auditor-api.audit:read",
    "auditor-api.audit:write",
    "auditor-api.auditor:read",
    "auditor-api.auditor:write",
)


class Credentials(NamedTuple):
    """A client id and its secret (a tuple: ``client_id, client_secret = app``)."""

    client_id: str
    client_secret: str


# The built-in demo applications' credentials: fake, published, and written out only here.
# Tests, the local stack and the benchmarks import them; the secret scan looks for them.
DEMO_MANAGE = Credentials("demo-manage", "demo-manage-secret-not-real")
DEMO_MANAGE_BASIC = Credentials("demo-manage-basic", "demo-manage-basic-secret-not-real")
DEMO_PRIVATE = Credentials("demo-private", "demo-private-secret-not-real")
DEMO_PUBLIC = Credentials("demo-public", "demo-public-secret-not-real")
DEMO_AUDITOR = Credentials("demo-auditor", "demo-auditor-secret-not-real")
DEMO_GOV_MANAGE = Credentials("demo-gov-manage", "demo-gov-manage-secret-not-real")
DEMO_CREDENTIALS = (
    DEMO_MANAGE,
    DEMO_MANAGE_BASIC,
    DEMO_PRIVATE,
    DEMO_PUBLIC,
    DEMO_AUDITOR,
    DEMO_GOV_MANAGE,
)
#: the demo application's public redirect URI (authorization-code grant)
DEMO_PUBLIC_REDIRECT_URI = "http://127.0.0.1:8765/callback"


def default_allowed_scopes(app_type: str) -> tuple[str, ...]:
    if app_type == "manage":
        return tuple(
            f"{ns}.{suffix}" for ns in ("service-api", "vanta-api") for suffix in _MANAGE_SUFFIXES
        )
    if app_type == "auditor":
        return _AUDITOR_SCOPES
    return _INTEGRATION_SCOPES


@dataclass
class Application:
    client_id: str
    client_secret: str
    app_type: str
    tier: str = "commercial"
    name: str = ""
    entitlements: tuple[str, ...] = ()
    redirect_uris: tuple[str, ...] = ()
    allowed_scopes: tuple[str, ...] = field(default_factory=tuple)
    secret_generation: int = 0

    def __post_init__(self) -> None:
        if self.app_type not in APP_TYPES:
            raise ValueError(
                f"application {self.client_id!r}: type {self.app_type!r} is not one of {APP_TYPES}"
            )
        if self.tier not in TIERS:
            raise ValueError(
                f"application {self.client_id!r}: tier {self.tier!r} is not one of {TIERS}"
            )
        if not self.allowed_scopes:
            self.allowed_scopes = default_allowed_scopes(self.app_type)
        if not self.name:
            self.name = self.client_id

    @property
    def grant_type(self) -> str:
        return (
            "authorization_code" if self.app_type == "integration_public" else "client_credentials"
        )

    def public(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "type": self.app_type,
            "tier": self.tier,
            "name": self.name,
            "grant_type": self.grant_type,
            "entitlements": list(self.entitlements),
            "redirect_uris": list(self.redirect_uris),
            "allowed_scopes": list(self.allowed_scopes),
        }


def demo_apps() -> list[Application]:
    """The built-in applications (fake credentials; documented in the README)."""
    return [
        Application(
            *DEMO_MANAGE,
            "manage",
            name="Demo manage app",
            entitlements=(ADVANCED_ENTITLEMENT,),
        ),
        Application(*DEMO_MANAGE_BASIC, "manage", name="Demo manage app without entitlements"),
        Application(*DEMO_PRIVATE, "integration_private", name="Demo private integration"),
        Application(
            *DEMO_PUBLIC,
            "integration_public",
            name="Demo public integration",
            redirect_uris=(DEMO_PUBLIC_REDIRECT_URI,),
        ),
        Application(*DEMO_AUDITOR, "auditor", name="Demo auditor app"),
        Application(
            *DEMO_GOV_MANAGE,
            "manage",
            tier="gov",
            name="Demo government-tier manage app",
            entitlements=(ADVANCED_ENTITLEMENT,),
        ),
    ]


def load_apps(path: str | Path) -> list[Application]:
    """Read applications from a JSON file: a list of objects (or ``{"applications": [...]}``)."""
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(raw, dict):
        raw = raw.get("applications")
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{path}: expected a non-empty JSON list of applications")
    apps = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: application #{index + 1} is not an object")
        missing = [key for key in ("client_id", "client_secret", "type") if not entry.get(key)]
        if missing:
            raise ValueError(f"{path}: application #{index + 1} lacks {', '.join(missing)}")
        apps.append(
            Application(
                client_id=str(entry["client_id"]),
                client_secret=str(entry["client_secret"]),
                app_type=str(entry["type"]),
                tier=str(entry.get("tier", "commercial")),
                name=str(entry.get("name", "")),
                entitlements=tuple(entry.get("entitlements", ())),
                redirect_uris=tuple(entry.get("redirect_uris", ())),
                allowed_scopes=tuple(entry.get("allowed_scopes", ())),
            )
        )
    ids = [app.client_id for app in apps]
    duplicates = sorted({cid for cid in ids if ids.count(cid) > 1})
    if duplicates:
        raise ValueError(f"{path}: duplicate client_id {', '.join(duplicates)}")
    return apps


class AppRegistry:
    """All applications (both tiers); secrets can be rotated and restored on reset."""

    def __init__(self, apps: list[Application]) -> None:
        self._initial = [(app.client_id, app.client_secret) for app in apps]
        self.apps = {app.client_id: app for app in apps}

    def get(self, client_id: str) -> Application | None:
        return self.apps.get(client_id)

    def rotate_secret(self, client_id: str) -> Application:
        app = self.apps[client_id]
        app.secret_generation += 1
        app.client_secret = f"{client_id}-secret-rotated-{app.secret_generation}-not-real"
        return app

    def reset(self) -> None:
        for client_id, secret in self._initial:
            self.apps[client_id].client_secret = secret
            self.apps[client_id].secret_generation = 0
