"""gbatch's exit statuses: a contract for scripts (documented in the README)."""

from __future__ import annotations

import enum


class Exit(enum.IntEnum):
    OK = 0
    FAILED = 1  # the request was understood but (partly) failed: unknown job, a refused cancel
    USAGE = 2  # bad input: options, a job file; nothing was queued or changed
    NO_DAEMON = 3  # no daemon answers on the socket
    PERMISSION = 4  # the daemon refused: not your job
    UNAVAILABLE = 5  # a component the request needs is missing (e.g. no docker engine)
    INTERNAL = 70  # a bug: rerun with --debug and report it
    INTERRUPTED = 130


class CliError(Exception):
    """A failure to report as `gbatch <cmd>: error: <message>` with `status`."""

    def __init__(self, message: str, status: Exit = Exit.FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
