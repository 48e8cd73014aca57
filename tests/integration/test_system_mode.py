"""The multi-user system deployment: one gbatchd run by a service user that alone holds
the store, the logs and the keys, serving a socket outside its home that only one
group may use (config socket_path, socket_group, socket_mode).

Real users and groups (useradd/groupadd, unique per run, removed after). The daemon is
started as the service user with setpriv, as systemd would (deploy/systemd/
gbatchd.service: User=, SupplementaryGroups=, UMask=0077); the users' clients run in
forked children that dropped to their uid (tests/integration/asuser.py).
"""

from __future__ import annotations

import grp
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from asuser import User, as_user, preload, temp_users
from conftest import FAST_CONFIG, kill_leftover_jobs, wait_for
from dockerenv import TEST_IMAGE, require_docker

from gbatch.protocol import requests
from gbatch.protocol.client import Client, DaemonUnavailable

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="needs root to make users")
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Service:
    users: dict[str, User]
    state: Path  # the service user's GBATCH_HOME (systemd's StateDirectory)
    socket: Path  # in the runtime directory (systemd's RuntimeDirectory)
    env: dict[str, str]

    @property
    def group(self) -> User:
        return self.users["users"]


def cli(socket: Path, *argv: str) -> dict[str, Any]:
    """`gbatch ARGV` in this process, aimed at `socket` (call it inside as_user)."""
    import contextlib as ctx
    import io

    from gbatch.cli._main import main

    os.environ.pop("GBATCH_HOME", None)
    os.environ["GBATCH_SOCKET"] = str(socket)
    out, err = io.StringIO(), io.StringIO()
    with ctx.redirect_stdout(out), ctx.redirect_stderr(err):
        status = main(list(argv))
    return {"rc": status, "out": out.getvalue(), "err": err.getvalue()}


