"""Simple token providers for scripts and tests (production uses the token broker).

``StaticTokenProvider`` wraps a token someone else obtained; ``InMemoryTokenProvider`` mints
through any async callable and replaces only the exact token that failed, so concurrent 401s
on one token cause one mint.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from pydantic import SecretStr

from compliance_api.auth import AccessToken

#: a token from outside with no known lifetime is assumed to last as long as the service's do
DEFAULT_LIFETIME = timedelta(seconds=3599)


class StaticTokenProvider:
    """One fixed token: fine for a quick script; a refused token cannot be replaced."""

    def __init__(self, token: str | SecretStr | AccessToken) -> None:
        if isinstance(token, AccessToken):
            self._token = token
        else:
            secret = token if isinstance(token, SecretStr) else SecretStr(token)
            self._token = AccessToken(secret, datetime.now(UTC) + DEFAULT_LIFETIME)

    async def get_token(self) -> AccessToken:
        """Always the same token."""
        return self._token

    async def replace_token(self, failed: AccessToken) -> AccessToken:
        """Nothing to replace it with: the retried call fails with the service's 401."""
        return self._token

    def __repr__(self) -> str:
        return f"StaticTokenProvider({self._token!r})"


Mint = Callable[[], Awaitable[AccessToken]]


class InMemoryTokenProvider:
    """Mints on demand, renews before expiry and replaces a refused token exactly once.

    ``mints`` counts calls to ``mint``: tests and benchmarks assert on it.
    """

    def __init__(self, mint: Mint, *, renewal_margin: timedelta = timedelta(seconds=300)) -> None:
        self._mint = mint
        self._margin = renewal_margin
        self._token: AccessToken | None = None
        self._lock = asyncio.Lock()
        self.mints = 0

    async def get_token(self) -> AccessToken:
        """The current token, minted first if there is none or it is about to expire."""
        token = self._token
        if token is not None and not token.expires_within(self._margin):
            return token
        async with self._lock:
            token = self._token
            if token is None or token.expires_within(self._margin):
                token = await self._new_token()
            return token

    async def replace_token(self, failed: AccessToken) -> AccessToken:
        """Compare-and-swap: mint only if ``failed`` is still the current token."""
        async with self._lock:
            current = self._token
            if current is not None and current.fingerprint != failed.fingerprint:
                return current
            return await self._new_token()

    async def _new_token(self) -> AccessToken:
        self.mints += 1
        self._token = await self._mint()
        return self._token

    def __repr__(self) -> str:
        return f"InMemoryTokenProvider(token={self._token!r}, mints={self.mints})"
