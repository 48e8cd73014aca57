"""Output file names as sbatch gives them (gbatch.core.outputs), their validation in job
files and options (gbatch.jobspec.spec), and opening them as the submitter (nodes.outfiles)."""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import socket
import tempfile
import time
from pathlib import Path

import pytest

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.outputs import (
    NO_ARRAY_TASK,
    appends,
    expand,
    job_fields,
    output_paths,
    submit_check_dir,
)
from gbatch.jobspec.spec import SpecError, build_spec
from gbatch.nodes.outfiles import OFFSETS_FILE, OPEN_TIMEOUT, OpenError, open_outputs


def job(job_id: int = 12, **spec: object) -> Job:
    fields: dict[str, object] = {"name": "train", "command": ("true",), "submit_dir": "/sub"}
    fields.update(spec)
    return Job(job_id, 1000, "alice", JobSpec(**fields), JobState.RUNNING, 0.0)  # type: ignore[arg-type]


def test_every_pattern_letter_of_sbatch_expands() -> None:
    fields = job_fields(job(7, array_task=3, array_pos=2), "gpu1")
    assert expand("%j %J %A %a %u %x %N %n %t %% %s", fields) == (
        "7 7 5 3 alice train gpu1 0 0 % batch"
    )


def test_a_number_zero_pads_numbers_only_and_unknown_letters_stay() -> None:
    fields = job_fields(job(7), "gpu1")
    assert expand("%4j-%3N-%q-%12j", fields) == "0007-gpu1-%q-0000000007"
    assert expand(r"lit\%j", fields) == "lit%j"  # a backslash: taken as written


def test_a_job_that_is_no_array_task_has_slurms_no_value_for_a() -> None:
    assert expand("%A_%a", job_fields(job(9), None)) == f"9_{NO_ARRAY_TASK}"


def test_the_default_is_slurm_jobid_out_in_the_submit_dir() -> None:
    assert output_paths(job(12), "n") == ("/sub/slurm-12.out", "/sub/slurm-12.out")
    task = job(12, array_task=1, array_pos=1)
    assert output_paths(task, "n") == ("/sub/slurm-11_1.out",) * 2
    assert output_paths(job(12, submit_dir=None), "n") is None  # queued before sbatch said


def test_relative_paths_start_from_the_workdir_of_a_bare_job_else_the_submit_dir() -> None:
    bare = job(3, output="o/%x.out", error="/abs/%j.err", workdir="/w")
    assert output_paths(bare, None) == ("/w/o/train.out", "/abs/3.err")
    boxed = job(3, output="o/%x.out", workdir="/in/container", image="img")
    assert output_paths(boxed, None) == ("/sub/o/train.out",) * 2


def test_only_the_first_attempt_may_truncate() -> None:
    assert not appends(job(), 1)
    assert appends(job(), 2)  # as Slurm for a requeued job
    assert appends(job(open_mode="append"), 1)


def test_the_submit_check_knows_the_user_and_name_only() -> None:
    assert submit_check_dir("x.out", "bob", "n", "/base") == "/base"
    assert submit_check_dir("/d/%u/%x/x.out", "bob", "n", "/b") == "/d/bob/n"
    assert submit_check_dir("../logs/x", "bob", "n", "/b/c") == "/b/logs"
    assert submit_check_dir("/d/%j/x.out", "bob", "n", "/b") is None


def test_job_file_keys_and_their_options_are_checked() -> None:
    spec = build_spec(
        {"command": "true", "output": "a-%j.out", "error": "e", "open_mode": "Append"},
        {},
        default_name="j",
    )
    assert (spec.output, spec.error, spec.open_mode) == ("a-%j.out", "e", "append")
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert "output" not in build_spec({"command": "true"}, {}, default_name="j").to_dict()
    assert build_spec({"command": "true", "open_mode": "T"}, {}, default_name="j").open_mode == (
        "truncate"
    )
    with pytest.raises(SpecError, match=r'^--open-mode: "sometimes" is not an open mode'):
        build_spec(
            {"command": "true"},
            {"open_mode": "sometimes"},
            default_name="j",
            option_names={"open_mode": "--open-mode"},
        )
    for bad, why in (("", "not a file name"), ("a\nb", "control character"), ("d/", "directory")):
        with pytest.raises(SpecError, match=f"^output: .*{why}"):
            build_spec({"command": "true", "output": bad}, {}, default_name="j")


