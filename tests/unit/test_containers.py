"""gbatch.nodes.docker: argv shapes and parsers, no docker needed."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime

import pytest

from gbatch.core.model import JobSpec
from gbatch.nodes.docker import (
    ContainerStatus,
    container_name,
    docker_inspect_argv,
    docker_kill_argv,
    docker_logs_argv,
    docker_rm_argv,
    docker_run_argv,
    docker_wait_argv,
    engine_check_argv,
    env_file_text,
    gpus_option_value,
    parse_docker_time,
    parse_inspect,
    parse_wait,
)
from gbatch.site.policy import DEFAULT_CAPABILITIES, ContainerPolicy, MountRoot, RunAs

SPEC = JobSpec(name="train", command=("python", "train.py", "--lr", "0.1"), image="pytorch:2")


def _run_argv(spec: JobSpec = SPEC, gpus: list[int] | None = None, **kw: object) -> list[str]:
    return docker_run_argv(
        job_id=42,
        attempt=3,
        user="alice",
        spec=spec,
        gpus=[0, 1] if gpus is None else gpus,
        env_file=kw.pop("env_file", None),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def _option_values(argv: list[str], option: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == option]


def test_container_name_is_job_and_attempt() -> None:
    assert container_name(42, 3) == "gbatch-42-3"


def test_run_is_detached_named_and_labelled() -> None:
    argv = _run_argv()
    assert argv[:3] == ["docker", "run", "-d"]
    assert _option_values(argv, "--name") == ["gbatch-42-3"]
    assert _option_values(argv, "--label") == [
        "gbatch.job=42",
        "gbatch.attempt=3",
        "gbatch.user=alice",
    ]


def test_run_never_restarts_and_always_has_an_init() -> None:
    argv = _run_argv()
    assert "--restart=no" in argv
    assert "--init" in argv


ROOTS = ContainerPolicy(mount_roots=(MountRoot("/d"), MountRoot("/scratch/{user}", True)))


def test_run_never_grants_privilege_or_host_namespaces() -> None:
    spec = JobSpec(name="t", command=("true",), image="x", mounts=("/d:/d",))
    argv = _run_argv(spec=spec, policy=ROOTS)
    joined = " ".join(argv)
    assert "--privileged" not in joined
    assert "userns" not in joined
    assert "docker.sock" not in joined
    assert _option_values(argv, "--security-opt") == ["no-new-privileges"]


def test_every_capability_is_dropped_and_only_the_allowlist_added_back() -> None:
    argv = _run_argv()
    assert _option_values(argv, "--cap-drop") == ["ALL"]
    assert _option_values(argv, "--cap-add") == list(DEFAULT_CAPABILITIES)
    assert "NET_RAW" not in argv
    argv = _run_argv(policy=ContainerPolicy(capabilities=()))
    assert _option_values(argv, "--cap-drop") == ["ALL"] and "--cap-add" not in argv


def test_network_comes_from_the_policy_and_defaults_to_bridge() -> None:
    assert _option_values(_run_argv(), "--network") == ["bridge"]
    assert _option_values(_run_argv(policy=ContainerPolicy(network="none")), "--network") == [
        "none"
    ]


def test_a_job_gets_the_network_it_picked_among_those_offered_and_no_other() -> None:
    offered = ContainerPolicy(networks=("none", "host"))
    picked = JobSpec(name="t", command=("true",), image="busybox", network="none")
    assert _option_values(_run_argv(picked, policy=offered), "--network") == ["none"]
    # Picked under a policy that offered it, started under one that no longer does.
    with pytest.raises(ValueError, match="job 42: network none is not among bridge"):
        _run_argv(picked, policy=ContainerPolicy())
    host = JobSpec(name="t", command=("true",), image="busybox", network="host")
    assert _option_values(_run_argv(host, policy=offered), "--network") == ["host"]


def test_run_as_gives_numeric_user_and_groups() -> None:
    assert "--user" not in _run_argv()
    argv = _run_argv(run_as=RunAs(1001, 1002, (27, 44)))
    assert _option_values(argv, "--user") == ["1001:1002"]
    assert _option_values(argv, "--group-add") == ["27", "44"]


@pytest.mark.parametrize(
    "options",
    [
        ["--privileged"],
        ["--userns=host"],
        ["--userns", "host"],
        ["--network", "host"],
        ["--net=container:other"],
        ["--cap-add", "SYS_ADMIN"],
        ["--cap-add=NET_ADMIN"],
        ["-v", "/var/run/docker.sock:/var/run/docker.sock"],
    ],
)
def test_options_that_break_an_invariant_are_refused_whoever_adds_them(
    options: list[str],
) -> None:
    with pytest.raises(ValueError, match="may not"):
        _run_argv(extra_options=options)


def test_node_options_go_right_after_run() -> None:
    argv = _run_argv(extra_options=["--memory", "8g"])
    assert argv[:5] == ["docker", "run", "--memory", "8g", "-d"]


def test_host_network_in_node_options_passes_only_under_a_host_policy() -> None:
    argv = _run_argv(policy=ContainerPolicy(network="host"), extra_options=["--network=host"])
    assert _option_values(argv, "--network") == ["host"]


def test_image_and_command_come_last_in_order() -> None:
    argv = _run_argv()
    assert argv[-5:] == ["pytorch:2", "python", "train.py", "--lr", "0.1"]


def test_several_gpus_are_one_csv_quoted_argv_element() -> None:
    assert _option_values(_run_argv(gpus=[0, 1]), "--gpus") == ['"device=0,1"']


def test_one_gpu_is_quoted_the_same_way() -> None:
    assert _option_values(_run_argv(gpus=[5]), "--gpus") == ['"device=5"']


def test_gpus_quotes_survive_shlex_join_for_the_remote_shell() -> None:
    argv = _run_argv(gpus=[2, 3])
    assert shlex.split(shlex.join(argv)) == argv


def test_no_gpus_means_no_gpus_option_at_all() -> None:
    argv = _run_argv(gpus=[])
    assert not any(a.startswith("--gpus") for a in argv)
    assert not any("device=" in a for a in argv)


def test_negative_gpu_index_is_refused() -> None:
    with pytest.raises(ValueError):
        gpus_option_value([-1])


def test_optional_settings_appear_only_when_set() -> None:
    bare = _run_argv()
    for option in ("--shm-size", "-v", "--mount", "-w", "--env-file", "--user", "--group-add"):
        assert option not in bare


def test_shm_mounts_workdir_and_env_file_are_passed() -> None:
    spec = JobSpec(
        name="t",
        command=("true",),
        image="img",
        mounts=("/d/sets:/data:ro", "/scratch/alice:/out", "/d:/d2"),
        workdir="/out",
        shm_size="8g",
    )
    argv = _run_argv(spec=spec, env_file="/var/lib/gbatch/env/42-3", policy=ROOTS)
    assert _option_values(argv, "--shm-size") == ["8g"]
    assert _option_values(argv, "--mount") == [
        "type=bind,source=/d/sets,target=/data,readonly",
        "type=bind,source=/scratch/alice,target=/out",
        "type=bind,source=/d,target=/d2,readonly",  # no mode on a read-only root: ro
    ]
    assert _option_values(argv, "-w") == ["/out"]
    assert _option_values(argv, "--env-file") == ["/var/lib/gbatch/env/42-3"]


def test_options_all_precede_the_image() -> None:
    spec = JobSpec(name="t", command=("true",), image="img", mounts=("/d/a:/a",), workdir="/a")
    argv = _run_argv(spec=spec, env_file="/e", policy=ROOTS, run_as=RunAs(5, 5))
    image_at = argv.index("img")
    options = ("--env-file", "--mount", "-w", "--gpus", "--init", "--user", "--cap-drop")
    assert all(argv.index(o) < image_at for o in options)


@pytest.mark.parametrize(
    "mount",
    [
        "/var/run/docker.sock:/s",
        "/run/docker.sock:/s:ro",
        "/var/run/:/h",
        "/:/host",
        "/d/docker.sock:/s",
    ],
)
def test_mount_exposing_the_docker_socket_is_refused(mount: str) -> None:
    spec = JobSpec(name="t", command=("true",), image="img", mounts=(mount,))
    everything = ContainerPolicy(mount_roots=(MountRoot("/var", True), MountRoot("/d", True)))
    with pytest.raises(ValueError, match="docker socket"):
        _run_argv(spec=spec, policy=everything)


@pytest.mark.parametrize(
    ("mount", "why"),
    [
        ("/d:/d", "allows no mounts"),  # the default policy
        ("/etc:/etc", "not under an allowed mount root"),
    ],
)
def test_the_last_guard_refuses_mounts_outside_the_roots(mount: str, why: str) -> None:
    spec = JobSpec(name="t", command=("true",), image="img", mounts=(mount,))
    policy = ContainerPolicy() if why == "allows no mounts" else ROOTS
    with pytest.raises(ValueError, match=why):
        _run_argv(spec=spec, policy=policy)


def test_the_last_guard_refuses_rw_on_a_read_only_root_and_other_users_roots() -> None:
    rw = JobSpec(name="t", command=("true",), image="img", mounts=("/d/x:/x:rw",))
    with pytest.raises(ValueError, match="read-only"):
        _run_argv(spec=rw, policy=ROOTS)
    theirs = JobSpec(name="t", command=("true",), image="img", mounts=("/scratch/bob:/x",))
    with pytest.raises(ValueError, match="not under"):
        _run_argv(spec=theirs, policy=ROOTS)  # user is alice


def test_job_without_image_is_refused() -> None:
    with pytest.raises(ValueError, match="no image"):
        _run_argv(spec=JobSpec(name="t", command=("true",)))


def test_image_that_looks_like_an_option_is_refused() -> None:
    with pytest.raises(ValueError):
        _run_argv(spec=JobSpec(name="t", command=("true",), image="--privileged"))


def test_another_docker_binary_can_be_named() -> None:
    assert _run_argv(docker="/usr/bin/docker")[0] == "/usr/bin/docker"


def test_small_commands_have_their_documented_shape() -> None:
    assert docker_wait_argv("c") == ["docker", "wait", "c"]
    assert docker_kill_argv("c", "KILL") == ["docker", "kill", "--signal", "KILL", "c"]
    assert docker_rm_argv("c") == ["docker", "rm", "-f", "c"]
    assert docker_logs_argv("c", follow=True) == ["docker", "logs", "--follow", "c"]
    assert docker_logs_argv("c", follow=False) == ["docker", "logs", "c"]
    assert engine_check_argv() == ["docker", "version", "--format", "{{.Server.Version}}"]


@pytest.mark.parametrize("signal", ["TERM", "SIGKILL", "9", "RTMIN+3"])
def test_kill_accepts_signal_names_and_numbers(signal: str) -> None:
    assert docker_kill_argv("c", signal)[3] == signal


@pytest.mark.parametrize("signal", ["", "-9", "TERM; rm -rf /", "term"])
def test_kill_refuses_anything_else(signal: str) -> None:
    with pytest.raises(ValueError):
        docker_kill_argv("c", signal)


def test_inspect_names_containers_only_and_needs_a_name() -> None:
    argv = docker_inspect_argv(["a", "b"])
    assert argv[:4] == ["docker", "inspect", "--type", "container"]
    assert argv[-2:] == ["a", "b"]
    with pytest.raises(ValueError):
        docker_inspect_argv([])


# Captured from docker 20.10.24 running docker_inspect_argv's command: an exited job
# (exit 3), a running one, one created but never started.
INSPECT_SAMPLE = """\
{"name":"/gbatch-7-1","state":"exited","exit_code":3,"oom_killed":false,"started_at":"2026-12-02T11:10:39.58425485Z","finished_at":"2026-12-02T11:10:39.586299772Z","error":"","labels":{"gbatch.attempt":"1","gbatch.job":"7","gbatch.user":"alice"}}
{"name":"/gbatch-8-2","state":"running","exit_code":0,"oom_killed":false,"started_at":"2026-12-02T11:10:39.953930882Z","finished_at":"0001-01-01T00:00:00Z","error":"","labels":{"gbatch.attempt":"2","gbatch.job":"8","gbatch.user":"bob"}}
{"name":"/gbatch-9-1","state":"created","exit_code":0,"oom_killed":false,"started_at":"0001-01-01T00:00:00Z","finished_at":"0001-01-01T00:00:00Z","error":"","labels":{"gbatch.attempt":"1","gbatch.job":"9","gbatch.user":"carol"}}

