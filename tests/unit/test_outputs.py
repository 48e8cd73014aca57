"""Output file names as sbatch gives them (gbatch.core.outputs), their validation in job
files and options (gbatch.jobspec.spec), and opening them as the submitter (nodes.outfiles)."""

from __future__ import annotations

import os
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
from gbatch.nodes.outfiles import OFFSETS_FILE, open_outputs


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
