"""What bootstrap and the deployments read from ``COMPLIANCE_*`` variables: the process
environment only (never ``.env``), and no credentials, which bootstrap has none of.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from compliance_api.settings import ENV_PREFIX, LocalState, blank_is_unset, environment_settings

#: what prefect.yaml sets as PREFECT_FLOWS_HEARTBEAT_FREQUENCY (Prefect's minimum is 30 s)
HEARTBEAT_SECONDS = 30
#: three missed heartbeats: a busy machine may delay one, not three
DEFAULT_GRACE_SECONDS = 90
#: flow runs of the work pool at once (excess runs wait Scheduled); an existing pool's is kept
DEFAULT_WORK_POOL_CONCURRENCY = 8


class DeploymentSettings(LocalState):
    """Bootstrap's settings: state directory, work pool, token rate limit, automations."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    #: flow runs of the work pool at once (a new pool only)
    work_pool_concurrency: int = Field(
        default=DEFAULT_WORK_POOL_CONCURRENCY,
        ge=1,
        le=1000,
        description="a whole number from 1 to 1000",
    )
    #: silence after a heartbeat before a run is marked Crashed
    unresponsive_run_grace_seconds: int = Field(
        default=DEFAULT_GRACE_SECONDS,
        gt=HEARTBEAT_SECONDS,
        description=(
            f"a whole number of seconds longer than the {HEARTBEAT_SECONDS} s between "
            "heartbeats, or live runs would be marked Crashed"
        ),
    )
    #: the access policy file the Prefect API server enforces (None: the shipped one)
    access_policy: Path | None = None
    #: people who sign in at the API server itself, with no proxy in front (None: nobody)
    people_file: Path | None = None
    #: the API server's key that signs four-eyes decisions (None: in its PREFECT_HOME)
    decision_key_file: Path | None = None
    #: where failed write runs are notified; secret (its path is often a token)
    notify_webhook_url: SecretStr | None = None
    #: or ``<block-type-slug>/<block-name>`` of an operator's notification block
    notify_block: str | None = None

    @field_validator(
        "access_policy",
        "people_file",
        "decision_key_file",
        "notify_webhook_url",
        "notify_block",
        mode="before",
    )
    @classmethod
    def _blank(cls, value: Any) -> Any:
        return blank_is_unset(value)

    @field_validator("notify_webhook_url")
    @classmethod
    def _check_webhook_url(cls, value: SecretStr | None) -> SecretStr | None:
        """An absolute http(s) URL; the message never repeats its path or query."""
        if value is None:
            return None
        try:
            parts = urlsplit(value.get_secret_value())
            parts.port  # noqa: B018 - raises ValueError for a malformed port
        except ValueError:
            raise ValueError(
                "not a valid URL; expected an absolute http(s) URL such as "
                "https://hooks.slack.com/services/..."
            ) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            scheme = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
            host = "a host" if parts.hostname else "no host"
            raise ValueError(
                "must be an absolute http(s) URL such as "
                f"https://hooks.slack.com/services/...; it has {scheme} and {host}"
            )
        return value

    @field_validator("notify_block")
    @classmethod
    def _check_block(cls, value: str | None) -> str | None:
        if value is None:
            return None
        slug, slash, name = value.partition("/")
        if not slash or not slug or not name or "/" in name:
            raise ValueError(
                "must be <block-type-slug>/<block-name> of a notification block, "
                "e.g. slack-webhook/compliance-alerts (`prefect block ls` lists them)"
            )
        return value


def deployment_settings() -> DeploymentSettings:
    """Read now (tests and ``make serve`` change the environment between steps)."""
    return environment_settings(DeploymentSettings)
