"""Who may do what on the Prefect API: roles and people, read from a policy file the operator edits.

A role allows requests by rule: ``METHOD /api/path [field=pattern ...]``. ``METHOD`` is an HTTP
method, ``WS`` (a websocket) or ``*``; each path segment is a shell pattern (``*`` one segment,
``compliance_sent_*`` a prefix, ``{a,b}`` either) and ``**`` any number of segments;
``field=pattern`` must hold for that top-level field of the JSON body (a Variable's ``name``).
Roles may ``include`` others.
Anything no role of the person allows is refused. The default file is
``deployments/access_policy.yaml``; docs/access.md explains the roles.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from deployments.settings import deployment_settings

DEFAULT_POLICY = Path(__file__).with_name("access_policy.yaml")
POLICY_SETTING = "COMPLIANCE_ACCESS_POLICY"
METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE", "WS", "*"}


class AccessPolicyError(ValueError):
    """The policy file cannot be used; the message names the field and the value."""


@dataclass(frozen=True)
class Rule:
    """One ``METHOD /path [field=pattern ...]`` line of a role."""

    method: str
    segments: tuple[str, ...]
    body: tuple[tuple[str, str], ...] = ()
    text: str = ""

    @classmethod
    def parse(cls, text: str, where: str) -> Rule:
        method, _, rest = text.strip().partition(" ")
        path, *conditions = rest.split()
        if method.upper() not in METHODS:
            raise AccessPolicyError(f"{where}: {text!r}: the method must be one of {METHODS}")
        if not path.startswith("/"):
            raise AccessPolicyError(f"{where}: {text!r}: the path must start with /")
        body: list[tuple[str, str]] = []
        for condition in conditions:
            field, equals, pattern = condition.partition("=")
            if not equals or not field or not pattern:
                raise AccessPolicyError(
                    f"{where}: {text!r}: expected field=pattern, not {condition!r}"
                )
            body.append((field, pattern))
        segments = tuple(path.strip("/").split("/"))
        return cls(method.upper(), segments, tuple(body), text.strip())

    def fits(self, method: str, path: str) -> bool:
        """The method and path match (the body is not looked at)."""
        segments = tuple(path.strip("/").split("/"))
        return self.method in ("*", method) and _path_matches(self.segments, segments)

    def matches(self, method: str, path: str, body: Mapping[str, Any] | None) -> bool:
        return self.fits(method, path) and all(
            isinstance(body, Mapping)
            and isinstance(body.get(field), str)
            and fnmatch.fnmatchcase(body[field], pattern)
            for field, pattern in self.body
        )


def _path_matches(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_path_matches(rest, path[skip:]) for skip in range(len(path) + 1))
    return bool(path) and _segment_matches(path[0], head) and _path_matches(rest, path[1:])


def _segment_matches(segment: str, pattern: str) -> bool:
    """A shell pattern; ``{a,b}`` (the whole segment) is either."""
    if pattern.startswith("{") and pattern.endswith("}"):
        return any(fnmatch.fnmatchcase(segment, one) for one in pattern[1:-1].split(","))
    return fnmatch.fnmatchcase(segment, pattern)


class RoleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include: list[str] = Field(default_factory=list)
    allow: list[str] = Field(default_factory=list)


class PolicyFile(BaseModel):
    """The file's shape: ``roles`` (name -> include/allow) and ``people`` (identity -> roles)."""

    model_config = ConfigDict(extra="forbid")

    roles: dict[str, RoleSpec]
    people: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("people", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @model_validator(mode="after")
    def _known_roles(self) -> PolicyFile:
        for name, spec in self.roles.items():
            for included in spec.include:
                if included not in self.roles:
                    raise ValueError(f"roles.{name}.include: unknown role {included!r}")
        for person, roles in self.people.items():
            if not person.strip():
                raise ValueError(f"people: an empty identity {person!r}")
            for role in roles:
                if role not in self.roles:
                    raise ValueError(f"people.{person}: unknown role {role!r}")
        return self


@dataclass(frozen=True)
class AccessPolicy:
    """The rules of each role (includes resolved) and the roles of each person."""

    rules: Mapping[str, tuple[Rule, ...]]
    people: Mapping[str, frozenset[str]]

    @classmethod
    def from_file(cls, data: PolicyFile) -> AccessPolicy:
        parsed = {
            name: tuple(Rule.parse(text, f"roles.{name}.allow") for text in spec.allow)
            for name, spec in data.roles.items()
        }
        rules = {name: _resolved(name, data, parsed, ()) for name in data.roles}
        people = {person: frozenset(roles) for person, roles in data.people.items()}
        return cls(rules, people)

    def roles_of(self, person: str) -> frozenset[str]:
        return self.people.get(person, frozenset())

    def rule_for(
        self, person: str, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> Rule | None:
        """The first rule of the person's roles that allows the request (None: refused)."""
        for role in sorted(self.roles_of(person)):
            for rule in self.rules[role]:
                if rule.matches(method, path, body):
                    return rule
        return None

    def needs_body(self, person: str, method: str, path: str) -> bool:
        """Whether a rule of the person's with body conditions fits the method and path (then
        the request's JSON body decides)."""
        return any(
            rule.body and rule.fits(method, path)
            for role in self.roles_of(person)
            for rule in self.rules[role]
        )


def _resolved(
    name: str, data: PolicyFile, parsed: Mapping[str, tuple[Rule, ...]], seen: tuple[str, ...]
) -> tuple[Rule, ...]:
    if name in seen:
        raise AccessPolicyError(f"roles.{name}.include: a cycle ({' -> '.join((*seen, name))})")
    included = [
        rule
        for other in data.roles[name].include
        for rule in _resolved(other, data, parsed, (*seen, name))
    ]
    return (*parsed[name], *included)


def load_policy(path: Path | None = None) -> AccessPolicy:
    """The policy in ``path`` (default: ``COMPLIANCE_ACCESS_POLICY``, else the shipped file)."""
    configured = deployment_settings().access_policy
    path = path or configured or DEFAULT_POLICY
    named = f"{POLICY_SETTING}={str(path)!r}" if path == configured else str(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise AccessPolicyError(f"{named}: cannot be read ({error})") from None
    except yaml.YAMLError as error:
        raise AccessPolicyError(f"{named}: not YAML ({error})") from None
    try:
        return AccessPolicy.from_file(PolicyFile.model_validate(raw))
    except ValueError as error:
        raise AccessPolicyError(f"{named}: {error}") from None
