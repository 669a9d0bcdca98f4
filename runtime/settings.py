"""What the Prefect runtime reads from ``COMPLIANCE_*`` variables (process environment only).

The client's own settings are ``compliance_api.settings.Settings``; these two are about how a
flow run gets them and where its token lives, so they are not part of the client.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from compliance_api.settings import ENV_PREFIX, blank_is_unset, environment_settings


class RuntimeSettings(BaseSettings):
    """``COMPLIANCE_TOKEN_STORE`` and ``COMPLIANCE_CREDENTIALS_BLOCK``."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    #: ``local``: encrypted files and a flock under the state directory; ``prefect``: encrypted
    #: Prefect Variables and a lock on the Prefect server (workers on several machines)
    token_store: Literal["local", "prefect"] = "local"  # noqa: S105 - a store kind
    #: the Compliance Credentials block flow runs take their credentials from, if any
    credentials_block: str | None = None

    @field_validator("token_store", mode="before")
    @classmethod
    def _normal_store(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip().lower() or "local"
        return value

    @field_validator("credentials_block", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return blank_is_unset(value)


def runtime_settings() -> RuntimeSettings:
    """Read now (tests and operators may change the environment between runs)."""
    return environment_settings(RuntimeSettings)
