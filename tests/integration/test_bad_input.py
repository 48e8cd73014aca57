"""Bad input: one clear line naming the field and the fix, exit 2, nothing queued."""

from __future__ import annotations

import json
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, Head, kill_leftover_jobs, make_head, wait_for

from gbatch.protocol import decoder, requests
from gbatch.protocol.client import Client, RequestFailed

BAD_FILES = {
    "unknown key": (
        "name: x\ncommand: echo hi\ngpu: 1\n",
        'unknown key "gpu". Did you mean "gpus"?',
    ),
    "negative gpus": ("command: echo hi\ngpus: -1\n", "gpus:"),
    "too many gpus": (
        "command: echo hi\ngpus: 3\n",
        "gpus: 3 GPUs requested but the largest node has 2",
    ),
    # Slurm: "Requested node configuration is not available" (issue 30): queued, these
    # waited BadConstraints for good. This machine has far fewer CPUs and less memory.
    "more cpus than any node": (
        "command: echo hi\ncpus: 4096\n",
        "cpus: 4096 CPUs requested (-c) but the largest node has ",
    ),
    "more memory than any node": (
        "command: echo hi\nmem: 900T\n",
        "mem: 921600G requested but the largest node has ",
    ),
    "bad time": ("command: echo hi\ntime_limit: '1:2:3:4'\n", "time_limit:"),
    "malformed yaml": ("command: [true\n", "could not parse YAML"),
    "no command": ("name: x\n", "command:"),
    "reserved env": (
        "command: echo hi\nenv: {CUDA_VISIBLE_DEVICES: '0'}\n",
        "CUDA_VISIBLE_DEVICES",
    ),
    "not a mapping": ("- a\n- b\n", "mapping"),
}


def _queue_size(head: Head) -> int:
    out = head.run("sacct", "-X", "-a", "-S", "all", "-n", "-P", "-o", "JobID", check=True).stdout
    return len(out.split())


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_job_file_is_refused_with_one_line_and_nothing_is_queued(
    head: Head, workdir: Path, case: str
) -> None:
    text, expected = BAD_FILES[case]
    before = _queue_size(head)
    job_file = workdir / "bad.yaml"
    job_file.write_text(text)
    result = head.run("sbatch", str(job_file))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gbatch sbatch: error: ")
    assert expected in lines[0]
    assert "Traceback" not in result.stderr
    assert _queue_size(head) == before


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--wrap", "true", "-t", "soon"], "-t/--time:"),
        (["--wrap", "true", "--gres", "tpu:1"], "--gres:"),
        (["--wrap", "true", "--gpus", "many"], "--gpus:"),
        (["--wrap", "true", "-J", "bad name;rm"], "-J/--job-name:"),
        (["--wrap", "true", "--retries", "x"], '--retries: "x" is not a whole number'),
        (["--wrap", "true", "--priority", "1e3"], "--priority:"),
        (["--wrap", "true", "--nice", "99999"], "--nice: 99999 is out of range"),
        (["--wrap", "true", "-D", "/a\nb"], "-D/--chdir:"),
        (["--wrap", "echo \udcff"], "--wrap: a value has a character that is not UTF-8"),
        (["--wrap", "true", "--array", "5-1"], "--array:"),
        ([], "no job file given"),
        (["/nonexistent/job.yaml"], "/nonexistent/job.yaml"),
    ],
)
def test_bad_options_are_refused_and_nothing_is_queued(
    head: Head, args: list[str], expected: str
) -> None:
    before = _queue_size(head)
    result = head.run("sbatch", *args)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert _queue_size(head) == before


