"""The daemon's side of a request line: parsed, then decoded into its request type.

Its JSON is parsed within the protocol's limits (size, nesting) and decoded into its
request type, each field checked against its type; BadRequest says what is wrong in one
line its sender reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from math import isfinite
from types import UnionType
from typing import Any, Union, get_args, get_origin

from gbatch.core.constants import MAX_ID_DIGITS as MAX_DIGITS
from gbatch.protocol import requests as request_types
from gbatch.protocol.requests import REQUESTS, Request


class BadRequest(ValueError):
    """A request of the wrong shape or types; str() is the one line its sender reads."""


MAX_NESTING = 64
"""The deepest JSON a request may nest (objects and lists). gbatch's own need 3
(submit -> spec -> env)."""

_TOO_DEEP = f"bad request: JSON nested too deeply (more than {MAX_NESTING} levels)"


def parse_request_line(line: bytes | bytearray) -> object:
    """The JSON value of one request line (its newline taken off), for decode_request.

    BadRequest when it is not UTF-8, not JSON, or nested deeper than MAX_NESTING.
    Python's C parser guards its own recursion (RecursionError, past ~1,000 levels:
    refused here like the rest); what it took is then measured, without recursion, when
    the line has enough brackets to nest that deep at all."""
    try:
        text = line.decode()
    except UnicodeDecodeError as err:
        raise BadRequest(
            f"bad request: not JSON (not UTF-8 at byte {err.start}). A request is one JSON "
            "object per line, in UTF-8"
        ) from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise BadRequest(_TOO_DEEP) from None
    except ValueError as err:
        raise BadRequest(
            f"bad request: not JSON ({err}). A request is one JSON object per line"
        ) from None
    if line.count(b"[") + line.count(b"{") > MAX_NESTING and _nested_deeper(data, MAX_NESTING):
        raise BadRequest(_TOO_DEEP)
    return data


def _nested_deeper(value: object, limit: int) -> bool:
    """Whether `value` (parsed JSON) holds lists and objects more than `limit` deep; one
    level at a time, so a deep value costs no recursion."""
    level = [value]
    for _ in range(limit + 1):
        containers = [item for item in level if type(item) is list or type(item) is dict]
        if not containers:
            return False
        level = []
        for container in containers:
            level.extend(container.values() if type(container) is dict else container)
    return True


def decode_request(data: object) -> Request:
    """The request a parsed JSON line asks for, its fields checked against their types.

    A field that is absent or null takes its default; one without a default must be
    there. Fields the request type does not name are ignored (an older client's, or
    a forged `uid`: identity is never read from a request). BadRequest names the
    field and what it should be: `bad request: jobs.states: expected a list of
    strings, got [1]`. Values (ranges, job states, specs) are the handlers' to check.
    """
    if not isinstance(data, dict):
        raise BadRequest(
            f"bad request: a request is one JSON object per line, not {_json_kind(data)}"
        )
    op = data.get("op")
    if not isinstance(op, str):
        got = _shown(op) if "op" in data else "nothing"
        raise BadRequest(f"bad request: op: expected the name of a request, got {got}")
    cls = REQUESTS.get(op)
    if cls is None:
        raise BadRequest(f"unknown request {op[:60]!r}")
    args: dict[str, Any] = {}
    for name, check in _field_checks(cls):
        value = data.get(name)
        if value is None:
            if check.required:
                got = "null" if name in data else "nothing"
                raise BadRequest(f"bad request: {op}.{name}: expected {check.what}, got {got}")
            continue
        try:
            args[name] = check.convert(value)
        except _OutOfRange:
            raise BadRequest(
                f"bad request: {op}.{name}: expected {check.what} of at most {MAX_DIGITS} "
                f"digits, got {_shown(value)}"
            ) from None
        except _Mismatch:
            got = f"{_json_kind(value)} (not shown)" if check.secret else _shown(value)
            raise BadRequest(
                f"bad request: {op}.{name}: expected {check.what}, got {got}"
            ) from None
    return cls(**args)


class _Mismatch(Exception):
    """A JSON value that is not of a field's type."""


