"""Errors of the token broker and its backends; none of them ever carries a token."""

from __future__ import annotations

from compliance_api.errors import ComplianceError


class TokenLockTimeoutError(ComplianceError):
    """The shared token lock was not obtained in time; the message says who holds it."""


class TokenStoreError(ComplianceError):
    """The token store could not be read, decrypted or written."""


class NotConnectedError(ComplianceError):
    """A public integration has no stored grant for this customer: the customer must authorize."""
