"""The try-out's sign-in endpoint (deployments/identity.py): the people file and the answer
nginx's auth_request gets. Through real nginx: tests/deployments/test_auth.py."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest

from deployments import identity
from deployments.identity import IdentityError, Verifier, add_person, main, read_people


def _basic(name: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()


def test_the_people_file_holds_hashes_only_and_is_private(tmp_path: Path) -> None:
    people = tmp_path / "people"
    add_person(people, "alice", "correct horse battery staple")
    add_person(people, "worker-1", "x" * 32)
    text = people.read_text()
    assert "correct horse" not in text and "x" * 32 not in text
    assert stat.S_IMODE(people.stat().st_mode) == 0o600
    assert set(read_people(people)) == {"alice", "worker-1"}
    add_person(people, "alice", "another long password!")  # replaced, not added twice
    assert text.count("alice:") == 1 and read_people(people)["alice"] not in text


@pytest.mark.parametrize(
    ("name", "password", "message"),
    [
        ("alice", "short", "needs 16\\+ characters"),
        ("al ice", "x" * 20, "no spaces"),
        ("al:ice", "x" * 20, "colons"),
        ("", "x" * 20, "identity ''"),
    ],
)
def test_an_unusable_person_is_refused_without_showing_the_password(
    tmp_path: Path, name: str, password: str, message: str
) -> None:
    with pytest.raises(IdentityError, match=message) as refused:
        add_person(tmp_path / "people", name, password)
    assert password not in str(refused.value)


def test_a_malformed_line_is_named_by_its_number(tmp_path: Path) -> None:
    people = tmp_path / "people"
    people.write_text("# people\nalice:plaintext-password\n")
    with pytest.raises(IdentityError, match="line 2") as refused:
        read_people(people)
    assert "plaintext-password" not in str(refused.value)


def test_only_the_right_password_names_the_person_and_scrypt_runs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    people = tmp_path / "people"
    add_person(people, "bob", "bob's long password")
    verifier = Verifier(read_people(people))
    calls: list[int] = []
    real = identity._scrypt

    def counted(*args: object) -> bytes:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(identity, "_scrypt", counted)
    assert verifier.identity(_basic("bob", "bob's long password")) == "bob"
    assert verifier.identity(_basic("bob", "bob's long password")) == "bob"
    assert len(calls) == 1  # remembered: not every API call pays for scrypt
    assert verifier.identity(_basic("bob", "wrong")) is None
    assert verifier.identity(_basic("mallory", "bob's long password")) is None
    for header in (
        None,
        "",
        "Bearer x",
        "Basic !!!",
        "Basic " + base64.b64encode(b"\xff").decode(),
    ):
        assert verifier.identity(header) is None


def test_the_cli_adds_a_person_from_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    people = tmp_path / "people"
    monkeypatch.setattr("sys.stdin", io.StringIO("a long enough password\n"))
    assert main(["add", "carol", str(people)]) == 0
    assert "carol can sign in" in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert main(["add", "dan", str(people)]) == 2
    assert "needs 16+ characters" in capsys.readouterr().err
