"""``StaticTokenProvider`` for quick scripts; production uses ``compliance_api.tokens``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import SecretStr

from compliance_api.auth import AccessToken

#: an outside token's unknown lifetime is taken to be the service's
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
        return self._token

    async def replace_token(self, failed: AccessToken) -> AccessToken:
        """Nothing to replace it with: the retried call fails with the service's 401."""
        return self._token

    def __repr__(self) -> str:
        return f"StaticTokenProvider({self._token!r})"
