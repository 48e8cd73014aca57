"""Per-user limits in the API process, so that one token's user cannot starve the others.

gbatchd cannot do it over HTTP: it limits each of *its* callers, and every HTTP request
reaches it as this process's own connections.

Three limits per key, all answered 429 with Retry-After and the API's JSON error:
  - requests at once (a stream of a log is not one of them; it has its own limit),
  - a request rate, a token bucket of `rate` a second up to `burst`,
  - logs followed at once (Server-Sent Events, /jobs/{job}/logs/follow and /ui's).
And one for everyone together, answered 503 with Retry-After: `total` requests and
streams at once, of which requests without a token gbatchd has accepted (`addr:` keys)
take at most half, so that users with tokens are served while anonymous ones wait.

Whose bucket a request draws on (`Limiter.key`):
  - `user:NAME` for a token gbatchd has accepted before (Limiter.vouch, called by the
    API on gbatchd's ok reply): its claims were signed by gbatchd, so the `sub` claim
    is the user's and is read here without a key;
  - `addr:HOST` for everything else: no token, or a token gbatchd has not accepted yet.
    The claims of such a token may be forged, so they name no bucket: a flood of forged
    tokens naming alice draws on the flooder's address, never on alice's bucket, and a
    flood of random tokens cannot make a fresh bucket per token.
A token gbatchd refuses as unauthenticated (expired, revoked) is forgotten
(Limiter.forget) and falls back to its address.

Time is a parameter (`now`): the middleware passes time.monotonic().
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from gbatch.api.openapi import PREFIX
from gbatch.protocol import requests

# The address of the HTTP client whose request is under way, as its share was keyed:
# gbatchd charges a token it refuses, and nobody signed, to it (requests.WithToken.client).
client_address: ContextVar[str] = ContextVar("client_address", default="")
MAX_VOUCHED = 4096  # tokens remembered as accepted; the oldest is forgotten past it
MAX_KEYS = 10_000  # buckets kept; idle full ones are dropped past it
_EMPTY_DIGEST = hashlib.sha256(b"").hexdigest()


@dataclass(frozen=True)
class RateLimits:
    """Each user's (or client address's) share of the API; `gbatch api serve` options."""

    requests: int = 4  # at once, streams aside
    rate: float = 50.0  # requests a second, sustained
    burst: float = 100.0  # requests at once after a quiet while
    streams: int = 4  # logs followed at once
    total: int = 512  # requests and streams at once, everyone's; half of it for anonymous ones


@dataclass(frozen=True)
class Refusal:
    """A 429: the message for the user and the seconds to wait (Retry-After)."""

    message: str
    retry_after: int
    status: int = 429

    def reply(self) -> dict[str, object]:
        return requests.error_reply("unavailable", self.message)


@dataclass
class _Share:
    tokens: float
    stamp: float
    requests: int = 0
    streams: int = 0


@dataclass
class Limiter:
    limits: RateLimits = field(default_factory=RateLimits)
    _shares: dict[str, _Share] = field(default_factory=dict)
    # sha256 of a token gbatchd accepted -> its user
    _vouched: OrderedDict[str, str] = field(default_factory=OrderedDict)
    # The last token digested and its digest: a request's key() and vouch() ask for the
    # same one, and one client's requests repeat it (OpenSSL's sha256 is a few us a call).
    _last_digest: tuple[str, str] = ("", _EMPTY_DIGEST)
    # Requests and streams admitted and not yet released: everyone's, and anonymous ones'.
    _busy: int = 0
    _busy_anonymous: int = 0

    # -- whose bucket -----------------------------------------------------------------

    def key(self, token: str | None, address: str) -> str:
        """The bucket of a request with `token` (None: none) from `address`."""
        if token is not None:
            user = self._vouched.get(self._digest(token))
            if user is not None:
                return f"user:{user}"
        return f"addr:{address}"

    def vouch(self, token: str) -> None:
        """gbatchd accepted `token`: its claims are its own, and its `sub` its bucket."""
        digest = self._digest(token)
        if digest in self._vouched:
            self._vouched.move_to_end(digest)
            return
        user = _subject(token)
        if user is None:
            return
        self._vouched[digest] = user
        if len(self._vouched) > MAX_VOUCHED:
            self._vouched.popitem(last=False)

    def forget(self, token: str) -> None:
        """gbatchd refused `token` (expired, revoked): its address's bucket from now on."""
        self._vouched.pop(self._digest(token), None)

    def _digest(self, token: str) -> str:
        last, digest = self._last_digest
        if token != last:
            digest = _digest(token)
            self._last_digest = (token, digest)
        return digest

    # -- admission ----------------------------------------------------------------------

    def admit(self, key: str, now: float, *, stream: bool = False) -> Refusal | None:
        """Take a request (a followed log if `stream`) for `key` at `now`, or refuse it.

        None when it may go on, and then `release` must follow once it is done; else the
        Refusal.
        """
        anonymous = key.startswith("addr:")
        total = self.limits.total
        if self._busy >= total or (anonymous and self._busy_anonymous >= total // 2):
            held = f"{total // 2} without a token gbatchd has accepted" if anonymous else total
            return Refusal(
                f"the API is serving its most requests at once ({held}). Try again in a moment",
                1,
                503,
            )
        share = self._share(key, now)
        limit = self.limits.streams if stream else self.limits.requests
        held = share.streams if stream else share.requests
        if held >= limit:
            what = "logs followed" if stream else "requests"
            return Refusal(
                f"too many {what} at once for {_who(key)} ({limit}). Wait for one to end",
                1,
            )
        share.tokens = min(self.limits.burst, share.tokens + (now - share.stamp) * self.limits.rate)
        share.stamp = now
        if share.tokens < 1.0:
            wait = (1.0 - share.tokens) / self.limits.rate
            return Refusal(
                f"too many requests for {_who(key)} (more than {self.limits.rate:g} a second). "
                "Slow down",
                max(1, math.ceil(wait)),
            )
        share.tokens -= 1.0
        if stream:
            share.streams += 1
        else:
            share.requests += 1
        self._busy += 1
        self._busy_anonymous += anonymous
        return None

    def release(self, key: str, *, stream: bool = False) -> None:
        """An admitted request (or stream) of `key` is done."""
        self._busy = max(0, self._busy - 1)
        if key.startswith("addr:"):
            self._busy_anonymous = max(0, self._busy_anonymous - 1)
        share = self._shares.get(key)
        if share is None:
            return
        if stream:
            share.streams = max(0, share.streams - 1)
        else:
            share.requests = max(0, share.requests - 1)

    def _share(self, key: str, now: float) -> _Share:
        share = self._shares.get(key)
        if share is None:
            if len(self._shares) >= MAX_KEYS:
                self._prune(now)
            share = self._shares[key] = _Share(tokens=self.limits.burst, stamp=now)
        return share

    def _prune(self, now: float) -> None:
        """Drop the buckets that would be full again and hold nothing: a new one is the
        same."""
        for key, share in list(self._shares.items()):
            refilled = share.tokens + (now - share.stamp) * self.limits.rate
            if share.requests == 0 and share.streams == 0 and refilled >= self.limits.burst:
                del self._shares[key]


class RateLimitMiddleware:
    """Admits each HTTP request through `limiter` before the app sees it, then releases it.

    The release comes once its response has ended (a followed log: when the stream ends
    or its client goes away).
    """

    def __init__(
        self, app: ASGIApp, limiter: Limiter, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.app = app
        self.limiter = limiter
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        address = client[0] if client is not None else ""
        key = self.limiter.key(credential(scope), address)
        stream = is_stream(scope["path"])
        refusal = self.limiter.admit(key, self.clock(), stream=stream)
        if refusal is not None:
            response = JSONResponse(
                refusal.reply(), refusal.status, headers={"Retry-After": str(refusal.retry_after)}
            )
            await response(scope, receive, send)
            return
        # The request's own task (and what it starts) reads it; the next request's
        # task starts from the connection's context, without it.
        client_address.set(address)
        try:
            await self.app(scope, receive, send)
        finally:
            self.limiter.release(key, stream=stream)


def credential(scope: Scope) -> str | None:
    """The request's token: its bearer's, or the web page's session cookie's."""
    token = bearer(scope)
    if token is not None:
        return token
    from gbatch.api.web import COOKIE  # deferred: web imports jinja2

    return Request(scope).cookies.get(COOKIE) or None


def bearer(scope: Scope) -> str | None:
    """The token of the request's `Authorization: Bearer TOKEN` header, or None.

    The first Authorization header counts, as Starlette's Headers.get reads it. Read
    from the scope's raw headers: a Headers object per request is not needed for one
    header.
    """
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


def is_stream(path: str) -> bool:
    """A followed log: /api/v1/jobs/{job}/logs/follow, or the web page's /ui/jobs/{job}/log."""
    return (path.startswith(PREFIX + "/jobs/") and path.endswith("/logs/follow")) or (
        path.startswith("/ui/jobs/") and path.endswith("/log")
    )


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _subject(token: str) -> str | None:
    """The `sub` claim of a JWT, read without its key: only for a token gbatchd has
    verified."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    sub = claims.get("sub") if isinstance(claims, dict) else None
    return sub if isinstance(sub, str) and sub else None


def _who(key: str) -> str:
    kind, _, name = key.partition(":")
    return f"user {name}" if kind == "user" else f"client {name}"
