"""What the Prefect runtime reads from ``COMPLIANCE_*`` variables (process environment only).

The client's own settings are ``compliance_api.settings.Settings``; these two are about how a
flow run gets them and where its token lives, so they are not part of the client.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from compliance_api.settings import ENV_PREFIX, blank_is_unset, environment_settings


class RuntimeSettings(BaseSettings):
    """How a flow run gets its settings, keeps its token and finds the link ledger."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    #: ``local``: encrypted files and a flock under the state directory; ``prefect``: encrypted
    #: Prefect Variables and a lock on the Prefect server (workers on several machines)
    token_store: Literal["local", "prefect"] = "local"  # noqa: S105 - a store kind
    #: the Compliance Credentials block flow runs take their credentials from, if any
    credentials_block: str | None = None
    #: PostgreSQL database of the document-link ledger every worker shares; unset: a file
    #: under the state directory, shared by this machine's runs only
    link_ledger_url: SecretStr | None = None

    @field_validator("token_store", mode="before")
    @classmethod
    def _normal_store(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip().lower() or "local"
        return value

    @field_validator("credentials_block", "link_ledger_url", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return blank_is_unset(value)


def runtime_settings() -> RuntimeSettings:
    """Read now (tests and operators may change the environment between runs)."""
    return environment_settings(RuntimeSettings)
