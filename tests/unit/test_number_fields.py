"""Numbers past what gbatch keeps are refused as `invalid`, naming the field, never a bug.

A student looping `{"op": "cancel", "ranges": ["1-99999999999999999999999"]}` wrote 69 MB
of OverflowError tracebacks into gbatchd.log in 20 s (issue 29): SQLite's integers are
64-bit, and an id past them overflowed in the store. Every integer a request carries (ids,
tasks, counts, offsets, page cursors, lifespans) and every id in a range has at most 18
digits, the job id grammar's (gbatch/core/jobids.py), checked where the request enters.
"""

from __future__ import annotations

import logging
import pwd
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.store import Store
from gbatch.protocol import requests
from gbatch.site.config import Config, Paths

NOBODY = pwd.getpwnam("nobody")
STUDENT = Caller(uid=NOBODY.pw_uid, user=NOBODY.pw_name, pid=7)
TOO_LONG = ["9" * 23, str(2**63), str(2**63 - 1), "1" + "0" * 18]


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    store = Store(Paths(tmp_path).store)
    made = Daemon(Paths(tmp_path), Config(simulate_gpus=1), store)
    yield made
    made.committer.close()
    store.close()


def refused(daemon: Daemon, request: dict[str, Any], caplog: pytest.LogCaptureFixture) -> str:
    """The `invalid` refusal of `request` (a student's); nothing logged at error level."""
    caplog.clear()
    reply = handle(daemon, STUDENT, request)
    assert reply["ok"] is False and reply["kind"] == "invalid", (request, reply)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "\n" not in reply["error"]
    return str(reply["error"])


@pytest.mark.parametrize("op", ["cancel", "hold", "release", "requeue"])
@pytest.mark.parametrize("last", TOO_LONG)
def test_a_range_past_18_digits_is_invalid_naming_ranges(
    daemon: Daemon, caplog: pytest.LogCaptureFixture, op: str, last: str
) -> None:
    caplog.set_level(logging.INFO, logger="gbatchd")
    error = refused(daemon, {"op": op, "ranges": [f"1-{last}"]}, caplog)
    assert error == (
        f"ranges: '1-{last}' is not a range of job ids: an id has at most 18 digits. Use "
        "FIRST-LAST, e.g. 12-511"
    )
    refused(daemon, {"op": op, "ranges": [f"{last}-{last}"]}, caplog)


def test_the_longest_range_that_fits_is_taken(daemon: Daemon) -> None:
    reply = handle(daemon, STUDENT, {"op": "cancel", "ranges": ["1-" + "9" * 18]})
    assert reply["ok"] and reply["failed"] == 1  # no job there: one failure, no crash


def integer_fields() -> list[tuple[str, str, bool]]:
    """(op, field, a list of integers?) for every integer field of every request type."""
    found = []
    for op, cls in sorted(requests.REQUESTS.items()):
        for name, hint in requests.type_hints(cls).items():
            if name not in cls._fields:
                continue
            if hint in (int, int | None):
                found.append((op, name, False))
            elif hint == tuple[int, ...]:
                found.append((op, name, True))
    return found


def test_the_requests_have_the_integer_fields_this_test_expects() -> None:
    named = {f"{op}.{name}" for op, name, _ in integer_fields()}
    assert named >= {"cancel.ids", "jobs.limit", "jobs.after", "logs.offset", "token.lifespan"}


BASE: dict[str, dict[str, Any]] = {
    "job": {"id": 1},
    "logs": {"id": 1},
    "update": {"id": 1, "changes": {"Comment": "x"}},
    "submit": {"spec": {"name": "j", "command": ["true"]}},
    "usage_report": {"start": 0, "end": 1},
    "usage_series": {"edges": [0, 1]},
    "timeline": {"start": 0, "end": 1},
    "gpu_history": {"start": 0, "end": 1},
    "step": {"job": 1, "argv": ["true"]},
    "await_allocation": {"job": 1},
    "port_forward": {"job": 1, "ports": [8888]},
}


@pytest.mark.parametrize(("op", "name", "listed"), integer_fields())
@pytest.mark.parametrize("value", [2**63 - 1, 10**18, -(10**18), 2**64])
def test_every_integer_field_past_18_digits_is_invalid_naming_the_field(
    daemon: Daemon,
    caplog: pytest.LogCaptureFixture,
    op: str,
    name: str,
    listed: bool,
    value: int,
) -> None:
    caplog.set_level(logging.INFO, logger="gbatchd")
    request = {"op": op, **BASE.get(op, {}), name: [value] if listed else value}
    error = refused(daemon, request, caplog)
    what = "a list of integers" if listed else "an integer"
    shown = f"[{value}]" if listed else str(value)
    assert error == f"bad request: {op}.{name}: expected {what} of at most 18 digits, got {shown}"


def test_the_largest_page_a_listing_may_ask_for_is_served(daemon: Daemon) -> None:
    # jobs.limit 2**63 - 1 made the store overflow on the page's limit + 1.
    reply = handle(daemon, STUDENT, {"op": "jobs", "limit": 10**18 - 1, "after": 10**18 - 1})
    assert reply["ok"] and reply["jobs"] == []


def test_a_token_request_with_an_overflowing_inner_field_is_invalid(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gbatchd")
    root = Caller(uid=0, user="root", pid=1)
    # A user's own token (root may mint only for a listed service account, issue 29).
    nobody = Caller(uid=NOBODY.pw_uid, user=NOBODY.pw_name, pid=2)
    token = handle(daemon, nobody, {"op": "token", "scopes": ["control"]})
    inner = {"op": "cancel", "ranges": ["1-" + "9" * 30]}
    reply = handle(daemon, root, {"op": "with_token", "token": token["token"], "request": inner})
    assert reply["kind"] == "invalid" and str(reply["error"]).startswith("ranges: ")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
