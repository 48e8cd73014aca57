"""Where gbatch keeps its files, and config.yaml plus environment overrides."""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Callable
from pathlib import Path

import platformdirs
import pytest

from gbatch.core.datadir import socket_file, user_data_dir
from gbatch.core.limits import Limits, UserLimits
from gbatch.core.qos import parse_qos
from gbatch.site.config import (
    Config,
    ConfigError,
    IdleGpuPolicy,
    Paths,
    RootInContainers,
    Webhook,
    check_socket_directory,
    load_config,
    make_private,
    resolve_paths,
)
from gbatch.site.policy import MountRoot


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(tmp_path)


def write_config(paths: Paths, text: str) -> None:
    paths.config_file.write_text(text)


# -- paths ------------------------------------------------------------------------------


def test_gbatch_home_decides_every_path(tmp_path: Path) -> None:
    paths = resolve_paths({"GBATCH_HOME": str(tmp_path / "gb")})

    home = tmp_path / "gb"
    assert paths.home == home
    assert paths.config_file == home / "config.yaml"
    assert paths.store == home / "gbatch.db"
    assert paths.socket == home / "gbatchd.sock"
    assert paths.lock == home / "gbatchd.lock"
    assert paths.daemon_log == home / "gbatchd.log"
    assert paths.job_log(42) == home / "logs" / "42.log"
    assert paths.run_dir(42, 3) == home / "run" / "42.3"
    assert paths.simulation_file == home / "simulated-gpus.json"


def test_relative_gbatch_home_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_paths({"GBATCH_HOME": "gb"}).home == tmp_path / "gb"


def test_gbatch_home_expands_the_tilde(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_paths({"GBATCH_HOME": "~/gb"}).home == tmp_path / "gb"


@pytest.mark.parametrize("environ", [{}, {"GBATCH_HOME": ""}], ids=["unset", "empty"])
def test_without_gbatch_home_the_user_data_dir_is_used(
    environ: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))

    home = resolve_paths(environ).home

    assert home == Path(platformdirs.user_data_dir("gbatch", appauthor=False))
    assert home == tmp_path / "share" / "gbatch"


UNSET = None


