"""Who an admin may mint API tokens for (gbatch/site/accounts.py): listed service
accounts only; never root, gbatchd's own account, a system account or a person; and
`service_accounts:` checked when the config is read."""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable
from pathlib import Path

import pytest

from gbatch.site import accounts
from gbatch.site.config import Config, ConfigError, Paths, load_config

DAEMON = 4700  # the uid gbatchd runs as, in these tests
LISTED = ("ci-bot", "gbatch", "stats", "nobody", "root")


def problem(name: str, uid: int, listed: tuple[str, ...] = LISTED) -> str | None:
    return accounts.other_account_problem(
        name, uid, listed=listed, daemon_uids={DAEMON}, uid_min=1000
    )


def test_a_listed_robots_account_may_have_tokens() -> None:
    assert problem("ci-bot", 4711) is None


@pytest.mark.parametrize(
    ("name", "uid", "why"),
    [
        ("root", 0, "it is root"),
        ("toor", 0, "it is root"),  # root by uid, whatever the name
        ("svc", DAEMON, "gbatchd's own account"),  # the uid gbatchd runs as
        ("gbatch", 999, "gbatchd's own account"),  # the system deployment's user
        ("gbatch", 4712, "gbatchd's own account"),  # by name, whatever its uid
        ("daemon", 1, "below UID_MIN 1000 of /etc/login.defs"),
        ("stats", 999, "below UID_MIN 1000 of /etc/login.defs"),
        ("nobody", 65534, "the overflow user nobody"),
        ("nfsnobody", 4294967294, "the overflow user nobody"),
    ],
)
def test_root_gbatchds_own_and_system_accounts_never_have_tokens_even_when_listed(
    name: str, uid: int, why: str
) -> None:
    assert why in str(problem(name, uid, (*LISTED, name)))


def test_an_account_not_listed_is_a_persons_and_is_refused_naming_the_key() -> None:
    found = problem("alice", 4713)
    assert found == accounts.NOT_LISTED
    line = accounts.refusal("alice", found)
    assert line == (
        "no tokens for alice but its own: it is not listed in service_accounts (a person's "
        "account, or a typo). A person mints their own with `gbatch token`; for a robot's "
        "account, list it under service_accounts in gbatchd's config.yaml"
    )


def test_a_forbidden_accounts_refusal_says_how_to_make_a_service_account() -> None:
    line = accounts.refusal("gbatch", str(problem("gbatch", 999)))
    assert line.startswith("no tokens for gbatch: it is gbatchd's own account: ")
    assert line.endswith(
        "useradd -M -s /usr/sbin/nologin NAME) and list it under service_accounts in "
        "gbatchd's config.yaml"
    )
    assert "\n" not in line


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("UID_MIN\t\t\t 1000\nUID_MAX 60000\n", 1000),
        ("# UID_MIN 5000\nUID_MIN 500  # old Red Hat\n", 500),
        ("SYS_UID_MIN 100\n#UID_MIN 2000\n", accounts.DEFAULT_UID_MIN),
        ("UID_MIN 1000\nUID_MIN 2000\n", 2000),  # the last one counts, as login's
        ("", accounts.DEFAULT_UID_MIN),
    ],
)
def test_uid_min_is_read_from_login_defs(text: str, expected: int) -> None:
    assert accounts.uid_min_of(text) == expected


def test_a_missing_login_defs_gives_the_default(tmp_path: Path) -> None:
    assert accounts.login_uid_min(tmp_path / "none") == accounts.DEFAULT_UID_MIN


# -- service_accounts: in config.yaml ----------------------------------------------------


def load(tmp_path: Path, text: str) -> Config:
    paths = Paths(tmp_path)
    paths.home.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text(text)
    return load_config(paths, {})


def test_listed_service_accounts_are_read(
    tmp_path: Path, fake_accounts: Callable[[str, int], pwd.struct_passwd]
) -> None:
    fake_accounts("ci-bot", 4711)
    fake_accounts("grafana", 4712)
    config = load(tmp_path, "service_accounts: [ci-bot, grafana, ci-bot]\n")
    assert config.service_accounts == ("ci-bot", "grafana")
    assert Config().service_accounts == ()


@pytest.mark.parametrize(
    ("listed", "said"),
    [
        ("ci-bot", "a list of service accounts' user names like [ci-bot]"),
        ("[ci-bot, 7]", "a list of service accounts' user names like [ci-bot]"),
        ("[no-such-account-gbatch]", "a list of existing accounts (no-such-account-gbatch is"),
        ("[root]", "(root: it is root"),
        ("[gbatch]", "(gbatch: it is gbatchd's own account"),
        ("[me]", "(me: it is gbatchd's own account"),
        ("[sysbot]", "(sysbot: it is a system account (uid 998 is below UID_MIN"),
        ("[nobody]", "(nobody: it is a system account (uid 65534, the overflow user nobody)"),
    ],
)
def test_a_bad_service_account_stops_the_daemon_with_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_accounts: Callable[[str, int], pwd.struct_passwd],
    listed: str,
    said: str,
) -> None:
    fake_accounts("ci-bot", 4711)
    fake_accounts("gbatch", 4712)
    fake_accounts("sysbot", 998)
    fake_accounts("me", DAEMON)
    monkeypatch.setattr(os, "geteuid", lambda: DAEMON)  # gbatchd runs as `me`
    monkeypatch.setattr(accounts, "login_uid_min", lambda: 1000)
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, f"service_accounts: {listed}\n")
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'config.yaml'}: service_accounts: ")
    assert said in message
    assert message.endswith("Fix the value") and "\n" not in message