def test_files_open_truncated_once_and_cut_back_to_the_attempts_start(tmp_path: Path) -> None:
    out = tmp_path / "o.out"
    out.write_text("old\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    me = Job(4, os.geteuid(), "me", JobSpec("n", ("true",), output=str(out)), JobState.RUNNING, 0)
    files = open_outputs(me, 1, "local", run_dir)
    assert files is not None and not files.apart
    os.write(files.out, b"one\n")
    files.close()
    assert (run_dir / OFFSETS_FILE).read_text() == "[0]"
    again = open_outputs(me, 1, "local", run_dir)  # a follower started again: replays
    assert again is not None and out.read_text() == ""
    os.write(again.out, b"one\n")
    again.close()
    second = tmp_path / "run2"
    second.mkdir()
    later = open_outputs(me, 2, "local", second)  # the next attempt appends
    assert later is not None
    os.write(later.out, b"two\n")
    later.close()
    assert out.read_text() == "one\ntwo\n"


def opened(path: str, tmp_path: Path, uid: int | None = None) -> int:
    """The descriptor open_outputs gives for `path` as `uid` (default: this process's)."""
    run_dir = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
    run_dir.mkdir()
    me = Job(
        4,
        os.geteuid() if uid is None else uid,
        "me",
        JobSpec("n", ("true",), output=path),
        JobState.RUNNING,
        0,
    )
    files = open_outputs(me, 1, "local", run_dir)
    assert files is not None and not files.apart
    return files.out


def test_a_regular_file_or_dev_null_is_opened_blocking(tmp_path: Path) -> None:
    for path in (str(tmp_path / "o.out"), "/dev/null"):
        fd = opened(path, tmp_path)
        assert not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK  # cleared once checked
        os.close(fd)


@pytest.mark.parametrize("as_other", [False, True])
def test_a_fifo_socket_device_or_directory_is_refused_at_once(
    tmp_path: Path, as_other: bool
) -> None:
    """Opened without waiting, by the job's user, and refused with what it is."""
    uid = None
    if as_other:  # the root daemon's opener child, that becomes the user
        if os.geteuid() != 0:
            pytest.skip("only root opens as another user")
        uid = pwd.getpwnam("nobody").pw_uid
        # pytest's own base is root's alone: a directory the user may reach and write
        tmp_path = Path(tempfile.mkdtemp(dir="/tmp"))
        tmp_path.chmod(0o777)
    fifo, read_fifo = str(tmp_path / "fifo"), str(tmp_path / "read-fifo")
    for path in (fifo, read_fifo):
        os.mkfifo(path)
        os.chmod(path, 0o666)
    reader = os.open(read_fifo, os.O_RDONLY | os.O_NONBLOCK)  # its open then succeeds
    sock_path = str(tmp_path / "sock")
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(sock_path)
    os.chmod(sock_path, 0o666)
    try:
        for path, what in (
            (fifo, "a FIFO"),
            (read_fifo, "a FIFO"),
            (sock_path, "a socket"),
            ("/dev/zero", "a device"),
        ):
            began = time.monotonic()
            with pytest.raises(OpenError) as refused:
                opened(path, tmp_path, uid)
            assert str(refused.value) == (
                f"{path} is {what}; a job writes only to a regular file or /dev/null"
            )
            assert time.monotonic() - began < OPEN_TIMEOUT / 3
        with pytest.raises(OpenError, match="Is a directory"):
            opened(str(tmp_path), tmp_path, uid)
        assert os.read(reader, 10) == b""  # nothing written to the FIFO's reader
    finally:
        os.close(reader)
        listening.close()
        if as_other:
            shutil.rmtree(tmp_path)


def test_sbatch_warns_when_the_default_output_file_cannot_be_written_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gbatch.cli.sbatch import _warn_default_output

    spec = build_spec({"command": "true"}, {}, default_name="j")
    _warn_default_output(spec, str(tmp_path))
    assert capsys.readouterr().err == ""
    # Root may write anywhere, so the submitter who may not is played by os.access.
    monkeypatch.setattr(os, "access", lambda path, mode: path != str(tmp_path))
    _warn_default_output(spec, str(tmp_path))
    warning = capsys.readouterr().err
    assert warning.startswith(f"gbatch sbatch: warning: you cannot write in {tmp_path}, ")
    assert "gbatch logs ID" in warning and len(warning.splitlines()) == 1
    named = build_spec({"command": "true", "output": "/tmp/x.out"}, {}, default_name="j")
    _warn_default_output(named, str(tmp_path))  # -o given: checked apart, refused if bad
    assert capsys.readouterr().err == ""
