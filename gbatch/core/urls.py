"""What a URL's path says once a server has read it: its dot-segments (issue 29).

A server resolves `.` and `..` in a path (RFC 3986 section 5.2.4), many after decoding
`%2e` and `%2f`, some taking `\\` for `/`; so https://hooks.example/allowed/../admin
starts with https://hooks.example/allowed/ but is posted to /admin. Pure.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

_SEPARATORS = re.compile(r"[/\\]")
# What is said of such a URL, after it (sbatch's check and the head's, alike).
DOT_SEGMENT_REFUSAL = (
    "has a `.` or `..` segment in its path (or %2e for one): give the address to post "
    "to as the server will read it, without them"
)


def has_dot_segment(url: str) -> bool:
    """Whether the path of `url` (scheme://host/path) has a `.` or `..` segment.

    As written or percent-decoded (once or more: %252e is %2e is .), with `/` or `\\`
    between segments.
    """
    rest = url.partition("://")[2]
    slash = rest.find("/")
    if slash < 0:
        return False
    path = re.split(r"[?#]", rest[slash:], maxsplit=1)[0]
    for _ in range(4):  # a few rounds of decoding; past that it is refused all the same
        if any(segment in (".", "..") for segment in _SEPARATORS.split(path)):
            return True
        decoded = unquote(path)
        if decoded == path:
            return False
        path = decoded
    return True
