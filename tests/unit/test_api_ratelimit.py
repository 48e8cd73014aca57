"""The API's per-user limits (gbatch/api/ratelimit.py) on a clock the test sets: whose
bucket a request draws on, the rate, requests and streams at once, and the 429 the
middleware answers."""

from __future__ import annotations

import argparse
import base64
import json

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from gbatch.api.ratelimit import (
    Limiter,
    RateLimitMiddleware,
    RateLimits,
    bearer,
    credential,
    is_stream,
)
from gbatch.cli.api import _positive_float, _positive_int


def jwt_for(user: str, jti: str = "j1") -> str:
    """A token's shape with `user` as its claim; the signature is never checked here."""

    def part(data: dict[str, str]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256'})}.{part({'sub': user, 'jti': jti})}.c2ln"


def test_a_token_names_its_users_bucket_only_once_gbatchd_has_accepted_it() -> None:
    limiter = Limiter()
    forged = jwt_for("alice", "forged")
    real = jwt_for("alice", "real")
    assert limiter.key(forged, "10.0.0.9") == "addr:10.0.0.9"
    limiter.vouch(real)
    assert limiter.key(real, "10.0.0.1") == "user:alice"
    # Claims naming alice in a token gbatchd never accepted: the sender's address.
    assert limiter.key(forged, "10.0.0.9") == "addr:10.0.0.9"
    assert limiter.key(None, "10.0.0.9") == "addr:10.0.0.9"
    limiter.forget(real)  # gbatchd now refuses it (revoked, expired)
    assert limiter.key(real, "10.0.0.1") == "addr:10.0.0.1"


def test_the_token_is_the_first_authorization_headers_bearer_else_the_session_cookie() -> None:
    from gbatch.api.web import COOKIE

    def scope(*headers: tuple[bytes, bytes]) -> dict[str, object]:
        return {"type": "http", "headers": list(headers)}

    auth = b"authorization"
    assert bearer(scope((auth, b"Bearer  T1 "), (auth, b"Bearer T2"))) == "T1"
    assert bearer(scope((auth, b"bearer T1"))) == "T1"  # the scheme in any case
    for value in (b"Basic dXNlcjpwdw==", b"Bearer ", b"Bearer", b"T1"):
        assert bearer(scope((auth, value))) is None
    assert bearer(scope((b"authorization-x", b"Bearer T1"))) is None
    cookie = (b"cookie", f"{COOKIE}=C1".encode())
    assert credential(scope(cookie, (auth, b"Bearer T1"))) == "T1"
    assert credential(scope(cookie)) == "C1"  # the web page's session
    assert credential(scope((auth, b"Basic x"), cookie)) == "C1"
    assert credential(scope()) is None


def test_a_token_digested_last_is_not_mistaken_for_another() -> None:
    """The limiter keeps the last token's digest: the next token's must be its own."""
    limiter = Limiter()
    alice, bob = jwt_for("alice"), jwt_for("bob")
    limiter.vouch(alice)
    limiter.vouch(bob)
    assert limiter.key(alice, "h") == "user:alice" and limiter.key(bob, "h") == "user:bob"
    limiter.forget(alice)
    assert limiter.key(alice, "h") == "addr:h" and limiter.key(bob, "h") == "user:bob"
    assert limiter.key("", "h") == "addr:h"


def test_a_token_that_is_not_a_jwt_is_never_vouched_for() -> None:
    limiter = Limiter()
    limiter.vouch("not-a-jwt")
    limiter.vouch("a.!!!.c")
    assert limiter.key("not-a-jwt", "h") == limiter.key("a.!!!.c", "h") == "addr:h"


def test_the_rate_allows_a_burst_then_refills_at_the_rate() -> None:
    limiter = Limiter(RateLimits(requests=1000, rate=2.0, burst=3))
    for _ in range(3):
        assert limiter.admit("user:a", 0.0) is None
    refusal = limiter.admit("user:a", 0.0)
    assert refusal is not None and refusal.retry_after == 1
    assert refusal.reply() == {
        "ok": False,
        "kind": "unavailable",
        "error": "too many requests for user a (more than 2 a second). Slow down",
    }
    assert limiter.admit("user:b", 0.0) is None  # another user's bucket is full
    assert limiter.admit("user:a", 0.5) is None  # one more after 1/rate
    assert limiter.admit("user:a", 0.5) is not None


def test_a_slow_rate_says_how_many_seconds_to_wait() -> None:
    limiter = Limiter(RateLimits(rate=0.1, burst=1))
    assert limiter.admit("addr:h", 0.0) is None
    limiter.release("addr:h")
    refusal = limiter.admit("addr:h", 2.0)
    assert refusal is not None and refusal.retry_after == 8


def test_requests_at_once_are_limited_until_one_is_released() -> None:
    limiter = Limiter(RateLimits(requests=2))
    assert limiter.admit("user:a", 0.0) is None
    assert limiter.admit("user:a", 0.0) is None
    refusal = limiter.admit("user:a", 0.0)
    assert refusal is not None
    assert "too many requests at once for user a (2)" in refusal.message
    assert limiter.admit("user:b", 0.0) is None
    limiter.release("user:a")
    assert limiter.admit("user:a", 0.0) is None


def test_anonymous_requests_take_half_of_all_at_once_and_users_with_tokens_the_rest() -> None:
    """Before, uvicorn's limit_concurrency=256 counted every connection: anyone's."""
    limiter = Limiter(RateLimits(requests=10, total=4))
    assert limiter.admit("addr:10.0.0.1", 0.0) is None
    assert limiter.admit("addr:10.0.0.2", 0.0) is None
    anonymous = limiter.admit("addr:10.0.0.3", 0.0)
    assert anonymous is not None and anonymous.status == 503
    assert "its most requests at once (2 without a token gbatchd has accepted)" in anonymous.message
    assert limiter.admit("user:a", 0.0) is None
    assert limiter.admit("user:b", 0.0) is None
    full = limiter.admit("user:c", 0.0)
    assert full is not None and full.status == 503 and "(4)" in full.message
    limiter.release("addr:10.0.0.1")
    assert limiter.admit("user:c", 0.0) is None


def test_followed_logs_have_their_own_limit_beside_requests() -> None:
    limiter = Limiter(RateLimits(requests=1, streams=2))
    assert limiter.admit("user:a", 0.0, stream=True) is None
    assert limiter.admit("user:a", 0.0, stream=True) is None
    refusal = limiter.admit("user:a", 0.0, stream=True)
    assert refusal is not None and "too many logs followed at once" in refusal.message
    assert limiter.admit("user:a", 0.0) is None  # a plain request still goes
    limiter.release("user:a", stream=True)
    assert limiter.admit("user:a", 0.0, stream=True) is None


def test_a_refused_request_takes_nothing_from_the_bucket() -> None:
    limiter = Limiter(RateLimits(requests=1, rate=1.0, burst=2))
    assert limiter.admit("user:a", 0.0) is None
    assert limiter.admit("user:a", 0.0) is not None  # at once: refused, no token taken
    limiter.release("user:a")
    assert limiter.admit("user:a", 0.0) is None


def test_idle_full_buckets_are_dropped_when_there_are_too_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("gbatch.api.ratelimit.MAX_KEYS", 3)
    limiter = Limiter(RateLimits(rate=1.0, burst=5))
    for n in range(3):
        assert limiter.admit(f"addr:{n}", 0.0) is None
        limiter.release(f"addr:{n}")
    assert limiter.admit("addr:busy", 0.0) is None  # held, never released
    assert limiter.admit("addr:new", 10.0) is None  # the three idle ones refilled: dropped
    assert set(limiter._shares) == {"addr:busy", "addr:new"}


def test_the_followed_logs_are_the_apis_and_the_web_pages_streams() -> None:
    assert is_stream("/api/v1/jobs/4/logs/follow")
    assert is_stream("/api/v1/jobs/4_2/logs/follow")
    assert is_stream("/ui/jobs/4/log")
    assert not is_stream("/api/v1/jobs/4/logs")
    assert not is_stream("/ui/jobs/4")


def test_the_middleware_answers_429_with_retry_after_in_the_apis_error_shape() -> None:
    now = [0.0]

    async def ok(http: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    limiter = Limiter(RateLimits(rate=1.0, burst=2))
    app = Starlette(routes=[Route("/x", ok)])
    client = TestClient(RateLimitMiddleware(app, limiter, clock=lambda: now[0]))
    alice = jwt_for("alice")
    limiter.vouch(alice)
    bearer = {"Authorization": f"Bearer {alice}"}
    assert [client.get("/x", headers=bearer).status_code for _ in range(3)] == [200, 200, 429]
    refused = client.get("/x", headers=bearer)
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "1"
    assert refused.json()["kind"] == "unavailable"
    assert "user alice" in refused.json()["error"]
    # No token: the client's address, a bucket of its own.
    assert client.get("/x").status_code == 200
    # The web page's cookie counts as the token.
    client.cookies.set("gbatch_session", alice)
    assert client.get("/x").status_code == 429
    now[0] = 1.0
    assert client.get("/x", headers=bearer).status_code == 200


def test_the_serve_options_take_only_positive_numbers() -> None:
    assert _positive_int("4") == 4
    assert _positive_float("0.5") == 0.5
    for bad in ("0", "-1", "x", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            _positive_int(bad)
    for bad in ("0", "-1", "x", "inf", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            _positive_float(bad)