class _OutOfRange(_Mismatch):
    """An integer with more digits than any id, count or offset gbatch keeps."""


class _FieldCheck:
    """How one field of a request type is decoded."""

    __slots__ = ("convert", "required", "secret", "what")

    def __init__(
        self, what: str, convert: Callable[[object], object], *, required: bool, secret: bool
    ) -> None:
        self.what = what  # the type in words: "a list of strings"
        self.convert = convert  # the field's value from a JSON value, or _Mismatch
        self.required = required
        self.secret = secret


# Built on a request type's first decode, from its type hints: only the daemon
# decodes, so a client never pays for get_type_hints.
_checks: dict[type[Any], tuple[tuple[str, _FieldCheck], ...]] = {}


def _field_checks(cls: type[Request]) -> tuple[tuple[str, _FieldCheck], ...]:
    checks = _checks.get(cls)
    if checks is None:
        hints = request_types.type_hints(cls)
        checks = _checks[cls] = tuple(
            (
                name,
                _FieldCheck(
                    *_converter(hints[name]),
                    required=name not in cls._defaults,
                    secret=name in cls._secret,
                ),
            )
            for name in cls._fields
        )
    return checks


# An integer field (an id, task, count, offset, page cursor, lifespan) has at most as many
# digits as a job id (gbatch/core/jobids.py): it and the sums the handlers make of it (a
# page's limit + 1, an offset + a chunk) stay inside SQLite's 64-bit integers, which a
# larger one overflows in the store (OverflowError) rather than failing to match.
_FITS = range(-(10**MAX_DIGITS) + 1, 10**MAX_DIGITS)


def _integer(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Mismatch
    if value not in _FITS:
        raise _OutOfRange
    return value


def _number(value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not isfinite(value):
        raise _Mismatch
    return float(value)


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise _Mismatch
    return value


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Mismatch
    return value


def _anything(value: object) -> object:
    return value


# A scalar type: (one in words, several in words, its check).
_SCALARS: dict[object, tuple[str, str, Callable[[object], object]]] = {
    int: ("an integer", "integers", _integer),
    float: ("a number", "numbers", _number),
    str: ("a string", "strings", _string),
    bool: ("true or false", "booleans", _boolean),
    Any: ("any value", "values", _anything),
}


def _converter(hint: object) -> tuple[str, Callable[[object], object]]:
    """What a field of type `hint` expects, in words, and its check. Knows the types
    requests use: the scalars, `X | None`, tuple[X, ...] (a JSON list) and dict[str, X]
    (a JSON object), X a scalar. Another is a TypeError when the type is first decoded
    (tests/unit/test_requests.py decodes every request type)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint in _SCALARS:
        what, _, check = _SCALARS[hint]
        return what, check
    if origin in (Union, UnionType) and len(args) == 2 and type(None) in args:
        # null never gets here: decode_request gives a null field its default
        (inner,) = (arg for arg in args if arg is not type(None))
        return _converter(inner)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis and args[0] in _SCALARS:
        _, items, check = _SCALARS[args[0]]

        def convert_list(value: object) -> tuple[object, ...]:
            if not isinstance(value, list | tuple):  # a tuple: encode_request's, not JSON
                raise _Mismatch
            return tuple(check(item) for item in value)

        return f"a list of {items}", convert_list
    if origin is dict and len(args) == 2 and args[0] is str and args[1] in _SCALARS:
        _, values, check = _SCALARS[args[1]]

        def convert_object(value: object) -> dict[str, object]:
            if not isinstance(value, dict):
                raise _Mismatch
            return {key: check(item) for key, item in value.items()}

        return "an object" if args[1] is Any else f"an object of {values}", convert_object
    raise TypeError(f"a request field of type {hint!r} has no JSON decoding")


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _shown(value: object, limit: int = 60) -> str:
    """`value` as JSON, cut to `limit` characters: a reply stays one short line."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (RecursionError, ValueError):  # nested near the parser's own limit
        return _json_kind(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
