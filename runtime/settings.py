"""What the Prefect runtime reads from ``COMPLIANCE_*`` variables (process environment only):
how a flow run gets its settings and keeps its token, so not part of the client's ``Settings``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from compliance_api.settings import ENV_PREFIX, blank_is_unset, environment_settings


class RuntimeSettings(BaseSettings):
    """How a flow run gets its settings, keeps its token and finds the link ledger."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    #: ``local``: files and a flock in the state dir; ``prefect``: on the Prefect server
    token_store: Literal["local", "prefect"] = "local"  # noqa: S105 - a store kind
    #: the Compliance Credentials block flow runs take their credentials from, if any
    credentials_block: Annotated[str | None, BeforeValidator(blank_is_unset)] = None
    #: PostgreSQL database of the shared document-link ledger; unset: a file in the state dir
    link_ledger_url: Annotated[SecretStr | None, BeforeValidator(blank_is_unset)] = None

    @field_validator("token_store", mode="before")
    @classmethod
    def _normal_store(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip().lower() or "local"
        return value


def runtime_settings() -> RuntimeSettings:
    """Read now (tests and operators may change the environment between runs)."""
    return environment_settings(RuntimeSettings)
