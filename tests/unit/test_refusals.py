"""A flood of refusals grows gbatchd.log by a bounded amount: per uid, at most LINES
audit lines per window, then one line counting the rest once the window has ended."""

from __future__ import annotations

import logging
import pwd
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from gbatch.head import refusals
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.refusals import RefusalLines
from gbatch.head.store import Store
from gbatch.site.config import Config, Paths

BOB = Caller(uid=5002, user="bob", pid=22)
NOBODY = pwd.getpwnam("nobody")
CAROL = Caller(uid=5003, user="carol", pid=33)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def daemon(tmp_path: Path, clock: Clock) -> Iterator[Daemon]:
    store = Store(Paths(tmp_path).store)
    made = Daemon(Paths(tmp_path), Config(simulate_gpus=1), store, monotonic=clock)
    yield made
    made.committer.close()
    store.close()


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("audit")]


def drain(daemon: Daemon, caller: Caller, name: str) -> None:
    reply = handle(daemon, caller, {"op": "node_drain", "name": name, "reason": "r"})
    assert reply["kind"] == "permission"


def test_a_flood_of_refusals_gets_a_few_lines_then_one_that_counts_the_rest(
    daemon: Daemon, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gbatchd")
    for _ in range(5000):
        drain(daemon, BOB, "x" * 100_000)
    lines = audit_lines(caplog)
    assert len(lines) == refusals.LINES
    assert sum(map(len, lines)) < refusals.LINES * 500  # each cut to 200 characters
    daemon.refusal_lines.close_ended()  # the window is still open: nothing to say yet
    assert len(audit_lines(caplog)) == refusals.LINES
    clock.now += refusals.WINDOW_SECONDS
    daemon.refusal_lines.close_ended()  # the loop's tick, after the flood stopped
    assert audit_lines(caplog)[refusals.LINES :] == [
        "audit: user=bob uid=5002 op=node_drain -> and 4,990 more refusals in 10 s, not logged "
        "one by one (at most 10 lines per user and operation per 10 s)"
    ]
    daemon.refusal_lines.close_ended()
    assert len(audit_lines(caplog)) == refusals.LINES + 1  # said once
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_one_users_flood_leaves_anothers_refusals_their_lines(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gbatchd")
    for _ in range(50):
        drain(daemon, BOB, "gpu1")
    drain(daemon, CAROL, "gpu2")
    lines = audit_lines(caplog)
    assert len(lines) == refusals.LINES + 1
    assert lines[-1].startswith("audit: user=carol uid=5003 pid=33 op=node_drain target=node_gpu2")


def test_a_refusal_after_the_window_opens_a_new_one_and_is_logged_after_the_count(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gbatchd")
    lines = RefusalLines(clock, lines=2, window=10.0)
    assert [lines.admit("user=eve uid=7", "cancel") for _ in range(4)] == [True, True, False, False]
    clock.now += 9.9
    assert lines.admit("user=eve uid=7", "cancel") is False
    clock.now += 0.1
    assert (
        lines.admit("user=eve uid=7", "cancel") is True
    )  # a new window; the last one's count first
    assert [r.getMessage() for r in caplog.records] == [
        "audit: user=eve uid=7 op=cancel -> and 3 more refusals in 10 s, not logged one by "
        "one (at most 2 lines per user and operation per 10 s)"
    ]
    clock.now += 10.0
    lines.close_ended()  # every refusal of that window had its line: nothing to count
    assert len(caplog.records) == 1


def test_a_flood_of_one_operation_leaves_another_of_the_same_user_its_lines(
    clock: Clock,
) -> None:
    # A thousand refused connections must not hide the one slow request that was closed.
    lines = RefusalLines(clock, lines=2, window=10.0)
    assert [lines.admit("user=eve uid=7", "connect") for _ in range(3)] == [True, True, False]
    assert lines.admit("user=eve uid=7", "request") is True


# -- refused API tokens: charged to their user or their client, not to the API's uid -----

API = Caller(uid=5999, user="gbatch-api", pid=99)  # `gbatch api serve`'s own user
GARBAGE = "eyJhbGciOiJIUzI1NiIsImtpZCI6WyJ4Il19.eyJzdWIiOiJub2JvZHkifQ.c2ln"  # kid: ["x"]


def through_api(daemon: Daemon, token: str, client: str = "") -> dict[str, object]:
    request = {"op": "with_token", "token": token, "request": {"op": "jobs"}, "client": client}
    return handle(daemon, API, request)


def revoked_token(daemon: Daemon) -> str:
    root = Caller(uid=0, user="root", pid=1)
    # nobody's own token (root may mint only for a listed service account, issue 29).
    nobody = Caller(uid=NOBODY.pw_uid, user=NOBODY.pw_name, pid=2)
    minted = handle(daemon, nobody, {"op": "token", "scopes": ["read"]})
    assert handle(daemon, root, {"op": "token_revoke", "jti": minted["jti"]})["ok"]
    return str(minted["token"])


def test_an_outsiders_garbage_tokens_leave_a_real_users_refused_token_its_line(
    daemon: Daemon, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 29: every refused token was charged to the API's uid, so 1,098 garbage
    tokens from one address in 20 s hid the refusal of a real user's revoked token."""
    token = revoked_token(daemon)
    caplog.set_level(logging.INFO, logger="gbatchd")
    for _ in range(1000):
        assert through_api(daemon, GARBAGE, "203.0.113.9")["kind"] == "unauthenticated"
    assert through_api(daemon, token, "198.51.100.7")["kind"] == "unauthenticated"
    lines = audit_lines(caplog)
    assert len(lines) == refusals.LINES + 1
    assert lines[0].startswith(
        "audit: user=gbatch-api uid=5999 pid=99 op=with_token client=203.0.113.9 target=api "
        "-> refused: the token is not a gbatch token ("
    )
    assert re.fullmatch(
        rf"audit: user=nobody uid={NOBODY.pw_uid} pid=99 via=token:[0-9a-f]+ op=with_token "
        "target=api -> refused: the token was revoked. Get a new one with `gbatch token`",
        lines[-1],
    )
    clock.now += refusals.WINDOW_SECONDS
    daemon.refusal_lines.close_ended()
    assert audit_lines(caplog)[-1] == (
        "audit: client=203.0.113.9 op=with_token -> and 990 more refusals in 10 s, not logged "
        "one by one (at most 10 lines per user and operation per 10 s)"
    )


def test_made_up_client_addresses_cannot_multiply_the_lines(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gbatchd")
    for n in range(5000):
        through_api(daemon, GARBAGE, f"10.0.{n // 256}.{n % 256}")
    lines = audit_lines(caplog)
    assert len(lines) <= (refusals.MAX_CLIENTS + 1) * refusals.LINES
    assert any(" client=10.0.0.0 " in line for line in lines)


def test_a_refused_token_without_a_client_is_charged_to_its_sender(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gbatchd")
    for _ in range(50):
        through_api(daemon, GARBAGE)
    lines = audit_lines(caplog)
    assert len(lines) == refusals.LINES
    assert lines[0].startswith("audit: user=gbatch-api uid=5999 pid=99 op=with_token target=api")
