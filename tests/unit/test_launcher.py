"""nodes/docker.ContainerLauncher, the launch route of both node kinds, over a recording
DockerHost (the real hosts are covered end to end in tests/integration), and LocalHost
against real child processes and files."""

from __future__ import annotations

import json
import pwd
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.nodes.base import CommandResult, HostError, LaunchError
from gbatch.nodes.docker import ContainerLauncher, LocalHost
from gbatch.nodes.local import LocalNode
from gbatch.nodes.resolve import RESOLVER_SOURCE
from gbatch.site.config import Config, Paths
from gbatch.site.policy import ContainerPolicy, MountRoot

ENV_FILE = "/agent/run/7.2.env"
NOBODY = pwd.getpwnam("nobody")


class RecordingHost:
    """A DockerHost that records each call in order and answers as told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.files: dict[str, tuple[bytes, int]] = {}
        self.run_answer: CommandResult | HostError = CommandResult(0, b"abc123\n", b"")
        self.put_error: HostError | None = None
        self.realpath: dict[str, str] = {}  # what the resolver answers; else the path
        self.closed: set[str] = set()  # paths the submitter cannot follow

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        if RESOLVER_SOURCE in argv:
            paths = argv[argv.index("--") + 1 :]
            self.calls.append(("resolve", *argv[argv.index(RESOLVER_SOURCE) + 1 :]))
            answers = [
                {"error": "Permission denied"}
                if p in self.closed
                else {"path": self.realpath.get(p, p)}
                for p in paths
            ]
            return CommandResult(0, "".join(json.dumps(a) + "\n" for a in answers).encode(), b"")
        self.calls.append(tuple(argv))
        if argv[0] == "rm":
            self.files.pop(argv[-1], None)
            return CommandResult(0, b"", b"")
        if isinstance(self.run_answer, HostError):
            raise self.run_answer
        return self.run_answer

    def put_bytes(self, data: bytes, remote_path: str, mode: int, *, timeout: float = 60.0) -> None:
        self.calls.append(("put", remote_path))
        if self.put_error is not None:
            raise self.put_error
        self.files[remote_path] = (data, mode)


def job(**spec: object) -> Job:
    secrets = spec.pop("secret_values", ())
    return Job(
        id=7,
        uid=NOBODY.pw_uid,  # a uid this machine's passwd has: the submitter's identity
        user="alice",
        spec=JobSpec(name="train", command=("python", "t.py"), image="img", **spec),  # type: ignore[arg-type]
        state=JobState.CONFIGURING,
        submit_time=0.0,
        secret_values=secrets,  # type: ignore[arg-type]
    )


def launcher(tmp_path: Path, host: RecordingHost, **kw: object) -> ContainerLauncher:
    return ContainerLauncher(
        host=host,
        node="gpu01",
        docker="docker",
        policy=kw.pop("policy", ContainerPolicy()),  # type: ignore[arg-type]
        paths=Paths(tmp_path),
        where=" on gpu01",
        label_node=True,
        **kw,  # type: ignore[arg-type]
    )


def test_a_launch_writes_the_env_file_then_runs_docker_and_marks_the_log(tmp_path: Path) -> None:
    host = RecordingHost()
    launcher(tmp_path, host).launch(job(env=(("LR", "0.1"),)), 2, [0, 1], ENV_FILE)

    put, run = host.calls
    assert put == ("put", ENV_FILE)
    assert run[:2] == ("docker", "run") and "--env-file" in run and ENV_FILE in run
    assert "gbatch.node=gpu01" in run and "device=0,1" in " ".join(run)
    data, mode = host.files[ENV_FILE]
    assert mode == 0o600
    assert b"LR=0.1\n" in data and b"GBATCH_NODE=gpu01\n" in data and b"GBATCH_ATTEMPT=2\n" in data
    # Where the attempt's output starts in the job's log, for a replay.
    assert (Paths(tmp_path).run_dir(7, 2) / "log_offset").read_text() == "0"


def test_secrets_leave_the_host_as_soon_as_docker_has_returned(tmp_path: Path) -> None:
    host = RecordingHost()
    secret = job(secret_env=("TOKEN",), secret_values=(("TOKEN", "s3cret"),))
    launcher(tmp_path, host).launch(secret, 2, [0], ENV_FILE)
    assert host.calls[-1] == ("rm", "-f", "--", ENV_FILE)
    assert ENV_FILE not in host.files

    host = RecordingHost()
    launcher(tmp_path, host).launch(job(), 2, [0], ENV_FILE)  # no secret: cleanup removes it
    assert ("rm", "-f", "--", ENV_FILE) not in host.calls

    host = RecordingHost()
    host.run_answer = HostError("connection lost")
    with pytest.raises(LaunchError):
        launcher(tmp_path, host).launch(secret, 2, [0], ENV_FILE)
    assert ENV_FILE not in host.files  # removed even when docker's answer was lost


def test_a_secret_the_store_cannot_give_fails_the_launch_before_anything_runs(
    tmp_path: Path,
) -> None:
    host = RecordingHost()
    with pytest.raises(LaunchError, match="secret env \\(TOKEN\\)"):
        launcher(tmp_path, host).launch(job(secret_env=("TOKEN",)), 2, [0], ENV_FILE)
    assert host.calls == []


def test_a_policy_refusal_leaves_nothing_behind(tmp_path: Path) -> None:
    host = RecordingHost()
    with pytest.raises(LaunchError, match=r"refused by the container policy on gpu01: .*mount"):
        launcher(tmp_path, host).launch(job(mounts=("/etc:/x",)), 2, [0], ENV_FILE)
    assert [call[0] for call in host.calls] == ["resolve"]  # asked, nothing written or run
    assert not Paths(tmp_path).run_dir(7, 2).exists()


def test_mounts_are_checked_again_as_the_host_resolves_them(tmp_path: Path) -> None:
    policy = ContainerPolicy(mount_roots=(MountRoot("/data/{user}", writable=True),))
    host = RecordingHost()
    launcher(tmp_path, host, policy=policy).launch(
        job(mounts=("/data/alice/run:/out",)), 2, [0], ENV_FILE
    )
    # Resolved as the submitter: their uid, gid and groups.
    as_submitter = ("--as", str(NOBODY.pw_uid), str(NOBODY.pw_gid))
    assert host.calls[0][:4] == ("resolve", *as_submitter)
    assert host.calls[0][5:] == ("--", "/data/alice/run", "/data/alice")
    run = host.calls[-1]
    assert "type=bind,source=/data/alice/run,target=/out" in run
    assert run[run.index("--user") + 1] == f"{NOBODY.pw_uid}:{NOBODY.pw_gid}"

    host = RecordingHost()
    host.realpath = {"/data/alice/run": "/etc"}  # made a symlink after submit
    with pytest.raises(LaunchError, match="symlink to /etc"):
        launcher(tmp_path, host, policy=policy).launch(
            job(mounts=("/data/alice/run:/out",)), 2, [0], ENV_FILE
        )
    assert [c[0] for c in host.calls] == ["resolve"]

    host = RecordingHost()
    host.closed = {"/data/alice/run"}  # a directory on the way is closed to the submitter
    with pytest.raises(LaunchError, match="cannot be followed as alice \\(Permission denied\\)"):
        launcher(tmp_path, host, policy=policy).launch(
            job(mounts=("/data/alice/run:/out",)), 2, [0], ENV_FILE
        )
    assert [c[0] for c in host.calls] == ["resolve"]


def test_containers_run_as_their_submitter_unless_root_in_containers_says(tmp_path: Path) -> None:
    host = RecordingHost()
    launcher(tmp_path, host).launch(job(), 2, [0], ENV_FILE)
    assert "--user" in host.calls[-1]
    keep = ContainerPolicy(
        mount_roots=(MountRoot("/datasets"),), root_images=("img",), root_nodes=()
    )
    host = RecordingHost()
    launcher(tmp_path, host, policy=keep).launch(job(), 2, [0], ENV_FILE)
    assert "--user" not in host.calls[-1]  # the image's own user
    host = RecordingHost()
    launcher(tmp_path, host, policy=keep).launch(job(mounts=("/datasets:/d",)), 2, [0], ENV_FILE)
    assert "--user" in host.calls[-1]  # never with a host path mounted
    host = RecordingHost()
    on_node = ContainerPolicy(root_nodes=("gpu01",))
    launcher(tmp_path, host, policy=on_node).launch(job(), 2, [0], ENV_FILE)
    assert "--user" not in host.calls[-1]


def test_a_lost_answer_may_have_started_the_run_and_a_refusal_did_not(tmp_path: Path) -> None:
    host = RecordingHost()
    host.run_answer = HostError("the connection dropped")
    with pytest.raises(LaunchError) as lost:
        launcher(tmp_path, host).launch(job(), 2, [0], ENV_FILE)
    assert lost.value.maybe_started
    assert str(lost.value) == "docker run on gpu01 failed: the connection dropped"

    host.run_answer = HostError("cannot run docker: not found", answer_lost=False)
    with pytest.raises(LaunchError) as never:
        launcher(tmp_path, host).launch(job(), 2, [0], ENV_FILE)
    assert not never.value.maybe_started

    host.run_answer = CommandResult(
        125, b"", b"docker: Error response from daemon: Conflict.\nRun 'docker run --help'\n"
    )
    with pytest.raises(LaunchError) as refused:
        launcher(tmp_path, host).launch(job(), 2, [0], ENV_FILE)
    assert not refused.value.maybe_started
    assert str(refused.value) == (
        "docker run on gpu01 failed: docker: Error response from daemon: Conflict."
    )


def test_a_host_too_busy_to_take_a_command_started_nothing_and_says_so(tmp_path: Path) -> None:
    host = RecordingHost()
    host.run_answer = HostError("sshd refused a channel", busy=True)
    with pytest.raises(LaunchError) as busy:
        launcher(tmp_path, host).launch(job(), 2, [0], ENV_FILE)
    assert busy.value.node_busy and not busy.value.maybe_started
    host = RecordingHost()
    host.put_error = HostError("not connected", busy=True)
    with pytest.raises(LaunchError) as unwritten:
        launcher(tmp_path, host).launch(job(), 2, [0], ENV_FILE)
    assert unwritten.value.node_busy and not unwritten.value.maybe_started
    assert not any(call[0] == "docker" for call in host.calls)


@pytest.mark.parametrize(
    "stderr",
    [
        # No registry reachable (an offline host): docker's last line names the registry.
        "Unable to find image 'img:1' locally\n"
        'docker: Error response from daemon: Get "https://registry-1.docker.io/v2/": '
        "dial tcp: lookup registry-1.docker.io: no such host.\n"
        "See 'docker run --help'.\n",
        # A registry that has no such image.
        "Unable to find image 'img:1' locally\n"
        "docker: Error response from daemon: pull access denied for img, repository does "
        "not exist or may require 'docker login': denied: requested access to the "
        "resource is denied.\nRun 'docker run --help' for more information\n",
        # Told not to pull.
        "docker: Error response from daemon: No such image: img:1.\n",
    ],
)
def test_an_image_docker_cannot_find_or_pull_is_named_in_the_launch_error(
    tmp_path: Path, stderr: str
) -> None:
    host = RecordingHost()
    host.run_answer = CommandResult(125, b"", stderr.encode())
    with pytest.raises(LaunchError) as missing:
        launcher(tmp_path, host).launch(job(), 2, [0], ENV_FILE)
    assert str(missing.value).startswith("image img:1 not found on gpu01 and it cannot be pulled (")
    assert "docker: Error response from daemon: " in str(missing.value)  # docker's own words
    assert "--help" not in str(missing.value)


def test_a_pulled_image_whose_container_failed_is_not_called_missing(tmp_path: Path) -> None:
    host = RecordingHost()
    host.run_answer = CommandResult(
        125,
        b"",
        b"Unable to find image 'img:1' locally\n1: Pulling from library/img\n"
        b"Status: Downloaded newer image for img:1\n"
        b"docker: Error response from daemon: Conflict.\n",
    )
    with pytest.raises(LaunchError) as refused:
        launcher(tmp_path, host).launch(job(), 2, [0], ENV_FILE)
    assert str(refused.value) == (
        "docker run on gpu01 failed: docker: Error response from daemon: Conflict."
    )


def test_a_failed_env_file_write_on_a_full_disk_says_so(tmp_path: Path) -> None:
    host = RecordingHost()
    host.put_error = HostError("Failure")
    with pytest.raises(LaunchError) as full:
        launcher(tmp_path, host).launch(job(), 2, [0], ENV_FILE, disk_free_bytes=4096)
    assert str(full.value) == (
        "cannot write its env-file on gpu01: Failure; the disk of /agent/run is full: "
        "No space left on device (4096 bytes free)"
    )
    assert not full.value.maybe_started
    with pytest.raises(LaunchError, match=r"env-file on gpu01: Failure$"):
        launcher(tmp_path, host).launch(job(), 2, [0], ENV_FILE, disk_free_bytes=10 << 30)
    assert not any(call[0] == "docker" for call in host.calls)


def test_local_host_runs_commands_and_writes_private_files(tmp_path: Path) -> None:
    host = LocalHost()
    done = host.run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=30)
    assert done == CommandResult(3, b"out\n", b"err\n")
    with pytest.raises(HostError) as missing:
        host.run([str(tmp_path / "no-such-docker"), "version"], timeout=30)
    assert not missing.value.answer_lost
    with pytest.raises(HostError) as slow:
        host.run(["sleep", "5"], timeout=0.1)
    assert slow.value.answer_lost

    target = tmp_path / "env"
    host.put_bytes(b"A=1\n", str(target), 0o600)
    assert target.read_bytes() == b"A=1\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env"]
    with pytest.raises(HostError, match="cannot write"):
        host.put_bytes(b"x", str(tmp_path / "no-dir" / "env"), 0o600)


def test_the_local_node_says_when_the_docker_cli_is_missing(tmp_path: Path) -> None:
    node = LocalNode(Paths(tmp_path), Config(docker=str(tmp_path / "docker")), lambda: None)
    assert node.docker_problem(now=100.0) == f"the docker CLI ({tmp_path}/docker) is not installed"


def test_a_container_step_is_docker_exec_as_the_jobs_user_with_its_env_in_a_file() -> None:
    from gbatch.nodes.docker import docker_exec_argv
    from gbatch.site.policy import RunAs

    argv = docker_exec_argv(
        "gbatch-7-2",
        ["bash", "-l"],
        tty=True,
        run_as=RunAs(uid=1000, gid=1000, groups=(27,)),
        env_file="/run/7.2/step.0/env",
        workdir="/work",
    )
    assert argv == [
        "docker", "exec", "-i", "-t", "--user", "1000:1000", "-w", "/work",
        "--env-file", "/run/7.2/step.0/env", "gbatch-7-2", "bash", "-l",
    ]  # fmt: skip
    pipes = docker_exec_argv("gbatch-7-2", ["nvidia-smi"], tty=False, run_as=None, env_file=None)
    assert pipes == ["docker", "exec", "-i", "gbatch-7-2", "nvidia-smi"]
    with pytest.raises(ValueError):
        docker_exec_argv("gbatch-7-2", [], tty=False, run_as=None, env_file=None)
