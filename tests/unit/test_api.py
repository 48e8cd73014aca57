"""The HTTP API's pure parts: its OpenAPI document against its routes, where it may
listen, and a submit's body turned into the request sbatch would make, reading nothing
of the server's own environment or files."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from gbatch.api.app import HTTP_STATUS, make_app
from gbatch.api.openapi import PREFIX, document
from gbatch.cli.api import make_listener, parse_listen, parse_trusted_proxies
from gbatch.cli.exits import CliError
from gbatch.jobspec.errors import BadSubmit
from gbatch.jobspec.submit import request_for_text
from gbatch.protocol.requests import ERROR_KINDS


def test_the_openapi_document_lists_every_route_and_no_other(tmp_path: object) -> None:
    app = make_app(tmp_path)  # type: ignore[arg-type]
    routed = {
        (route.path.removeprefix(PREFIX), method.lower())  # type: ignore[attr-defined]
        for route in app.routes
        # A WebSocket route (port-forward's tunnel) is its handshake's GET.
        for method in (getattr(route, "methods", None) or {"GET"}) - {"HEAD"}
        if not route.path.startswith("/ui")  # type: ignore[attr-defined]  # the web page's
    }
    # One route serves the four job actions; the document names each.
    routed.remove(("/jobs/{job}/{action}", "post"))
    routed |= {(f"/jobs/{{job}}/{a}", "post") for a in ("cancel", "hold", "release", "requeue")}
    documented = {
        (path, method)
        for path, ops in document()["paths"].items()
        for method in ops
        if method != "servers"  # /metrics's own server: the root, not /api/v1
    }
    assert routed == documented


def test_every_error_kind_has_an_http_status() -> None:
    assert set(HTTP_STATUS) == set(ERROR_KINDS)
    assert HTTP_STATUS["unauthenticated"] == 401 and HTTP_STATUS["permission"] == 403


def test_it_listens_on_loopback_unless_tls_is_on() -> None:
    assert parse_listen("127.0.0.1:8642", tls=False) == ("127.0.0.1", 8642)
    assert parse_listen("[::1]:0", tls=False) == ("::1", 0)
    with pytest.raises(CliError, match="in clear"):
        parse_listen("0.0.0.0:8642", tls=False)
    assert parse_listen("0.0.0.0:8443", tls=True) == ("0.0.0.0", 8443)
    with pytest.raises(CliError, match="HOST:PORT"):
        parse_listen("8642", tls=False)


def test_trusted_proxies_are_addresses_or_networks_never_everyone() -> None:
    assert parse_trusted_proxies(["127.0.0.1", "10.1.0.0/24", "::1", "127.0.0.1"]) == (
        "127.0.0.1",
        "10.1.0.0/24",
        "::1",
    )
    for everyone in ("*", "0.0.0.0/0", "::/0", "nginx.lab", ""):
        with pytest.raises(CliError, match=r"--trusted-proxy: .* is not a proxy's address"):
            parse_trusted_proxies([everyone])


def test_connections_to_the_listener_get_tcp_nodelay_from_asyncio() -> None:
    """Without TCP_NODELAY a keep-alive client waited 40 ms a request (delayed ACK)."""
    listener = make_listener("127.0.0.1", 0)
    port = listener.getsockname()[1]
    seen: list[int] = []

    async def scenario() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer = writer.get_extra_info("socket")
            seen.append(peer.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(handle, sock=listener)
        async with server:
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await _reader.read()
            writer.close()

    asyncio.run(scenario())
    assert seen and seen[0] != 0


def test_a_script_submitted_over_http_keeps_its_sbatch_lines_and_not_the_servers_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SERVER_SECRET", "do-not-leak")
    request = request_for_text(
        "#!/bin/bash\n#SBATCH -J ci --gres=gpu:1 -t 10\n#SBATCH --export=ALL\necho hi\n", "api"
    )
    assert request.spec["name"] == "ci" and request.spec["gpus"] == 1
    assert request.spec["time_limit"] == 600
    assert request.submit_env is None  # --export=ALL of nothing: the server's env stays home
    assert "workdir" not in request.spec or request.spec["workdir"] is None  # the user's home
    with pytest.raises(BadSubmit, match="SERVER_SECRET is not set"):
        request_for_text("#!/bin/sh\n#SBATCH --secret-env SERVER_SECRET\ntrue\n", "api")


def test_a_job_file_as_yaml_or_json_makes_the_same_request() -> None:
    from_yaml = request_for_text("command: python train.py\ngpus: 2\nname: t\n", "api")
    from_json = request_for_text('{"command": "python train.py", "gpus": 2, "name": "t"}', "api")
    assert from_yaml == from_json
    with pytest.raises(BadSubmit, match="sweep"):
        request_for_text("command: echo {lr}\nsweep: /etc/shadow\n", "api")


def test_one_submits_options_never_reach_the_next_through_the_shared_parser() -> None:
    """request_for_text builds its parser once; a script's #SBATCH lines set that
    request's options only."""
    plain = '{"command": "true"}'
    before = request_for_text(plain, "api")
    request_for_text("#!/bin/bash\n#SBATCH -J ci --gres=gpu:1 -t 10 --hold\necho hi\n", "api")
    after = request_for_text(plain, "api")
    assert after == before
    assert after.spec.get("gpus") in (None, 0) and not after.held


