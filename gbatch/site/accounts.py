"""Which accounts an admin may mint API tokens for: listed service accounts, nobody else.

A token acts as its account: its jobs run as it. One minted by an admin for another
account would let the admin run code as that account, so it must be one the site's
config names in `service_accounts:` (a robot's: CI, a dashboard), and never root,
gbatchd's own account (which holds the fleet's SSH key, the store and the token keys),
a system account (uid below UID_MIN of /etc/login.defs, and nobody) or a person (an
account not listed). Pure but for `login_uid_min`, which reads /etc/login.defs once.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection
from pathlib import Path

LOGIN_DEFS = Path("/etc/login.defs")
# useradd's first uid for people where login.defs does not say (Debian, Fedora, Arch).
DEFAULT_UID_MIN = 1000
# The system deployment's own account (deploy/install-system.sh), whoever runs gbatchd.
SERVICE_USER = "gbatch"
# nobody and nfsnobody (the kernel's overflow uid, and -1/-2 as unsigned), by uid or name.
NOBODY_UIDS = frozenset({65534, 4294967294, 4294967295})
NOBODY_NAMES = frozenset({"nobody", "nfsnobody"})
# The fix every refusal ends with, so an admin reads what to do in one line.
FIX = (
    "Mint tokens for a robot's own account: create one (useradd -M -s /usr/sbin/nologin "
    "NAME) and list it under service_accounts in gbatchd's config.yaml"
)

_UID_MIN_LINE = re.compile(r"^\s*UID_MIN\s+([0-9]+)\s*(?:#.*)?$", re.MULTILINE)


def uid_min_of(text: str) -> int:
    """UID_MIN as login.defs `text` sets it (its last setting), else DEFAULT_UID_MIN."""
    found = _UID_MIN_LINE.findall(text)
    return int(found[-1]) if found else DEFAULT_UID_MIN


@functools.cache
def login_uid_min(path: Path = LOGIN_DEFS) -> int:
    """The first uid useradd gives a person on this system (UID_MIN), read once."""
    try:
        return uid_min_of(path.read_text(errors="replace"))
    except OSError:
        return DEFAULT_UID_MIN


def forbidden_account(
    name: str, uid: int, *, daemon_uids: Collection[int], uid_min: int
) -> str | None:
    """Why no one may hold a token for account `name` (uid `uid`) minted by another, or None.

    Root, gbatchd's own account (`daemon_uids`: the uids it runs as and the owner of its
    home; and SERVICE_USER by name) and system accounts (uid below `uid_min`, nobody)
    are never service accounts, whatever the config lists."""
    if uid == 0:
        return "it is root: its jobs would run as root"
    if uid in daemon_uids or name == SERVICE_USER:
        return (
            "it is gbatchd's own account: its jobs could read the fleet's SSH key, the "
            "store and the token keys"
        )
    if uid in NOBODY_UIDS or name in NOBODY_NAMES:
        return f"it is a system account (uid {uid}, the overflow user nobody)"
    if uid < uid_min:
        return f"it is a system account (uid {uid} is below UID_MIN {uid_min} of /etc/login.defs)"
    return None


NOT_LISTED = "it is not listed in service_accounts (a person's account, or a typo)"


def other_account_problem(
    name: str,
    uid: int,
    *,
    listed: Collection[str],
    daemon_uids: Collection[int],
    uid_min: int,
) -> str | None:
    """Why an admin may not mint a token for account `name` (uid `uid`), or None.

    A few words, for the audit line. `listed` is the config's service_accounts; an
    account not listed is a person's."""
    why = forbidden_account(name, uid, daemon_uids=daemon_uids, uid_min=uid_min)
    if why is not None:
        return why
    return None if name in listed else NOT_LISTED


def refusal(name: str, problem: str) -> str:
    """The one line a refused mint for account `name` reads: the problem, and the fix."""
    if problem == NOT_LISTED:
        return (
            f"no tokens for {name} but its own: {problem}. A person mints their own with "
            "`gbatch token`; for a robot's account, list it under service_accounts in "
            "gbatchd's config.yaml"
        )
    return f"no tokens for {name}: {problem}. {FIX}"
