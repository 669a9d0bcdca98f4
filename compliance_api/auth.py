"""The seam between the data client and whoever owns the access token.

The client never mints tokens itself: it asks a ``TokenProvider`` for the current token and,
on a 401, asks it to replace exactly the token that failed (compare-and-swap), so that many
callers sharing one provider cause at most one new mint.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

from pydantic import SecretStr


@dataclass(frozen=True)
class AccessToken:
    """A bearer token and when it stops working. ``fingerprint`` is safe to log and compare."""

    value: SecretStr = field(repr=False)
    expires_at: datetime

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(self.value.get_secret_value().encode()).hexdigest()
        return digest[:12]

    def expires_within(self, margin: timedelta, *, now: datetime | None = None) -> bool:
        current = now or datetime.now(UTC)
        return self.expires_at - margin <= current

    def __repr__(self) -> str:
        return f"AccessToken(fingerprint={self.fingerprint!r}, expires_at={self.expires_at!r})"


@runtime_checkable
class TokenProvider(Protocol):
    """Hands out the current access token and replaces one that the service refused."""

    async def get_token(self) -> AccessToken:
        """Return a token that is valid now (renewing it first if it is about to expire)."""
        ...

    async def replace_token(self, failed: AccessToken) -> AccessToken:
        """Replace ``failed`` unless someone already did; return the token to use now."""
        ...
