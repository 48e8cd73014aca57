"""GET /api/v1/jobs asked for whole is asked of gbatchd a page at a time and streamed
(issue 35): the body is the line one whole listing gave, the API process holds a page."""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gbatch.api import app as api_app
from gbatch.api.app import make_app
from gbatch.api.openapi import PREFIX
from gbatch.protocol.replies import COMPACT

NOW = 1_800_000_000.25
AUTH = {"Authorization": "Bearer T"}


class FakeGbatchd(socketserver.ThreadingUnixStreamServer):
    """Answers `jobs` requests (inside WithToken) over `records` as gbatchd does: by id,
    a page with after/limit and "next"; `refuse` answers every request with that error."""

    daemon_threads = True

    def __init__(self, path: Path, records: list[dict[str, Any]]) -> None:
        self.records = records
        self.asked: list[dict[str, Any]] = []
        self.refuse: dict[str, Any] | None = None
        super().__init__(str(path), _Handler)


class _Handler(socketserver.StreamRequestHandler):
    server: FakeGbatchd

    def handle(self) -> None:
        for line in self.rfile:
            inner = json.loads(line)["request"]
            self.server.asked.append(inner)
            reply = self.server.refuse or _listing(self.server.records, inner)
            self.wfile.write(json.dumps(reply, separators=COMPACT).encode() + b"\n")


def _listing(records: list[dict[str, Any]], request: dict[str, Any]) -> dict[str, Any]:
    after, limit = request.get("after"), request.get("limit")
    listed = [r for r in records if after is None or r["id"] > after]
    reply: dict[str, Any] = {"ok": True}
    following: dict[str, Any] = {}
    if limit is not None:
        following["next"] = listed[limit - 1]["id"] if len(listed) > limit else None
        listed = listed[:limit]
    return {**reply, "jobs": listed, "now": NOW, **following}


@pytest.fixture
def gbatchd(tmp_path: Path) -> Iterator[FakeGbatchd]:
    server = FakeGbatchd(tmp_path / "gbatchd.sock", [])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _get(socket_path: Path, query: str) -> Any:
    from starlette.testclient import TestClient

    with TestClient(make_app(socket_path)) as client:
        return client.get(f"{PREFIX}/jobs?{query}", headers=AUTH)


@pytest.mark.parametrize("count", [0, 1, 3, 7, 9])
def test_a_whole_listing_is_asked_a_page_at_a_time_and_reads_as_one(
    gbatchd: FakeGbatchd, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    """At 1,000,000 finished jobs the API held the whole listing's line (and the page
    asked for nothing else): each request to gbatchd now names a page."""
    monkeypatch.setattr(api_app, "LISTING_PAGE", 3, raising=False)
    gbatchd.records = [
        {"id": i, "name": f'j"{i}],"now":', "state": "CD"} for i in range(1, count + 1)
    ]
    response = _get(Path(gbatchd.server_address), "history=true")  # type: ignore[arg-type]
    assert response.status_code == 200
    whole = json.dumps(
        {"ok": True, "jobs": gbatchd.records, "now": NOW}, separators=COMPACT
    ).encode()
    assert response.content == whole
    assert [r["limit"] for r in gbatchd.asked] == [3] * (max(count - 1, 0) // 3 + 1)
    assert [r["after"] for r in gbatchd.asked] == [None, 3, 6][: len(gbatchd.asked)]


def test_a_page_asked_for_and_a_refusal_are_relayed_as_they_come(
    gbatchd: FakeGbatchd,
) -> None:
    gbatchd.records = [{"id": i} for i in range(1, 6)]
    paged = _get(Path(gbatchd.server_address), "history=true&limit=2")  # type: ignore[arg-type]
    assert paged.json() == {"ok": True, "jobs": gbatchd.records[:2], "now": NOW, "next": 2}
    gbatchd.refuse = {"ok": False, "kind": "permission", "error": "not yours"}
    refused = _get(Path(gbatchd.server_address), "history=true")  # type: ignore[arg-type]
    assert refused.status_code == 403 and refused.json()["error"] == "not yours"
