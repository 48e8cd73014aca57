"""The HTTP API's link to gbatchd (api/link.py) against a fake daemon on a Unix
socket: Client's errors and replies, connections kept and replaced, and a slow reply
that holds up no other request."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from gbatch.api.link import DaemonLink
from gbatch.protocol.client import DaemonUnavailable, ReplyTimeout, RequestFailed

Answer = Callable[[dict[str, object], asyncio.StreamWriter], Awaitable[bool]]


class FakeDaemon:
    """Reads request lines; `answer` writes the reply and says whether to keep the
    connection open."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while line := await reader.readline():
            if not await self.answer(json.loads(line), writer):
                break
            await writer.drain()
        writer.close()


async def echo(request: dict[str, object], writer: asyncio.StreamWriter) -> bool:
    if request.get("op") == "refuse":
        writer.write(b'{"ok":false,"kind":"permission","error":"not yours"}\n')
    else:
        writer.write(b'{"ok":true,"echo":' + json.dumps(request).encode() + b"}\n")
    return True


def run(path: Path, daemon: FakeDaemon, scenario: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        server = await asyncio.start_unix_server(daemon.handle, path=str(path))
        async with server:
            await scenario()

    asyncio.run(main())


def test_a_reply_comes_back_decoded_or_as_written_and_a_refusal_raises(tmp_path: Path) -> None:
    path = tmp_path / "d.sock"
    link = DaemonLink(path)

    async def scenario() -> None:
        assert await link.send({"op": "ping"}) == {"echo": {"op": "ping"}}
        assert await link.send_raw({"op": "ping"}) == b'{"ok":true,"echo":{"op": "ping"}}'
        with pytest.raises(RequestFailed) as refused:
            await link.send({"op": "refuse"})
        assert (refused.value.kind, refused.value.message) == ("permission", "not yours")
        with pytest.raises(RequestFailed):
            await link.send_raw({"op": "refuse"})
        # A too large request is refused here, as Client refuses it.
        with pytest.raises(RequestFailed, match="MiB gbatchd reads"):
            await link.send({"op": "x" * (5 << 20)})

    daemon = FakeDaemon(echo)
    run(path, daemon, scenario)
    assert daemon.connections == 1  # kept between requests, a refusal's too


def test_a_connection_the_daemon_closed_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "d.sock"
    link = DaemonLink(path)

    async def once(request: dict[str, object], writer: asyncio.StreamWriter) -> bool:
        await echo(request, writer)
        return False  # close after each reply, as gbatchd closes an idle connection

    async def scenario() -> None:
        for n in range(3):
            assert await link.send({"n": n}) == {"echo": {"n": n}}
            await asyncio.sleep(0)  # let the close reach the link's side

    daemon = FakeDaemon(once)
    run(path, daemon, scenario)
    assert daemon.connections == 3


def test_a_connection_that_sent_more_than_its_reply_is_not_kept(tmp_path: Path) -> None:
    """gbatchd writes one line a request: bytes past it are no reply of the next request's."""
    path = tmp_path / "d.sock"
    link = DaemonLink(path)

    async def twice(request: dict[str, object], writer: asyncio.StreamWriter) -> bool:
        await echo(request, writer)
        writer.write(b'{"ok":true,"stray":1}\n')
        return True

    async def scenario() -> None:
        for n in range(2):
            assert await link.send({"n": n}) == {"echo": {"n": n}}

    daemon = FakeDaemon(twice)
    run(path, daemon, scenario)
    assert daemon.connections == 2


def test_a_reply_in_many_pieces_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "d.sock"
    link = DaemonLink(path)
    rows = [{"id": n, "name": "x" * 100} for n in range(5000)]  # ~600 KB, many reads

    async def slowly(request: dict[str, object], writer: asyncio.StreamWriter) -> bool:
        line = json.dumps({"ok": True, "rows": rows}).encode() + b"\n"
        for at in range(0, len(line), 70_000):
            writer.write(line[at : at + 70_000])
            await writer.drain()
            await asyncio.sleep(0)
        return True

    async def scenario() -> None:
        assert await link.send({"op": "list"}) == {"rows": rows}
        assert await link.send({"op": "list"}) == {"rows": rows}

    daemon = FakeDaemon(slowly)
    run(path, daemon, scenario)
    assert daemon.connections == 1


def test_a_slow_reply_holds_up_no_other_request(tmp_path: Path) -> None:
    path = tmp_path / "d.sock"
    link = DaemonLink(path)
    release = asyncio.Event()
    quick_done: list[bool] = []

    async def answer(request: dict[str, object], writer: asyncio.StreamWriter) -> bool:
        if request.get("slow"):
            await release.wait()
        return await echo(request, writer)

    async def scenario() -> None:
        slow = asyncio.create_task(link.send({"slow": True}))
        assert await link.send({"quick": True}) == {"echo": {"quick": True}}
        quick_done.append(not slow.done())
        release.set()
        assert await slow == {"echo": {"slow": True}}

    run(path, FakeDaemon(answer), scenario)
    assert quick_done == [True]


def test_a_reply_not_given_in_time_or_cut_short_is_the_clients_error(tmp_path: Path) -> None:
    path = tmp_path / "d.sock"

    async def answer(request: dict[str, object], writer: asyncio.StreamWriter) -> bool:
        if request.get("op") == "cut":
            writer.write(b'{"ok":true,')
            return False
        if request.get("op") == "close":
            return False
        await asyncio.Event().wait()  # never
        return False

    async def scenario() -> None:
        with pytest.raises(DaemonUnavailable, match="before its reply's end"):
            await DaemonLink(path).send({"op": "cut"})
        with pytest.raises(DaemonUnavailable, match=r"\(the daemon closed the connection\)"):
            await DaemonLink(path).send({"op": "close"})
        with pytest.raises(ReplyTimeout):
            await DaemonLink(path, timeout=0.05).send({"op": "hang"})

    run(path, FakeDaemon(answer), scenario)


def test_no_daemon_is_daemon_unavailable(tmp_path: Path) -> None:
    async def scenario() -> None:
        with pytest.raises(DaemonUnavailable, match="no gbatch daemon answers"):
            await DaemonLink(tmp_path / "none.sock").send({"op": "ping"})

    asyncio.run(scenario())


def test_the_api_submits_a_small_and_a_large_job_file_and_refuses_a_bad_one(
    tmp_path: Path,
) -> None:
    """A job file up to INLINE_PARSE_BYTES is read on the loop, a larger one in a worker
    thread: both reach gbatchd as the bearer's submit; a bad one is refused before."""
    import httpx

    from gbatch.api.app import INLINE_PARSE_BYTES, make_app

    path = tmp_path / "d.sock"
    seen: list[dict[str, object]] = []

    async def answer(request: dict[str, object], writer: asyncio.StreamWriter) -> bool:
        seen.append(request)
        writer.write(b'{"ok":true,"ids":[7]}\n')
        return True

    small = json.dumps({"command": "true", "name": "small"})
    large = json.dumps({"command": "true #" + "x" * INLINE_PARSE_BYTES, "name": "large"})
    replies: list[tuple[int, object]] = []

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=make_app(path))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for body in (small, large, '{"command": "true", "gpus": -1}'):
                reply = await client.post(
                    "/api/v1/jobs", content=body, headers={"Authorization": "Bearer T"}
                )
                replies.append((reply.status_code, reply.json()))

    run(path, FakeDaemon(answer), scenario)
    assert replies[:2] == [(201, {"ok": True, "ids": [7], "job_id": 7})] * 2
    assert replies[2] == (
        400,
        {
            "ok": False,
            "kind": "invalid",
            "error": "gpus: -1 is not a GPU count. Use a whole number from 0 to 64",
        },
    )
    names = [r["request"]["spec"]["name"] for r in seen]  # type: ignore[index]
    assert [r["op"] for r in seen] == ["with_token"] * 2 and names == ["small", "large"]


def test_a_token_goes_to_gbatchd_with_the_address_it_came_from(tmp_path: Path) -> None:
    """gbatchd charges a token it refuses, and nobody signed, to that address (issue 29)."""
    import httpx

    from gbatch.api.app import make_app

    path = tmp_path / "d.sock"
    seen: list[dict[str, object]] = []

    async def answer(request: dict[str, object], writer: asyncio.StreamWriter) -> bool:
        seen.append(request)
        writer.write(b'{"ok":false,"kind":"unauthenticated","error":"not a token"}\n')
        return True

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=make_app(path), client=("203.0.113.9", 4242))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for _ in range(2):
                reply = await client.get("/api/v1/nodes", headers={"Authorization": "Bearer T"})
                assert reply.status_code == 401
            reply = await client.post(
                "/api/v1/jobs", content="{}", headers={"Authorization": "Bearer T"}
            )
            assert reply.status_code in (400, 401)

    run(path, FakeDaemon(answer), scenario)
    assert seen and {r["client"] for r in seen} == {"203.0.113.9"}
