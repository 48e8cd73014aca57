"""Whether the system knows a user, named as squeue's `-u` takes one (a name or a uid).

A leaf (pwd is imported when asked) that squeue's start-up path, the full command and
the MCP tool share, so all three refuse the same texts.
"""

from __future__ import annotations


def user_exists(user: str) -> bool:
    """True when `user`, a login name or a decimal uid, names an account on this system.

    A text no account can have (a NUL, a uid past the system's range, a non-ASCII digit)
    is False, never an exception: it came from a user's command line or a tool call.
    """
    import pwd  # deferred: only a listing narrowed to users needs it

    try:
        if user.isdigit():
            pwd.getpwuid(int(user))
        else:
            pwd.getpwnam(user)
    except (KeyError, OverflowError, ValueError):
        return False
    return True