def test_the_submit_shortcut_answers_as_the_route_does_and_is_rate_limited(
    tmp_path: Path,
) -> None:
    """POST /api/v1/jobs skips Starlette's stack (app._App's shortcut); what it answers
    is what the route answers, and the per-user limits hold on it."""
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    from gbatch.api.ratelimit import RateLimits

    def routed(app: Starlette) -> Any:
        async def through_the_stack(scope: Any, receive: Any, send: Any) -> None:
            await Starlette.__call__(app, scope, receive, send)

        return through_the_stack

    cases = [
        ({}, '{"command": "true"}'),  # no token
        ({"Authorization": "Bearer T"}, '{"command": "true", "gpus": -1}'),  # a bad job
        ({"Authorization": "Bearer T"}, '{"command": "true"}'),  # no gbatchd
        ({"Authorization": "Bearer T"}, "\xff"),  # not UTF-8
        ({"Authorization": "Basic T"}, '{"command": "true"}'),  # no bearer token
        ({"Authorization": "Bearer T"}, "#" * (1 << 20) + "\n"),  # over 1 MiB
    ]
    answers = []
    for serve in (lambda app: app, routed):
        app = make_app(tmp_path / "none.sock")
        with TestClient(serve(app)) as client:
            replies = [
                client.post(f"{PREFIX}/jobs", headers=h, content=body.encode("latin-1"))
                for h, body in cases
            ]
        answers.append(
            [(r.status_code, r.json(), r.headers.get("www-authenticate")) for r in replies]
        )
    assert answers[0] == answers[1]
    assert [status for status, _, _ in answers[0]] == [401, 400, 503, 400, 401, 400]

    limited = make_app(tmp_path / "none.sock", limits=RateLimits(rate=0.001, burst=1))
    with TestClient(limited) as client:
        assert client.post(f"{PREFIX}/jobs", content=b"{}").status_code == 401
        refused = client.post(f"{PREFIX}/jobs", content=b"{}")
    assert refused.status_code == 429 and refused.headers["retry-after"]


