"""A reply's line as the daemon writes it (JSON, COMPACT separators), and decoded in-process.

It is made in pieces (a listing's lists streamed from the store, values known only once
written); the same reply is decoded for a caller in the daemon's own process."""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any

COMPACT = (",", ":")  # json.dumps's separators for reply lines: no spaces to send


class Streamed:
    """A reply's list made while the reply is written, such as a listing streamed from the store.

    `runs` yields the JSON text of its items a run at a time, each run's items joined by
    "," without brackets. encode_reply's pieces write it as the list it is;
    materialised() decodes it for a caller in-process. Taken once.
    """

    def __init__(self, runs: Iterator[str]) -> None:
        self.runs = runs

    def close(self) -> None:
        """Stop it where it is (a reply not written to its end): the store's read ends."""
        close = getattr(self.runs, "close", None)
        if close is not None:
            close()


class Later:
    """A reply's value known only once the Streamed values before it have been written.

    A page's "next" is one: `value()` is asked for when its turn comes.
    """

    def __init__(self, value: Callable[[], object]) -> None:
        self.value = value


def materialised(reply: dict[str, Any]) -> dict[str, Any]:
    """`reply` as a client reading its line would decode it.

    Its Streamed values (in it or in its mappings) are decoded into lists and its Later
    values asked for, in order.
    """
    out: dict[str, Any] = {}
    for key, value in reply.items():
        if isinstance(value, Streamed):
            value = json.loads("[" + ",".join(run for run in value.runs if run) + "]")
        elif isinstance(value, Later):
            value = value.value()
        elif isinstance(value, dict):
            value = materialised(value)
        out[key] = value
    return out


REPLY_PIECE_ITEMS = 1000
"""The most items of one list (a listing's rows or one of its columns) that
encode_reply turns into text at once."""


def encode_reply(reply: Mapping[str, Any]) -> list[bytes]:
    """A reply's line as a list of pieces that, concatenated, are that line.

    The line is `json.dumps(reply, separators=COMPACT) + "\n"` byte for byte; the pieces
    are reply_pieces', taken whole.
    """
    return list(reply_pieces(reply))


def reply_pieces(reply: Mapping[str, Any]) -> Generator[bytes, None, None]:
    """A reply's line, made in pieces as they are taken.

    The line is `json.dumps(reply, separators=COMPACT) + "\n"` byte for byte; the daemon
    writes each piece before the next is made. A Streamed list's items go in as its runs
    come, a Later value once the values before it are written.

    A large listing's reply is never one string: json.dumps of 100,000 jobs would hold
    their whole text twice (the str, then its bytes) beside the reply's objects, and
    glibc keeps such large blocks' pages once freed (issue 16). Each long list is
    encoded REPLY_PIECE_ITEMS items at a time with json.dumps's own separators, so the
    client, which reads one line, cannot tell."""
    if all(type(key) is str and _small(item) for key, item in reply.items()):
        # A submit's or an action's few fields: one encode (the walk below is slower).
        yield _COMPACT_JSON.encode(reply).encode() + b"\n"
        return
    yield from _coalesced(_encoded(reply))


# json.dumps(value, separators=COMPACT) without an encoder made for each call.
_COMPACT_JSON = json.JSONEncoder(separators=COMPACT)
_JSON_SCALARS = (str, int, float, bool, type(None))


def _small(value: object) -> bool:
    """A scalar, or a short list of scalars: encoded whole, as _encode would."""
    if isinstance(value, _JSON_SCALARS):
        return True
    return (
        isinstance(value, list | tuple)
        and len(value) <= 16
        and all(isinstance(item, _JSON_SCALARS) for item in value)
    )


def _coalesced(pieces: Iterable[bytes], least: int = 64 * 1024) -> Iterator[bytes]:
    """`pieces` with each run of small ones joined (a small reply is one piece): one
    write each, not one per key."""
    run: list[bytes] = []
    size = 0
    for piece in pieces:
        if len(piece) >= least:
            if run:
                yield b"".join(run)
                run, size = [], 0
            yield piece
            continue
        run.append(piece)
        size += len(piece)
        if size >= least:
            yield b"".join(run)
            run, size = [], 0
    if run:
        yield b"".join(run)


def _encoded(reply: Mapping[str, Any]) -> Iterator[bytes]:
    yield from _encode(reply)
    yield b"\n"


def _encode(value: object) -> Iterator[bytes]:
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        # json.dumps turns other keys (int, None, ...) into strings its own way: such a
        # mapping (never a large one) is encoded whole below.
        yield b"{"
        for i, (key, item) in enumerate(value.items()):
            yield (("," if i else "") + json.dumps(key) + ":").encode()
            yield from _encode(item)
        yield b"}"
    elif isinstance(value, Streamed):
        head = "["
        for run in value.runs:
            if run:
                yield (head + run).encode()
                head = ","
        yield b"[]" if head == "[" else b"]"
    elif isinstance(value, Later):
        yield from _encode(value.value())
    elif isinstance(value, list | tuple) and len(value) > REPLY_PIECE_ITEMS:
        for start in range(0, len(value), REPLY_PIECE_ITEMS):
            text = json.dumps(value[start : start + REPLY_PIECE_ITEMS], separators=COMPACT)
            # "[a,b]" -> "[a,b" first, ",c,d" between, ",e]" last.
            head = "[" if start == 0 else ","
            tail = "]" if start + REPLY_PIECE_ITEMS >= len(value) else ""
            yield (head + text[1:-1] + tail).encode()
    else:
        yield json.dumps(value, separators=COMPACT).encode()
