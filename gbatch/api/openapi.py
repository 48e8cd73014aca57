"""The HTTP API's OpenAPI 3 document, for /api/v1/openapi.json and `gbatch api openapi`.

Served at /api/v1/openapi.json and printed by `gbatch api openapi`. Written out here
rather than generated from models: the request types live once, in
gbatch/protocol/requests.py, and the daemon checks them; this says what each path takes
and gives (tests/unit/test_api.py keeps its paths and the app's routes equal).
"""

from __future__ import annotations

from typing import Any

from gbatch import __version__
from gbatch.protocol.requests import ERROR_KINDS

PREFIX = "/api/v1"


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


_ERRORS = {
    "400": _error("bad input: the same one line `gbatch` prints after `error:`"),
    "401": _error("no token, or one malformed, altered, expired, revoked or of an unknown key"),
    "403": _error("the token's scopes, or its user's rights, do not allow it"),
    "404": _error("no such job"),
    "503": _error("gbatchd does not answer, or a component it needs is missing"),
}


def _reply(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    body = schema or {"type": "object"}
    return {"description": description, "content": {"application/json": {"schema": body}}}


def _op(
    summary: str,
    scope: str,
    ok: dict[str, Any],
    *,
    status: str = "200",
    params: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "description": f"Needs a token with scope `{scope}`.",
        "security": [{"bearer": [scope]}],
        "responses": {status: ok, **_ERRORS},
    }
    if params:
        op["parameters"] = params
    if body:
        op["requestBody"] = body
    return op


def _query(name: str, description: str, kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": "query", "description": description, "schema": {"type": kind}}


_JOB = {
    "name": "job",
    "in": "path",
    "required": True,
    "description": "a job id, N, or task K of array N, N_K",
    "schema": {"type": "string", "pattern": "^[0-9]+(_[0-9]+)?$"},
}

_BULK = _reply(
    "done: how many jobs it acted on; results: the ones that failed, each with its error "
    "(status 409 when any failed)",
    {"$ref": "#/components/schemas/Bulk"},
)


def _action(verb: str) -> dict[str, Any]:
    return {
        "post": _op(f"{verb} a job (as gbatch scontrol/scancel)", "control", _BULK, params=[_JOB])
    }


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "gbatch HTTP API",
            "version": __version__,
            "description": "gbatch's requests over HTTP: each runs as the user its bearer "
            "token was issued to (`gbatch token`), with that user's rights and limits, within "
            "the token's scopes. Errors are one JSON object: {ok: false, kind, error}, with "
            "the kind and message the CLI would print.",
        },
        "servers": [{"url": PREFIX}],
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
            },
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["ok", "kind", "error"],
                    "properties": {
                        "ok": {"const": False},
                        "kind": {"enum": list(ERROR_KINDS)},
                        "error": {"type": "string"},
                    },
                },
                "Bulk": {
                    "type": "object",
                    "properties": {
                        "ok": {"type": "boolean"},
                        "done": {"type": "integer"},
                        "failed": {"type": "integer"},
                        "results": {"type": "array", "items": {"type": "object"}},
                    },
                },
            },
        },
        "paths": {
            "/openapi.json": {
                "get": {
                    "summary": "this document (no token needed)",
                    "security": [],
                    "responses": {"200": _reply("the OpenAPI document")},
                }
            },
            "/jobs": {
                "get": _op(
                    "list jobs (as gbatch squeue; with history=true, as gbatch sacct)",
                    "read",
                    _reply(
                        "{jobs: [...], now}; with format=columns {columns: {id: [...], "
                        "user: [...], state: [...], ..., spec: [index into specs], specs: "
                        "[...]}, now}: one list per field, a tenth of the bytes; with limit "
                        "or after also next: the last id listed when more are left, else null"
                    ),
                    params=[
                        _query("user", "only these users' jobs (comma-separated)"),
                        _query("state", "only these states, names or codes (PD,R)"),
                        _query("name", "only jobs of these names"),
                        _query("partition", "only jobs in these partitions"),
                        _query("job", "only these job ids (N, N_K, N-M)"),
                        _query("history", "finished jobs too (true/false)", "boolean"),
                        _query("since", "with history: jobs since (epoch seconds)", "number"),
                        _query("limit", "at most this many jobs (a page)", "integer"),
                        _query(
                            "after", "only jobs with greater ids (the last page's next)", "integer"
                        ),
                        _query("format", "jobs (records, the default) or columns"),
                    ],
                ),
                "post": _op(
                    "submit a job (as gbatch sbatch FILE)",
                    "submit",
                    _reply("{ids: [...], job_id}: the job's id (an array's: its first)"),
                    status="201",
                    body={
                        "required": True,
                        "description": "a job file (YAML, or the same keys as JSON; across "
                        "nodes: nodes, gpus_per_node, ntasks_per_node, nodelist, exclude, "
                        "exclusive) or a batch script (#! and #SBATCH lines, -N among them), "
                        "at most 1 MiB. The job starts "
                        "in its user's home unless it names a workdir; nothing of the "
                        "server's environment or files is read",
                        "content": {
                            "application/yaml": {"schema": {"type": "string"}},
                            "application/json": {"schema": {"type": "object"}},
                            "text/x-shellscript": {"schema": {"type": "string"}},
                        },
                    },
                ),
            },
            "/jobs/{job}": {
                "get": _op(
                    "one job with its events (as gbatch scontrol show job)",
                    "read",
                    _reply("{job, events, tasks, now, gpu_usage}"),
                    params=[_JOB],
                )
            },
            "/jobs/{job}/cancel": _action("cancel"),
            "/jobs/{job}/hold": _action("hold"),
            "/jobs/{job}/release": _action("release"),
            "/jobs/{job}/requeue": _action("requeue"),
            "/jobs/{job}/logs": {
                "get": _op(
                    "a chunk of the job's output from byte `offset` (as gbatch logs)",
                    "read",
                    _reply("{data, offset (where the next chunk starts), done, state}"),
                    params=[_JOB, _query("offset", "the byte to start at (default 0)", "integer")],
                )
            },
            "/jobs/{job}/logs/follow": {
                "get": _op(
                    "the job's output from byte `offset` as Server-Sent Events until the job "
                    "ends (as gbatch logs -f): `log` events ({data, offset, state}; the "
                    "event's id is the offset to resume from, taken from Last-Event-ID), "
                    "then one `end` ({state, offset}), or `failed` (an error's JSON)",
                    "read",
                    {
                        "description": "an event stream",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    params=[_JOB, _query("offset", "the byte to start at (default 0)", "integer")],
                )
            },
            "/jobs/{job}/ports/{port}": {
                "get": _op(
                    "a WebSocket (send `Upgrade: websocket`) carrying one TCP connection to "
                    "`port` inside your running job, as gbatch port-forward: the first "
                    "message is gbatchd's reply as text ({ok: true, job, node, port} once "
                    "the port is connected); then binary messages are the connection's bytes "
                    "both ways, until either end closes. A refusal is that text message "
                    "({ok: false, kind, error}) and a close with code 4000 + the HTTP status "
                    "(4403 not yours, 4404 nothing listens, 4400 not running). With "
                    "watch=1 nothing is connected: the socket stays open until the job's run "
                    "ends, then carries one line {ended: STATE}",
                    "ports",
                    {"description": "Switching Protocols: the WebSocket", "content": {}},
                    status="101",
                    params=[
                        _JOB,
                        {
                            "name": "port",
                            "in": "path",
                            "required": True,
                            "description": "the job's TCP port (1-65535)",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 65535},
                        },
                        _query("watch", "1: wait for the job's end instead of a connection"),
                    ],
                )
            },
            "/nodes": {
                "get": _op(
                    "the nodes and their GPUs, and the partitions (as gbatch sinfo)",
                    "read",
                    _reply("{nodes, partitions, default_partition}"),
                )
            },
            "/metrics": {
                "servers": [{"url": "/"}],  # /metrics, where Prometheus looks: not under /api
                "get": {
                    **_op(
                        "the queue, the fleet and gbatchd's counters in Prometheus's text "
                        "format (README, Metrics). Every user's figures: under private_data "
                        "the token's user must be an admin. Without a token only from "
                        "loopback, when served with --local-metrics",
                        "read",
                        {
                            "description": "Prometheus text exposition format 0.0.4",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                    ),
                },
            },
            "/reservations": {
                "get": _op(
                    "the reservations (as gbatch scontrol show reservation; records as "
                    "docs/priorities.md shows them)",
                    "read",
                    _reply("{reservations: [...], now}"),
                    params=[_query("name", "only this reservation")],
                ),
                "post": _op(
                    "book GPUs for yourself under user_reservations (docs/priorities.md): "
                    'a JSON body {"action": "create" or "update", "words": ["ReservationName='
                    'NAME", "StartTime=now+1hour", "Duration=2:00:00", "Users=YOU", "GPUs=1"]}',
                    "submit",
                    _reply("{reservation}"),
                ),
            },
            "/reservations/{name}": {
                "delete": _op(
                    "delete your own booking",
                    "submit",
                    _reply("{}"),
                    params=[
                        {
                            "name": "name",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        }
                    ],
                )
            },
            "/timeline": {
                "get": _op(
                    "the GPU timeline's data: runs on GPUs, the pending queue, reservations "
                    "(as the web page's /ui/timeline; under private_data another user's run "
                    "has id 0 and no name or user); at most 34 days",
                    "read",
                    _reply("{start, end, now, runs, pending, windows, lanes}"),
                    params=[
                        _query("start", "epoch seconds; default: end - 24 h", "number"),
                        _query("end", "epoch seconds; default: now", "number"),
                    ],
                )
            },
            "/gpus/history": {
                "get": _op(
                    "GPUs' utilisation and memory over time from the head's sample history "
                    "(1-s samples within the last hour, else 1-min means and peaks)",
                    "read",
                    _reply("{start, end, now, series: [{node, index, memory_total_mib, points}]}"),
                    params=[
                        _query("start", "epoch seconds; default: end - 1 h", "number"),
                        _query("end", "epoch seconds; default: now", "number"),
                        _query("node", "one node; default: every node"),
                        _query("gpu", "GPU indices, comma-separated; default: each of the node(s)"),
                        _query(
                            "points", "at most this many points a GPU, 1 to 1000 (120)", "integer"
                        ),
                    ],
                )
            },
            "/usage": {
                "get": _op(
                    "sreport's GPU-seconds per step, by user and by partition, and the "
                    "fair-share factors (as the web page's /ui/usage; under private_data other "
                    'users are one row named "")',
                    "read",
                    _reply("{edges, now, users, partitions, shares, hidden}"),
                    params=[
                        _query("start", "epoch seconds; default: end - 30 days", "number"),
                        _query("end", "epoch seconds; default: now", "number"),
                        _query(
                            "step",
                            "seconds a step, 60 or more (86400); 400 steps at most",
                            "integer",
                        ),
                    ],
                )
            },
            "/cluster": {
                "get": _op(
                    "the Slurm cluster partitions (up, or down and why) and your links to "
                    "them (ok, new or broken and why), as gbatch cluster status "
                    "(docs/slurm-cluster.md)",
                    "read",
                    _reply(
                        "{partitions: [{name, identity, login, state, reason}], links: "
                        "[{partition, user, login, state, reason, since, linked, public}]}"
                    ),
                    params=[_query("all", "everyone's links (admins)", "boolean")],
                )
            },
            "/fairshare": {
                "get": _op(
                    "fair-share usage and limits (as gbatch sshare)",
                    "read",
                    _reply("{users: [...], now}"),
                    params=[
                        _query("user", "these users (admins; your own always)"),
                        _query("all", "every user (admins)", "boolean"),
                    ],
                )
            },
        },
    }