@pytest.mark.parametrize(
    ("name", "text", "wrap_first"),
    [
        ("job.yaml", "command: echo from-file\n", True),
        ("job.yaml", "command: echo from-file\n", False),  # options after a job file
        ("job.sh", "#!/bin/sh\necho from-file\n", True),  # after a script: its $1 $2
    ],
)
def test_a_job_file_with_wrap_is_refused_not_silently_replaced(
    head: Head, workdir: Path, name: str, text: str, wrap_first: bool
) -> None:
    # As Slurm's sbatch, which takes no script with --wrap: neither command wins silently.
    job_file = workdir / name
    job_file.write_text(text)
    wrap = ["--wrap", "echo from-wrap"]
    args = [*wrap, str(job_file)] if wrap_first else [str(job_file), *wrap]
    before = _queue_size(head)
    result = head.run("sbatch", *args)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        f"gbatch sbatch: error: --wrap: {job_file} is given too, and both name the job's "
        f"command. Drop {job_file}, or drop --wrap (a job file's command is its `command:` "
        "key)\n"
    )
    assert _queue_size(head) == before


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["sbatch", "--wrap", "true", "--bogus"],
            "gbatch sbatch: error: unrecognized arguments: --bogus",
        ),
        (["sbatch", "--wrap"], "gbatch sbatch: error: argument --wrap: expected one argument"),
        (["--bogus", "sbatch", "--wrap", "true"], "gbatch sbatch: error: unrecognized arguments"),
        (["squeue", "-t"], "gbatch squeue: error: argument -t/--states: expected one argument"),
        (["sinfo", "-N", "--bogus"], "gbatch sinfo: error: unrecognized arguments: --bogus"),
        (["node", "add"], "gbatch node: error: argument action: invalid choice: 'add'"),
        (["tui", "--refresh", "soon"], "gbatch tui: error: argument --refresh: invalid float"),
        (
            ["sbtach", "job.yaml"],
            "gbatch: error: argument COMMAND: invalid choice: 'sbtach' (did you mean sbatch?)",
        ),
        (
            ["squeu"],
            "gbatch: error: argument COMMAND: invalid choice: 'squeu' (did you mean squeue?)",
        ),
        # No prefix matching: `--gpu 1` was silently `--gpus 1`; the near options are named.
        (
            ["sbatch", "--gpu", "1", "--wrap", "true"],
            "gbatch sbatch: error: unrecognized arguments: --gpu (did you mean --gpu-mem, "
            "--gpus or --gpus-per-node?)",
        ),
        (
            ["sbatch", "--wrap", "true", "--tim", "5"],
            "gbatch sbatch: error: unrecognized arguments: --tim (did you mean --time?)",
        ),
        (
            ["squeue", "--stat", "R"],
            "gbatch squeue: error: unrecognized arguments: --stat R (did you mean --states?)",
        ),
        (
            ["scontrol", "shw", "job", "1"],
            "gbatch scontrol: error: argument action: invalid choice: 'shw' (did you mean show?)",
        ),
        ([], "gbatch: error: the following arguments are required: COMMAND"),
    ],
)
def test_a_usage_mistake_is_one_line_pointing_at_the_help(
    head: Head, args: list[str], expected: str
) -> None:
    # argparse's own errors (unknown option, missing value, bad choice or type) come
    # out as one line too, not the usage block, and name the command they were given to.
    before = _queue_size(head)
    result = head.run(*args)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(expected), lines[0]
    command = expected.split(":")[0]
    assert lines[0].endswith(f"See `{command} --help`"), lines[0]
    assert _queue_size(head) == before


def test_bad_squeue_format_names_the_letter(head: Head) -> None:
    result = head.run("squeue", "-o", "%i %W")
    assert result.returncode == 2
    assert "--format:" in result.stderr and "W" in result.stderr


def test_unknown_job_is_an_error_not_a_traceback(head: Head) -> None:
    result = head.run("scontrol", "show", "job", "4242")
    assert result.returncode == 1
    assert result.stderr.strip() == "gbatch scontrol: error: Invalid job id specified: 4242"


# ------------------------------------------------------------------ bad requests

