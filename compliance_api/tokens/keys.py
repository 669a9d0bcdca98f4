"""Who a stored token belongs to: tier, application and (public apps) customer. The key is
hashed into file and variable names, so identifiers never show in paths."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from pydantic import SecretStr

from compliance_api.settings import ApplicationType, Settings

_SECRET_FINGERPRINT_LABEL = b"compliance-flows/client-secret-fingerprint/v1"


@dataclass(frozen=True)
class CustomerKey:
    """One active token per (tier, client_id, source_id), as the service itself counts them."""

    tier: str
    client_id: str
    source_id: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> CustomerKey:
        """Only public integrations have a customer (source_id), even for settings built
        around validation (``model_copy``)."""
        public = settings.application_type is ApplicationType.INTEGRATION_PUBLIC
        source_id = settings.source_id if public else None
        return cls(tier=settings.tier, client_id=settings.client_id, source_id=source_id)

    @property
    def slug(self) -> str:
        """Stable, filesystem- and Prefect-name-safe identifier (hex)."""
        raw = "\x1f".join((self.tier, self.client_id, self.source_id or ""))
        return hashlib.sha256(raw.encode()).hexdigest()[:32]

    def describe(self) -> str:
        source = f", source_id={self.source_id}" if self.source_id else ""
        return f"client_id={self.client_id}{source} ({self.tier} tier)"


def secret_fingerprint(secret: SecretStr) -> str:
    """Identifies which client_secret minted a token, without being reversible into it."""
    mac = hmac.new(_SECRET_FINGERPRINT_LABEL, secret.get_secret_value().encode(), hashlib.sha256)
    return mac.hexdigest()[:16]
