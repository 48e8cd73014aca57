"""What a request line may be: at most constants.MAX_REQUEST_BYTES, UTF-8, JSON nested at
most decoder.MAX_NESTING deep; anything else is one bad-request line, never a traceback.
Hypothesis throws arbitrary bytes and JSON values at parse_request_line and
decode_request, and well-typed requests through the whole trip."""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wirefuzz import JSON_VALUES, RAW_LINES, nested, request_shaped

from gbatch.core import constants
from gbatch.jobspec.reader import MAX_FILE_BYTES, load_job_file
from gbatch.jobspec.spec import MAX_COMMAND_BYTES, build_spec
from gbatch.protocol import decoder, requests
from gbatch.protocol.client import Client, RequestFailed

FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
DEEP = decoder.MAX_NESTING


# ------------------------------------------------------------------ nesting and bytes


def test_json_as_deep_as_the_limit_is_taken() -> None:
    assert decoder.parse_request_line(nested(DEEP)) is not None
    assert decoder.parse_request_line(b'{"op":"jobs","states":' + nested(DEEP - 1) + b"}")


@pytest.mark.parametrize(
    "line",
    [
        nested(DEEP + 1),
        b"[" * (DEEP + 1) + b"]" * (DEEP + 1),
        b'{"op":"ping","x":' + nested(DEEP) + b"}",
        b"[" * 900 + b"]" * 900,  # within Python's own recursion limit
        b"[" * 100_000,  # past it: the parser stops itself, refused the same way
        b'{"a":' * 100_000,
    ],
    ids=["limit+1", "lists", "inside a request", "900", "100,000 open", "objects"],
)
def test_json_deeper_than_the_limit_is_one_bad_request_line(line: bytes) -> None:
    with pytest.raises(decoder.BadRequest) as caught:
        decoder.parse_request_line(line)
    assert str(caught.value) == "bad request: JSON nested too deeply (more than 64 levels)"


def test_brackets_inside_strings_are_text_not_nesting() -> None:
    line = json.dumps({"op": "submit", "spec": {"command": ["python", "-c", "[" * 5000]}})
    assert decoder.parse_request_line(line.encode()) == json.loads(line)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"\xff\xfe{}", "bad request: not JSON (not UTF-8 at byte 0). A request is one JSON"),
        (b'{"op":"ping","x":"\xc3"}', "bad request: not JSON (not UTF-8 at byte 18)"),
        (b"ping", "bad request: not JSON (Expecting value: line 1 column 1 (char 0))"),
        (b"", "bad request: not JSON (Expecting value"),
        (b'{"op":"ping"}\x00', "bad request: not JSON (Extra data"),
        (b"1" * 5000, "bad request: not JSON (Exceeds the limit (4300 digits)"),
        (b'\xef\xbb\xbf{"op":"ping"}', "bad request: not JSON (Unexpected UTF-8 BOM"),
    ],
)
def test_a_line_that_is_not_json_says_so(line: bytes, message: str) -> None:
    with pytest.raises(decoder.BadRequest) as caught:
        decoder.parse_request_line(line)
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


# ------------------------------------------------------------------ size


def largest_submit(tmp_path: Path) -> dict[str, Any]:
    """The submit sbatch makes of a job file at MAX_FILE_BYTES, plain text chosen to
    escape worst (quotes and backslashes: two bytes each in JSON), with --wrap and
    --secret-env at their 64 KiB limits."""
    ugly = '"\\' * 1000  # single-quoted YAML: taken as written
    head = f"command: x\nenv:\n  V: '{ugly[:5000]}'\nmounts:\n"
    lines = []
    size = len(head)
    n = 0
    while True:
        line = f"  - '/{ugly[: 4000 - 1]}{n}:/m/{n}'\n"
        if size + len(line) > MAX_FILE_BYTES:
            break
        lines.append(line)
        size += len(line)
        n += 1
    job = tmp_path / "job.yaml"
    job.write_text(head + "".join(lines))
    assert job.stat().st_size > MAX_FILE_BYTES - 5000
    wrap = ('"\\' * MAX_COMMAND_BYTES)[: MAX_COMMAND_BYTES - 20]
    secrets = {"S": ('"\\' * 40_000)[: 64 * 1024 - 10]}
    spec = build_spec(
        load_job_file(str(job)), {"command": wrap, "secret_env": secrets}, default_name="job"
    )
    return requests.encode_request(requests.Submit(spec=spec.to_dict(), secret_env=secrets))


