"""The SSE follow loop on scripted ReadLog replies: no daemon, no sleeping."""

from __future__ import annotations

import asyncio
from typing import Any

from gbatch.api.follow import ReadFailed, follow


def run(
    replies: list[dict[str, Any] | ReadFailed], grace: float = 60.0
) -> tuple[list[str], list[int]]:
    offsets: list[int] = []

    async def read(offset: int) -> dict[str, Any]:
        offsets.append(offset)
        reply = replies.pop(0)
        if isinstance(reply, ReadFailed):
            raise reply
        return reply

    async def collect() -> list[str]:
        first = await read(0)
        return [chunk async for chunk in follow(read, first, poll=0, grace=grace)]

    return asyncio.run(collect()), offsets


def reply(data: str, offset: int, state: str, done: bool = False) -> dict[str, Any]:
    return {"data": data, "offset": offset, "state": state, "done": done}


def test_a_job_not_yet_started_is_waited_for_and_its_log_followed_to_the_end() -> None:
    events, offsets = run(
        [
            reply("", 0, "PENDING", done=True),  # nothing yet: logs -f would stop here
            reply("a\r", 2, "RUNNING"),
            reply("", 2, "RUNNING"),
            reply("b\n", 4, "COMPLETED", done=True),
        ]
    )
    assert offsets == [0, 0, 2, 2]
    assert events == [
        "retry: 1000\n\n",
        'event: state\ndata: {"state":"PENDING"}\n\n',
        'event: state\ndata: {"state":"RUNNING"}\n\n',
        'event: log\nid: 2\ndata: {"data":"a\\r","offset":2,"state":"RUNNING"}\n\n',
        'event: state\ndata: {"state":"COMPLETED"}\n\n',
        'event: log\nid: 4\ndata: {"data":"b\\n","offset":4,"state":"COMPLETED"}\n\n',
        'event: end\ndata: {"state":"COMPLETED","offset":4}\n\n',
    ]


def test_a_read_refused_mid_stream_ends_it_with_a_failed_event() -> None:
    refusal = {"ok": False, "kind": "unauthenticated", "error": "the token expired"}
    events, _ = run([reply("x", 1, "RUNNING"), ReadFailed(refusal)])
    assert events[-1] == (
        'event: failed\ndata: {"ok":false,"kind":"unauthenticated","error":"the token expired"}\n\n'
    )


DOWN = {"ok": False, "kind": "unavailable", "error": "gbatchd is not running"}


def test_a_daemon_restart_mid_stream_is_waited_out_and_the_log_goes_on_from_its_offset() -> None:
    events, offsets = run(
        [
            reply("a\n", 2, "RUNNING"),
            ReadFailed(DOWN),
            ReadFailed(DOWN),
            reply("b\n", 4, "COMPLETED", done=True),
        ]
    )
    assert offsets == [0, 2, 2, 2]
    assert [e for e in events if e.startswith("event: log")] == [
        'event: log\nid: 2\ndata: {"data":"a\\n","offset":2,"state":"RUNNING"}\n\n',
        'event: log\nid: 4\ndata: {"data":"b\\n","offset":4,"state":"COMPLETED"}\n\n',
    ]
    assert events[-1] == 'event: end\ndata: {"state":"COMPLETED","offset":4}\n\n'


def test_a_daemon_down_for_longer_than_the_grace_ends_the_stream_with_failed() -> None:
    events, _ = run([reply("a\n", 2, "RUNNING"), ReadFailed(DOWN)], grace=0)
    assert events[-1].startswith('event: failed\ndata: {"ok":false,"kind":"unavailable"')
