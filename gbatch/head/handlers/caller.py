"""Caller: who makes a request, as the socket or an API token says (never the request)."""

from __future__ import annotations

from dataclasses import dataclass

from gbatch.core.loglines import loggable


@dataclass(frozen=True)
class Caller:
    """Who makes a request: the socket's peer (SO_PEERCRED), or an API token's user.

    With a token, `scopes` says what it allows and `via` names it."""

    uid: int
    user: str
    pid: int
    scopes: frozenset[str] | None = None  # None: no token, the peer's own rights
    via: str = ""  # "token:<jti>" for a request made with a token

    @property
    def party(self) -> str:
        """Who this caller is in an audit line and whose refusal budget it draws on."""
        return f"user={loggable(self.user)} uid={self.uid}"
