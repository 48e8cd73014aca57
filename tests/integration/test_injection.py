"""Injection end to end: shell syntax in every field of a job is refused at submit with
the field's name, or reaches the job as inert data. Never is it run by a shell on the
head or on a GPU host.

Each payload tries to `touch` a canary file, /tmp/gbatch-canary-<random>. The jobs run
for real on (a) the local node's docker engine and (b) a GPU host reached over SSH
(tests/integration/fleet.py), echo their argv, env and working directory back, and the
test compares the log with the literal text. Afterwards the canary must exist nowhere
outside the jobs' own containers: not on the head, not in the host. Commands are argv
lists here, so only an injection bug could create it; a string command IS a shell
command by design, and one job proves that its shell stays inside its container.
"""

from __future__ import annotations

import json
import posixpath
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import Head, kill_leftover_jobs, make_head
from dockerenv import ensure_test_image, require_docker
from fleet import Fleet, build_fleet, teardown_fleet

pytestmark = pytest.mark.docker


def payloads(canary: str) -> list[str]:
    """Ways a careless `sh -c` of joined strings, a bad quote or an option would run
    `touch canary` or change what docker does."""
    return [
        f"; touch {canary}",
        f"$(touch {canary})",
        f"`touch {canary}`",
        f"' ; touch {canary} ; '",
        f'" ; touch {canary} ; "',
        f"&& touch {canary} ||",
        f"| touch {canary}",
        f"$IFS;touch${{IFS}}{canary}",
        f"{canary}*",
        "--privileged",
        "-v=/:/host",
        "*",
        "~root",
        "\\",
    ]


@dataclass
class Submitted:
    job_id: int
    check: str  # what the log must show, word for word (lines in `must_contain` mode)
    exact: bool


def write_job(directory: Path, name: str, data: dict[str, object]) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


def submit_inert_jobs(
    head: Head, image: str, canary: str, token: str, files: Path
) -> list[Submitted]:
    marks = {"GBTI_RUN": token}  # finds this test's containers at teardown
    words = payloads(canary)
    jobs = []
    # 1. The payloads as argv words: printf gets each one as a single argument.
    argv_file = write_job(
        files, "argv", {"image": image, "command": ["printf", "[%s]\\n", *words], "env": marks}
    )
    jobs.append(Submitted(head.sbatch(str(argv_file)), "".join(f"[{w}]\n" for w in words), True))
    # 2. ... as env values (no shell reads them: `env` prints its environment).
    env = {**marks, **{f"P{i}": w for i, w in enumerate(words)}}
    env_file = write_job(files, "env", {"image": image, "command": ["env"], "env": env})
    jobs.append(
        Submitted(
            head.sbatch(str(env_file)),
            "\n".join(f"P{i}={w}" for i, w in enumerate(words)),
            False,
        )
    )
    # 3. ... as the working directory (docker creates it; pwd prints it back).
    for i, word in enumerate(words):
        workdir = f"/w{i}/{word}"
        path = write_job(
            files, f"wd{i}", {"image": image, "command": ["pwd"], "workdir": workdir, "env": marks}
        )
        jobs.append(Submitted(head.sbatch(str(path)), posixpath.normpath(workdir) + "\n", True))
    # ... and through -D/--chdir, the CLI's own path to the same field.
    chdir_file = write_job(files, "chdir", {"command": ["pwd"], "env": marks})
    workdir = f"/cd/{words[1]}"
    chdir_id = head.sbatch("--image", image, "-D", workdir, str(chdir_file))
    jobs.append(Submitted(chdir_id, workdir + "\n", True))
    # 4. A string command is a shell command by design: its shell runs in its container.
    shell_file = write_job(
        files,
        "shell",
        {"image": image, "command": f"touch {canary} && echo touched-inside", "env": marks},
    )
    jobs.append(Submitted(head.sbatch(str(shell_file)), "touched-inside\n", True))
    return jobs