def require_interpreter_for(user: User) -> None:
    """The daemon runs as `user`: it must be able to run this interpreter and import
    gbatch. Fails in CI (a clone under /root is 0700: clone elsewhere), skips locally."""
    probe = subprocess.run(
        [
            "setpriv",
            f"--reuid={user.uid}",
            f"--regid={user.gid}",
            "--clear-groups",
            sys.executable,
            "-c",
            "import gbatch.head.server",
        ],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
    )
    if probe.returncode != 0:
        message = (
            f"the service user cannot run {sys.executable} with gbatch from {REPO} "
            f"({probe.stderr.strip().splitlines()[-1:]}); put the checkout and its venv "
            "where other users may read them"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def start_daemon(
    service: Service, user: User, groups: list[int], log: Path
) -> subprocess.Popen[bytes]:
    """`gbatch daemon run` as `user` with these supplementary groups and umask 077."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchown(fd, user.uid, user.gid)
    try:
        return subprocess.Popen(
            [
                "setpriv",
                f"--reuid={user.uid}",
                f"--regid={user.gid}",
                f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups",
                *(sys.executable, "-m", "gbatch", "daemon", "run"),
            ],
            env=service.env,
            cwd=service.state,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            preexec_fn=lambda: os.umask(0o077),  # systemd's UMask=0077
        )
    finally:
        os.close(fd)


def answers(socket: Path) -> bool:
    try:
        with Client(socket, timeout=5) as client:
            client.call(requests.Ping())
    except DaemonUnavailable:
        return False
    return True


@pytest.fixture
def service() -> Iterator[Service]:
    base = Path(tempfile.mkdtemp(prefix="gbatch-system-", dir="/tmp"))
    base.chmod(0o755)
    try:
        with temp_users("gbto", ["svc", "bob"], group="users", in_group=["alice"]) as users:
            svc = users["svc"]
            state = base / "lib" / "gbatch"
            runtime = base / "run" / "gbatch"
            for directory, mode in ((state, 0o700), (runtime, 0o755)):
                directory.mkdir(parents=True)
                os.chown(directory, svc.uid, svc.gid)
                directory.chmod(mode)
            env = {k: v for k, v in os.environ.items() if not k.startswith("GBATCH_")}
            env.update(GBATCH_HOME=str(state), GBATCH_SIMULATE_GPUS="1", HOME=str(state))
            yield Service(users, state, runtime / "gbatchd.sock", env)
            kill_leftover_jobs(state)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def write_config(service: Service, extra: str) -> None:
    config = service.state / "config.yaml"
    config.write_text(FAST_CONFIG + extra)
    os.chown(config, service.users["svc"].uid, service.users["svc"].gid)
    config.chmod(0o600)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.docker
def test_the_service_users_daemon_serves_its_group_and_nobody_else(service: Service) -> None:
    svc, alice, bob, group = (service.users[k] for k in ("svc", "alice", "bob", "users"))
    require_interpreter_for(svc)
    write_config(
        service,
        f"socket_path: {service.socket}\nsocket_group: {group.name}\nsocket_mode: '660'\n",
    )
    log = service.state / "gbatchd.log"
    require_docker()  # the service user reaches the engine through the docker group
    docker_gid = grp.getgrnam("docker").gr_gid
    daemon = start_daemon(service, svc, [group.gid, docker_gid], log)
    try:
        wait_for(lambda: daemon.poll() is not None or answers(service.socket), 30, "gbatchd")
        assert daemon.poll() is None, log.read_text()
        assert "gbatchd is not root: it runs bare jobs of its own user only" in log.read_text()

        st = service.socket.lstat()
        assert stat.S_ISSOCK(st.st_mode)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (svc.uid, group.gid, 0o660)
        # Commands run with GBATCH_HOME (the admin's `gbatch daemon stop`) find it too.
        assert os.readlink(service.state / "gbatchd.sock") == str(service.socket)

        preload()
        sock = service.socket

        # A daemon that is not root cannot start a process as alice: her bare job is
        # refused in one line, and nothing is queued. A container job runs as her
        # (docker --user); queued held, as this test is about the front door.
        def submit_and_list() -> dict[str, Any]:
            bare = cli(sock, "sbatch", "--parsable", "--wrap", "echo from-alice")
            submitted = cli(
                sock, "sbatch", "--parsable", "-H", "--image", TEST_IMAGE, "--wrap", "id -u"
            )
            return {
                "bare": bare,
                "sbatch": submitted,
                "squeue": cli(sock, "squeue", "-h", "-o", "%i %u %t"),
            }

        done = as_user(alice, submit_and_list)
        assert done["bare"]["rc"] == 2 and done["bare"]["out"] == ""
        assert done["bare"]["err"].startswith(
            "gbatch sbatch: error: image: this daemon does not run as root, so it cannot "
            "start a process as you"
        )
        assert done["sbatch"]["rc"] == 0, done["sbatch"]["err"]
        job_id = int(done["sbatch"]["out"])
        assert done["squeue"] == {"rc": 0, "out": f"{job_id} {alice.name} PD\n", "err": ""}
        root_env = {**service.env, "GBATCH_SOCKET": str(sock)}
        shown = subprocess.run(
            [sys.executable, "-m", "gbatch", "scontrol", "show", "job", str(job_id), "--json"],
            env=root_env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(shown.stdout)["uid"] == alice.uid

        # bob is not in the group: one line that says what to do, and nothing queued.
        refused = as_user(
            bob,
            lambda: [cli(sock, "squeue"), cli(sock, "sbatch", "--wrap", "echo from-bob")],
        )
        for outcome, command in zip(refused, ("squeue", "sbatch"), strict=True):
            assert outcome["rc"] == 4 and outcome["out"] == ""
            assert outcome["err"] == (
                f"gbatch {command}: error: permission denied on {sock}: "
                f"ask an admin to add you to group {group.name}\n"
            )
        with Client(sock) as client:
            found = client.call(requests.ListJobs(history=True))["jobs"]
        queued = [(j["id"], j["user"]) for j in found]
        assert queued == [(job_id, alice.name)]

        # The store, the daemon's log, the config and the keys are the service user's alone.
        key = service.state / "ssh" / "id_ed25519"
        key.parent.mkdir(mode=0o700)
        key.write_text("not a real key\n")
        for path in (key.parent, key):
            os.chown(path, svc.uid, svc.gid)
        key.chmod(0o600)
        secret = [
            service.state / "gbatch.db",
            service.state / "config.yaml",
            log,
            key,
        ]

        def try_to_read() -> list[str]:
            outcomes = []
            for path in secret:
                try:
                    path.read_bytes()
                    outcomes.append(f"read {path}")
                except PermissionError:
                    outcomes.append("denied")
            return outcomes

        assert as_user(alice, try_to_read) == ["denied"] * len(secret)
        assert as_user(bob, try_to_read) == ["denied"] * len(secret)
        for path in [service.state, *secret, *service.state.rglob("*")]:
            mode = path.lstat().st_mode
            if path != service.state / "gbatchd.sock" and not stat.S_ISSOCK(mode):
                assert mode & 0o077 == 0, f"{path} is {stat.S_IMODE(mode):o}"
                assert path.lstat().st_uid == svc.uid, path

        # `gbatch daemon stop` with GBATCH_HOME, as the admin would: it finds the daemon
        # through the link in the home. (The daemon is our child: reap it meanwhile, or
        # `stop` would wait on a zombie.)
        stopper = subprocess.Popen(
            [sys.executable, "-m", "gbatch", "daemon", "stop"],
            env=service.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        daemon.wait(timeout=20)
        out, err = stopper.communicate(timeout=60)
        assert stopper.returncode == 0 and out.startswith("gbatchd stopped"), err
        assert not service.socket.exists()
        assert not (service.state / "gbatchd.sock").is_symlink()
    finally:
        stop(daemon)


def test_a_socket_group_the_daemon_cannot_use_stops_it_at_start(service: Service) -> None:
    svc, group = service.users["svc"], service.users["users"]
    require_interpreter_for(svc)
    log = service.state / "gbatchd.log"
    cases = [
        # The group does not exist.
        (
            "socket_group: gbto-no-such-group\n",
            [group.gid],
            "socket_group: 'gbto-no-such-group' is not an existing Unix group",
        ),
        # It exists, but the service user is not in it (SupplementaryGroups= missing).
        (
            f"socket_group: {group.name}\nsocket_mode: '660'\n",
            [],
            f"which is not in group {group.name} and so cannot hand the socket to it",
        ),
        # socket_mode gives the group no access.
        (
            f"socket_group: {group.name}\n",
            [group.gid],
            f"socket_mode 600 gives group {group.name} no access. Set socket_mode: '660'",
        ),
    ]
    for extra, groups, message in cases:
        write_config(service, f"socket_path: {service.socket}\n{extra}")
        log.unlink(missing_ok=True)
        daemon = start_daemon(service, svc, groups, log)
        try:
            assert daemon.wait(timeout=30) == 2
        finally:
            stop(daemon)
        lines = log.read_text().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gbatch daemon: error: "), lines
        assert message in lines[0]
        assert not service.socket.exists()


def test_no_one_gets_a_token_for_the_service_user_the_daemon_runs_as(service: Service) -> None:
    """Issue 29: an admin-group member minted `gbatch token --user gbatch` and ran code
    as the daemon's user (its SSH key, store and token keys). Listing that user as a
    service account stops the daemon at start; unlisted, an admin is refused, audited."""
    svc, alice, group = service.users["svc"], service.users["alice"], service.users["users"]
    require_interpreter_for(svc)
    log = service.state / "gbatchd.log"
    config = (
        f"socket_path: {service.socket}\nsocket_group: {group.name}\nsocket_mode: '660'\n"
        f"admin_group: {group.name}\n"  # alice is an admin
    )
    write_config(service, config + f"service_accounts: [{svc.name}]\n")
    daemon = start_daemon(service, svc, [group.gid], log)
    try:
        assert daemon.wait(timeout=30) == 2
    finally:
        stop(daemon)
    (line,) = log.read_text().strip().splitlines()
    assert "config.yaml: service_accounts: " in line
    assert f"({svc.name}: it is gbatchd's own account: " in line

    write_config(service, config)
    log.unlink()
    daemon = start_daemon(service, svc, [group.gid], log)
    try:
        wait_for(lambda: daemon.poll() is not None or answers(service.socket), 30, "gbatchd")
        preload()
        sock = service.socket
        out = as_user(alice, lambda: cli(sock, "token", "--user", svc.name))
        assert out["rc"] == 4 and out["out"] == "", out
        assert out["err"].startswith(
            f"gbatch token: error: --user {svc.name}: no tokens for {svc.name}: it is "
            "gbatchd's own account: its jobs could read the fleet's SSH key, the store and "
            "the token keys. "
        )
        audited = [line for line in log.read_text().splitlines() if "op=token " in line]
        assert len(audited) == 1 and f"user={alice.name} uid={alice.uid} " in audited[0]
        assert f"target=user_{svc.name} -> refused: it is gbatchd's own account" in audited[0]
    finally:
        stop(daemon)
