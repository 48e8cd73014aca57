"""A slowloris on the HTTP API over TLS (issue 29, finding 4): while 300 connections
from one address trickle a request head a header line every 2 s, another user's
authenticated request is answered within 1 s, and the server closes every slow
connection: the ones past the address's share at once, the rest when their head's
time is out. A real gbatchd, `gbatch api serve` with a self-signed certificate, the
attack as a process of its own (tests/slowloris.py), urllib as the other user."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, Head, make_head, service_config
from test_http_api import mint, serve_api
from test_notifications import self_signed

SLOWLORIS = Path(__file__).resolve().parent.parent / "slowloris.py"
HEAD_SECONDS = 5.0  # gbatch.api.guard.GuardLimits.head_seconds
SWEEP_SECONDS = 0.5  # gbatch.api.server.SWEEP_SECONDS


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    """A daemon that lists the account tokens are minted for (root mints for no one else)."""
    h = make_head(tmp_path / "home", config=FAST_CONFIG + service_config())
    h.start()
    yield h
    h.stop()


def nodes(url: str, token: str, context: ssl.SSLContext) -> tuple[int, float]:
    """GET /nodes with `token` on a fresh TLS connection: (status, seconds taken)."""
    request = urllib.request.Request(f"{url}/nodes", headers={"Authorization": f"Bearer {token}"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as reply:
            reply.read()
            status = reply.status
    except urllib.error.HTTPError as err:
        status = err.code
    return status, time.monotonic() - started


def test_another_users_request_is_served_during_a_slowloris_whose_connections_are_closed(
    head: Head, tmp_path: Path
) -> None:
    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(cafile=str(cert))
    token = mint(head, "--scope", "read")
    with serve_api(head, "--tls-cert", str(cert), "--tls-key", str(key)) as url:
        assert url.startswith("https://127.0.0.1:")
        port = url.split(":")[2].split("/")[0]
        assert nodes(url, token, context)[0] == 200
        attack = subprocess.Popen(
            [sys.executable, str(SLOWLORIS), "127.0.0.1", port, "300", "2", "20", "--tls"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert attack.stdout is not None
            assert attack.stdout.readline().strip() == "ready"
            # Through the time the slow connections are held, and past it.
            answers = []
            until = time.monotonic() + HEAD_SECONDS + 1
            while time.monotonic() < until:
                answers.append(nodes(url, token, context))
                time.sleep(0.2)
            assert [status for status, _ in answers] == [200] * len(answers)
            assert max(seconds for _, seconds in answers) < 1.0, answers
            tally = json.loads(attack.stdout.readline())
        finally:
            attack.kill()
            attack.wait(timeout=30)
    # Every slow connection was closed by the server: none held past the head's time.
    assert tally["opened"] + tally["refused"] == 300, tally
    assert tally["closed"] == tally["opened"] and tally["open_at_end"] == 0, tally
    _, _, most = tally["closed_after_min_median_max"]
    assert HEAD_SECONDS - 0.5 <= most <= HEAD_SECONDS + SWEEP_SECONDS + 1.5, tally
