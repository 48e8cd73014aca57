"""gbatch's exit statuses: a contract for scripts (documented in the README)."""

from __future__ import annotations

import enum


class Exit(enum.IntEnum):
    """The statuses; MEANING says what each tells a script."""

    OK = 0
    FAILED = 1
    USAGE = 2
    NO_DAEMON = 3
    PERMISSION = 4
    UNAVAILABLE = 5
    INTERNAL = 70
    INTERRUPTED = 130


# What each status tells a script; the man pages' EXIT STATUS (gbatch/cli/manpages.py).
MEANING = {
    Exit.OK: "success",
    Exit.FAILED: "the request failed, or partly (unknown job, a refused cancel: one line per "
    "failure)",
    Exit.USAGE: "bad input (options, job file, format, or a malformed request sent to the "
    "socket): nothing was queued or changed",
    Exit.NO_DAEMON: "no daemon answers; the message says how to start one",
    Exit.PERMISSION: "permission denied (not your job), or refused by a limit "
    "(max_pending_jobs): wait, then submit again",
    Exit.UNAVAILABLE: "a component the request needs is missing or failing (an image job and "
    "no docker engine, a store that cannot write: disk full); nothing was changed",
    Exit.INTERNAL: "internal error; rerun with `gbatch --debug ...` for the traceback and "
    "report it",
    Exit.INTERRUPTED: "interrupted (Ctrl-C)",
}


class CliError(Exception):
    """A failure to report as `gbatch <cmd>: error: <message>` with `status`."""

    def __init__(self, message: str, status: Exit = Exit.FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
