"""Issue 29's log floods, re-run against a real root daemon: a student's requests whose
numbers overflow the store, an outsider's malformed tokens on the HTTP API, and a bug
every request hits. Each grows gbatchd.log (and the API's log) by less than 64 KiB."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asuser import User, as_user, temp_users
from conftest import GBATCH, Head, require_root, shared_home, wait_for

from gbatch.head import refusals
from gbatch.protocol.client import Client, RequestFailed

BOUND = 64 * 1024
UNLIMITED = ("--user-rate", "100000", "--user-burst", "100000")  # `api serve`'s share
BIG = "99999999999999999999999"
# Every request field that takes a number or an id range, past SQLite's 64-bit integers.
OVERFLOWS: list[dict[str, Any]] = [
    *({"op": op, "ranges": [f"1-{BIG}"]} for op in ("cancel", "hold", "release", "requeue")),
    *({"op": op, "ranges": [f"{2**63}-{2**63}"]} for op in ("cancel", "hold", "release")),
    {"op": "cancel", "ids": [2**63 - 1]},
    {"op": "jobs", "limit": 2**63 - 1},
    {"op": "jobs", "after": 2**63 - 1, "limit": 2**63 - 1},
    {"op": "jobs", "columns": True, "offset": 2**63 - 1},
    {"op": "job", "id": 2**63 - 1},
    {"op": "logs", "id": 1, "offset": 2**63 - 1},
    {"op": "token", "lifespan": 2**63 - 1},
    {"op": "submit", "spec": {"name": "x", "command": ["true"]}, "count": 2**63 - 1},
]


@pytest.fixture(autouse=True)
def _root_only() -> None:
    require_root("to act as a student")


@pytest.fixture
def student() -> Iterator[User]:
    with temp_users("gbflood", ["student"]) as users:
        yield users["student"]


@contextlib.contextmanager
def started(prefix: str, env: dict[str, str] | None = None) -> Iterator[Head]:
    """A shared head, started (with `env` added), stopped however the block ends."""
    with shared_home(prefix) as head:
        head.env.update(env or {})
        head.start()
        try:
            yield head
        finally:
            head.stop()


def log_size(head: Head) -> int:
    return (head.home / "gbatchd.log").stat().st_size


def flood(head: Head, user: User, requests: list[dict[str, Any]], times: int) -> list[str]:
    """Each of `requests` sent `times` times as `user` over one connection: the kinds
    of the replies (each a refusal)."""
    sock = head.home / "gbatchd.sock"

    def send_all() -> list[str]:
        kinds = []
        with Client(sock, timeout=60) as client:
            for _ in range(times):
                for request in requests:
                    try:
                        client.send(request)
                        kinds.append("ok")
                    except RequestFailed as err:
                        kinds.append(err.kind)
        return kinds

    kinds: list[str] = as_user(user, send_all, timeout=600)
    return kinds


def test_a_students_overflow_flood_is_refused_as_invalid_and_grows_the_log_little(
    student: User,
) -> None:
    with started("gbatch-flood-") as head:
        before = log_size(head)
        kinds = flood(head, student, OVERFLOWS, 200)
        grown = log_size(head) - before
        text = (head.home / "gbatchd.log").read_text()
    assert set(kinds) == {"invalid"}, set(kinds)
    assert len(kinds) == 200 * len(OVERFLOWS)
    assert "Traceback" not in text and "OverflowError" not in text
    assert grown < BOUND, grown


def test_a_bug_every_request_hits_is_one_traceback_and_a_count(student: User) -> None:
    # Every `shares` request fails as a bug would (gbatch/core/crashpoints.py).
    with started("gbatch-bug-", {"GBATCH_FAULT_AT": "request.shares"}) as head:
        before = log_size(head)
        times = 2000
        kinds = flood(head, student, [{"op": "shares"}], times)
        assert set(kinds) == {"internal"}
        log = head.home / "gbatchd.log"
        count = re.compile(r"internal error: InjectedFault at \S+ -> and ([\d,]+) more in 10 s")

        def all_counted() -> bool:
            text = log.read_text()
            lines = text.count("internal error: request 'shares' failed: InjectedFault")
            return lines + sum(int(n.replace(",", "")) for n in count.findall(text)) == times

        # The window's count is written by the loop once the window has ended.
        wait_for(all_counted, 3 * refusals.WINDOW_SECONDS, "the count of the repeats")
        text = log.read_text()
        grown = log_size(head) - before
    assert text.count("Traceback (most recent call last)") == 1
    assert count.search(text)
    assert grown < BOUND, grown


def _b64(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def test_an_outsiders_malformed_token_flood_on_the_api_is_401_and_grows_no_log_much(
    tmp_path: Path,
) -> None:
    """A JWT header with a non-string kid was HTTP 500 and a PyJWT traceback each."""
    token = f"{_b64({'alg': 'HS256', 'kid': ['x']})}.{_b64({'sub': 'alice'})}.c2ln"
    api_log = tmp_path / "api.log"
    with started("gbatch-jwt-") as head:
        before = log_size(head)
        with open(api_log, "wb") as stderr:
            api = subprocess.Popen(
                # Limits raised so that the whole count reaches gbatchd quickly (at the
                # default 50 a second, 20 s of flood reached it ~1,100 times).
                [*GBATCH, "api", "serve", "--listen", "127.0.0.1:0", *UNLIMITED],
                env=head.env,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
            try:
                assert api.stdout is not None
                line = api.stdout.readline()
                assert "gbatch API on http://127.0.0.1:" in line, api_log.read_text()
                port = int(line.split()[3].split(":")[2].split("/")[0])
                statuses = _get_many(port, token, 1500)
                # The daemon answered every one as a refused token: one line of why.
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                connection.request("GET", "/api/v1/jobs", headers=_bearer(token))
                reply = json.loads(connection.getresponse().read())
            finally:
                api.terminate()
                api.wait(timeout=30)
        grown = log_size(head) - before
        text = (head.home / "gbatchd.log").read_text()
    assert set(statuses) == {401}, set(statuses)
    assert reply["kind"] == "unauthenticated"
    assert "Key ID header parameter must be a string" in reply["error"]
    assert "Traceback" not in text
    assert grown < BOUND, grown
    assert api_log.stat().st_size < BOUND
    assert "Traceback" not in api_log.read_text()
    # Charged to the client's address, not to the API's uid (the budget of real users).
    assert "client=127.0.0.1 target=api -> refused: the token is not a gbatch token" in text


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _get_many(port: int, token: str, times: int) -> list[int]:
    """GET /api/v1/jobs `times` times on one keep-alive connection: the statuses."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    statuses = []
    try:
        for _ in range(times):
            connection.request("GET", "/api/v1/jobs", headers=_bearer(token))
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
    finally:
        connection.close()
    return statuses