DEEP = decoder.MAX_NESTING - 1  # with the request's own object: as deep as a request may be
# Lines a client that skips gbatch's own could send, and the start of each one's reply.
BAD_REQUEST_LINES = [
    (
        b'{"op":"jobs","states":[1]}',
        "bad request: jobs.states: expected a list of strings, got [1]",
    ),
    (b'{"op":"cancel","ids":"x"}', 'bad request: cancel.ids: expected a list of integers, got "x"'),
    (b'{"op":"submit","spec":[]}', "bad request: submit.spec: expected an object, got []"),
    (b"[" * 100_000, "bad request: JSON nested too deeply"),
    (b"[" * 900 + b"]" * 900, "bad request: JSON nested too deeply (more than 64 levels)"),
    (
        b'{"op":"jobs","states":' + b"[" * DEEP + b"]" * DEEP + b"}",
        "bad request: jobs.states: expected a list of strings, got [[[",
    ),
    (b'["op", "ping"]', "bad request: a request is one JSON object per line, not a list"),
    (b"ping", "bad request: not JSON ("),
    (b"\xff\xfe{}", "bad request: not JSON ("),
    (b'{"op":"format-disk"}', "unknown request 'format-disk'"),
]


def test_bad_requests_get_a_one_line_reply_each_and_the_connection_serves_on(head: Head) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(head.home / "gbatchd.sock"))
        replies = sock.makefile("rb")
        for line, error in BAD_REQUEST_LINES:
            sock.sendall(line + b"\n")
            reply = json.loads(replies.readline())
            assert reply["ok"] is False and reply["kind"] == "invalid", (line[:40], reply)
            assert reply["error"].startswith(error), (line[:40], reply)
            assert reply["error"].isprintable() and len(reply["error"]) < 200, reply
        sock.sendall(b'{"op":"ping"}\n')
        assert json.loads(replies.readline())["pid"] == head.daemon_pid()
    assert "Traceback" not in (head.home / "gbatchd.log").read_text()
    assert head.run("squeue").returncode == 0  # and the daemon serves everyone else


# ------------------------------------------------------------------ hostile job files

CANARY = "/tmp/gbatch-canary-bad-input"
# Files an attacker or a careless generator might write. Each must stop at the CLI or
# the daemon with one line naming the field: nothing queued, docker never asked to run.
HOSTILE_FILES = [
    "command: x\nname: $(touch " + CANARY + ")\n",
    "command: x\nname: '-rf'\n",
    "command: x\nname: 'a;b'\n",
    "command: x\nimage: '-v=/:/host busybox'\n",
    "command: x\nimage: 'busybox;touch " + CANARY + "'\n",
    "command: x\nimage: 'Busybox'\n",
    "command: x\nimage: 'busybox:'\n",
    "command: x\nimage: '" + "a" * 300 + "'\n",
    "command: x\nimage: 'busybox@sha256:123'\n",
    "command: x\nenv: {'A;B': x}\n",
    "command: x\nenv: {'$(id)': x}\n",
    'command: x\nenv: {A: "x\\ntouch ' + CANARY + '"}\n',
    "command: x\nenv: {LD_PRELOAD: x, NVIDIA_VISIBLE_DEVICES: all}\n",
    "command: x\nworkdir: 'tmp/$(id)'\n",
    'command: x\nworkdir: "/w\\ntouch ' + CANARY + '"\n',
    'command: x\nworkdir: "/w\\e[31m"\n',
    "command: x\nworkdir: '/" + "a" * 5000 + "'\n",
    "command: x\nmounts: ['/var/run/docker.sock:/s']\n",
    "command: x\nmounts: ['/a:/b,readonly']\n",
    'command: [printf, "a\\0b"]\n',
    "command: []\n",
    "command: ['', x]\n",
    "command: [a" + ', ""' * 70000 + "]\n",
    "command: !!python/object/apply:os.system ['touch " + CANARY + "']\n",
    "command: !!binary dG91Y2g=\n",
    "command: &a [x]\nname: *a\n",
    "command: x\n<<: {gpus: 1}\n",
    "command: x\ngpus: !!int x\n",
    "command: x\ngpus: " + "9" * 5000 + "\n",
    "command: x\nshm_size: 999999999g\n",
    "command: x\nprivileged: true\n",
    "command: " + "[" * 100 + "]" * 100 + "\n",
]


