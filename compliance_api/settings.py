"""Settings from ``COMPLIANCE_*`` variables and an optional ``.env``, all checked at load: a typo
fails before the first call, naming the variable, never a secret's value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

from cryptography.fernet import Fernet, MultiFernet
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from compliance_api.errors import ConfigurationError

ENV_PREFIX = "COMPLIANCE_"
DEFAULT_BASE_URL = "http://127.0.0.1:8700"
DEFAULT_SCOPE_NAMESPACE = "service-api"
DEFAULT_STATE_DIR = Path.home() / ".compliance-flows"
_KEYGEN = (
    "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
)


class ApplicationType(StrEnum):
    MANAGE = "manage"
    INTEGRATION_PRIVATE = "integration_private"
    INTEGRATION_PUBLIC = "integration_public"
    AUDITOR = "auditor"


def allowed_scopes(
    app_type: ApplicationType, namespace: str = DEFAULT_SCOPE_NAMESPACE
) -> list[str]:
    """Scopes each application type may request (spec §5.7; vendor scopes from the real service)."""
    if app_type is ApplicationType.MANAGE:
        suffixes = [
            "all:read",
            "all:write",
            "documents:upload",
            "documents:read",
            "documents:list",
            "documents:write",
            "vendors:read",
            "vendors:write",
        ]
        return [f"{namespace}.{suffix}" for suffix in suffixes]
    if app_type is ApplicationType.AUDITOR:
        return [
            "auditor-api.audit:read",
            "auditor-api.audit:write",
            "auditor-api.auditor:read",
            "auditor-api.auditor:write",
        ]
    return [
        "connectors.self:read-resource",
        "connectors.self:write-resource",
        "self:read-document",
        "self:write-document",
    ]


def default_scopes(
    app_type: ApplicationType, namespace: str = DEFAULT_SCOPE_NAMESPACE
) -> list[str]:
    if app_type is ApplicationType.MANAGE:
        return [f"{namespace}.all:read", f"{namespace}.all:write"]
    if app_type is ApplicationType.AUDITOR:
        return ["auditor-api.audit:read", "auditor-api.auditor:read"]
    return ["connectors.self:read-resource", "self:read-document", "self:write-document"]


def _split_words(value: Any) -> Any:
    """Accept ``"a b"``, ``"a,b"`` or a list, as people write scopes and keys in env files."""
    if isinstance(value, str):
        return [word for word in value.replace(",", " ").split() if word]
    return value


class LocalState(BaseSettings):
    """State directory and token rate-limit name: part of the client's settings, and all that
    bootstrap (which has no credentials) loads."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    state_dir: Path = DEFAULT_STATE_DIR
    token_rate_limit_name: str = "compliance-token-endpoint"  # noqa: S105 - a name

    @field_validator("state_dir", mode="before")
    @classmethod
    def _blank_state_dir_is_default(cls, value: Any) -> Any:
        return DEFAULT_STATE_DIR if isinstance(value, str) and not value.strip() else value

    @field_validator("state_dir")
    @classmethod
    def _expand_user(cls, value: Path) -> Path:
        return value.expanduser()