def test_the_largest_plain_text_submit_fits_well_within_the_limit(tmp_path: Path) -> None:
    size = len(json.dumps(largest_submit(tmp_path)).encode())
    assert size > 2 * MAX_FILE_BYTES  # the escapes did double it
    assert size < 2.5 * 2**20 < constants.MAX_REQUEST_BYTES


def test_the_client_refuses_a_request_over_the_limit_without_sending_it(tmp_path: Path) -> None:
    # No daemon at that path: a client that tried to send would say it cannot connect.
    client = Client(tmp_path / "none.sock")
    with pytest.raises(RequestFailed) as caught:
        client.send({"op": "ping", "pad": "x" * constants.MAX_REQUEST_BYTES})
    assert caught.value.kind == "invalid"
    assert caught.value.message == (
        "the request takes 4.0 MiB, more than the 4 MiB gbatchd reads. Pass large data in "
        "a file the job mounts"
    )


# ------------------------------------------------------------------ hypothesis


@FUZZ
@given(st.one_of(JSON_VALUES, request_shaped()))
def test_decode_request_gives_a_request_or_one_bad_request_line(data: object) -> None:
    try:
        request = decoder.decode_request(data)
    except decoder.BadRequest as err:
        message = str(err)
        assert message.startswith(("bad request: ", "unknown request ")), message
        assert message.isprintable() and len(message) < 200, message
    else:
        assert isinstance(data, dict) and request.op == data["op"]
        # What was taken is of the declared types: it decodes again to itself.
        assert decoder.decode_request(requests.encode_request(request)) == request


@FUZZ
@given(RAW_LINES)
def test_any_bytes_parse_or_are_one_bad_request_line(line: bytes) -> None:
    try:
        decoder.parse_request_line(line)
    except decoder.BadRequest as err:
        message = str(err)
        assert message.startswith("bad request: "), message
        assert message.isprintable(), message


# JSON values equal to themselves (no NaN), for comparing what came back.
COMPARABLE_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=20,
)


def _value_of(hint: object) -> st.SearchStrategy[Any]:
    text = st.text(string.printable, max_size=20)
    scalars: dict[object, st.SearchStrategy[Any]] = {
        int: st.integers(-(10**18) + 1, 10**18 - 1),  # the decoder's: at most 18 digits
        float: st.floats(allow_nan=False, allow_infinity=False),
        str: text,
        bool: st.booleans(),
    }
    if hint in scalars:
        return scalars[hint]
    if hint == float | None:
        return st.none() | scalars[float]
    if hint == str | None:
        return st.none() | text
    if hint == int | None:
        return st.none() | scalars[int]
    if hint == tuple[int, ...]:
        return st.lists(scalars[int], max_size=5).map(tuple)
    if hint == tuple[float, ...]:
        return st.lists(scalars[float], max_size=5).map(tuple)
    if hint == tuple[str, ...]:
        return st.lists(text, max_size=5).map(tuple)
    if hint == dict[str, Any]:
        return st.dictionaries(text, COMPARABLE_VALUES, max_size=4)
    if hint == dict[str, Any] | None:
        return st.none() | st.dictionaries(text, COMPARABLE_VALUES, max_size=4)
    if hint == dict[str, str] | None:
        return st.none() | st.dictionaries(text, text, max_size=4)
    if hint == dict[str, str]:
        return st.dictionaries(text, text, max_size=4)
    raise AssertionError(f"no strategy for {hint}: add one")


@st.composite
def any_request(draw: st.DrawFn) -> requests.Request:
    cls = draw(st.sampled_from(sorted(requests.REQUESTS.values(), key=lambda c: c.op)))
    hints = requests.type_hints(cls)
    return cls(**{name: draw(_value_of(hints[name])) for name in cls._fields})


@FUZZ
@given(any_request())
def test_every_well_typed_request_survives_the_line_and_comes_back_equal(
    request: requests.Request,
) -> None:
    line = json.dumps(requests.encode_request(request)).encode()
    assert decoder.decode_request(decoder.parse_request_line(line)) == request
