"""Jobs run as their submitter, in the deployment a busy admin makes (issue 13): root
runs `gbatch daemon start` with `socket_mode: '666'` so that students can submit.

A student's bare job runs with the student's uid, gid, HOME and a login's umask, in
the workdir entered with the student's rights, and cannot read the store, the daemon's
log, another user's log or the run directories. A container job runs as the student
(docker --user). A symlink to /etc or to the docker socket's directory in the student's
0700 mount root is refused at submit, and one made after submit is refused at start.
Real users (useradd), a real root daemon, real docker for the container jobs.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from asuser import User, as_user, preload, run_cli, temp_users
from conftest import FAST_CONFIG, Head, make_head, require_root, shared_home
from docexamples import yaml_block_with
from dockerenv import ensure_test_image, require_docker

from gbatch.nodes.docker import container_name
from gbatch.nodes.resolve import resolve_here
from gbatch.protocol import wire
from gbatch.protocol.client import Client
from gbatch.site.policy import RunAs


@dataclass
class Lab:
    head: Head
    base: Path
    student: User
    other: User

    @property
    def data(self) -> Path:
        return self.base / "data" / self.student.name

    def as_student(self, *argv: str) -> dict[str, Any]:
        home, jobs = self.head.home, self.base / "jobs"

        def in_jobs() -> dict[str, Any]:
            os.chdir(jobs)  # the submit dir: slurm-N.out files land there
            return run_cli(home, *argv)

        result: dict[str, Any] = as_user(self.student, in_jobs)
        return result

    def sbatch_as_student(self, *argv: str) -> int:
        done = self.as_student("sbatch", "--parsable", "-D", str(self.base / "jobs"), *argv)
        assert done["rc"] == 0, done["err"]
        return int(done["out"])

    def job_file(
        self, name: str, mount: str, command: str, image: str = "gbatch-test:latest"
    ) -> str:
        path = self.base / "jobs" / f"{name}.yaml"
        spec = {"name": name, "image": image, "mounts": [mount], "command": command}
        path.write_text(yaml.safe_dump(spec))
        path.chmod(0o644)
        return str(path)

    def log(self, job_id: int) -> str:
        return (self.head.home / "logs" / f"{job_id}.log").read_text()


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    require_root("to make users and run a root daemon for them")
    preload()
    with temp_users("gbra", ["student", "other"]) as users, shared_home("gbatch-runas-") as head:
        base = head.home.parent
        student = users["student"]
        (base / "jobs").mkdir()
        (base / "jobs").chmod(0o1777)  # as /tmp: the students' output files go there
        data = base / "data" / student.name
        (data / "run").mkdir(parents=True)
        (data / "link-etc").symlink_to("/etc")
        (data / "link-sock").symlink_to("/var/run")  # docker.sock's directory
        for path in (data, data / "run"):
            os.chown(path, student.uid, student.gid)
        data.chmod(0o700)  # the daemon's user could not enter it without root
        # docs/security.md's example, with its /data under this test's directory.
        example = yaml_block_with("security.md", "of a root daemon other users submit to")
        config = FAST_CONFIG + example.replace("/data/{user}", f"{base}/data/{{user}}")
        (head.home / "config.yaml").write_text(config)
        head.start()
        yield Lab(head, base, student, users["other"])


def test_a_students_bare_job_runs_as_the_student_and_reads_nothing_of_the_head(
    lab: Lab,
) -> None:
    home = lab.head.home
    # Root's job with a secret: the store's key file exists from then on.
    spec = {"name": "roots", "command": "echo roots-own-output", "secret_env": ["TOKEN"]}
    with Client(home / "gbatchd.sock") as client:
        (roots_job,) = client.call(wire.Submit(spec=spec, secret_env={"TOKEN": "x"}))["ids"]
    lab.head.wait_state(roots_job, "COMPLETED")
    assert (home / "secrets.key").exists()
    job_id = lab.sbatch_as_student(
        "--wrap",
        "id -u; id -g; echo HOME=$HOME USER=$USER; umask; pwd; "
        f"for f in {home}/gbatch.db {home}/secrets.key {home}/gbatchd.log "
        f"{home}/logs/{roots_job}.log; "
        "do cat $f >/dev/null 2>&1 && echo READ $f || echo DENIED; done; "
        f"ls {home}/run >/dev/null 2>&1 && echo LISTED || echo DENIED",
    )
    lab.head.wait_state(job_id, "COMPLETED")
    lines = lab.log(job_id).splitlines()
    student = lab.student
    assert lines[:5] == [
        str(student.uid),
        str(student.gid),
        f"HOME=/home/{student.name} USER={student.name}",
        "0022",
        str(lab.base / "jobs"),
    ]
    assert lines[5:] == ["DENIED"] * 5
    assert lab.head.job(job_id)["uid"] == student.uid
    # Its slurm-N.out was made by the student, not by the root daemon.
    made = (lab.base / "jobs" / f"slurm-{job_id}.out").stat()
    assert (made.st_uid, made.st_gid, made.st_mode & 0o777) == (student.uid, student.gid, 0o644)


def test_an_output_file_the_student_may_not_write_is_not_written_and_the_log_says_so(
    lab: Lab,
) -> None:
    done = lab.as_student("sbatch", "-o", "/etc/gbatch-evil.out", "--wrap", "echo x")
    assert (done["rc"], done["err"]) == (
        2,
        "gbatch sbatch: error: -o/--output: /etc/gbatch-evil.out: directory /etc is not "
        "writable by you. Name a file in a directory you can write\n",
    )
    done = lab.as_student("sbatch", "-o", "/etc/passwd", "--wrap", "echo x")
    assert (done["rc"], done["err"]) == (
        2,
        "gbatch sbatch: error: -o/--output: /etc/passwd: /etc/passwd is not writable by you. "
        "Name a file in a directory you can write\n",
    )
    done = lab.as_student("sbatch", "-o", "/dev/null", "--wrap", "echo x")  # /dev is not
    assert done["rc"] == 0, done["err"]
    # Past the CLI's check (its own client): the daemon opens it as the student, so
    # the root daemon's rights never create it.
    home, target = lab.head.home, "/etc/gbatch-evil.out"
    spec = {"name": "sneak", "command": "echo sneaked", "output": target, "submit_dir": "/tmp"}

    def submit() -> int:
        with Client(home / "gbatchd.sock") as client:
            return int(client.call(wire.Submit(spec=spec))["ids"][0])

    job_id = as_user(lab.student, submit)
    lab.head.wait_state(job_id, "COMPLETED")
    assert not Path(target).exists()
    assert lab.log(job_id).splitlines() == [
        f"[gbatch: the output file is not written (cannot open {target}: Permission denied); "
        f"this attempt's output is in `gbatch logs {job_id}` only]",
        "sneaked",
    ]


def test_a_workdir_the_student_may_not_enter_fails_the_job_with_a_line(lab: Lab) -> None:
    job_id = lab.sbatch_as_student("-D", str(lab.head.home / "run"), "--wrap", "pwd")
    job = lab.head.wait_state(job_id, "FAILED")
    assert job["exit_code"] == 126
    assert f"gbatch: cannot enter the workdir {lab.head.home / 'run'}: Permission denied" in (
        lab.log(job_id)
    )


def test_the_resolver_follows_paths_with_the_submitters_rights(lab: Lab) -> None:
    as_student = RunAs(lab.student.uid, lab.student.gid)
    as_other = RunAs(lab.other.uid, lab.other.gid)
    link = str(lab.data / "link-etc")
    assert resolve_here(as_student, [link]).paths == {link: "/etc"}
    assert resolve_here(as_other, [link]).errors == {link: "Permission denied"}


def test_symlinks_out_of_the_mount_root_are_refused_at_submit(lab: Lab) -> None:
    jobs_before = len(lab.head.run("squeue", "-h", check=True).stdout.splitlines())
    refusals = {
        "link-etc": "leads through a symlink to /etc, outside the mount roots",
        "link-sock": "would expose the docker socket",
    }
    for link, message in refusals.items():
        done = lab.as_student("sbatch", lab.job_file(link, f"{lab.data}/{link}:/x", "true"))
        assert done["rc"] == 2 and done["out"] == "", done
        assert done["err"].startswith("gbatch sbatch: error: mounts: ") and message in done["err"]
        assert len(done["err"].splitlines()) == 1
    # Another user's root is not the student's to mount, nor to follow.
    job_file = lab.job_file("theirs", f"{lab.data}/run:/x", "true")
    done = as_user(lab.other, lambda: run_cli(lab.head.home, "sbatch", job_file))
    assert done["rc"] == 2 and "is not under an allowed mount root" in done["err"]
    assert len(lab.head.run("squeue", "-h", check=True).stdout.splitlines()) == jobs_before


@pytest.mark.docker
def test_a_students_container_runs_as_the_student(lab: Lab) -> None:
    require_docker()
    image = ensure_test_image()
    job_id = lab.sbatch_as_student(
        lab.job_file(
            "boxed", f"{lab.data}/run:/out", "id -u; id -g; touch /out/made-in-the-container", image
        ),
        "-o",
        f"{lab.data}/run/%x-%j.out",
    )
    lab.head.wait_state(job_id, "COMPLETED", timeout=60)
    assert lab.log(job_id).splitlines()[-2:] == [str(lab.student.uid), str(lab.student.gid)]
    out = lab.data / "run" / f"boxed-{job_id}.out"
    assert out.read_text().splitlines()[-2:] == [str(lab.student.uid), str(lab.student.gid)]
    assert (out.stat().st_uid, out.stat().st_gid) == (lab.student.uid, lab.student.gid)
    made = (lab.data / "run" / "made-in-the-container").stat()
    assert (made.st_uid, made.st_gid) == (lab.student.uid, lab.student.gid)


@pytest.mark.docker
def test_a_symlink_made_after_submit_is_refused_at_start(lab: Lab) -> None:
    require_docker()
    image = ensure_test_image()
    target = lab.data / "later"
    target.mkdir()
    os.chown(target, lab.student.uid, lab.student.gid)
    job_id = lab.sbatch_as_student("-H", lab.job_file("later", f"{target}:/out", "ls /out", image))

    def swap() -> None:
        target.rmdir()
        target.symlink_to("/etc")

    as_user(lab.student, swap)
    done = lab.as_student("scontrol", "release", str(job_id))
    assert done["rc"] == 0, done["err"]
    job = lab.head.wait_state(job_id, "FAILED", timeout=60)
    assert "leads through a symlink to /etc" in str(job["reason"]), job
    started = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"name={container_name(job_id, 1)}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert started.stdout == ""  # refused before `docker run`


def test_root_in_containers_is_said_at_start_and_an_unknown_node_stops_it(tmp_path: Path) -> None:
    typo = make_head(
        tmp_path / "typo", config=FAST_CONFIG + "root_in_containers: {nodes: [gpu99]}\n"
    )
    refused = typo.run("daemon", "start")
    assert refused.returncode != 0
    assert "root_in_containers: node gpu99 is not in the fleet (local)" in refused.stderr

    head = make_head(
        tmp_path / "ok", config=FAST_CONFIG + "root_in_containers: {images: ['lab/admin:*']}\n"
    )
    head.start()
    try:
        log = (head.home / "gbatchd.log").read_text()
        assert "root_in_containers: containers of images lab/admin:* and on nodes (none)" in log
    finally:
        head.stop()
