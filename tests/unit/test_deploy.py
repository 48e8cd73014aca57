"""The system deployment: the systemd unit, the install script, and how the daemon and
its clients agree on the socket (config socket_path/socket_group, GBATCH_SOCKET, the
system socket)."""

from __future__ import annotations

import configparser
import grp
import os
import subprocess
from pathlib import Path

import pytest

from gbatch.site.config import (
    SYSTEM_SOCKET,
    Config,
    ConfigError,
    Paths,
    daemon_paths,
    load_config,
    resolve_paths,
)

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "deploy" / "systemd" / "gbatchd.service"
INSTALL = REPO / "deploy" / "install-system.sh"


def unit() -> configparser.ConfigParser:
    # strict=False: systemd allows a key twice; interpolation off: `%` is systemd's.
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    parser.read_string(UNIT.read_text())
    return parser


def test_the_unit_runs_the_daemon_in_the_foreground_as_the_service_user() -> None:
    service = unit()["Service"]
    assert service["Type"] == "simple"
    assert service["ExecStart"] == "/opt/gbatch/venv/bin/gbatch daemon run"
    assert service["User"] == "gbatch" and service["Group"] == "gbatch"
    assert service["SupplementaryGroups"] == "gbatch-users"
    assert service["Environment"] == "GBATCH_HOME=/var/lib/gbatch"
    assert service["StateDirectory"] == "gbatch" and service["StateDirectoryMode"] == "0700"
    assert service["RuntimeDirectory"] == "gbatch"
    assert service["RuntimeDirectoryMode"] == "0755"
    assert unit()["Install"]["WantedBy"] == "multi-user.target"


def test_the_unit_is_hardened() -> None:
    service = unit()["Service"]
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert set(service["ReadWritePaths"].split()) == {"/var/lib/gbatch", "/run/gbatch"}
    assert service["ProtectHome"] in ("yes", "read-only", "tmpfs")
    assert service["PrivateTmp"] == "yes"
    assert service["CapabilityBoundingSet"] == ""  # no capabilities at all
    assert service["UMask"] == "0077"
    assert "User" in service and service["User"] != "root"


def test_the_install_script_parses() -> None:
    checked = subprocess.run(["bash", "-n", str(INSTALL)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert os.access(INSTALL, os.X_OK)


def test_the_install_script_refuses_to_run_as_a_normal_user() -> None:
    if os.getuid() == 0:
        # Root would install for real: check the guard is the first thing it does.
        text = INSTALL.read_text()
        assert text.index('[ "$(id -u)" = 0 ] || die') < text.index("groupadd")
        return
    done = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "run as root" in done.stderr


# -- where the socket is --------------------------------------------------------------


def test_gbatch_socket_wins_over_home_and_the_system_socket(tmp_path: Path) -> None:
    system = tmp_path / "run" / "gbatchd.sock"
    system.parent.mkdir()
    system.touch()
    env = {"GBATCH_SOCKET": str(tmp_path / "s.sock"), "GBATCH_HOME": str(tmp_path / "h")}
    paths = resolve_paths(env, system_socket=system)
    assert paths.socket == tmp_path / "s.sock" and paths.home == tmp_path / "h"


def test_gbatch_home_wins_over_the_system_socket(tmp_path: Path) -> None:
    system = tmp_path / "gbatchd.sock"
    system.touch()
    paths = resolve_paths({"GBATCH_HOME": str(tmp_path / "h")}, system_socket=system)
    assert paths.socket == tmp_path / "h" / "gbatchd.sock"


def test_the_system_socket_is_used_only_when_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # platformdirs reads it
    system = tmp_path / "gbatchd.sock"
    without = resolve_paths({}, system_socket=system)
    system.touch()
    with_it = resolve_paths({}, system_socket=system)
    assert without.socket == tmp_path / "data" / "gbatch" / "gbatchd.sock"
    assert with_it.socket == system and with_it.home == without.home
    assert Path("/run/gbatch/gbatchd.sock") == SYSTEM_SOCKET


def test_a_daemon_serves_on_its_socket_path_but_never_on_a_found_system_socket(
    tmp_path: Path,
) -> None:
    config = Config(socket_path=tmp_path / "run" / "d.sock")
    home = Paths(tmp_path / "h")
    assert daemon_paths(home, config).socket == tmp_path / "run" / "d.sock"
    found = Paths(
        tmp_path / "h", socket_file=Path("/run/gbatch/gbatchd.sock"), socket_from="system"
    )
    assert daemon_paths(found, Config()).socket == tmp_path / "h" / "gbatchd.sock"
    env = Paths(tmp_path / "h", socket_file=tmp_path / "e.sock", socket_from="env")
    assert daemon_paths(env, config).socket == tmp_path / "e.sock"


def write_config(tmp_path: Path, text: str) -> Paths:
    paths = Paths(tmp_path)
    paths.config_file.write_text(text)
    return paths


def test_socket_path_and_group_are_read_from_the_config(tmp_path: Path) -> None:
    group = grp.getgrgid(os.getgid()).gr_name
    paths = write_config(
        tmp_path,
        f"socket_path: /run/gbatch/gbatchd.sock\nsocket_group: {group}\nsocket_mode: '660'\n",
    )
    config = load_config(paths, {})
    assert config.socket_path == Path("/run/gbatch/gbatchd.sock")
    assert config.socket_group == group and config.socket_mode == 0o660


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("socket_path: run/gbatchd.sock", "socket_path: 'run/gbatchd.sock' is not an absolute"),
        ("socket_path: 5", "socket_path: 5 is not an absolute path"),
        ("socket_group: gbto-no-such-group", "is not an existing Unix group"),
        ("socket_group: ''", "is not a Unix group name"),
    ],
)
def test_bad_socket_settings_name_the_key_and_the_fix(
    tmp_path: Path, line: str, message: str
) -> None:
    paths = write_config(tmp_path, line + "\n")
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(paths, {})
    assert str(caught.value).startswith(f"{paths.config_file}: ")


def test_the_unit_gives_the_daemon_descriptors_for_every_connection_it_serves() -> None:
    from gbatch.head.server import MAX_CONNECTIONS

    assert int(unit()["Service"]["LimitNOFILE"]) >= 8 * MAX_CONNECTIONS