@pytest.mark.parametrize("home", ["/home/alice", "/home/alice/", "/", "rel", "", UNSET])
@pytest.mark.parametrize(
    "xdg", ["/data", "/data/", "/da ta", "", "   ", "rel/share", "~/share", " /data", UNSET]
)
def test_the_user_data_dir_is_platformdirs_without_importing_it(
    home: str | None, xdg: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """paths.user_data_dir() answers as platformdirs does for every HOME and XDG_DATA_HOME
    (it imports platformdirs itself for the forms it leaves to it)."""
    for name, value in (("HOME", home), ("XDG_DATA_HOME", xdg)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    try:
        expected: str | type[Exception] = platformdirs.user_data_dir("gbatch", appauthor=False)
    except RuntimeError:  # no home to be found (platformdirs >= 4.4)
        expected = RuntimeError
    if expected is RuntimeError:
        with pytest.raises(RuntimeError):
            user_data_dir()
    else:
        assert user_data_dir() == expected


HOMES = [UNSET, "", "/h", "/h/", "rel", "./rel", "a//b", "~/x", "~nobody-here/x"]
HOMES += ["/a/./b", "/a/..", "..", "/"]
SOCKETS = [UNSET, "", "/s.sock", "rel.sock", "~/s", "/s//x", "/s/."]


@pytest.mark.parametrize("xdg", [UNSET, "/xdg", "/x//y"])
@pytest.mark.parametrize("socket", SOCKETS)
@pytest.mark.parametrize("home", HOMES)
def test_the_socket_found_without_pathlib_is_the_paths_socket(
    home: str | None,
    socket: str | None,
    xdg: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """datadir.socket_file (the commands' client, without pathlib) answers as
    resolve_paths(...).socket spells it, or None (then the paths answer)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    environ = {"GBATCH_HOME": home, "GBATCH_SOCKET": socket, "XDG_DATA_HOME": xdg}
    for name, value in environ.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    given = {name: value for name, value in environ.items() if value is not None}
    found = socket_file(given)
    try:
        expected: str | None = str(resolve_paths(given).socket)
    except RuntimeError:  # `~nobody-here`: refused, by the paths (found is None)
        expected = None
    if found is not None:
        assert found == expected
    if home in (None, "", "/h") and (socket == "/s.sock" or (home == "/h" and not socket)):
        assert found is not None  # the plain forms are found without pathlib


# -- load_config: files -----------------------------------------------------------------


def test_missing_config_file_gives_defaults(paths: Paths) -> None:
    config = load_config(paths, {})

    assert config == Config()
    assert config.tick_seconds == 1.0
    assert config.half_life_days == 7.0
    assert config.simulate_gpus is None
    assert config.socket_mode == 0o600
    assert config.admins == ()
    assert config.docker == "docker"


@pytest.mark.parametrize("text", ["", "# nothing set yet\n", "---\n"])
def test_empty_config_file_gives_defaults(paths: Paths, text: str) -> None:
    write_config(paths, text)
    assert load_config(paths, {}) == Config()


def test_config_file_with_every_key_is_read(
    paths: Paths, fake_accounts: Callable[[str, int], pwd.struct_passwd]
) -> None:
    fake_accounts("ci-bot", 4711)
    write_config(
        paths,
        "tick_seconds: 0.5\n"
        "report_interval: 2\n"
        "half_life_days: 14\n"
        "kill_grace_seconds: 10.5\n"
        "simulate_gpus: 4\n"
        "gpu_memory_threshold_mib: 1024\n"
        'socket_mode: "660"\n'
        "socket_path: /run/gbatch-test/gbatchd.sock\n"
        "socket_group: root\n"
        "admins: [alice, bob]\n"
        "service_accounts: [ci-bot]\n"
        "admin_group: root\n"
        "private_data: true\n"
        "kill_invalid_depend: true\n"
        "admin_steps: true\n"
        "bare_job_cgroups: false\n"
        "interactive_grace_seconds: 12\n"
        "max_interactive_time: '2:00:00'\n"
        "docker: podman\n"
        "node_down_seconds: 90\n"
        "node_lease_seconds: 60\n"
        'mount_roots: [{path: "/data/{user}", writable: true}, /datasets]\n'
        "run_as_submitter: true\n"
        'root_in_containers: {images: ["lab/admin:*"], nodes: [gpu07, gpu07]}\n'
        "job_network: none\n"
        "allow_host_network: true\n"
        "job_networks: [labnet, host, labnet]\n"
        "job_capabilities: [CHOWN, KILL]\n"
        "max_log_bytes: 2G\n"
        "limits: {max_running_jobs: 3, groups: {root: {max_gpus: 1}}}\n"
        "token_leeway_seconds: 5\n"
        "smtp_host: mail.example.org\n"
        "smtp_port: 2525\n"
        "smtp_tls: starttls\n"
        "smtp_ca_file: /etc/gbatch/mail-ca.pem\n"
        "smtp_user: gbatch\n"
        "smtp_password_file: /etc/gbatch/smtp-password\n"
        "mail_from: gbatch@example.org\n"
        "mail_domain: example.org\n"
        "webhooks: [{name: ops, url: 'https://hooks.example.org/x', secret: s3,"
        " events: [FAIL, NODE_DOWN], form: slack}]\n"
        "notify_retry_seconds: 5\n"
        "notify_retention_days: 2\n"
        "user_reservations: 8\n"
        "webhook_prefixes_allowed: ['https://hooks.slack.com/services/']\n"
        "idle_gpu: {threshold_percent: 10, after_minutes: 20, cancel_after_minutes: 60}\n"
        "gpu_mem_policy: warn\n"
        "gpu_mem_grace_seconds: 0\n"
        "event_log: events.jsonl\n"
        "event_log_max_bytes: 10M\n"
        "event_log_backups: 3\n"
        "gpu_types: {'NVIDIA A100*80GB*': a100-80gb, 'Tesla V100*': v100}\n"
        "share_gpus: [0, 2]\n"
        "share_headroom_mib: 2048\n"
        "shard_mib: 10240\n"
        "mps: true\n"
        "qos: {high: {priority: 100, users: [root]}}\n",
    )

    assert load_config(paths, {}) == Config(
        tick_seconds=0.5,
        report_interval=2.0,
        half_life_days=14.0,
        kill_grace_seconds=10.5,
        simulate_gpus=4,
        gpu_memory_threshold_mib=1024,
        socket_mode=0o660,
        socket_path=Path("/run/gbatch-test/gbatchd.sock"),
        socket_group="root",
        admins=("alice", "bob"),
        service_accounts=("ci-bot",),
        admin_group="root",
        private_data=True,
        kill_invalid_depend=True,
        admin_steps=True,
        bare_job_cgroups=False,
        interactive_grace_seconds=12.0,
        max_interactive_time=7200,
        docker="podman",
        node_down_seconds=90.0,
        node_lease_seconds=60.0,
        mount_roots=(MountRoot("/data/{user}", writable=True), MountRoot("/datasets")),
        root_in_containers=RootInContainers(images=("lab/admin:*",), nodes=("gpu07",)),
        job_network="none",
        allow_host_network=True,
        job_networks=("labnet", "host"),
        job_capabilities=("CHOWN", "KILL"),
        max_log_bytes=2 << 30,
        limits=Limits(UserLimits(max_running_jobs=3), groups={"root": {"max_gpus": 1}}),
        token_leeway_seconds=5.0,
        smtp_host="mail.example.org",
        smtp_port=2525,
        smtp_tls="starttls",
        smtp_ca_file=Path("/etc/gbatch/mail-ca.pem"),
        smtp_user="gbatch",
        smtp_password_file=Path("/etc/gbatch/smtp-password"),
        mail_from="gbatch@example.org",
        mail_domain="example.org",
        webhooks=(
            Webhook("ops", "https://hooks.example.org/x", "s3", ("FAIL", "NODE_DOWN"), "slack"),
        ),
        notify_retry_seconds=5.0,
        notify_retention_days=2.0,
        user_reservations=8.0,
        webhook_prefixes_allowed=("https://hooks.slack.com/services/",),
        idle_gpu=IdleGpuPolicy(10.0, 20.0, 60.0),
        gpu_mem_policy="warn",
        gpu_mem_grace_seconds=0.0,
        event_log="events.jsonl",
        event_log_max_bytes=10 << 20,
        event_log_backups=3,
        gpu_types=(("NVIDIA A100*80GB*", "a100-80gb"), ("Tesla V100*", "v100")),
        share_gpus=(0, 2),
        share_headroom_mib=2048,
        shard_mib=10240,
        mps=True,
        qos=parse_qos({"high": {"priority": 100, "users": ["root"]}}),
    )


def test_every_config_key_is_a_config_field() -> None:
    # Guards the test above: if Config grows a field, that test must grow a key.
    assert {f for f in Config.__dataclass_fields__} == {
        "tick_seconds",
        "report_interval",
        "half_life_days",
        "kill_grace_seconds",
        "simulate_gpus",
        "simulated_models",
        "gpu_types",
        "share_gpus",
        "share_headroom_mib",
        "shard_mib",
        "mps",
        "qos",
        "gpu_memory_threshold_mib",
        "socket_mode",
        "socket_path",
        "socket_group",
        "admins",
        "service_accounts",
        "admin_group",
        "private_data",
        "kill_invalid_depend",
        "docker",
        "node_down_seconds",
        "node_lease_seconds",
        "mount_roots",
        "root_in_containers",
        "job_network",
        "allow_host_network",
        "job_networks",
        "job_capabilities",
        "max_log_bytes",
        "limits",
        "token_leeway_seconds",
        "smtp_host",
        "smtp_port",
        "smtp_tls",
        "smtp_ca_file",
        "smtp_user",
        "smtp_password_file",
        "mail_from",
        "mail_domain",
        "webhooks",
        "notify_retry_seconds",
        "notify_retention_days",
        "user_reservations",
        "resv_over_run",
        "webhook_prefixes_allowed",
        "idle_gpu",
        "gpu_mem_policy",
        "gpu_mem_grace_seconds",
        "event_log",
        "event_log_max_bytes",
        "event_log_backups",
        "admin_steps",
        "bare_job_cgroups",
        "interactive_grace_seconds",
        "max_interactive_time",
    }


@pytest.mark.parametrize(
    ("text", "expected"), [("off", None), ("'off'", None), ("stdout", "stdout")]
)
def test_event_log_off_or_stdout(tmp_path: Path, text: str, expected: str | None) -> None:
    # A bare YAML off is false: it must mean off too, not a file named "False".
    paths = Paths(home=tmp_path)
    write_config(paths, f"event_log: {text}\n")
    assert load_config(paths, {}).event_log == expected


@pytest.mark.parametrize("text", ["event_log: 3", "event_log: ''", "event_log_backups: 0"])
def test_bad_event_log_settings_are_refused(tmp_path: Path, text: str) -> None:
    paths = Paths(home=tmp_path)
    write_config(paths, text + "\n")
    with pytest.raises(ConfigError, match="event_log"):
        load_config(paths, {})


@pytest.mark.parametrize(
    "hooks",
    [
        "{url: 'https://h.example.org/'}",  # no name
        "[{name: ops, url: 'ftp://h.example.org/'}]",
        "[{name: ops, url: 'https://h.example.org/', events: [BOGUS]}]",
        "[{name: ops, url: 'https://h.example.org/', form: xml}]",
        "[{name: ops, url: 'https://a.example.org/'}, {name: ops, url: 'https://b.example.org/'}]",
    ],
)
def test_bad_webhooks_are_refused_with_the_form_to_use(paths: Paths, hooks: str) -> None:
    write_config(paths, f"webhooks: {hooks}\n")
    with pytest.raises(ConfigError, match=r"webhooks.*name: ops, url"):
        load_config(paths, {})


@pytest.mark.parametrize(
    "prefixes",
    [
        "https://hooks.slack.com",  # not a list
        "['https://hooks.slack.com']",  # no "/" after the host: .com.evil.example matches
        "['ftp://files.example.org/']",
        "['https://user@hooks.example.org/']",
    ],
)
def test_webhook_prefixes_name_a_host_and_end_it(paths: Paths, prefixes: str) -> None:
    write_config(paths, f"webhook_prefixes_allowed: {prefixes}\n")
    with pytest.raises(ConfigError, match=r"webhook_prefixes_allowed.*like https://hooks"):
        load_config(paths, {})


def test_a_webhook_prefix_with_a_dot_segment_is_refused(paths: Paths) -> None:
    """It would allow what its resolved path does not: refused, not resolved."""
    write_config(paths, "webhook_prefixes_allowed: ['https://hooks.example.org/a/../']\n")
    with pytest.raises(ConfigError, match=r"webhook_prefixes_allowed.*without `.` or `..`"):
        load_config(paths, {})


@pytest.mark.parametrize(
    ("written", "size"),
    [
        ("10G", 10 << 30),
        ("'10 GiB'", 10 << 30),
        ("512m", 512 << 20),
        ("1.5T", 3 << 39),
        ("1048576", 1 << 20),
        ("64KB", 64 << 10),
    ],
)
def test_max_log_bytes_takes_bytes_or_a_size_with_a_unit(
    paths: Paths, written: str, size: int
) -> None:
    assert Config().max_log_bytes == 10 << 30
    write_config(paths, f"max_log_bytes: {written}\n")
    assert load_config(paths, {}).max_log_bytes == size


def test_half_life_is_converted_to_seconds(paths: Paths) -> None:
    write_config(paths, "half_life_days: 2\n")
    assert load_config(paths, {}).half_life_seconds == 2 * 86400.0


def test_simulate_gpus_zero_is_allowed(paths: Paths) -> None:
    write_config(paths, "simulate_gpus: 0\n")
    assert load_config(paths, {}).simulate_gpus == 0


@pytest.mark.parametrize(
    ("written", "mode"),
    [('"660"', 0o660), ('"0o640"', 0o640), ('"0600"', 0o600), ('"0"', 0)],
)
def test_socket_mode_digits_are_read_as_octal(paths: Paths, written: str, mode: int) -> None:
    write_config(paths, f"socket_mode: {written}\n")
    assert load_config(paths, {}).socket_mode == mode


@pytest.mark.parametrize("written", ["0660", "660"])
def test_unquoted_socket_mode_is_refused_as_ambiguous(paths: Paths, written: str) -> None:
    write_config(paths, f"socket_mode: {written}\n")
    with pytest.raises(ConfigError, match="quoted octal mode like '660'"):
        load_config(paths, {})


# -- load_config: environment -----------------------------------------------------------


def test_simulate_gpus_from_environment_without_a_file(paths: Paths) -> None:
    assert load_config(paths, {"GBATCH_SIMULATE_GPUS": "8"}).simulate_gpus == 8


def test_environment_overrides_the_file(paths: Paths) -> None:
    write_config(paths, "simulate_gpus: 2\ntick_seconds: 3\n")

    config = load_config(paths, {"GBATCH_SIMULATE_GPUS": "4"})

    assert config.simulate_gpus == 4
    assert config.tick_seconds == 3.0


def test_empty_environment_variable_does_not_override(paths: Paths) -> None:
    write_config(paths, "simulate_gpus: 2\n")
    assert load_config(paths, {"GBATCH_SIMULATE_GPUS": ""}).simulate_gpus == 2


def test_bad_simulate_gpus_in_environment_is_a_config_error(paths: Paths) -> None:
    with pytest.raises(ConfigError, match="GBATCH_SIMULATE_GPUS"):
        load_config(paths, {"GBATCH_SIMULATE_GPUS": "lots"})


def test_bad_simulate_gpus_in_environment_names_the_variable(paths: Paths) -> None:
    with pytest.raises(ConfigError, match="GBATCH_SIMULATE_GPUS"):
        load_config(paths, {"GBATCH_SIMULATE_GPUS": "lots"})


# -- load_config: errors ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "nearest"),
    [
        ("tick_second", "tick_seconds"),
        ("simulate_gpu", "simulate_gpus"),
        ("half_life", "half_life_days"),
        ("admin", "admins"),
        ("socketmode", "socket_mode"),
    ],
)
def test_unknown_key_names_the_file_and_suggests_the_nearest_key(
    paths: Paths, key: str, nearest: str
) -> None:
    write_config(paths, f"{key}: 1\n")

    with pytest.raises(ConfigError) as caught:
        load_config(paths, {})

    message = str(caught.value)
    assert str(paths.config_file) in message
    assert f'"{key}"' in message
    assert f'Did you mean "{nearest}"?' in message


def test_unknown_key_far_from_any_lists_the_valid_keys(paths: Paths) -> None:
    write_config(paths, "colour: blue\n")

    with pytest.raises(ConfigError) as caught:
        load_config(paths, {})

    message = str(caught.value)
    assert str(paths.config_file) in message
    assert '"colour"' in message
    assert "Valid keys:" in message
    assert "tick_seconds" in message and "docker" in message


def test_non_string_key_is_a_config_error(paths: Paths) -> None:
    write_config(paths, "5: 1\n")
    with pytest.raises(ConfigError, match="5"):
        load_config(paths, {})


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("tick_seconds: -1", "a finite number greater than zero"),
        ("tick_seconds: 0", "a finite number greater than zero"),
        ("half_life_days: -7", "a finite number greater than zero"),
        ("kill_grace_seconds: -0.5", "a finite number greater than zero"),
        ("report_interval: fast", "a number"),
        ("tick_seconds: true", "a number"),
        ("tick_seconds: [1]", "a number"),
        ("simulate_gpus: -2", "zero or more"),
        ("gpu_memory_threshold_mib: -1", "zero or more"),
        ("simulate_gpus: many", "N, or models with counts such as a100-80gb:2,rtx4090:1"),
        ("simulate_gpus: 2.5", "an integer"),
        ("gpu_memory_threshold_mib: yes", "an integer"),
        ('socket_mode: "rw-rw----"', "an octal mode like '660'"),
        ('socket_mode: "680"', "an octal mode like '660'"),  # 8 is no octal digit
        ('socket_mode: "-600"', "zero or more"),
        ("admins: alice", "a list of user names"),
        ("admins: [alice, 7]", "a list of user names"),
        ('docker: ""', "a command name"),
        ("docker: 5", "a command name"),
        ("max_log_bytes: 10X", "a size like 10G, 512M or 1048576 (bytes)"),
        ("max_log_bytes: -1", "a size like 10G, 512M or 1048576 (bytes)"),
        ("max_log_bytes: null", "a size like 10G, 512M or 1048576 (bytes)"),
        ("max_log_bytes: 100", "a size of at least 1K"),
    ],
)
def test_bad_value_names_file_key_value_and_the_fix(paths: Paths, line: str, what: str) -> None:
    write_config(paths, line + "\n")
    key = line.split(":")[0]

    with pytest.raises(ConfigError) as caught:
        load_config(paths, {})

    message = str(caught.value)
    assert message.startswith(f"{paths.config_file}: {key}: ")
    assert f"is not {what}" in message
    assert message.endswith("Fix the value")


@pytest.mark.parametrize("key", ["tick_seconds", "half_life_days"])
def test_nan_is_not_a_valid_number(paths: Paths, key: str) -> None:
    write_config(paths, f"{key}: .nan\n")
    with pytest.raises(ConfigError, match=key):
        load_config(paths, {})


def test_explicit_null_simulate_gpus_means_no_simulation(paths: Paths) -> None:
    write_config(paths, "simulate_gpus: null\n")
    assert load_config(paths, {}).simulate_gpus is None


@pytest.mark.parametrize("text", ["- tick_seconds: 1\n", "just a string\n", "42\n"])
def test_top_level_that_is_not_a_mapping_is_refused(paths: Paths, text: str) -> None:
    write_config(paths, text)

    with pytest.raises(ConfigError) as caught:
        load_config(paths, {})

    assert str(paths.config_file) in str(caught.value)
    assert "top level must be a mapping" in str(caught.value)


def test_malformed_yaml_is_a_config_error_naming_the_file(paths: Paths) -> None:
    write_config(paths, "tick_seconds: [1\n")

    with pytest.raises(ConfigError) as caught:
        load_config(paths, {})

    assert str(paths.config_file) in str(caught.value)
    assert "Fix the file" in str(caught.value)


def test_make_private_creates_and_closes_files_whatever_the_umask(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        fresh = tmp_path / "fresh"
        make_private(fresh)
        assert oct(mode(fresh)) == "0o600" and fresh.read_bytes() == b""
        older = tmp_path / "older"
        older.write_text("kept\n")  # 0644 under umask 022
        make_private(older)
        assert oct(mode(older)) == "0o600" and older.read_text() == "kept\n"
    finally:
        os.umask(old_umask)


def test_run_dirs_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        run_dir = Paths(tmp_path / "home").make_run_dir(4, 2)
    finally:
        os.umask(old_umask)
    assert run_dir == tmp_path / "home" / "run" / "4.2"
    assert oct(mode(run_dir)) == oct(mode(run_dir.parent)) == "0o700"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_socket_open_to_others_in_a_directory_others_may_write_is_refused(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: anyone could put a socket of their own there
    with pytest.raises(ConfigError) as caught:
        check_socket_directory(shared / "gbatchd.sock", Config(socket_mode=0o666))
    assert f"but {shared} may be written by others (mode 1777" in str(caught.value)
    assert "such as /run/gbatch" in str(caught.value)
    # Only the owner may connect: nobody else to deceive.
    check_socket_directory(shared / "gbatchd.sock", Config(socket_mode=0o600))
    own = tmp_path / "own"
    own.mkdir(mode=0o755)
    own.chmod(0o755)
    check_socket_directory(own / "gbatchd.sock", Config(socket_mode=0o666))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("smtp_tls: ssl", "smtp_tls: 'ssl' is not starttls or implicit"),
        ("smtp_tls: implicit", "smtp_tls: implicit TLS on port 25, where servers speak plain"),
        ("smtp_user: gbatch", "smtp_user: its password is not set. Name a file"),
        ("smtp_password_file: /etc/pw", "smtp_password_file: it names no user's password"),
        (
            "{smtp_user: gbatch, smtp_password_file: /etc/pw}",
            "smtp_user: its password would cross the network in clear. Set smtp_tls",
        ),
        ("smtp_password_file: pw", "smtp_password_file: 'pw' is not an absolute path"),
        ("smtp_password: hunter2", 'unknown setting "smtp_password"'),
    ],
)
def test_smtp_tls_and_auth_mistakes_are_one_line_naming_the_key_and_the_fix(
    paths: Paths, text: str, says: str
) -> None:
    write_config(paths, text + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(paths, {})
    assert says in str(caught.value) and "\n" not in str(caught.value)
