"""The OpenAPI document as a fuzzer's grammar: requests generated (hypothesis) from each
operation's parameter and body schemas, sent to a live `gbatch api serve` on 127.0.0.1
with a valid token. Whatever is sent, the answer is never a 5xx: bad input is a 4xx
with one JSON error. Bounded: MAX_EXAMPLES requests per operation.

A small generator from the document rather than schemathesis: schemathesis 3.x's
hypothesis-jsonschema (0.23.1, the latest) fails on this project's hypothesis 6.170
(`'many' object has no attribute 'more'`). The document's schemas are few and plain
(string with a pattern, integer, number, boolean, object), so each maps to one
strategy below."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from conftest import Head
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_http_api import api, head, http, mint  # noqa: F401 (fixtures)

MAX_EXAMPLES = 60
# The log follow streams until its job ends, and a generated id may name a held job: its
# inputs are the log read's (job, offset), which /jobs/{job}/logs covers.
SKIPPED = {"/jobs/{job}/logs/follow"}
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=10,
)


def value_of(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    """A query or path parameter's text, from its schema; now and then any text at all."""
    kind = schema.get("type")
    if "pattern" in schema:
        typed: st.SearchStrategy[str] = st.from_regex(schema["pattern"], fullmatch=True)
    elif kind == "integer":
        typed = st.integers().map(str)
    elif kind == "number":
        typed = st.floats().map(str)
    elif kind == "boolean":
        typed = st.sampled_from(["true", "false", "1", "0"])
    else:
        typed = st.text()
    return st.one_of(typed, typed, typed, st.text())


def body_of(content: dict[str, Any]) -> st.SearchStrategy[tuple[str, bytes]]:
    """(content type, body) for one of the operation's media types."""
    choices = []
    for media, spec in content.items():
        if spec["schema"].get("type") == "object":
            data = st.dictionaries(st.sampled_from(KEYS) | st.text(), JSON, max_size=6)
            choices.append(data.map(lambda d, m=media: (m, json.dumps(d).encode())))
        else:
            choices.append(st.text().map(lambda t, m=media: (m, t.encode())))
    return st.one_of(choices)


# A job file's keys, so that generated bodies get past "unknown key" to the values.
KEYS = ["command", "name", "gpus", "workdir", "partition", "time", "array", "env", "mem"]


def request_of(path: str, method: str, op: dict[str, Any]) -> st.SearchStrategy[Any]:
    params = op.get("parameters", [])
    path_values = {p["name"]: value_of(p["schema"]) for p in params if p["in"] == "path"}
    query_values = {
        p["name"]: st.none() | value_of(p["schema"]) for p in params if p["in"] == "query"
    }
    body = body_of(op["requestBody"]["content"]) if "requestBody" in op else st.none()
    return st.tuples(st.fixed_dictionaries(path_values), st.fixed_dictionaries(query_values), body)


def send(url: str, method: str, token: str, body: tuple[str, bytes] | None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"}
    if body is not None:
        headers["Content-Type"] = body[0]
    data = None if body is None else body[1]
    request = urllib.request.Request(url, data=data, method=method.upper(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


def fuzz(base: str, path: str, method: str, op: dict[str, Any], token: str, seen: set[int]) -> None:
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(request=request_of(path, method, op))
    def check(request: Any) -> None:
        path_values, query_values, body = request
        where = path
        for name, value in path_values.items():
            where = where.replace("{" + name + "}", urllib.parse.quote(value, safe=""))
        query = urllib.parse.urlencode({k: v for k, v in query_values.items() if v is not None})
        url = base + where + (f"?{query}" if query else "")
        status, text = send(url, method, token, body)
        seen.add(status)
        assert status < 500, (method, url, body, status, text)
        if status >= 400 and path != "/metrics":
            reply = json.loads(text)
            # 409: an action some job refused, the Bulk reply with each one's error.
            why = reply["results"][0]["error"] if status == 409 else reply["error"]
            assert reply["ok"] is False and why, (url, reply)

    check()


def test_no_request_the_openapi_document_allows_gets_a_5xx(
    head: Head,  # noqa: F811
    api: str,  # noqa: F811
) -> None:
    # Jobs for the ids to hit: an ended one and a held one. No submit scope: a generated
    # body is parsed as a job but never queued, so no generated command runs.
    ended = head.sbatch("--wrap", "echo fuzz", "-D", "/tmp")
    head.sbatch("--hold", "--wrap", "echo held", "-D", "/tmp")
    head.wait_state(ended, "COMPLETED")
    token = mint(head, "--scope", "read,control")
    status, document, _ = http(f"{api}/openapi.json")
    assert status == 200
    root = api.removesuffix("/api/v1")
    statuses: dict[str, set[int]] = {}
    for path, item in document["paths"].items():  # type: ignore[attr-defined]
        for method, op in item.items():
            if method == "servers" or path in SKIPPED:
                continue
            base = root if "servers" in item else api
            seen = statuses.setdefault(f"{method.upper()} {path}", set())

            fuzz(base, path, method, op, token, seen)
    assert len(statuses) >= 10 and all(statuses.values()), statuses