def refused_at_submit(head: Head, image: str, canary: str, files: Path) -> None:
    """Fields where shell syntax has no business are refused with the field's name."""
    word = f"$(touch {canary})"
    cases: list[tuple[list[str], str]] = [
        (["--image", image, "-J", word, "--wrap", "true"], "-J/--job-name:"),
        (["--image", f"{image};touch {canary}", "--wrap", "true"], "--image:"),
        (["--image=--privileged", "--wrap", "true"], "--image:"),
        (["--image", image, "-D", f"/w\ntouch {canary}", "--wrap", "true"], "-D/--chdir:"),
    ]
    file_cases: list[tuple[dict[str, object], str]] = [
        ({"name": word}, "name:"),
        ({"name": "-rf"}, "name:"),
        ({"image": f"-v=/:/host {image}"}, "image:"),
        ({"env": {word: "x"}}, "env:"),
        ({"env": {"A;touch": "x"}}, "env:"),
        ({"env": {"A": f"x\ntouch {canary}"}}, "env:"),
        ({"workdir": f"/w\ntouch {canary}"}, "workdir:"),
        ({"workdir": f"w/{word}"}, "workdir:"),
        ({"mounts": [f"/tmp:/x/{word}"]}, "mounts:"),
        ({"mounts": [f"/tmp/{word}:/x"]}, "mounts:"),
        ({"command": ["printf", "a\0b"]}, "command:"),
    ]
    for i, (data, field) in enumerate(file_cases):
        path = write_job(files, f"bad{i}", {"image": image, "command": ["true"], **data})
        cases.append(([str(path)], field))
    before = _job_count(head)
    for args, field in cases:
        result = head.run("sbatch", *args)
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"gbatch sbatch: error: {field}"), (field, lines[0])
        assert result.stdout == ""
    assert _job_count(head) == before


def _job_count(head: Head) -> int:
    out = head.run("sacct", "-X", "-a", "-S", "all", "-n", "-P", "-o", "JobID", check=True).stdout
    return len(out.split())


def check_logs(head: Head, jobs: list[Submitted]) -> None:
    for job in jobs:
        record = head.wait_state(job.job_id, "COMPLETED", "FAILED", timeout=120)
        log = head.run("logs", str(job.job_id), check=True).stdout
        assert record["state"] == "COMPLETED", (job, record, log)
        if job.exact:
            assert log == job.check, job
        else:
            lines = set(log.splitlines())
            for line in job.check.splitlines():
                assert line in lines, (line, log)


def head_canaries(token: str) -> list[Path]:
    return sorted(Path("/tmp").glob(f"gbatch-canary-{token}*"))


def remove_test_containers(token: str) -> None:
    """Only the containers whose env carries this test's mark."""
    listed = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=gbatch.job"], capture_output=True, text=True
    ).stdout.split()
    for container in listed:
        env = subprocess.run(
            ["docker", "inspect", "-f", "{{json .Config.Env}}", container],
            capture_output=True,
            text=True,
        ).stdout
        if env.strip() and f"GBTI_RUN={token}" in json.loads(env):
            subprocess.run(["docker", "rm", "-f", container], capture_output=True)


@pytest.fixture
def token() -> Iterator[str]:
    value = secrets.token_hex(6)
    yield value
    for path in head_canaries(value):  # only if the test failed: leave nothing behind
        path.unlink()


@pytest.fixture
def image() -> str:
    require_docker()
    return ensure_test_image()


@pytest.fixture
def local_head(tmp_path: Path, image: str, token: str) -> Iterator[Head]:
    head = make_head(tmp_path / "home", gpus=1)
    head.start()
    yield head
    head.stop()
    kill_leftover_jobs(head.home)
    remove_test_containers(token)


@pytest.fixture
def fleet(tmp_path: Path, token: str) -> Iterator[Fleet]:
    built = build_fleet(tmp_path, {f"inj{token[:6]}": 1})
    yield built
    teardown_fleet(built)
    remove_test_containers(token)


def test_payloads_on_the_local_node_are_refused_or_inert(
    local_head: Head, image: str, token: str, tmp_path: Path
) -> None:
    canary = f"/tmp/gbatch-canary-{token}"
    files = tmp_path / "jobs"
    files.mkdir()
    refused_at_submit(local_head, image, canary, files)
    jobs = submit_inert_jobs(local_head, image, canary, token, files)
    check_logs(local_head, jobs)
    assert head_canaries(token) == []


def test_payloads_on_a_host_over_ssh_are_refused_or_inert(
    fleet: Fleet, token: str, tmp_path: Path
) -> None:
    canary = f"/tmp/gbatch-canary-{token}"
    files = tmp_path / "jobs"
    files.mkdir()
    refused_at_submit(fleet.head, fleet.image, canary, files)
    jobs = submit_inert_jobs(fleet.head, fleet.image, canary, token, files)
    check_logs(fleet.head, jobs)
    assert {j["node"] for j in (fleet.head.job(s.job_id) for s in jobs)} == set(fleet.hosts)
    assert head_canaries(token) == []
    for host in fleet.hosts.values():
        container = host.container.get_container_id()
        found = subprocess.run(
            ["docker", "exec", container, "sh", "-c", 'ls -d "$1"* 2>/dev/null', "sh", canary],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert found.stdout == "", found.stdout
        # The probe itself works: it sees a file that is there.
        shown = subprocess.run(
            ["docker", "exec", container, "sh", "-c", 'ls -d "$1"*', "sh", "/etc/host"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "/etc/hostname" in shown.stdout
