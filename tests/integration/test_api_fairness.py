"""One user flooding the HTTP API is refused (429) while another's requests go through:
a real gbatchd, `gbatch api serve` with small per-user limits, tokens of two users
minted with the real CLI (root mints for two service accounts the head lists), urllib as
their clients."""

from __future__ import annotations

import contextlib
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (
    FAST_CONFIG,
    Head,
    kill_leftover_jobs,
    make_head,
    require_root,
    service_config,
    token_account,
    wait_for,
)
from test_http_api import serve_api


def get(url: str, token: str | None = None) -> tuple[int, dict[str, object], str | None]:
    """(status, the JSON reply, Retry-After)."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read()), reply.headers["Retry-After"]
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), err.headers["Retry-After"]


def hang(url: str, path: str, token: str | None = None) -> socket.socket:
    """A POST to `path` whose body never comes: a request held open in the API."""
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    auth = "" if token is None else f"Authorization: Bearer {token}\r\n"
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\n{auth}"
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n".encode()
    )
    return sock


def mint(head: Head, user: str) -> str:
    return head.run("token", "--user", user, "--scope", "read,submit", check=True).stdout.strip()


def submit_held(url: str, token: str) -> int:
    """A held job of `token`'s user: following its log waits."""
    request = urllib.request.Request(
        f"{url}/jobs",
        data=b"#!/bin/bash\n#SBATCH --hold\necho held\n",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "text/x-shellscript"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        job_id: int = json.loads(reply.read())["job_id"]
        return job_id


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    h = make_head(tmp_path / "home", config=FAST_CONFIG + service_config("flooder", "other"))
    h.start()
    yield h
    h.stop()
    kill_leftover_jobs(h.home)


@pytest.fixture
def tokens(head: Head) -> tuple[str, str]:
    require_root("to mint tokens for two users")
    return mint(head, token_account("flooder")), mint(head, token_account("other"))


def prompt(url: str, token: str) -> None:
    """`token`'s user is served at once."""
    started = time.monotonic()
    status, reply, _ = get(f"{url}/nodes", token)
    assert status == 200, reply
    assert time.monotonic() - started < 5


def test_a_users_requests_and_streams_at_once_are_capped_and_another_user_is_served(
    head: Head, tokens: tuple[str, str]
) -> None:
    flooder, other = tokens
    flooder_user = token_account("flooder")
    with serve_api(head, "--user-requests", "2", "--user-streams", "2") as url:
        # gbatchd accepts each token once: its user's bucket from then on.
        follow, other_follow = (f"{url}/jobs/{submit_held(url, t)}/logs/follow" for t in tokens)
        with contextlib.ExitStack() as held:
            for _ in range(2):
                request = urllib.request.Request(
                    follow, headers={"Authorization": f"Bearer {flooder}"}
                )
                held.enter_context(urllib.request.urlopen(request, timeout=30))
            status, reply, retry = get(follow, flooder)
            assert status == 429, reply
            assert retry == "1"
            assert reply["kind"] == "unavailable"
            assert f"too many logs followed at once for user {flooder_user} (2)" in str(
                reply["error"]
            )
            # The other user's stream and requests are not touched.
            request = urllib.request.Request(
                other_follow, headers={"Authorization": f"Bearer {other}"}
            )
            with urllib.request.urlopen(request, timeout=30) as stream:
                assert stream.status == 200
            prompt(url, other)

            for _ in range(2):
                held.callback(hang(url, "/api/v1/jobs", flooder).close)

            def at_once() -> bool:
                status, reply, _ = get(f"{url}/nodes", flooder)
                said = str(reply["error"])
                return status == 429 and f"requests at once for user {flooder_user}" in said

            wait_for(at_once, what="the flooder's held requests to fill its share")
            prompt(url, other)
        # Released as the flooder's streams and requests end.
        wait_for(lambda: get(f"{url}/nodes", flooder)[0] == 200, what="the share released")


def test_anonymous_and_forged_token_floods_draw_on_their_address_not_a_users_share(
    head: Head, tokens: tuple[str, str]
) -> None:
    _, other = tokens
    with serve_api(head, "--user-requests", "2") as url:
        prompt(url, other)  # accepted once: other's own bucket
        with contextlib.ExitStack() as held:
            for _ in range(2):  # the login form's POST takes no token: the address's share
                held.callback(hang(url, "/ui/login").close)
            wait_for(lambda: get(f"{url}/nodes")[0] == 429, what="the address's share full")
            # A token gbatchd never accepted draws on the address too, whatever it claims.
            status, reply, _ = get(f"{url}/nodes", other[:-4] + "AAAA")
            assert status == 429 and "client 127.0.0.1" in str(reply["error"]), reply
            prompt(url, other)


def test_a_users_request_rate_is_capped_and_another_user_is_served(
    head: Head, tokens: tuple[str, str]
) -> None:
    flooder, other = tokens
    with serve_api(head, "--user-rate", "5", "--user-burst", "10") as url:
        for token in tokens:
            assert get(f"{url}/nodes", token)[0] == 200
        refused = None
        for _ in range(300):  # at least 10 go through, then one is refused
            status, reply, retry = get(f"{url}/nodes", flooder)
            if status == 429:
                refused = reply, retry
                break
        assert refused is not None, "the flooder was never refused"
        assert "more than 5 a second" in str(refused[0]["error"])
        assert refused[1] == "1"
        prompt(url, other)
