"""The web page (/ui): server-rendered HTML over the same wire requests as the JSON API.

They are sent through Api.ask with the token of the session's cookie, so gbatchd
authorizes every page exactly as it does each CLI command (this module decides nothing).

Safety, in one place:
  - the token lives in an HttpOnly, SameSite=Strict cookie (Secure over https), set by
    the login form's POST; scripts cannot read it and other sites cannot send it;
  - every form that changes something carries a CSRF token, an HMAC of the session's
    token under a key this process draws at start (a restart asks for a reload, no more);
    the login form's is an HMAC of a random value in a SameSite=Strict cookie (login CSRF);
  - Jinja2 autoescapes every value (job names, users, reasons, YAML), and the log is
    written by job.js as text, never as HTML;
  - a Content-Security-Policy allows this origin's own script and style only: no inline
    script, no frames, forms post only here.
Jinja2 rather than string.Template: autoescaping by default is the XSS defence, and
loops and conditionals keep the templates free of HTML built in Python.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
import urllib.parse
from pathlib import Path
from typing import Any

import jinja2
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from gbatch.api.charts import gpu_chart
from gbatch.api.follow import resume_offset, whole_number
from gbatch.core.jobids import ONE, JobIdError, parse_one_job
from gbatch.core.labels import folded_label
from gbatch.jobspec.errors import BadSubmit
from gbatch.protocol import requests

HERE = Path(__file__).parent
FORM_LIMIT = 3 << 20  # a job file of 1 MiB (app.MAX_BODY), URL-encoded
COOKIE = "gbatch_session"
# Before a session: a random value for the login form's CSRF token (login CSRF, where
# another site signs a victim in with the attacker's token). SameSite=Strict, so a POST
# from another site's page arrives without it and is refused.
LOGIN_COOKIE = "gbatch_login"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
STATIC = {"app.css": "text/css", "job.js": "text/javascript"}
# Why the login page is shown (its ?why=): a key of this table, never text from the URL,
# which anyone may write into a link they send.
LOGIN_REASONS = {
    "refused": "the session's token is no longer accepted (expired, revoked, or its "
    "user gone): sign in with a new one (gbatch token)",
    "signed-out": "signed out",
}
STATES = (
    "PENDING",
    "RUNNING",
    "COMPLETING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "PREEMPTED",
)


def _when(stamp: float | None) -> str:
    return "" if stamp is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))


def _placements(job: dict[str, Any]) -> list[tuple[str, list[int]]]:
    """A wire job's nodes with its GPUs on each, first node first (none while on none)."""
    if not job.get("node"):
        return []
    return [(job["node"], list(job["gpus"])), *((n, list(g)) for n, g in job.get("peers", ()))]


def _nodelist(job: dict[str, Any]) -> str:
    """A wire job's nodes as Slurm's host list (`gpu[01-02]`), as squeue's NODELIST."""
    from gbatch.core.hostlist import compress

    return compress(name for name, _ in _placements(job))


QUEUE_PAGE = 500
"""Jobs on one page of the web page's queue (a link leads to the next)."""


def _ui_query(fields: dict[str, Any]) -> str:
    """The queue page's address with these query fields."""
    return "/ui" + ("?" + urllib.parse.urlencode(fields) if fields else "")


def _label(job: dict[str, Any]) -> str:
    """A wire job's id as squeue shows it: `N`, task K of array N `N_K`, and a record
    standing for more pending tasks (array_more) `N_[K-M]`, as jobids.job_label."""
    spec = job["spec"]
    task = spec.get("array_task")
    if task is None:
        return str(job["id"])
    array = job["id"] - (spec.get("array_pos") or 0)
    more = job.get("array_more")
    if not more:
        return f"{array}_{task}"
    spans = [(task, task), *((first, last) for first, last in more)]
    return folded_label(array, spans, spec.get("array_throttle"))


