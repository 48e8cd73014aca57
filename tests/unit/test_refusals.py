"""A flood of refusals grows gbatchd.log by a bounded amount: per uid, at most LINES
audit lines per window, then one line counting the rest once the window has ended."""

from __future__ import annotations

import logging
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
