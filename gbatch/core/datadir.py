"""The user's data dir, where gbatch lives without GBATCH_HOME: platformdirs' answer.

A leaf (os and sys alone): core/paths.py resolves a command's files with it, and a
start-up path without pathlib (gbatch/cli/everyday.py) may too.
"""

from __future__ import annotations

import os
import sys


def user_data_dir() -> str:
    """Where a user's gbatch lives without GBATCH_HOME: platformdirs.user_data_dir's.

    The same as platformdirs.user_data_dir("gbatch", appauthor=False). On Linux, where
    the answer is plain, without importing platformdirs (~7 ms of every command's
    start): $XDG_DATA_HOME/gbatch when that is an absolute path, else
    ~/.local/share/gbatch when HOME is an absolute path and XDG_DATA_HOME is unset or
    blank. platformdirs itself for the rest (another platform, a relative XDG_DATA_HOME
    or HOME, no HOME, Android), where its versions since 4.0 differ.
    tests/unit/test_config.py holds the two equal.
    """
    xdg = os.environ.get("XDG_DATA_HOME", "")
    home = os.environ.get("HOME", "")
    if sys.platform == "linux" and "ANDROID_DATA" not in os.environ:
        if xdg.startswith("/"):
            return os.path.join(xdg, "gbatch")
        if not xdg.strip() and home.startswith("/"):
            return os.path.join(os.path.expanduser("~/.local/share"), "gbatch")
    import platformdirs

    return platformdirs.user_data_dir("gbatch", appauthor=False)
