"""The user's data dir and the daemon's socket, found without pathlib or platformdirs.

A leaf (os, sys and core/constants alone): core/paths.py resolves a command's files
with user_data_dir, the commands' client its socket with socket_file, and a start-up
path without pathlib (gbatch/cli/everyday.py) may use either.
"""

from __future__ import annotations

import os
import sys
from errno import EBADF, ELOOP, ENOENT, ENOTDIR

from gbatch.core import constants

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from collections.abc import Mapping


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


def socket_file(environ: Mapping[str, str]) -> str | None:
    """str(paths.resolve_paths(environ).socket), found without pathlib (~3 ms of a start).

    None where that takes pathlib's own reading, which the caller then asks: a `~` to
    expand, a path spelt otherwise than pathlib writes it (`//`, `/./`, a trailing `/`),
    the system socket's directory unreadable (Path.exists raises there).
    tests/unit/test_config.py holds the two equal.
    """
    socket = environ.get("GBATCH_SOCKET")
    home = environ.get("GBATCH_HOME")
    if home:
        home = _as_pathlib_writes(home)
        if home is None:
            return None  # pathlib's to read (and to refuse: `~nobody` raises there)
    else:
        home = _as_pathlib_writes(user_data_dir())
        if not socket:
            exists = _exists(constants.SYSTEM_SOCKET)
            if exists is None:
                return None
            if exists:
                return constants.SYSTEM_SOCKET
    if socket:
        return _as_pathlib_writes(socket)
    return None if home is None else home + "/gbatchd.sock"


def _as_pathlib_writes(path: str) -> str | None:
    """str(Path(path).expanduser().absolute()) where it is `path` made absolute as it
    is spelt; None where pathlib would spell it otherwise, or expand a `~`."""
    if path.startswith("~"):
        return None
    full = path if path.startswith("/") else os.path.join(os.getcwd(), path)
    if "//" in full or "/./" in full or full.endswith(("/", "/.")):
        return None
    return full


def _exists(path: str) -> bool | None:
    """Path(path).exists(); None where it would raise (an error other than not found)."""
    try:
        os.stat(path)
    except OSError as err:
        return False if err.errno in (ENOENT, ENOTDIR, EBADF, ELOOP) else None
    except ValueError:
        return False
    return True