def test_a_body_in_several_messages_is_read_whole_up_to_its_limit() -> None:
    """app._body reads the ASGI messages itself: pieces joined, the 1 MiB limit over all
    of them, and a client gone before the end is Starlette's ClientDisconnect."""
    from starlette.requests import ClientDisconnect
    from starlette.responses import Response

    from gbatch.api.app import MAX_BODY, _body

    def receiving(*messages: dict[str, Any]) -> Any:
        queue = list(messages)

        async def receive() -> dict[str, Any]:
            return queue.pop(0)

        return receive

    def piece(body: bytes, more: bool = True) -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": more}

    async def scenario() -> None:
        text = await _body(
            receiving(piece(b"com"), piece("mand: \u00e9".encode()), piece(b"", False))
        )
        assert text == "command: \u00e9"
        assert await _body(receiving({"type": "http.request"})) == ""
        half = b"#" * (MAX_BODY // 2)
        too_large = await _body(receiving(piece(half), piece(half), piece(b"\n", False)))
        assert isinstance(too_large, Response) and too_large.status_code == 400
        assert b"larger than 1 MiB" in bytes(too_large.body)
        with pytest.raises(ClientDisconnect):
            await _body(receiving(piece(b"a"), {"type": "http.disconnect"}))

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "path",
    [
        f"{PREFIX}/jobs?limit=%C2%B2",  # '²': str.isdigit's, not int()'s
        f"{PREFIX}/jobs?after=%C2%B2",
        f"{PREFIX}/jobs?limit=" + "9" * 19,
        f"{PREFIX}/jobs?after=" + "9" * 30,
        f"{PREFIX}/jobs/1/logs?offset=%C2%B2",
        f"{PREFIX}/jobs/1/logs?offset=" + "9" * 19,
        f"{PREFIX}/jobs/1/logs/follow?offset=%C2%B2",
        f"{PREFIX}/jobs/1/logs/follow?offset=" + "9" * 19,
    ],
)
def test_a_query_number_that_is_not_one_or_too_long_is_a_400(tmp_path: Path, path: str) -> None:
    from starlette.testclient import TestClient

    with TestClient(make_app(tmp_path / "none.sock"), raise_server_exceptions=False) as client:
        reply = client.get(path, headers={"Authorization": "Bearer T"})
    assert reply.status_code == 400, reply.text
    assert reply.json()["kind"] == "invalid"


@pytest.mark.parametrize("route", ["routed", "shortcut"])
def test_a_bug_in_a_route_is_a_json_500_logged_once_then_counted(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    route: str,
) -> None:
    """Issue 29: the server wrote a traceback per request that hit a bug."""
    import logging

    from starlette.testclient import TestClient

    from gbatch.api import app as api_app
    from gbatch.core import loglines

    def boom(*args: object, **kwargs: object) -> None:
        raise OverflowError("a bug")

    if route == "routed":
        monkeypatch.setattr(api_app.Api, "nodes", boom)
        method, path = "GET", f"{PREFIX}/nodes"
    else:  # POST /jobs skips Starlette's stack
        monkeypatch.setattr(api_app, "request_for_text", boom)
        method, path = "POST", f"{PREFIX}/jobs"
    from gbatch.api.ratelimit import RateLimits

    now = [1000.0]
    app = make_app(tmp_path / "none.sock", limits=RateLimits(rate=1e6, burst=1e6))
    app.bugs = loglines.InternalErrors(logging.getLogger("gbatch.api"), lambda: now[0])
    caplog.set_level(logging.INFO)
    with TestClient(app, raise_server_exceptions=False) as client:
        replies = [
            client.request(method, path, headers={"Authorization": "Bearer T"}, content=b"{}")
            for _ in range(200)
        ]
    assert {r.status_code for r in replies} == {500}
    assert replies[0].json() == {
        "ok": False,
        "kind": "internal",
        "error": "internal error in the HTTP API (a bug): the API's log says more. Please "
        "report it",
    }
    logged = [r.getMessage() for r in caplog.records if r.name != "httpx"]
    (line,) = logged  # nothing from the server, no traceback per request
    assert line.startswith(f"internal error: {method} {path} failed: OverflowError at ")
    assert "Traceback (most recent call last)" in line
    now[0] += loglines.WINDOW_SECONDS
    app.bugs.close_ended()
    assert "-> and 199 more in 10 s" in caplog.records[-1].getMessage()