class Settings(LocalState):
    """Connection, credentials and behaviour of the client."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8")

    base_url: str = DEFAULT_BASE_URL
    gov_base_url: str | None = None
    use_gov: bool = False
    auth_url: str | None = None
    client_id: str = Field(min_length=1)
    client_secret: SecretStr
    application_type: ApplicationType = ApplicationType.MANAGE
    scope_namespace: str = DEFAULT_SCOPE_NAMESPACE
    scopes: Annotated[list[str], NoDecode] = Field(default_factory=list)
    source_id: str | None = None
    redirect_uri: str | None = None
    token_encryption_key: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    token_renewal_margin_seconds: int = Field(default=300, ge=0, le=3000)
    http_timeout_seconds: float = Field(default=30.0, gt=0)
    max_retries: int = Field(default=5, ge=0, le=20)
    #: the longest backoff between two attempts (it starts at 0.5 s and doubles, full jitter)
    retry_max_wait_seconds: float = Field(default=30.0, ge=0, le=300)
    #: the longest ``Retry-After`` of a 429 the client waits for before sending again
    retry_after_max_seconds: float = Field(default=60.0, ge=0, le=600)

    @field_validator("scopes", mode="before")
    @classmethod
    def _parse_scopes(cls, value: Any) -> Any:
        return _split_words(value)

    @field_validator("token_encryption_key", mode="before")
    @classmethod
    def _parse_keys(cls, value: Any) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        return _split_words(value)

    @field_validator("token_encryption_key")
    @classmethod
    def _check_keys(cls, value: list[SecretStr]) -> list[SecretStr]:
        for index, key in enumerate(value):
            try:
                Fernet(key.get_secret_value())
            except (ValueError, TypeError):
                raise ValueError(
                    f"key #{index + 1} is not a Fernet key (32 url-safe base64 bytes); "
                    f"generate one with: {_KEYGEN}"
                ) from None
        return value

    @field_validator("source_id")
    @classmethod
    def _blank_source_id_is_unset(cls, value: str | None) -> str | None:
        """An empty ``COMPLIANCE_SOURCE_ID=`` line in an env file means "not set"."""
        if value is None or not value.strip():
            return None
        return value

    @field_validator("base_url", "gov_base_url", "auth_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _check_combination(self) -> Settings:
        if self.use_gov and not self.gov_base_url:
            raise ValueError(f"{ENV_PREFIX}USE_GOV is true but {ENV_PREFIX}GOV_BASE_URL is not set")
        self._check_source_id()
        allowed = allowed_scopes(self.application_type, self.scope_namespace)
        not_allowed = [scope for scope in self.scopes if scope not in allowed]
        if not_allowed:
            raise ValueError(
                f"{ENV_PREFIX}SCOPES has {', '.join(not_allowed)}, not allowed for application "
                f"type {self.application_type.value}; allowed: {', '.join(allowed)}"
            )
        if not self.scopes:
            object.__setattr__(
                self, "scopes", default_scopes(self.application_type, self.scope_namespace)
            )
        return self

    def _check_source_id(self) -> None:
        """Public integrations need a source_id; any other type must not have one (it would give
        the application a second token key, whose mints supersede the first's)."""
        public = self.application_type is ApplicationType.INTEGRATION_PUBLIC
        if public and not self.source_id:
            raise ValueError(
                f"{ENV_PREFIX}SOURCE_ID is required when {ENV_PREFIX}APPLICATION_TYPE="
                "integration_public (tokens are scoped to client_id and source_id)"
            )
        if not public and self.source_id is not None:
            raise ValueError(
                f"{ENV_PREFIX}SOURCE_ID={self.source_id!r} is only for integration_public "
                f"applications, but {ENV_PREFIX}APPLICATION_TYPE={self.application_type.value} "
                "uses client_credentials, with one active token per application: a source_id "
                "would give it a second token key whose mints supersede the first. "
                f"Unset {ENV_PREFIX}SOURCE_ID"
            )

    @property
    def tier(self) -> str:
        return "gov" if self.use_gov else "commercial"

    @property
    def api_base_url(self) -> str:
        """Where data and token calls go: the government tier replaces the base URL for both."""
        if self.use_gov:
            assert self.gov_base_url is not None
            return self.gov_base_url
        return self.base_url

    @property
    def authorize_url(self) -> str:
        return f"{self.auth_url or self.api_base_url}/oauth/authorize"

    @property
    def scope_string(self) -> str:
        return " ".join(self.scopes)

    def fernet(self) -> MultiFernet:
        """The cipher for tokens at rest; the first key encrypts, every key decrypts."""
        if not self.token_encryption_key:
            raise ConfigurationError(
                f"{ENV_PREFIX}TOKEN_ENCRYPTION_KEY is not set: tokens are only stored encrypted. "
                f"Generate a key with: {_KEYGEN}"
            )
        return MultiFernet([Fernet(key.get_secret_value()) for key in self.token_encryption_key])


def load_settings(**overrides: Any) -> Settings:
    """Settings whose errors name environment variables, never input values (maybe secrets)."""
    return load_settings_from(overrides)


def load_settings_from(
    values: Mapping[str, Any],
    *,
    labels: Mapping[str, str] | None = None,
    origin: str | None = None,
) -> Settings:
    """Settings from ``values`` over the environment. For values from elsewhere (a block),
    ``labels`` names a field in errors instead of its variable (``{"source_id": "block field
    source_id"}``) and ``origin`` goes in the error's first line."""
    try:
        return Settings(**values)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_input=False, include_url=False):
            message = str(error["msg"]).removeprefix("Value error, ")
            if error["type"] == "missing":
                message = "is required but not set"
            location = error["loc"]
            name = f"{ENV_PREFIX}{str(location[0]).upper()}" if location else "settings"
            problems.append(message if message.startswith(ENV_PREFIX) else f"{name}: {message}")
        heading = f"Invalid settings ({origin}):" if origin else "Invalid settings:"
        report = heading + "\n  " + "\n  ".join(problems)
        for field_name, label in (labels or {}).items():  # a label replaces the variable's name
            variable = re.escape(f"{ENV_PREFIX}{field_name.upper()}")
            report = re.sub(rf"\b{variable}\b", label.replace("\\", "\\\\"), report)
        raise ConfigurationError(report) from None


SettingsT = TypeVar("SettingsT", bound=BaseSettings)


def blank_is_unset(value: Any) -> Any:
    """A ``before`` validator: an empty or blank variable (``COMPLIANCE_X=``) means "not set"."""
    if isinstance(value, str):
        return value.strip() or None
    return value


def environment_settings(cls: type[SettingsT]) -> SettingsT:
    """``cls()`` read from the environment, or a ``ConfigurationError`` that names each bad
    variable with its value (``COMPLIANCE_WORK_POOL_CONCURRENCY='0': ...``); a secret field's
    value is never repeated. A field's ``description`` says what is expected."""
    prefix = str(cls.model_config.get("env_prefix") or "")
    try:
        return cls()
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            location = tuple(error["loc"])
            field_name = str(location[0]) if location else ""
            message = str(error["msg"]).removeprefix("Value error, ")
            field = cls.model_fields.get(field_name)
            if field is not None and field.description and error["type"] != "value_error":
                message = f"{message}; expected {field.description}"
            name = f"{prefix}{field_name.upper()}" if field_name else cls.__name__
            secret = field is not None and "SecretStr" in repr(field.annotation)
            if field_name and not secret and "input" in error:
                name = f"{name}={error['input']!r}"
            problems.append(f"{name}: {message}")
        raise ConfigurationError("\n".join(problems)) from None
