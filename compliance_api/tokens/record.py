"""The stored token record and its encryption (MultiFernet, for key rotation): stores only ever
see ciphertext, so every backend is encrypted at rest."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from cryptography.fernet import InvalidToken, MultiFernet
from pydantic import SecretStr

from compliance_api.auth import AccessToken
from compliance_api.settings import ENV_PREFIX
from compliance_api.tokens.errors import TokenStoreError
from compliance_api.tokens.keys import CustomerKey

RECORD_VERSION = 1


@dataclass(frozen=True)
class TokenRecord:
    """The current grant of one customer key."""

    key: CustomerKey
    access_token: SecretStr = field(repr=False)
    expires_at: datetime
    minted_at: datetime
    secret_fingerprint: str
    refresh_token: SecretStr | None = field(default=None, repr=False)

    @property
    def token(self) -> AccessToken:
        return AccessToken(value=self.access_token, expires_at=self.expires_at)


class TokenCodec:
    """Serialises records to JSON and encrypts them; the first key encrypts, all keys decrypt."""

    def __init__(self, fernet: MultiFernet) -> None:
        self._fernet = fernet

    def encrypt(self, record: TokenRecord) -> bytes:
        document = {
            "version": RECORD_VERSION,
            "tier": record.key.tier,
            "client_id": record.key.client_id,
            "source_id": record.key.source_id,
            "access_token": record.access_token.get_secret_value(),
            "refresh_token": (
                record.refresh_token.get_secret_value()
                if record.refresh_token is not None
                else None
            ),
            "expires_at": record.expires_at.isoformat(),
            "minted_at": record.minted_at.isoformat(),
            "secret_fingerprint": record.secret_fingerprint,
        }
        return self._fernet.encrypt(json.dumps(document).encode())

    def decrypt(self, ciphertext: bytes, key: CustomerKey) -> TokenRecord:
        try:
            document = json.loads(self._fernet.decrypt(ciphertext))
        except InvalidToken:
            raise TokenStoreError(
                f"the stored token of {key.describe()} cannot be decrypted with "
                f"{ENV_PREFIX}TOKEN_ENCRYPTION_KEY; when rotating keys, list the new key first "
                "and keep the old one after it"
            ) from None
        stored = CustomerKey(document["tier"], document["client_id"], document["source_id"])
        if stored != key:
            raise TokenStoreError(f"the stored record does not belong to {key.describe()}")
        refresh = document.get("refresh_token")
        return TokenRecord(
            key=stored,
            access_token=SecretStr(document["access_token"]),
            refresh_token=SecretStr(refresh) if refresh else None,
            expires_at=datetime.fromisoformat(document["expires_at"]),
            minted_at=datetime.fromisoformat(document["minted_at"]),
            secret_fingerprint=document["secret_fingerprint"],
        )
