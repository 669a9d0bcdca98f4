"""Try-out sign-ins for ``make serve``: four people, four roles; nobody holds the server string.

On first start ``make serve`` writes into its state dir, each file 0600:

- ``try-out-people.txt``: ``name:password`` per person, what a person types into the browser's
  sign-in and what ``PREFECT_API_AUTH_STRING`` takes for the CLI;
- ``people`` (scrypt hashes, what the server checks; ``deployments/identity.py``);
- ``access-policy.yaml``: the shipped policy with these people given their roles.

Later starts reuse them, so the passwords stay the same. A team replaces them with its own
people file and policy (``serve --people FILE --access-policy FILE``, docs/access.md).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml

from compliance_api.files import write_secret
from deployments.access import DEFAULT_POLICY
from deployments.identity import add_person

#: who signs in on ``make serve`` and as what: alice and bob each request changes and decide
#: on the other's (never on their own: four eyes)
PEOPLE: dict[str, list[str]] = {
    "alice": ["requester", "approver"],
    "bob": ["requester", "approver"],
    "carol": ["admin"],
    "dave": ["viewer"],
}
PASSWORDS_FILE, PEOPLE_FILE, POLICY_FILE = "try-out-people.txt", "people", "access-policy.yaml"
PASSWORD_BYTES = 15  # 20 url-safe characters


@dataclass(frozen=True)
class TryOutPeople:
    passwords_file: Path
    people_file: Path
    policy_file: Path

    def describe(self) -> str:
        """``alice (requester), bob (approver), ...``"""
        return ", ".join(f"{name} ({', '.join(roles)})" for name, roles in PEOPLE.items())


def ensure(state_dir: Path) -> TryOutPeople:
    """The try-out people of ``state_dir``, created on first use (all three files 0600)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    people = TryOutPeople(
        state_dir / PASSWORDS_FILE, state_dir / PEOPLE_FILE, state_dir / POLICY_FILE
    )
    passwords = _read_passwords(people.passwords_file)
    if set(passwords) != set(PEOPLE) or not people.people_file.is_file():
        passwords = {name: secrets.token_urlsafe(PASSWORD_BYTES) for name in PEOPLE}
        people.people_file.unlink(missing_ok=True)
        for name, password in passwords.items():
            add_person(people.people_file, name, password)
        write_secret(people.passwords_file, _passwords_text(passwords))
    write_secret(people.policy_file, _policy_text())
    return people


def _read_passwords(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines()
    pairs = (line.partition(":") for line in lines if line and not line.startswith("#"))
    return {name: password for name, _, password in pairs if password}


def _passwords_text(passwords: dict[str, str]) -> str:
    header = [
        "# make serve's try-out sign-ins (deployments/try_out.py), one name:password per line:",
        "# type them into the browser's sign-in, or for the CLI:",
        '#   export PREFECT_API_AUTH_STRING="$(grep ^carol: THIS_FILE)"',
        "# roles: " + ", ".join(f"{name} {'/'.join(roles)}" for name, roles in PEOPLE.items()),
    ]
    return "\n".join(header + [f"{name}:{password}" for name, password in passwords.items()]) + "\n"


def _policy_text() -> str:
    policy = yaml.safe_load(DEFAULT_POLICY.read_text(encoding="utf-8"))
    policy["people"] = PEOPLE
    header = (
        "# make serve's try-out policy: the shipped deployments/access_policy.yaml with the\n"
        "# try-out people given roles. Rewritten on every start; edit a copy and pass\n"
        "# serve --access-policy (with --people) to change it.\n"
    )
    return header + yaml.safe_dump(policy, sort_keys=False)
