"""A job's log followed live as Server-Sent Events, each chunk one event.

The loop of `gbatch logs -f`: ReadLog from an offset until the daemon says `done`.
Every chunk is read with the caller's token like any other request, so a token revoked
or expired mid-stream ends the stream at the next read.

The events (each `data:` one JSON line, so a log's CR, NUL or half a line crosses intact):
  event: state                      data: {"state": "RUNNING"}  (first, then each change)
  event: log    id: <next offset>   data: {"data": "...", "offset": N, "state": "RUNNING"}
  event: end                        data: {"state": "COMPLETED", "offset": N}
  event: failed                     data: {"ok": false, "kind": ..., "error": ...}
`id` is the offset to resume from: a browser's EventSource sends it back as
Last-Event-ID when it reconnects, and the stream goes on from there.

gbatchd restarting (an upgrade, `gbatch daemon stop; gbatch daemon start`) does not end
a follow: jobs outlive the daemon, so a read it cannot answer is tried again, from the
same offset, for up to RESTART_GRACE_SECONDS before the stream ends with `failed`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request

from gbatch.core.constants import MAX_ID_DIGITS

POLL_SECONDS = 0.2  # gbatch logs -f's pause when a read brings nothing new
KEEPALIVE_SECONDS = 15.0  # a comment line, so proxies keep a quiet stream open
RESTART_GRACE_SECONDS = 60.0  # how long a follow waits for gbatchd to be back
MEDIA_TYPE = "text/event-stream"
HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # nginx: pass each event on as it comes
}

# Reads the chunk from `offset`: the ReadLog reply, or raises ReadFailed.
ReadChunk = Callable[[int], Awaitable[dict[str, Any]]]


class ReadFailed(Exception):
    def __init__(self, reply: dict[str, Any]) -> None:
        super().__init__(reply.get("error", ""))
        self.reply = reply


def event(name: str, fields: dict[str, Any], event_id: int | None = None) -> str:
    head = f"event: {name}\n" + ("" if event_id is None else f"id: {event_id}\n")
    return head + f"data: {json.dumps(fields, separators=(',', ':'))}\n\n"


async def follow(
    read: ReadChunk,
    first: dict[str, Any],
    *,
    poll: float = POLL_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    grace: float = RESTART_GRACE_SECONDS,
) -> AsyncIterator[str]:
    """The events from `first` until the daemon says `done`; keepalives only while it is down.

    `first` is the reply to the first read, made before the response started so that a
    refusal is an HTTP status. A pending job's `done` does not end the events. The
    daemon may be unavailable for at most `grace` seconds; past that, or on any other
    refusal, the events end with `failed`.
    """
    reply = first
    quiet_since = clock()
    down_since: float | None = None
    state = None
    yield "retry: 1000\n\n"
    while True:
        if reply["state"] != state:
            state = reply["state"]
            yield event("state", {"state": state})
        if reply["data"]:
            quiet_since = clock()
            yield event("log", _chunk(reply), reply["offset"])
        # The daemon says `done` for a job not yet started (there is nothing to read
        # *yet*), where `logs -f` ends; a follow waits for it to start and end.
        if reply["done"] and reply["state"] != "PENDING":
            yield event("end", {"state": reply["state"], "offset": reply["offset"]})
            return
        if not reply["data"]:
            if clock() - quiet_since >= KEEPALIVE_SECONDS:
                quiet_since = clock()
                yield ": keepalive\n\n"
            await asyncio.sleep(poll)
        try:
            reply = await read(reply["offset"])
            down_since = None
        except ReadFailed as err:
            now = clock()
            down_since = now if down_since is None else down_since
            if err.reply.get("kind") != "unavailable" or now - down_since >= grace:
                yield event("failed", err.reply)
                return
            # The last reply again, less its data: nothing new to say; same offset.
            reply = {**reply, "data": ""}


def resume_offset(http: Request) -> int | None:
    """Where a follow starts: Last-Event-ID (a reconnecting EventSource), else `offset`.

    0 when neither is given; None when the one given is not a non-negative integer.
    """
    text = http.headers.get("last-event-id") or http.query_params.get("offset", "0")
    return whole_number(text)


def whole_number(text: str) -> int | None:
    """`text` as a whole number of a query (an offset, a page's limit or cursor), or None.

    ASCII digits only (str.isdigit takes `²`, which int() refuses) and at most as many
    as a job id has, so that the number fits gbatchd's (and SQLite's) integers."""
    if text.isascii() and text.isdigit() and len(text) <= MAX_ID_DIGITS:
        return int(text)
    return None


def _chunk(reply: dict[str, Any]) -> dict[str, Any]:
    return {"data": reply["data"], "offset": reply["offset"], "state": reply["state"]}
