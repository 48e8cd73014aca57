"""The one line that says why a request to gbatchd failed, worded alike by every front.

No daemon answers, the daemon refused it, or its answer did not come in time. The CLI
prints the line with an exit status of its own, the MCP server answers with it.
"""

from __future__ import annotations


def failure_line(err: Exception) -> str | None:
    """What to tell the user of `err`, in one line; None when it is no client failure.

    The client's failures are gbatch.protocol.client's DaemonUnavailable, RequestFailed
    and ReplyTimeout. Imports the client only on this error path.
    """
    from gbatch.protocol.client import DaemonUnavailable, ReplyTimeout, RequestFailed

    if isinstance(err, DaemonUnavailable):
        from gbatch.core.constants import SYSTEM_SOCKET  # a str: no pathlib here

        # The lab's system daemon is the admins' to start (systemd), not the user's.
        system = str(err.socket_path) == SYSTEM_SOCKET
        hint = "Ask an admin to start gbatchd" if system else "Start one with `gbatch daemon start`"
        return f"{err}. {hint}"
    if isinstance(err, RequestFailed):
        return err.message
    if isinstance(err, ReplyTimeout):
        return str(err)
    return None
