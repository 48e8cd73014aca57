"""Hypothesis strategies for the daemon's wire protocol, shared by
tests/unit/test_request_limits.py (parse_request_line, decode_request) and
tests/integration/test_wire_fuzz.py (a real daemon on its socket): JSON values of every
kind, objects shaped like requests, and raw lines (invalid UTF-8, NULs, brackets,
quotes, no newline, many lines)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from gbatch.protocol import wire

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=20,
)


def nested(depth: int, inner: str = "1") -> bytes:
    """JSON `depth` levels deep, lists and objects by turns."""
    text = inner
    for level in range(depth):
        text = f'{{"k":{text}}}' if level % 2 else f"[{text}]"
    return text.encode()


@st.composite
def request_shaped(draw: st.DrawFn, ops: tuple[str, ...] = tuple(sorted(wire.REQUESTS))) -> Any:
    """An object with an op (one of `ops`, or any text), some of its request type's
    fields and some it lacks, each of any JSON value."""
    op = draw(st.sampled_from(ops) | st.text(max_size=12))
    cls = wire.REQUESTS.get(op)
    names = st.sampled_from(cls._fields) if cls and cls._fields else st.text(max_size=8)
    fields = draw(st.dictionaries(names, JSON_VALUES, max_size=4))
    extra = draw(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=3))
    return {**extra, **fields, "op": op}


_PIECES = st.sampled_from(
    [b"{", b"}", b"[", b"]", b'"', b"\\", b":", b",", b"\x00", b"\xff", b"\xc3", b"\n", b" "]
)
RAW_LINES = st.one_of(
    st.binary(max_size=300),
    st.lists(_PIECES | st.binary(max_size=4), max_size=200).map(b"".join),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.integers(0, 3 * wire.MAX_NESTING).map(nested),
    st.sampled_from([nested(wire.MAX_NESTING + 1), b"[" * 5000, b'{"a":' * 5000]),
)
