"""The HTTP API behind a reverse proxy, and reached past it (issue 29, finding 6): the
X-Forwarded-For and X-Forwarded-Proto headers are believed from `--trusted-proxy`
addresses only, and the web page's cookies are Secure when the documented nginx block
says the client came over https. A real gbatchd and `gbatch api serve`; http.client
sends what nginx would, and what a local user on 127.0.0.1 would forge."""

from __future__ import annotations

import http.client
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, Head, make_head, service_config
from test_http_api import mint, serve_api

DOCS = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"
CLIENT = "203.0.113.7"  # the browser, as nginx sees it


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    """A daemon that lists the account tokens are minted for (root mints for no one else)."""
    h = make_head(tmp_path / "home", config=FAST_CONFIG + service_config())
    h.start()
    yield h
    h.stop()


def nginx_headers() -> dict[str, str]:
    """The headers the documented nginx block sets, for a browser at CLIENT over https."""
    (block,) = re.findall(r"```nginx\n(.*?)```", DOCS.read_text(), re.S)
    values = {
        "$host": "gbatch.lab.example",
        "$remote_addr": CLIENT,
        "$proxy_add_x_forwarded_for": CLIENT,
        "$scheme": "https",
    }
    return {
        name: values.get(value, value)
        for name, value in re.findall(r"proxy_set_header\s+(\S+)\s+(\S+);", block)
    }


@pytest.fixture
def api(head: Head) -> Iterator[str]:
    with serve_api(head, "--user-burst", "3", "--user-rate", "0.01") as url:
        yield url


def request(
    url: str, method: str, path: str, headers: dict[str, str], body: str | None = None
) -> tuple[http.client.HTTPResponse, str]:
    """One request on a connection of its own: the response and its body."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response, response.read().decode()
    finally:
        connection.close()


def statuses(url: str, forwarded: list[str]) -> list[int]:
    """Requests without a token, each saying it comes from another address."""
    path = urllib.parse.urlsplit(url).path + "/nodes"
    return [request(url, "GET", path, {"X-Forwarded-For": f})[0].status for f in forwarded]


def test_a_forged_forwarded_for_does_not_escape_the_loopback_addresss_share(api: str) -> None:
    # A share of 3 requests, refilled at one per 100 s: 401 (no token) thrice, then 429.
    forged = [f"10.9.0.{n}" for n in range(6)]
    assert statuses(api, forged) == [401, 401, 401, 429, 429, 429]


def test_a_trusted_proxys_forwarded_for_gives_each_client_its_share(head: Head) -> None:
    options = ("--user-burst", "3", "--user-rate", "0.01", "--trusted-proxy", "127.0.0.1")
    with serve_api(head, *options) as url:
        clients = [f"10.9.0.{n}" for n in range(6)]
        assert statuses(url, clients) == [401] * 6
        assert statuses(url, ["10.9.0.0"] * 3) == [401, 401, 429]


def login_cookies(url: str, token: str, headers: dict[str, str]) -> dict[str, str]:
    """Sign in on the web page with `headers` on every request: each Set-Cookie line,
    by the cookie's name ("form": the login form's own, as the form's page set it)."""
    form, page = request(url, "GET", "/ui/login", headers)
    login = form.headers["Set-Cookie"]
    nonce = login.split(";")[0].split("=", 1)[1]
    (csrf,) = re.findall(r'name="csrf" value="([0-9a-f]+)"', page)
    signed_in, _ = request(
        url,
        "POST",
        "/ui/login",
        {
            **headers,
            "Cookie": f"gbatch_login={nonce}",
            "Content-Type": "application/x-www-form-urlencoded",
        },
        urllib.parse.urlencode({"token": token, "csrf": csrf}),
    )
    assert signed_in.status == 303, signed_in.status
    cookies = {"form": login}
    for line in signed_in.headers.get_all("Set-Cookie") or []:
        cookies[line.split("=", 1)[0]] = line
    return cookies


def secure(cookie: str) -> bool:
    return "secure" in [attribute.strip().lower() for attribute in cookie.split(";")]


def test_behind_the_documented_nginx_block_the_session_cookie_is_secure(head: Head) -> None:
    headers = nginx_headers()
    assert headers.get("X-Forwarded-Proto") == "https", headers
    token = mint(head, "--scope", "read")
    with serve_api(head, "--trusted-proxy", "127.0.0.1") as url:
        cookies = login_cookies(url, token, headers)
    assert secure(cookies["gbatch_session"]) and secure(cookies["form"]), cookies
    # The same headers from a client that is no trusted proxy: plain http, as it is.
    with serve_api(head) as url:
        cookies = login_cookies(url, token, headers)
    assert not secure(cookies["gbatch_session"]) and not secure(cookies["form"]), cookies
