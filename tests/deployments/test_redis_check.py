"""The Redis several Prefect servers share, checked before anything starts
(deployments/redis_check.py): beyond loopback only with a password and verified TLS; a Redis
that wants a password the URL lacks refuses the stack before any process starts; whether it
keeps its data across a restart is known (the recipe needs it: docs/scaling.md §4)."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from deployments.redis_check import RedisCheckError, check_redis_url, preflight
from deployments.stack import LocalStack, StackOptions
from tests.fixtures.own_redis import own_redis
from tests.fixtures.stack import stack_options

PASSWORD = secrets.token_urlsafe(24)


def test_a_redis_that_wants_a_password_refuses_the_stack_before_anything_starts(
    tmp_path: Path,
) -> None:
    with own_redis(tmp_path / "redis", PASSWORD, "--save", "", "--appendonly", "no") as server:
        for url, words in [
            (server.url(password=None), "requires a password"),
            (server.url(password="not-" + PASSWORD), "refused the password"),
        ]:
            stack = LocalStack(stack_options(tmp_path / "state", redis_url=url))
            with pytest.raises(RedisCheckError, match=words) as refused:
                stack.start()
            assert stack.children == [] and stack.replicas == [], "nothing was started"
            assert PASSWORD not in str(refused.value)
        facts = preflight(server.url())
        assert facts.persistent is False, "no AOF, no snapshots: a restart forgets the leases"


def test_a_redis_with_an_append_only_file_is_known_to_persist(tmp_path: Path) -> None:
    with own_redis(tmp_path / "redis", PASSWORD, "--appendonly", "yes") as server:
        assert preflight(server.url()).persistent is True


def test_nothing_answers_is_a_clear_refusal_too(tmp_path: Path) -> None:
    with own_redis(tmp_path / "redis", None) as server:
        url = server.url()
    with pytest.raises(RedisCheckError, match="cannot reach Redis"):
        preflight(url, timeout=2)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("redis://redis.internal:6379/0", "needs a password"),
        (f"redis://:{PASSWORD}@redis.internal:6379/0", r"needs TLS \(rediss://\)"),
        (f"rediss://:{PASSWORD}@10.0.0.7:6380/0?ssl_cert_reqs=none", "must be verified"),
        (f"rediss://:{PASSWORD}@10.0.0.7:6380/0?ssl_cert_reqs=optional", "must be verified"),
    ],
    ids=["no-password", "no-tls", "unverified", "optional"],
)
def test_a_redis_beyond_loopback_needs_a_password_and_verified_tls(url: str, words: str) -> None:
    with pytest.raises(ValueError, match=words) as refused:
        StackOptions(state_dir=Path("unused"), redis_url=url)
    assert PASSWORD not in str(refused.value)


def test_the_recipes_redis_urls_are_taken() -> None:
    for url in (
        f"rediss://:{PASSWORD}@redis.internal:6380/0",
        f"rediss://prefect:{PASSWORD}@10.0.0.7:6380/0?ssl_ca_certs=/etc/prefect/tls/ca.pem",
        "redis://127.0.0.1:6379/0",  # the try-out, on loopback
    ):
        check_redis_url(url)
