"""Which token scopes authorize which data route.

The specification leaves the endpoint-to-scope mapping open (§5.7); the sandbox uses the
plainest reading of the scope names, documented in the README:

* manage applications: reads need ``<ns>.all:read``; writes need ``<ns>.all:write`` (or the
  vendor/document write scopes for add-to-managed and document links);
* integrations: connector resources need ``connectors.self:read-resource``; document links
  ``self:write-document``;
* auditors: the event log with ``auditor-api.audit:read``.

A token without a fitting scope gets 403 ``insufficient_scope`` naming the scopes that would do.
"""

from __future__ import annotations

READ = ("*.all:read",)
WRITE = ("*.all:write",)

ROUTE_SCOPES: dict[str, tuple[str, ...]] = {
    "GET /v1/knowledge-base/resources": READ,
    "GET /v1/knowledge-base/answer-library": READ,
    "GET /v1/customer-trust/tag-categories": READ,
    "GET /v1/customer-trust/tag-categories/{tagCategoryId}": READ,
    "GET /v1/event-logs": (*READ, "auditor-api.audit:read"),
    "GET /v1/resources/package_vulnerability_connectors": (
        "connectors.self:read-resource",
        *READ,
    ),
    "GET /v1/resources/user_security_training_status": ("connectors.self:read-resource", *READ),
    "PATCH /v1/customer-trust/questionnaires/{questionnaireId}": WRITE,
    "POST /v1/customer-trust/questionnaires/{questionnaireId}/approve": WRITE,
    "PATCH /v1/customer-trust/accounts/{accountId}": WRITE,
    "POST /v1/discovered-vendors/{discoveredVendorId}/add-to-managed": (*WRITE, "*.vendors:write"),
    "POST /v1/documents/{documentId}/links": (
        *WRITE,
        "*.documents:write",
        "*.documents:upload",
        "self:write-document",
    ),
    "POST /v1/groups/{groupId}/add-people": WRITE,
}


def _granted(pattern: str, scopes: frozenset[str]) -> bool:
    if pattern.startswith("*."):
        return any(scope.endswith(pattern[1:]) and scope.count(".") == 1 for scope in scopes)
    return pattern in scopes


def missing_scopes(route: str, scopes: frozenset[str]) -> tuple[str, ...] | None:
    """None when the token may call ``route``; otherwise the scopes that would allow it."""
    needed = ROUTE_SCOPES.get(route)
    if needed is None or any(_granted(pattern, scopes) for pattern in needed):
        return None
    return needed
