"""The HTTP API (`gbatch api serve`): HTTP requests sent to gbatchd as the CLI's requests.

Each HTTP request becomes the wire request the CLI would send, wrapped in
requests.WithToken with the bearer's token, and goes to gbatchd over its socket like any
command's. The daemon verifies the token and runs the request as the token's user within
its scopes (head/handlers/tokens.unwrap_token): this process holds no key, lends no
identity of its own, and authorizes nothing. A request without a token is answered 401
here, and never reaches the daemon.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from gbatch.api.follow import resume_offset, whole_number
from gbatch.api.link import DaemonLink
from gbatch.api.openapi import PREFIX, document
from gbatch.api.ratelimit import (
    Limiter,
    RateLimitMiddleware,
    RateLimits,
    bearer,
    client_address,
)
from gbatch.api.tunnel import TUNNEL_PATH, PortTunnel
from gbatch.core.constants import MAX_ID_DIGITS
from gbatch.core.jobids import ANY, ONE, JobIdError, parse_job_ids, parse_one_job
from gbatch.core.loglines import InternalErrors, loggable
from gbatch.jobspec.errors import BadSubmit
from gbatch.jobspec.submit import request_for_text  # loads neither yaml nor the spec until used
from gbatch.protocol import requests
from gbatch.protocol.client import DaemonUnavailable, ReplyTimeout, RequestFailed

T = TypeVar("T")
log = logging.getLogger("gbatch.api")
METRICS_PATH = "/metrics"
MAX_BODY = 1 << 20  # a job file's or script's limit (spec.MAX_FILE_BYTES)
# A job file up to this size is read on the event loop (a small one is read quickly); a
# larger one in a worker thread, so that reading a megabyte of YAML holds up no other
# request for long.
INLINE_PARSE_BYTES = 16 * 1024
# A reply line past this size is decoded in a worker thread (a listing's megabytes).
INLINE_DECODE_BYTES = 256 * 1024
HTTP_STATUS: dict[requests.ErrorKind, int] = {
    "invalid": 400,
    "unauthenticated": 401,
    "permission": 403,
    "not_found": 404,
    "internal": 500,
    "unavailable": 503,
}


def error(kind: requests.ErrorKind, message: str) -> JSONResponse:
    """One JSON line: the kind and message the CLI would print after `error:`."""
    headers = {"WWW-Authenticate": 'Bearer realm="gbatch"'} if kind == "unauthenticated" else None
    return JSONResponse(requests.error_reply(kind, message), HTTP_STATUS[kind], headers=headers)


class Api:
    """The routes, sending to the daemon at `socket_path`."""

    def __init__(
        self,
        socket_path: Path,
        timeout: float = 30.0,
        *,
        local_metrics: bool = False,
        limiter: Limiter | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        # Told which tokens gbatchd accepts: their users' buckets (api/ratelimit.py).
        self.limiter = limiter or Limiter()
        # /metrics without a token from this machine, as this process's own user.
        self.local_metrics = local_metrics
        # Connections to gbatchd, kept open between requests (a connection per request
        # cost the daemon a thread and an accept each), used on the event loop.
        self.link = DaemonLink(socket_path, timeout)

    async def _send(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The reply's fields to `payload`, decoded in a worker thread when large."""
        line = await self.link.send_raw(payload)
        if len(line) > INLINE_DECODE_BYTES:
            reply: dict[str, Any] = await run_in_threadpool(json.loads, line)
        else:
            reply = json.loads(line)
        reply.pop("ok", None)
        return reply

    async def call(
        self, http: Request, inner: requests.Request, status: int = 200
    ) -> tuple[dict[str, Any] | None, JSONResponse]:
        """Send `inner` as the bearer of `http`'s token: the reply's fields and the response.

        The response is the one to give: an error's when the fields are None.
        """
        token = bearer(http.scope)
        if token is None:
            return None, _no_token()
        reply = await self.ask(token, inner)
        if isinstance(reply, JSONResponse):
            return None, reply
        return reply, JSONResponse({"ok": True, **reply}, status)

    async def relay(self, http: Request, inner: requests.Request) -> Response:
        """call()'s response, with the daemon's reply line passed on undecoded.

        What call() would encode again is what gbatchd wrote (a listing's megabytes).
        """
        token = bearer(http.scope)
        if token is None:
            return _no_token()
        line = await self._exchange(token, self.link.send_raw(_as_bearer(token, inner)))
        if isinstance(line, JSONResponse):
            return line
        return Response(line, media_type="application/json")

    async def relay_pages(self, http: Request, inner: requests.ListJobs) -> Response:
        """relay()'s response to a listing asked for whole, asked a page at a time.

        Streamed: this process holds a page, not 1,000,000 jobs' records.
        The body is the one line relay() would pass on (`{"ok":true,"jobs":[...],"now":N}`,
        `now` the first page's). A refusal of the first page is its error response; a
        failure of a later one cuts the body short (the status has been sent)."""
        token = bearer(http.scope)
        if token is None:
            return _no_token()

        def page(after: int | None) -> dict[str, Any]:
            fields = {**vars(inner), "after": after, "limit": LISTING_PAGE}
            return _as_bearer(token, requests.ListJobs(**fields))

        line = await self._exchange(token, self.link.send_raw(page(None)))
        if isinstance(line, JSONResponse):
            return line
        try:
            items, now, after = _page_parts(line)
        except ValueError as err:  # a gbatchd of another version
            return error("internal", str(err))

        async def body() -> Any:
            yield _PAGE_HEAD + items
            wrote = bool(items)
            following = after
            while following is not None:
                more, _, following = _page_parts(await self.link.send_raw(page(following)))
                if more:
                    yield b"," + more if wrote else more
                    wrote = True
            yield b'],"now":' + now + b"}"

        return StreamingResponse(body(), media_type="application/json")

    async def ask(self, token: str, inner: requests.Request) -> dict[str, Any] | JSONResponse:
        """The reply's fields to `inner` sent as the bearer of `token`, or the error's response."""
        return await self._exchange(token, self._send(_as_bearer(token, inner)))

    async def _exchange(self, token: str, work: Coroutine[Any, Any, T]) -> T | JSONResponse:
        """`work` (a request sent as the bearer of `token`): its result, or the error's
        response. gbatchd's word on the token tells the limiter whose share the token's
        requests draw on."""
        try:
            reply = await work
        except RequestFailed as err:
            if err.kind == "unauthenticated":
                self.limiter.forget(token)
            return error(err.kind, err.message)
        except (DaemonUnavailable, ReplyTimeout) as err:
            return error("unavailable", str(err))
        self.limiter.vouch(token)
        return reply

    async def stream_log(self, token: str, job: tuple[int, int | None], offset: int) -> Response:
        """The job's log from `offset` as Server-Sent Events until the job ends (api/follow.py).

        A refusal of the first read is an ordinary JSON error.
        """
        from gbatch.api import follow

        async def read(at: int) -> dict[str, Any]:
            reply = await self.ask(token, requests.ReadLog(id=job[0], task=job[1], offset=at))
            if isinstance(reply, JSONResponse):
                raise follow.ReadFailed(json.loads(bytes(reply.body)))
            return reply

        try:
            first = await read(offset)
        except follow.ReadFailed as err:
            return JSONResponse(err.reply, HTTP_STATUS[err.reply["kind"]])
        return StreamingResponse(
            follow.follow(read, first), media_type=follow.MEDIA_TYPE, headers=follow.HEADERS
        )

    # -- the routes -------------------------------------------------------------------

    async def openapi(self, http: Request) -> Response:
        return JSONResponse(document())

    async def submit(self, http: Request) -> Response:
        return await self.submit_from(bearer(http.scope), http.receive)

    async def submit_from(self, token: str | None, receive: Receive) -> Response:
        """POST /jobs: submit the job file or batch script in the body, as `token`'s bearer.

        201 with the reply's fields and its first id as job_id.
        """
        if token is None:  # before reading a body that will not be used
            return _no_token()
        body = await _body(receive)
        if isinstance(body, Response):
            return body
        try:
            if len(body) <= INLINE_PARSE_BYTES:
                built = request_for_text(body, "api")
            else:
                built = await run_in_threadpool(request_for_text, body, "api")
        except BadSubmit as err:
            return error("invalid", err.message)
        request = requests.Submit(**built.fields())
        reply = await self._exchange(token, self._send(_as_bearer(token, request)))
        if isinstance(reply, JSONResponse):
            return reply
        job_id = {"job_id": reply["ids"][0]} if reply.get("ids") else {}
        return JSONResponse({"ok": True, **reply, **job_id}, 201)

    async def jobs(self, http: Request) -> Response:
        query = http.query_params
        try:
            ids = tuple(str(t) for t in parse_job_ids(query["job"], ANY)) if "job" in query else ()
            since = None if query.get("since") is None else float(query["since"])
        except JobIdError as err:
            return error("invalid", f"job: {err}")
        except ValueError:
            return error("invalid", "since: give epoch seconds, e.g. 1767225600")
        page: dict[str, int] = {}
        for name in ("limit", "after"):
            text = query.get(name)
            if text is not None:
                number = whole_number(text)
                if number is None or (name == "limit" and number < 1):
                    least = "1 or more" if name == "limit" else "a job id"
                    least += f", of at most {MAX_ID_DIGITS} digits"
                    return error("invalid", f"{name}: {loggable(text, 40)!r}; give {least}")
                page[name] = number
        shape = query.get("format", "jobs")
        if shape not in ("jobs", "columns"):
            return error("invalid", f"format: {shape!r}; give jobs or columns")
        request = requests.ListJobs(
            jobs=ids,
            users=_list(query.get("user")),
            states=_list(query.get("state")),
            names=_list(query.get("name")),
            partitions=_list(query.get("partition")),
            history=_flag(query.get("history")),
            since=since,
            # columns: the narrow listing squeue reads (no Job built per row) and a
            # tenth of the bytes of the jobs' records.
            brief=shape == "jobs",
            columns=shape == "columns",
            after=page.get("after"),
            limit=page.get("limit"),
        )
        if shape == "jobs" and not ids and not page:
            return await self.relay_pages(http, request)
        return await self.relay(http, request)

    async def job(self, http: Request) -> Response:
        target = _one_job(http)
        if isinstance(target, Response):
            return target
        job_id, task = target
        return await self.relay(http, requests.ShowJob(id=job_id, task=task, with_tasks=True))

    async def act(self, http: Request) -> Response:
        target = http.path_params["job"]
        action = http.path_params["action"]
        if action not in requests.JOB_ACTIONS:
            return error("not_found", f"no action {action!r}: cancel, hold, release or requeue")
        checked = _one_job(http)
        if isinstance(checked, Response):
            return checked
        reply, response = await self.call(http, requests.JOB_ACTIONS[action](jobs=(target,)))
        if reply is not None and reply.get("failed"):
            return JSONResponse({"ok": False, **reply}, 409)
        return response

    async def logs(self, http: Request) -> Response:
        target = _one_job(http)
        if isinstance(target, Response):
            return target
        offset = whole_number(http.query_params.get("offset", "0"))
        if offset is None:
            return error("invalid", "offset must be a non-negative integer")
        request = requests.ReadLog(id=target[0], task=target[1], offset=offset)
        return await self.relay(http, request)

    async def follow_logs(self, http: Request) -> Response:
        """GET /jobs/{job}/logs/follow: the log as text/event-stream until the job ends.

        It starts from `offset`, or an EventSource's Last-Event-ID (the offset it had
        reached).
        """
        token = bearer(http.scope)
        if token is None:
            return _no_token()
        target = _one_job(http)
        if isinstance(target, Response):
            return target
        offset = resume_offset(http)
        if offset is None:
            return error("invalid", "offset must be a non-negative integer")
        return await self.stream_log(token, target, offset)

    async def nodes(self, http: Request) -> Response:
        return await self.relay(http, requests.ListNodes())

    async def metrics(self, http: Request) -> Response:
        """Prometheus's text format of the daemon's Metrics snapshot.

        With a token, as its user (scope read); without one, only with local_metrics and
        from loopback, as this process's user: Prometheus on the head scrapes with no
        secret to keep.
        """
        reply: dict[str, Any] | None
        if bearer(http.scope) is None and self.local_metrics and _from_loopback(http):
            try:
                reply = await self._send(requests.encode_request(requests.Metrics()))
            except RequestFailed as err:
                return error(err.kind, err.message)
            except (DaemonUnavailable, ReplyTimeout) as err:
                return error("unavailable", str(err))
        else:
            reply, response = await self.call(http, requests.Metrics())
            if reply is None:
                return response
        from gbatch.api.metrics import CONTENT_TYPE, render  # deferred: prometheus_client

        body = await run_in_threadpool(render, reply)
        return Response(body, media_type=CONTENT_TYPE)

    async def fairshare(self, http: Request) -> Response:
        query = http.query_params
        request = requests.ShowShares(
            users=_list(query.get("user")), all_users=_flag(query.get("all"))
        )
        return await self.relay(http, request)

    async def cluster(self, http: Request) -> Response:
        """GET /cluster: the cluster partitions and the bearer's links (`all`: admins, all)."""
        request = requests.ClusterStatus(all_users=_flag(http.query_params.get("all")))
        return await self.relay(http, request)

    async def timeline(self, http: Request) -> Response:
        """GET /timeline: the GPU timeline's data over [start, end) (default: the last 24 h)."""
        span = _period(http, 86400.0)
        if isinstance(span, Response):
            return span
        return await self.relay(http, requests.ShowTimeline(start=span[0], end=span[1]))

    async def gpu_history(self, http: Request) -> Response:
        """GET /gpus/history: GPUs' utilisation and memory over [start, end) (default: 1 h)."""
        span = _period(http, 3600.0)
        if isinstance(span, Response):
            return span
        query = http.query_params
        numbers: dict[str, Any] = {}
        for name in ("gpu", "points"):
            items = _list(query.get(name))
            parsed = [whole_number(item) for item in items]
            if any(n is None for n in parsed):
                return error("invalid", f"{name}: give whole numbers, e.g. {name}=0,1")
            numbers[name] = tuple(n for n in parsed if n is not None)
        if len(numbers["points"]) > 1:
            return error("invalid", "points: give one number, 1 to 1000")
        request = requests.ShowGpuHistory(
            start=span[0],
            end=span[1],
            node=query.get("node", ""),
            gpus=numbers["gpu"],
            points=numbers["points"][0] if numbers["points"] else 120,
        )
        return await self.relay(http, request)

    async def usage(self, http: Request) -> Response:
        """GET /usage: sreport's GPU-seconds per step, by user and by partition.

        Steps of `step` seconds (default a day) over [start, end) (default the last 30
        days)."""
        span = _period(http, 30 * 86400.0)
        if isinstance(span, Response):
            return span
        text = http.query_params.get("step", "86400")
        step = whole_number(text)
        if step is None or step < 60:
            return error("invalid", f"step: {loggable(text, 40)!r}; give seconds, 60 or more")
        count = -(-(span[1] - span[0]) // step)  # the last step ends at `end`
        if count > 400:
            return error("invalid", "step: more than 400 steps in the period; give a longer one")
        edges = [span[0] + i * step for i in range(int(count))] + [span[1]]
        return await self.relay(http, requests.ReportUsageSeries(edges=tuple(edges)))

    async def reservations(self, http: Request) -> Response:
        """The reservations (as gbatch sinfo -T / scontrol show reservation)."""
        return await self.relay(http, requests.ListReservations(name=http.query_params.get("name")))

    async def book(self, http: Request) -> Response:
        """POST /reservations: {"action": "create"|"update", "words": ["Key=Value", ...]}.

        A user's own booking under user_reservations (scope submit); admins make the
        others on the head (`gbatch scontrol`)."""
        try:
            body = await http.json()
            action = body.get("action", "create")
            words = tuple(body["words"])
            if not all(isinstance(w, str) for w in words) or not isinstance(action, str):
                raise TypeError
        except (ValueError, KeyError, TypeError, AttributeError):
            return error(
                "invalid",
                'give {"action": "create", "words": ["ReservationName=NAME", "StartTime=...", '
                '"Duration=...", "Users=YOU", "GPUs=N"]}',
            )
        _, response = await self.call(
            http, requests.ChangeReservation(action=action, words=words), 201
        )
        return response

    async def unbook(self, http: Request) -> Response:
        """DELETE /reservations/{name}: a user's own booking (or an admin's request)."""
        name = http.path_params["name"]
        _, response = await self.call(http, requests.DeleteReservation(name=name))
        return response


def make_app(
    socket_path: Path,
    timeout: float = 30.0,
    *,
    local_metrics: bool = False,
    limits: RateLimits | None = None,
    trusted_proxies: tuple[str, ...] = (),
) -> Starlette:
    """The API's ASGI app, talking to the daemon at `socket_path`.

    `local_metrics`: serve /metrics without a token to clients on this machine's
    loopback. `limits`: each user's share (api/ratelimit.py; the defaults when None).
    `trusted_proxies`: addresses or networks whose X-Forwarded-For and
    X-Forwarded-Proto are believed (the client's address for the limits, https for the
    web page's Secure cookie); from anyone else they are ignored.
    """
    limiter = Limiter(limits or RateLimits())
    api = Api(socket_path, timeout, local_metrics=local_metrics, limiter=limiter)
    routes: list[tuple[str, Callable[[Request], Awaitable[Response]], list[str]]] = [
        ("/openapi.json", api.openapi, ["GET"]),
        ("/jobs", api.jobs, ["GET"]),
        ("/jobs", api.submit, ["POST"]),
        ("/jobs/{job}", api.job, ["GET"]),
        ("/jobs/{job}/logs", api.logs, ["GET"]),
        ("/jobs/{job}/logs/follow", api.follow_logs, ["GET"]),
        ("/jobs/{job}/{action}", api.act, ["POST"]),
    ]
    routes += [("/nodes", api.nodes, ["GET"]), ("/fairshare", api.fairshare, ["GET"])]
    routes += [("/cluster", api.cluster, ["GET"])]
    routes += [
        ("/timeline", api.timeline, ["GET"]),
        ("/gpus/history", api.gpu_history, ["GET"]),
        ("/usage", api.usage, ["GET"]),
    ]
    routes += [
        ("/reservations", api.reservations, ["GET"]),
        ("/reservations", api.book, ["POST"]),
        ("/reservations/{name}", api.unbook, ["DELETE"]),
    ]
    from gbatch.api.web import Web  # deferred with the app: jinja2

    async def submit(scope: Scope, receive: Receive, send: Send) -> None:
        response = await api.submit_from(bearer(scope), receive)
        await response(scope, receive, send)

    return _App(
        trusted_proxies=trusted_proxies,
        # POST /jobs, the request a CI pipeline repeats, straight to its endpoint.
        shortcuts={("POST", PREFIX + "/jobs"): RateLimitMiddleware(submit, limiter)},
        routes=[
            Route(PREFIX + path, endpoint, methods=methods) for path, endpoint, methods in routes
        ]
        # Where Prometheus looks by default; outside /api/ so a proxy of /api/ (README's
        # nginx) does not publish it.
        + [Route(METRICS_PATH, api.metrics, methods=["GET"])]
        # The web page, through the same wire requests (api/web.py).
        + Web(api).routes()
        # port-forward's tunnel (api/tunnel.py): a WebSocket per forwarded connection.
        + [WebSocketRoute(PREFIX + TUNNEL_PATH, PortTunnel(socket_path).__call__)],
        exception_handlers={404: _not_found, 405: _not_allowed, Exception: _internal_error},
        middleware=[Middleware(RateLimitMiddleware, limiter=limiter)],
    )


class _App(Starlette):
    """Starlette, with `shortcuts`, and the API's bugs logged within a budget.

    `shortcuts`: (method, exact path) -> an ASGI app that serves it
    as its route would, in place of the middleware stack, the router and the route's
    wrappers (a visible share of the API's CPU per submit: bench/bench_api.py). A
    shortcut must do all that its route's stack would: the rate limit
    (RateLimitMiddleware) and the answers. Any other spelling of the path (a trailing
    slash, a root_path) takes the route.

    A bug (an exception no route handles) is answered 500 `internal` and logged once per
    kind per window with its traceback, the repeats counted (core/loglines.InternalErrors),
    never re-raised to the server, which would write a traceback per request: a loop
    of requests that hit one must not fill the disk.

    With `trusted_proxies`, a request from one of them is first given the client's
    address and scheme its X-Forwarded-For and X-Forwarded-Proto say (uvicorn's
    ProxyHeadersMiddleware), before the shortcuts and the rate limit see it."""

    def __init__(
        self,
        *,
        shortcuts: dict[tuple[str, str], ASGIApp],
        trusted_proxies: tuple[str, ...] = (),
        bugs: InternalErrors | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.shortcuts = shortcuts
        # No loop of ours ticks here: the budget's own timer writes the counts.
        self.bugs = bugs or InternalErrors(log, timer=True)

        self.entry: ASGIApp = self._dispatch
        if trusted_proxies:
            from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

            self.entry = ProxyHeadersMiddleware(self._dispatch, list(trusted_proxies))  # type: ignore[arg-type,assignment]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.entry(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan: a failed start-up is the server's to tell
            await super().__call__(scope, receive, send)
            return
        try:
            if not scope.get("root_path"):
                shortcut = self.shortcuts.get((scope["method"], scope["path"]))
                if shortcut is not None:
                    scope["app"] = self
                    await shortcut(scope, receive, send)
                    return
            await super().__call__(scope, receive, send)
        except ClientDisconnect:
            return  # the client left while its body came: nobody to answer, nothing wrong
        except Exception as err:
            what = f"{loggable(scope['method'], 10)} {loggable(scope['path'], 100)}"
            self.bugs.report(err, what)
            # Starlette's outer middleware has answered already (internal_error) when the
            # route's stack ran; a shortcut's has not. Sending a second answer, or one
            # after a response began, fails in the server: nothing more to do then.
            with contextlib.suppress(Exception):
                await internal_error()(scope, receive, send)


def internal_error() -> JSONResponse:
    """The answer to a request that hit a bug in the API: 500, kind internal, no traceback."""
    return error(
        "internal",
        "internal error in the HTTP API (a bug): the API's log says more. Please report it",
    )


async def _internal_error(http: Request, exc: Exception) -> Response:
    return internal_error()


async def _not_found(http: Request, exc: Exception) -> Response:
    return error("not_found", f"no such path {http.url.path}. See {PREFIX}/openapi.json")


async def _not_allowed(http: Request, exc: Exception) -> Response:
    return JSONResponse(
        requests.error_reply("invalid", f"{http.method} is not taken at {http.url.path}"), 405
    )


def _no_token() -> JSONResponse:
    return error(
        "unauthenticated",
        "no token: send `Authorization: Bearer TOKEN` (mint one with `gbatch token`)",
    )


LISTING_PAGE = 5000
"""Jobs a listing asked for whole is asked of gbatchd at once (Api.relay_pages)."""
_PAGE_HEAD = b'{"ok":true,"jobs":['


def _page_parts(line: bytes) -> tuple[bytes, bytes, int | None]:
    """A page's reply line (`{"ok":true,"jobs":[...],"now":N,"next":M}`, as gbatchd
    writes it: replies.encode_reply) as (its records' text, its now's, its next).

    The records end at the last `],"now":`, which no string among them can hold (a
    quote inside a JSON string is escaped)."""
    end = line.rfind(b'],"now":')
    if not line.startswith(_PAGE_HEAD) or end < 0:
        raise ValueError("a listing's page came from gbatchd in an unknown form")
    rest = json.loads(b"{" + line[end + 2 :])
    return line[len(_PAGE_HEAD) : end], json.dumps(rest["now"]).encode(), rest.get("next")


def _as_bearer(token: str, inner: requests.Request) -> dict[str, Any]:
    """`inner` as gbatchd's request to run it as the user of `token`."""
    return requests.encode_request(
        requests.WithToken(
            token=token, request=requests.encode_request(inner), client=client_address.get()
        )
    )


def _from_loopback(http: Request) -> bool:
    host = http.client.host if http.client is not None else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _body(receive: Receive) -> str | Response:
    """The request's body as text, at most MAX_BODY bytes, or the error response. Read
    from `receive` itself, as Request.stream() would (ClientDisconnect when the client
    went away), without its async generator: most bodies come in one message."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            continue
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY:
            return error("invalid", "the job is larger than 1 MiB. Keep data out of it")
        if not message.get("more_body", False):
            break
    try:
        return b"".join(chunks).decode()
    except UnicodeDecodeError as err:
        return error("invalid", f"byte {err.start} of the body is not UTF-8 text")


def _one_job(http: Request) -> tuple[int, int | None] | Response:
    text = http.path_params["job"]
    try:
        target = parse_one_job(text, ONE)
    except JobIdError as err:
        return error("invalid", f"job: {err}")
    return target.job, target.tasks[0][0] if target.tasks else None


def _period(http: Request, default_span: float) -> tuple[float, float] | Response:
    """?start= and ?end= as epoch seconds: end now and start `default_span` before it
    when not given."""
    import time

    values: dict[str, float] = {}
    for name in ("start", "end"):
        text = http.query_params.get(name)
        if text is None:
            continue
        try:
            values[name] = float(text)
        except ValueError:
            return error("invalid", f"{name}: {loggable(text, 40)!r}; give epoch seconds")
        if values[name] != values[name] or abs(values[name]) == float("inf"):
            return error("invalid", f"{name}: {loggable(text, 40)!r}; give epoch seconds")
    end = values.get("end", time.time())
    start = values.get("start", end - default_span)
    if not end > start:
        return error("invalid", "end: give a time after start (epoch seconds)")
    return start, end


def _list(value: str | None) -> tuple[str, ...]:
    return tuple(item for item in (value or "").split(",") if item)


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")
