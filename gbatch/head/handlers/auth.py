"""Who may do what: admins, a job's owner, the caller's submit limits, a token's scopes."""

from __future__ import annotations

import functools
import grp
import os
import pwd
import time
from collections.abc import Mapping

from gbatch.core.limits import UserLimits, unix_groups
from gbatch.core.model import Job
from gbatch.head.daemon import Daemon
from gbatch.head.handlers.audit import audit
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.protocol import requests

# gbatchd's own user, who may do anything (as root): read once, since it never changes
# while gbatchd runs (os.getuid() is a system call, and a submit asked up to three times).
DAEMON_UID = os.getuid()


def is_admin(daemon: Daemon, caller: Caller) -> bool:
    """Whether `caller` is an admin, who may act on any job.

    Root, the daemon's own user, the users named in `admins:` and the members of
    `admin_group:` (supplementary or primary) are."""
    if caller.uid in (0, DAEMON_UID) or caller.user in daemon.config.admins:
        return True
    group = daemon.config.admin_group
    epoch = int(time.monotonic() // GROUP_CACHE_S)
    return group is not None and _in_group(caller.uid, caller.user, group, epoch)


# Group membership is read from the system's group database (grp/pwd), and kept for
# this long: a sweep over thousands of jobs asks once, and a change still takes hold.
GROUP_CACHE_S = 10.0


@functools.lru_cache(maxsize=256)
def _in_group(uid: int, user: str, group: str, epoch: int) -> bool:
    """Whether `user` (`uid`) is in `group`, listed or by primary gid; `epoch` ends the cache."""
    try:
        entry = grp.getgrnam(group)
    except KeyError:
        return False
    if user in entry.gr_mem:
        return True
    try:
        return pwd.getpwuid(uid).pw_gid == entry.gr_gid
    except KeyError:
        return False


def require_admin(daemon: Daemon, caller: Caller, op: str, target: str, what: str) -> None:
    """Refuse (and audit) a caller who is not an admin; `what` they may not do."""
    if not is_admin(daemon, caller):
        audit(daemon, caller, op, target, "refused: not an admin")
        raise Refused("permission", f"only root, the daemon's user or an admin may {what}")


def may_act_on(daemon: Daemon, caller: Caller, job: Job) -> bool:
    """Whether `caller` owns `job` or is an admin."""
    return caller.uid == job.uid or is_admin(daemon, caller)


def allowed_qos(daemon: Daemon, caller: Caller, user: str | None = None) -> list[str]:
    """The QOS names `user` (default: the caller) may use, for `caller` to give a job.

    An admin acting may give any QOS; otherwise a QOS's `users:`/`groups:` (or `ALL`)
    name who may (gbatch/core/qos.py)."""
    table = daemon.config.qos
    if is_admin(daemon, caller):
        return table.names
    user = user or caller.user
    groups = unix_groups(user, int(time.monotonic() // GROUP_CACHE_S)) if table.needs_groups else ()
    return table.allowed(user, groups)


def submit_limits(daemon: Daemon, caller: Caller) -> UserLimits | None:
    """The caller's limits at submit, or None for root and the daemon's own user.

    Those two may always queue (an admin restoring a queue, the single user of an
    embedded daemon)."""
    if caller.uid in (0, DAEMON_UID):
        return None
    return daemon.limits_for(caller.user)


# The scope a token needs for each request it may make. A request not named here
# (admin commands, tokens themselves) is refused to a token, whoever it was issued to:
# only a user at the head, on the socket, makes those.
TOKEN_SCOPE_OF: Mapping[str, str] = {
    "ping": "read",
    "jobs": "read",
    "job": "read",
    "logs": "read",
    "nodes": "read",
    "shares": "read",
    "priorities": "read",
    "usage_report": "read",
    "usage_series": "read",
    "timeline": "read",
    "gpu_history": "read",
    "metrics": "read",
    "steps": "read",
    "reservations": "read",
    "cluster_status": "read",
    # A user's own booking (user_reservations); with a token, never an admin's request.
    "reservation_change": "submit",
    "reservation_delete": "submit",
    "submit": "submit",
    "cancel": "control",
    "hold": "control",
    "release": "control",
    "requeue": "control",
    "update": "control",
    "port_forward": "ports",
}


def check_token_scope(daemon: Daemon, caller: Caller, request: requests.Request) -> None:
    """Refuse (and audit) a request a token caller's scopes do not allow."""
    if caller.scopes is None:
        return
    needed = TOKEN_SCOPE_OF.get(request.op)
    if needed is None:
        audit(daemon, caller, request.op, "api", "refused: not allowed with a token")
        raise Refused(
            "permission",
            f"{request.op} cannot be done with an API token. Run gbatch on the head instead",
        )
    if needed not in caller.scopes:
        audit(daemon, caller, request.op, "api", f"refused: token lacks scope {needed}")
        has = ",".join(sorted(caller.scopes)) or "none"
        raise Refused(
            "permission",
            f"the token does not allow {needed} (its scopes: {has}). Mint one with "
            f"`gbatch token --scope {needed}`",
        )
