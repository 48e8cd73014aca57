"""json.dumps and json.loads as the standard library's defaults, without importing json.

The json package loads `re` (compiling its patterns at import), and with it enum and
functools, a share of a command's start (bench/bench_startup.py). The work is done by
the C accelerator `_json`, the very code json.dumps and json.loads run; only the Python
wrappers around it are skipped. Anything those wrappers would treat otherwise (an object
that is not a dict, text with leading whitespace or trailing data, bytes that are not
UTF-8, a malformed line, an interpreter without `_json`) goes to the json package, which
answers, or raises, as ever. tests/unit/test_cli_everyday.py holds both to json's
results.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

try:
    import _json as _c
except ImportError:  # an interpreter without the accelerator: json's Python code does it
    _c = None  # type: ignore[assignment]


def _not_serializable(obj: object) -> object:
    raise TypeError(f"Object of type {obj.__class__.__name__} is not JSON serializable")


_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _Decoding:
    """json.decoder.JSONDecoder()'s settings, as the C scanner reads them."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


try:
    _scan = _c.make_scanner(_Decoding) if _c is not None else None  # type: ignore[arg-type]
except Exception:  # an accelerator of another shape (a future Python): json's own code
    _scan = None  # type: ignore[assignment]
_SPACE = " \t\n\r"


def dumps(obj: dict[str, Any]) -> str:
    """json.dumps(obj) for a dict: the same text, or the same error."""
    if _c is None or type(obj) is not dict:
        return _json_dumps(obj)
    # json.JSONEncoder()'s settings: markers (check_circular), default, ensure_ascii,
    # indent, separators, sort_keys, skipkeys, allow_nan.
    try:
        # Inside the try: an accelerator of another shape falls back, as any other error.
        encode = _c.make_encoder(
            {}, _not_serializable, _c.encode_basestring_ascii, None, ": ", ", ", False, False, True
        )
        return "".join(encode(obj, 0))
    except Exception:
        return _json_dumps(obj)  # raises as json.dumps does


def loads(line: bytes) -> Any:
    """json.loads(line) for a line that holds one JSON value: the same value or the same error.

    Meant for a line with at most a newline after its value; any other line is handed
    to json.loads itself.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if _scan is None or not text or text[0] in _SPACE or text.startswith("\ufeff"):
        return _json_loads(line)
    try:
        value, end = _scan(text, 0)
    except Exception:
        return _json_loads(line)  # raises as json.loads does
    if text[end:].strip(_SPACE):
        return _json_loads(line)
    return value


def _json_dumps(obj: object) -> str:
    import json

    return json.dumps(obj)


def _json_loads(line: bytes) -> Any:
    import json

    return json.loads(line)
