"""A flow or worker process killed mid-run (SIGKILL: no cleanup at all), then the recovery an
operator would do; and locks whose holder died.

Recovery rules these tests pin down:
* add-people is set-semantic: rerun the same input. The killed run left no failed-items record
  (it never reported), so the whole input is sent again: every person exactly once more.
* document links are not idempotent: rerun the same manifest. The ledger skips links the
  killed run saw attached, reports the ones whose answer it never saw (needs_review, not
  resent), and sends the rest; the operator settles the reviewed ones after checking.
* a token lock (flock) dies with its holder (a lock on the Prefect server is freed after its
  lease: tests/deployments/test_scale_out.py).
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from flows.add_people_to_groups import add_people_to_groups
from flows.document_links import attach_document_links
from sandbox.runner import SandboxHandle
from tests.fixtures.chaos import (
    ADD_PEOPLE,
    CREATE_LINK,
    child_env,
    group_adds,
    kill_hard,
    run_flow,
    settle_reviewed_links,
    slow,
    start_child,
    start_lock_holder,
    wait_for,
    write_counts,
)
from write_engine.outcomes import Outcome

pytestmark = pytest.mark.chaos

LOCK_DEADLINE_SECONDS = 60.0


def _manifest(path: Path, seed: dict[str, Any], count: int) -> list[dict[str, Any]]:
    documents = seed["documents"]
    links = [
        {
            "document_id": documents[index % len(documents)],
            "url": f"https://evidence.example/crash/{index}",
            "title": f"Evidence {index}",
        }
        for index in range(count)
    ]
    path.write_text(json.dumps(links))
    return links


def _key(link: dict[str, Any]) -> str:
    return f"{link['document_id']} {link['url']}"


async def test_flow_process_killed_mid_run_then_document_links_rerun(
    chaos_env: SandboxHandle, seed: dict[str, Any], tmp_path: Path
) -> None:
    control = chaos_env.control
    manifest = tmp_path / "manifest.json"
    links = _manifest(manifest, seed, 24)
    control.set_fault(route=CREATE_LINK, latency_ms=400)
    code = textwrap.dedent(
        f"""
        import asyncio
        from flows.document_links import attach_document_links
        asyncio.run(attach_document_links(input_file={str(manifest)!r}, concurrency=4))
        """
    )
    child = start_child(code, child_env())
    wait_for(lambda: sum(write_counts(chaos_env, "document_link").values()) >= 6, child)
    kill_hard(child)
    await asyncio.sleep(0.6)  # requests already on the wire finish on the server
    control.clear_faults()
    before = write_counts(chaos_env, "document_link")
    assert 6 <= len(before) < len(links) and max(before.values()) == 1

    state, rerun = await run_flow(attach_document_links, input_file=str(manifest))
    after = write_counts(chaos_env, "document_link")
    assert max(after.values()) == 1, "the rerun must not send any link a second time"
    review = [f.rerun_input for f in rerun.failed_items]
    assert all(f.outcome is Outcome.NEEDS_REVIEW for f in rerun.failed_items)
    # links the killed run saw attached are skipped, those it never heard back about are for
    # review (never resent blindly), and only the untouched rest was sent now
    assert rerun.total == len(links)
    assert rerun.counts.get(Outcome.SUCCEEDED, 0) == len(after) - len(before)
    assert rerun.counts.get(Outcome.SKIPPED, 0) + len(review) == len(links) - (
        len(after) - len(before)
    )
    assert all(link in review or _key(link) in after for link in links), "a link was lost"

    # the operator checks each reviewed link on its document, then settles it
    present = [link for link in review if after.get(_key(link))]
    absent = [link for link in review if not after.get(_key(link))]
    await settle_reviewed_links(present, absent)
    _, final = await run_flow(attach_document_links, input_file=str(manifest))
    assert final.counts == {Outcome.SKIPPED: len(links)}
    assert write_counts(chaos_env, "document_link") == {_key(link): 1 for link in links}


@slow
async def test_flow_process_killed_mid_run_then_add_people_rerun(
    chaos_env: SandboxHandle, seed: dict[str, Any], tmp_path: Path
) -> None:
    control = chaos_env.control
    group, people = seed["groups"][0], seed["people"][:400]
    people_file = tmp_path / "people.csv"
    people_file.write_text("person_id\n" + "\n".join(people) + "\n")
    control.set_fault(route=ADD_PEOPLE, latency_ms=500)
    code = textwrap.dedent(
        f"""
        import asyncio
        from flows.add_people_to_groups import add_people_to_groups
        asyncio.run(add_people_to_groups(
            group_ids=[{group!r}], input_file={str(people_file)!r}, concurrency=1))
        """
    )
    child = start_child(code, child_env())
    wait_for(lambda: len(group_adds(chaos_env, group)) >= 100, child)
    kill_hard(child)
    await asyncio.sleep(0.8)
    control.clear_faults()
    before = group_adds(chaos_env, group)
    assert 100 <= len(before) < len(people) and max(before.values()) == 1

    state, summary = await run_flow(
        add_people_to_groups, group_ids=[group], input_file=str(people_file)
    )
    assert state.is_completed(), summary.headline()
    after = group_adds(chaos_env, group)
    # nobody lost, and the rerun sent every person exactly once more (a harmless re-add)
    assert after == {person: before.get(person, 0) + 1 for person in people}


def _lock_holder_code(state_dir: str) -> str:
    return textwrap.dedent(
        f"""
        import asyncio, sys
        from pathlib import Path
        from compliance_api.settings import load_settings
        from compliance_api.tokens.factory import local_lock
        from compliance_api.tokens.keys import CustomerKey

        async def main():
            settings = load_settings(state_dir=Path({state_dir!r}))
            lock = local_lock(settings)
            async with lock.hold(CustomerKey.from_settings(settings), wait_seconds=30):
                print("HELD", flush=True)
                await asyncio.sleep(600)

        asyncio.run(main())
        """
    )


async def test_token_lock_of_a_killed_holder_is_free_at_once(chaos_env: SandboxHandle) -> None:
    """The token lock's holder is killed while minting: the next process gets the lock (and
    a token) well within 60 s; while the holder lived, the lock was really held."""
    from compliance_api.settings import load_settings
    from compliance_api.tokens.errors import TokenLockTimeoutError
    from compliance_api.tokens.factory import local_lock
    from compliance_api.tokens.keys import CustomerKey
    from runtime.connection import shared_broker

    settings = load_settings()
    child = await start_lock_holder(_lock_holder_code(str(settings.state_dir)))
    lock, key = local_lock(settings), CustomerKey.from_settings(settings)
    with pytest.raises(TokenLockTimeoutError):
        async with lock.hold(key, wait_seconds=0.3):
            pass
    kill_hard(child)
    async with lock.hold(key, wait_seconds=LOCK_DEADLINE_SECONDS):
        pass
    token = await shared_broker().get_token()
    assert token.fingerprint
