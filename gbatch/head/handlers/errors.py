"""Refused, the error a handler raises, and the message a caller reads on a full disk."""

from __future__ import annotations

from gbatch.head.store import StoreFull
from gbatch.protocol import requests


class Refused(Exception):
    """The request cannot be served, for the reason `kind` says."""

    def __init__(self, kind: requests.ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def store_full_message(err: StoreFull, *, resubmit: bool = False) -> str:
    """What a caller reads when the store's disk is full: nothing it asked was done."""
    if resubmit:
        return f"{err}; nothing was queued. Free space there and resubmit"
    return f"{err}; nothing was changed. Free space there and try again"
