"""The seam between the data client and the token's owner: on a 401 the client asks the
``TokenProvider`` to replace exactly the failed token (compare-and-swap: one mint for many callers).
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