class Web:
    """The /ui routes, asking the daemon through `api` (an app.Api)."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.csrf_key = secrets.token_bytes(32)
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters["when"] = _when
        self.templates.filters["placements"] = _placements
        self.templates.filters["nodelist"] = _nodelist
        self.templates.filters["label"] = _label

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/ui", self.queue, methods=["GET"]),
            Route("/ui/login", self.login_form, methods=["GET"]),
            Route("/ui/login", self.login, methods=["POST"]),
            Route("/ui/logout", self.logout, methods=["POST"]),
            Route("/ui/jobs/{job}", self.job, methods=["GET"]),
            Route("/ui/jobs/{job}/log", self.log, methods=["GET"]),
            Route("/ui/jobs/{job}/{action}", self.act, methods=["POST"]),
            Route("/ui/nodes", self.nodes, methods=["GET"]),
            Route("/ui/timeline", self.timeline, methods=["GET"]),
            Route("/ui/usage", self.usage, methods=["GET"]),
            Route("/ui/submit", self.submit_form, methods=["GET"]),
            Route("/ui/submit", self.submit, methods=["POST"]),
            Route("/ui/static/{name}", self.static, methods=["GET"]),
        ]

    # -- helpers ------------------------------------------------------------------------

    def csrf(self, token: str) -> str:
        return hmac.new(self.csrf_key, token.encode(), hashlib.sha256).hexdigest()

    def login_csrf(self, nonce: str) -> str:
        return self.csrf("login:" + nonce)  # never equal to a session's: tokens hold no ':'

    def page(self, http: Request, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        token = http.cookies.get(COOKIE)
        fields = {"csrf": self.csrf(token) if token else "", "signed_in": bool(token)}
        html = self.templates.get_template(name).render({**fields, **values})
        return HTMLResponse(html, status, headers=SECURITY_HEADERS)

    def login_page(self, http: Request, status: int, message: str) -> HTMLResponse:
        """The login form, its CSRF token from the LOGIN_COOKIE nonce.

        A new nonce is drawn if the browser has none; the cookie is set with the page.
        """
        nonce = http.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(32)
        response = self.page(
            http, "login.html", status, message=message, csrf=self.login_csrf(nonce)
        )
        response.set_cookie(
            LOGIN_COOKIE,
            nonce,
            path="/ui/login",
            httponly=True,
            samesite="strict",
            secure=http.url.scheme == "https",
        )
        return response

    def problem(self, http: Request, reply: Response) -> Response:
        """The daemon's refusal as a page; a token it no longer takes: back to login."""
        import json

        fields = json.loads(bytes(reply.body))
        if fields["kind"] == "unauthenticated":
            return _to_login("refused")
        return self.page(http, "error.html", reply.status_code, message=fields["error"])

    async def ask(self, http: Request, request: requests.Request) -> dict[str, Any] | Response:
        token = http.cookies.get(COOKIE)
        if not token:
            return _to_login("")
        reply = await self.api.ask(token, request)
        return reply if isinstance(reply, dict) else self.problem(http, reply)

    async def form(self, http: Request) -> dict[str, str] | Response:
        """The POSTed form's fields, once its CSRF token matched the session's."""
        data = bytearray()
        async for chunk in http.stream():
            data += chunk
            if len(data) > FORM_LIMIT:
                return self.page(http, "error.html", 413, message="the form is too large")
        fields = {k: v[-1] for k, v in urllib.parse.parse_qs(data.decode(errors="replace")).items()}
        if http.url.path == "/ui/login":
            nonce = http.cookies.get(LOGIN_COOKIE, "")
            expected = self.login_csrf(nonce) if nonce else ""
        else:
            token = http.cookies.get(COOKIE, "")
            expected = self.csrf(token) if token else ""
        if not (expected and hmac.compare_digest(fields.get("csrf", ""), expected)):
            return self.page(http, "error.html", 403, message="stale form: reload the page")
        return fields

    # -- pages --------------------------------------------------------------------------

    async def login_form(self, http: Request) -> Response:
        return self.login_page(http, 200, LOGIN_REASONS.get(http.query_params.get("why", ""), ""))

    async def login(self, http: Request) -> Response:
        fields = await self.form(http)
        if isinstance(fields, Response):
            return fields
        token = fields.get("token", "").strip()
        # Checked with a read, so that a mistyped token is said at once, not on each page.
        reply = await self.api.ask(token, requests.ListJobs(brief=True)) if token else None
        if reply is None or not isinstance(reply, dict):
            import json

            why = "no token given" if reply is None else json.loads(bytes(reply.body))["error"]
            return self.login_page(http, 401, why)
        response = RedirectResponse("/ui", 303, headers=SECURITY_HEADERS)
        response.set_cookie(
            COOKIE,
            token,
            path="/ui",
            httponly=True,
            samesite="strict",
            secure=http.url.scheme == "https",
        )
        response.delete_cookie(
            LOGIN_COOKIE,
            path="/ui/login",
            httponly=True,
            samesite="strict",
            secure=http.url.scheme == "https",
        )
        return response

    async def logout(self, http: Request) -> Response:
        fields = await self.form(http)
        if isinstance(fields, Response):
            return fields
        response = _to_login("signed-out")
        response.delete_cookie(
            COOKIE, path="/ui", httponly=True, samesite="strict", secure=http.url.scheme == "https"
        )
        return response

    async def queue(self, http: Request) -> Response:
        query = http.query_params
        users = _list(query.get("user"))
        states = _list(query.get("state"))
        history = query.get("history") == "1"
        after = None if query.get("after") is None else whole_number(query["after"])
        if query.get("after") is not None and after is None:
            return self.page(http, "error.html", 400, message="after: give a job id")
        # A page at a time, as the API's ?limit=&after=: 100,000 pending jobs are not one
        # page of HTML. An array's pending tail is one record, one row (N_[K-M]).
        request = requests.ListJobs(
            users=users, states=states, history=history, brief=True, after=after, limit=QUEUE_PAGE
        )
        reply = await self.ask(http, request)
        if isinstance(reply, Response):
            return reply
        filters = {"user": ",".join(users), "state": ",".join(states)}
        filters = {name: value for name, value in filters.items() if value}
        if history:
            filters["history"] = "1"
        following = reply.get("next")
        return self.page(
            http,
            "queue.html",
            jobs=reply["jobs"],
            user=",".join(users),
            state=",".join(states),
            history=history,
            states=STATES,
            first_page=None if after is None else _ui_query(filters),
            next_page=None if following is None else _ui_query({**filters, "after": following}),
        )

    async def job(self, http: Request) -> Response:
        target = _target(http)
        if target is None:
            return self.page(http, "error.html", 400, message="not a job id: give N or N_K")
        reply = await self.ask(
            http, requests.ShowJob(id=target[0], task=target[1], with_tasks=True)
        )
        if isinstance(reply, Response):
            return reply
        job = reply["job"]
        charts = []
        if job.get("start_time") and job.get("node"):
            # Its GPUs since it started (its last 30 days: what the history keeps).
            end = job["end_time"] or reply["now"]
            start = max(job["start_time"], end - 30 * 86400)
            for node, gpus in _placements(job):
                if not gpus or end <= start:
                    continue
                history = await self.ask(
                    http,
                    requests.ShowGpuHistory(
                        start=start, end=end, node=node, gpus=tuple(gpus), points=240
                    ),
                )
                if isinstance(history, Response):
                    return history
                for s in history["series"]:
                    chart = gpu_chart(s["points"], start, end, 480, 70, s["memory_total_mib"])
                    charts.append({"node": s["node"], "index": s["index"], "chart": chart})
        return self.page(http, "job.html", job=job, events=reply["events"], charts=charts)

    async def act(self, http: Request) -> Response:
        """A job page's button: send the wire request the CLI would, then back to the job's page.

        Each job the daemon refused is said as it said it.
        """
        action = requests.JOB_ACTIONS.get(http.path_params["action"])
        if action is None:
            return self.page(http, "error.html", 404, message="no such action")
        if _target(http) is None:
            return self.page(http, "error.html", 400, message="not a job id: give N or N_K")
        fields = await self.form(http)
        if isinstance(fields, Response):
            return fields
        job = http.path_params["job"]
        reply = await self.ask(http, action(jobs=(job,)))
        if isinstance(reply, Response):
            return reply
        if reply.get("failed"):
            message = "; ".join(  # as scontrol says each: `job N: why`
                f"job {r['id']}: {r['error']}" for r in reply["results"] if not r["ok"]
            )
            return self.page(http, "error.html", 409, message=message)
        return RedirectResponse(f"/ui/jobs/{job}", 303, headers=SECURITY_HEADERS)

    async def log(self, http: Request) -> Response:
        """The job's log as Server-Sent Events (the API's follow), with the cookie's token.

        An EventSource sends cookies, never an Authorization header.
        """
        token = http.cookies.get(COOKIE)
        target = _target(http)
        offset = resume_offset(http)
        if not token or target is None or offset is None:
            return Response("", 400)
        response: Response = await self.api.stream_log(token, target, offset)
        return response

    async def nodes(self, http: Request) -> Response:
        reply = await self.ask(http, requests.ListNodes())
        if isinstance(reply, Response):
            return reply
        from gbatch.core.reservations import windows_text

        nodes = [
            {**_by_card(node), "windows_text": windows_text(node.get("windows") or ())}
            for node in reply["nodes"]
        ]
        end = time.time()
        history = await self.ask(
            http, requests.ShowGpuHistory(start=end - 3600, end=end, points=60)
        )
        if isinstance(history, Response):
            return history
        charts = {
            f"{s['node']}/{s['index']}": gpu_chart(
                s["points"], end - 3600, end, 120, 22, s["memory_total_mib"]
            )
            for s in history["series"]
        }
        return self.page(
            http, "nodes.html", nodes=nodes, partitions=reply["partitions"], charts=charts
        )

    async def timeline(self, http: Request) -> Response:
        """The GPU timeline over the picked range (?range=, 24h by default) up to now."""
        from gbatch.api import timeline

        picked = http.query_params.get("range", timeline.DEFAULT_RANGE)
        span = timeline.RANGES.get(picked)
        if span is None:
            known = ", ".join(timeline.RANGES)
            return self.page(http, "error.html", 400, message=f"range: pick one of {known}")
        now = time.time()  # the range, then an eighth of it ahead: windows to come
        reply = await self.ask(http, requests.ShowTimeline(start=now - span, end=now + span / 8))
        if isinstance(reply, Response):
            return reply
        return self.page(
            http,
            "timeline.html",
            picture=timeline.layout(reply),
            ranges=list(timeline.RANGES),
            picked=picked,
            other_user=timeline.OTHER_USER,
        )

    async def usage(self, http: Request) -> Response:
        """GPU-hours per day or week by user and by partition (?period=, 30d by default)."""
        from gbatch.api import usage

        picked = http.query_params.get("period", usage.DEFAULT_PERIOD)
        if picked not in usage.PERIODS:
            known = ", ".join(usage.PERIODS)
            return self.page(http, "error.html", 400, message=f"period: pick one of {known}")
        edges = usage.edges(picked, time.time())
        reply = await self.ask(http, requests.ReportUsageSeries(edges=tuple(edges)))
        if isinstance(reply, Response):
            return reply
        return self.page(
            http,
            "usage.html",
            picture=usage.layout(reply, usage.PERIODS[picked][0]),
            periods=list(usage.PERIODS),
            picked=picked,
        )

    async def submit_form(self, http: Request) -> Response:
        if not http.cookies.get(COOKIE):
            return _to_login("")
        return self.page(http, "submit.html", text="", message="")

    async def submit(self, http: Request) -> Response:
        fields = await self.form(http)
        if isinstance(fields, Response):
            return fields
        text = fields.get("job", "").replace("\r\n", "\n")  # browsers send CRLF
        from gbatch.jobspec.submit import request_for_text  # deferred: the option parsers

        try:
            built = await run_in_threadpool(request_for_text, text, "api")
        except BadSubmit as err:
            return self.page(http, "submit.html", 400, text=text, message=err.message)
        reply = await self.ask(http, requests.Submit(**built.fields()))
        if isinstance(reply, Response):
            return reply
        return RedirectResponse(f"/ui/jobs/{reply['ids'][0]}", 303, headers=SECURITY_HEADERS)

    async def static(self, http: Request) -> Response:
        name = http.path_params["name"]
        if name not in STATIC:  # a fixed list: no path from the URL reaches the disk
            return Response("", 404)
        return FileResponse(HERE / "static" / name, media_type=STATIC[name])


def _to_login(why: str) -> RedirectResponse:
    """To the login page, saying LOGIN_REASONS[why] (nothing when "")."""
    where = "/ui/login" + (f"?{urllib.parse.urlencode({'why': why})}" if why else "")
    return RedirectResponse(where, 303, headers=SECURITY_HEADERS)


def _target(http: Request) -> tuple[int, int | None] | None:
    try:
        target = parse_one_job(http.path_params["job"], ONE)
    except JobIdError:
        return None
    return target.job, target.tasks[0][0] if target.tasks else None


def _list(value: str | None) -> tuple[str, ...]:
    return tuple(item.strip() for item in (value or "").split(",") if item.strip())


def _by_card(node: dict[str, Any]) -> dict[str, Any]:
    """A node's wire row with its GPUs as the page lists them: each MIG slice under its card."""
    gpus = node.get("gpus") or []
    if all(g.get("parent") is None for g in gpus):
        return node
    order = sorted(
        gpus,
        key=lambda g: (g["index"] if g.get("parent") is None else g["parent"], "parent" in g),
    )
    return {**node, "gpus": order}
