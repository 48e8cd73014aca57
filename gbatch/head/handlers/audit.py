"""The audit log: who tried what on what, and why it was allowed or refused, one line each.

Every string a user chose goes through `loggable` first, so a line cannot be forged or
made huge.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from gbatch.core.loglines import LOGGED_CHARS, loggable
from gbatch.core.model import Job
from gbatch.head.daemon import Daemon
from gbatch.head.handlers.caller import Caller
from gbatch.head.store import JobBrief

log = logging.getLogger("gbatchd")
__all__ = ["LOGGED_CHARS", "audit", "audit_jobs", "loggable"]


def audit(
    daemon: Daemon,
    caller: Caller,
    action: str,
    target: Job | JobBrief | str,
    outcome: str,
    *,
    charged: str | None = None,
) -> None:
    """Record who tried what on what, and why it was refused or allowed: one line.

    `caller` is from SO_PEERCRED (never what the request claims); `target` a job, or
    what else was acted on ("node gpu1", "daemon"); `outcome` is "refused: <why>"
    (logged as a warning) or "allowed: <why>". The line is key=value, for grep:
    `audit: user=bob uid=1001 pid=42 op=cancel job=12 owner=alice -> refused: not the
    owner`. A user's refusals past the daemon's budget are counted instead, and said in
    one line (gbatch/head/refusals.py). `charged`: whom else a refusal is charged to
    (`client=ADDR`, loggable already), named in the line before the target, when the
    caller only passes it on (the HTTP API, with a token nobody signed)."""
    refused = outcome.startswith("refused")
    if refused and not daemon.refusal_lines.admit(charged or caller.party, action):
        return
    what = (
        f"job={target.id} owner={loggable(target.user)}"
        if isinstance(target, Job | JobBrief)
        else f"target={loggable(target.replace(' ', '_'))}"
    )
    _audit_line(caller, action, f"{charged} {what}" if charged else what, outcome)


def audit_jobs(
    daemon: Daemon,
    caller: Caller,
    action: str,
    count: int,
    ids: Sequence[int],
    owners: Iterable[str],
    outcome: str,
) -> None:
    """One audit line for `count` jobs refused alike in one request.

    It names the first `ids` and their `owners`: `... op=cancel jobs=500000
    ids=12,13,14,15,16... owners=alice -> refused: not the owner`. Within the user's
    refusal budget, as audit's."""
    if outcome.startswith("refused") and not daemon.refusal_lines.admit(caller.party, action):
        return
    shown = ",".join(map(str, ids)) + ("..." if count > len(ids) else "")
    whose = ",".join(sorted(loggable(owner) for owner in owners))
    _audit_line(caller, action, f"jobs={count} ids={shown} owners={whose}", outcome)


def _audit_line(caller: Caller, action: str, what: str, outcome: str) -> None:
    """Log one audit line: a warning for a refusal, else info."""
    level = logging.WARNING if outcome.startswith("refused") else logging.INFO
    log.log(
        level,
        "audit: user=%s uid=%s pid=%s%s op=%s %s -> %s",
        loggable(caller.user),
        caller.uid,
        caller.pid,
        f" via={caller.via}" if caller.via else "",
        action,
        what,
        loggable(outcome),
    )