@pytest.fixture(scope="module")
def logged_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Head, Path]]:
    """A daemon whose docker is a wrapper that logs every invocation, then runs docker.
    One for the module: every case below must leave it as it found it (an empty queue)."""
    tmp_path = tmp_path_factory.mktemp("logged")
    log = tmp_path / "docker-calls.log"
    wrapper = tmp_path / "docker-wrapper"
    wrapper.write_text(f'#!/bin/sh\nprintf \'%s\\n\' "$*" >> {log}\nexec docker "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    head = make_head(tmp_path / "home", config=FAST_CONFIG + f"docker: {wrapper}\n")
    head.start()
    yield head, log
    head.stop()
    kill_leftover_jobs(head.home)


def _docker_runs(log: Path) -> list[str]:
    calls = log.read_text().splitlines() if log.exists() else []
    return [c for c in calls if c.split(" ", 1)[0] in ("run", "create", "start", "exec")]


@pytest.mark.parametrize("index", range(len(HOSTILE_FILES)))
def test_hostile_job_file_is_refused_before_docker_is_asked(
    logged_head: tuple[Head, Path], workdir: Path, index: int
) -> None:
    head, log = logged_head
    job_file = workdir / "hostile.yaml"
    job_file.write_text(HOSTILE_FILES[index])
    result = head.run("sbatch", str(job_file))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gbatch sbatch: error: "), result.stderr
    assert lines[0].isprintable() and "Traceback" not in result.stderr
    field = lines[0].removeprefix("gbatch sbatch: error: ").split(": ", 1)[0]
    assert field in {str(job_file), "job file"} or field.isidentifier(), lines[0]
    assert _queue_size(head) == 0
    # The wrapper is docker for this daemon (its agent lists containers through it) ...
    wait_for(lambda: log.exists() and log.read_text(), 15, "the agent to call docker")
    # ... and nothing was started, created or exec'd.
    assert _docker_runs(log) == []
    assert not Path(CANARY).exists()


# What a client that skips the CLI's checks could send over the socket: the daemon
# validates again, with the same rules.
HOSTILE_WIRE_SPECS: list[dict[str, object]] = [
    {"name": "$(id)", "command": ["true"]},
    {"name": "x", "command": ["true"], "image": "-v=/:/h busybox"},
    {"name": "x", "command": ["true"], "image": "busybox;id"},
    {"name": "x", "command": ["true"], "env": {"A;B": "x"}},
    {"name": "x", "command": ["true"], "env": {"A": "x\nB=y"}},
    {"name": "x", "command": ["true"], "env": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}},
    {"name": "x", "command": ["true"], "workdir": "w"},
    {"name": "x", "command": ["true"], "workdir": "/w\x1b[2J"},
    {"name": "x", "command": ["true"], "mounts": ["/var/run/docker.sock:/s"]},
    {"name": "x", "command": []},
    {"name": "x", "command": ["a\x00b"]},
    {"name": "x", "command": ["echo", "\udcff"]},
    {"name": "x", "command": ["true"], "gpus": "1"},
    {"name": "x", "command": ["true"], "privileged": True},
    {"name": "x", "command": ["true"], "shm_size": "99999999999999g"},
]


@pytest.mark.parametrize("index", range(len(HOSTILE_WIRE_SPECS)))
def test_hostile_spec_sent_past_the_cli_is_refused_by_the_daemon(
    logged_head: tuple[Head, Path], index: int
) -> None:
    head, log = logged_head
    spec = HOSTILE_WIRE_SPECS[index]
    with Client(head.home / "gbatchd.sock") as client, pytest.raises(RequestFailed) as caught:
        client.call(requests.Submit(spec=spec))
    assert caught.value.kind == "invalid", caught.value.message
    message = caught.value.message
    assert message.isprintable() and message.split(": ", 1)[0], message
    assert _queue_size(head) == 0
    assert _docker_runs(log) == []
    assert json.dumps(spec)  # the request itself was well-formed JSON