"""


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_parse_inspect_reads_an_exited_container() -> None:
    exited = parse_inspect(INSPECT_SAMPLE)[0]
    assert exited == ContainerStatus(
        name="gbatch-7-1",
        state="exited",
        exit_code=3,
        oom_killed=False,
        started_at=pytest.approx(_epoch("2026-12-02T11:10:39.584254")),  # type: ignore[arg-type]
        finished_at=pytest.approx(_epoch("2026-12-02T11:10:39.586299")),  # type: ignore[arg-type]
        labels={"gbatch.attempt": "1", "gbatch.job": "7", "gbatch.user": "alice"},
    )


def test_parse_inspect_gives_none_for_times_docker_has_not_recorded() -> None:
    _, running, created = parse_inspect(INSPECT_SAMPLE)
    assert (running.state, running.finished_at) == ("running", None)
    assert running.started_at is not None
    assert (created.state, created.started_at, created.finished_at) == ("created", None, None)


def test_parse_inspect_reads_oom_kill_error_and_missing_labels() -> None:
    line = (
        '{"name":"/x","state":"exited","exit_code":137,"oom_killed":true,'
        '"started_at":"","finished_at":"","error":"boom","labels":null}'
    )
    (status,) = parse_inspect(line)
    assert (status.oom_killed, status.exit_code, status.error) == (True, 137, "boom")
    assert status.labels == {}


def test_parse_inspect_of_no_output_is_empty() -> None:
    assert parse_inspect("") == []


def test_parse_wait_reads_the_exit_code() -> None:
    assert parse_wait("3\n") == 3
    with pytest.raises(ValueError):
        parse_wait("Error: No such container: x")


def test_docker_time_keeps_nanoseconds_and_honours_offsets() -> None:
    assert parse_docker_time("1970-01-01T00:00:01.5Z") == 1.5
    assert parse_docker_time("1970-01-01T02:00:01.000000001+02:00") == pytest.approx(1.0)
    assert parse_docker_time("0001-01-01T00:00:00Z") is None
    with pytest.raises(ValueError):
        parse_docker_time("yesterday")


def test_env_file_has_one_literal_line_per_variable() -> None:
    text = env_file_text({"A": "1", "B": " spaced 'quoted' $X #x ", "EMPTY": ""})
    assert text == "A=1\nB= spaced 'quoted' $X #x \nEMPTY=\n"


def test_env_file_of_nothing_is_empty() -> None:
    assert env_file_text({}) == ""


@pytest.mark.parametrize("value", ["two\nlines", "cr\rhere", "trailing\n"])
def test_env_file_refuses_values_with_line_breaks(value: str) -> None:
    with pytest.raises(ValueError, match="line break"):
        env_file_text({"K": value})


@pytest.mark.parametrize("name", ["", "#K", "A=B", "HAS SPACE", "1ST"])
def test_env_file_refuses_names_docker_would_misread(name: str) -> None:
    with pytest.raises(ValueError, match="not valid"):
        env_file_text({name: "v"})


@pytest.mark.parametrize("name", ["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "NVIDIA_X"])
def test_env_file_refuses_names_reserved_for_gpu_assignment(name: str) -> None:
    with pytest.raises(ValueError, match="allocation"):
        env_file_text({name: "0"})


def test_env_file_refuses_nul_in_values() -> None:
    with pytest.raises(ValueError, match="NUL"):
        env_file_text({"K": "a\0b"})


def test_error_line_skips_the_clis_help_hint() -> None:
    from gbatch.nodes.docker import error_line

    stderr = (
        "docker: Error response from daemon: No such image: nope:latest.\n"
        "See 'docker run --help'.\n"
    )
    assert (
        error_line(stderr, "x") == "docker: Error response from daemon: No such image: nope:latest."
    )
    assert error_line("Run 'docker run --help' for more information\n", "exit 125") == "exit 125"


def test_srun_is_mounted_read_only_where_every_images_path_finds_it() -> None:
    argv = _run_argv(srun="/opt/gbatch/containerbin/srun")
    assert _option_values(argv, "--mount") == [
        "type=bind,source=/opt/gbatch/containerbin/srun,target=/usr/local/bin/srun,readonly",
        "type=bind,source=/opt/gbatch/containerbin/srun,target=/usr/bin/srun,readonly",
    ]
    # The image's own PATH is kept: nothing sets one.
    assert not any(a.startswith("PATH=") for a in argv)
    assert argv.index("--mount") < argv.index(SPEC.image)


def test_a_jobs_own_mount_at_srun_wins_and_a_relative_srun_is_refused() -> None:
    spec = JobSpec(
        name="t", command=("true",), image="img", mounts=("/d/srun:/usr/local/bin/srun",)
    )
    argv = _run_argv(spec=spec, policy=ROOTS, srun="/opt/gbatch/srun")
    assert _option_values(argv, "--mount") == [
        "type=bind,source=/d/srun,target=/usr/local/bin/srun,readonly",
        "type=bind,source=/opt/gbatch/srun,target=/usr/bin/srun,readonly",
    ]
    for bad in (".gbatch/bin/srun", "/home/a/x,readonly=false/srun"):
        with pytest.raises(ValueError, match="absolute"):
            _run_argv(srun=bad)
