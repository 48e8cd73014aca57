"""Parameter sweeps (gbatch/jobspec/sweep.py): grids, row files, substitution, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from gbatch.core.model import JobSpec
from gbatch.jobspec.spec import SpecError, parse_job_text
from gbatch.jobspec.sweep import (
    MAX_ROWS,
    Sweep,
    check_templates,
    parse_param_options,
    read_rows_file,
    substitute,
    sweep_from_wire,
    sweep_from_yaml,
    task_spec,
)
from gbatch.nodes.base import job_env


def test_grid_last_name_varies_fastest() -> None:
    sweep = parse_param_options(["lr=1e-3,1e-2", "bs=32,64"])
    assert sweep.names == ("lr", "bs")
    assert sweep.rows == (("1e-3", "32"), ("1e-3", "64"), ("1e-2", "32"), ("1e-2", "64"))


def test_yaml_sweep_values_keep_their_written_form() -> None:
    data = parse_job_text("command: x\nsweep:\n  lr: [1e-3, 0.10, 1.0e-2]\n  bs: 032\n", "j")
    sweep = sweep_from_yaml(data["sweep"])
    assert isinstance(sweep, Sweep)
    assert sweep.rows == (("1e-3", "032"), ("0.10", "032"), ("1.0e-2", "032"))


def test_yaml_sweep_file_is_named_for_the_caller_to_read() -> None:
    assert sweep_from_yaml({"file": "p.csv"}) == "p.csv"
    with pytest.raises(SpecError, match="takes no other keys"):
        sweep_from_yaml({"file": "p.csv", "lr": [1]})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["lr"], "has no '='"),
        (["lr="], "lr has no values"),
        (["1lr=1"], "is not a parameter name"),
        (["lr=1", "LR=2"], "given twice"),
        (["a=" + ",".join(["1"] * 1000), "b=" + ",".join(["1"] * 101)], "more than 100000"),
        (["lr=a\tb"], "control character"),
    ],
)
def test_bad_param_options_are_refused(options: list[str], message: str) -> None:
    with pytest.raises(SpecError, match=message) as err:
        parse_param_options(options)
    assert err.value.field == "--param"


def test_csv_rows_under_a_header(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("lr,bs\n1e-3,32\n\n0.10,64\n")
    assert read_rows_file(str(path)) == Sweep(("lr", "bs"), (("1e-3", "32"), ("0.10", "64")))


def test_csv_row_of_the_wrong_width_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("lr,bs\n1,2\n3\n")
    with pytest.raises(SpecError) as err:
        read_rows_file(str(path))
    assert err.value.field == f"{path}:3"
    assert "1 values for 2 names" in err.value.message


def test_csv_header_of_bad_names_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("\nlr,batch size\n1,2\n")
    with pytest.raises(SpecError, match="not a parameter name") as err:
        read_rows_file(str(path))
    assert err.value.field == f"{path}:2"


def test_jsonl_rows_keep_numbers_as_written(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"lr": 1e-3, "bs": 32, "opt": "adam"}\n{"bs": 64, "lr": 0.10, "opt": "sgd"}\n')
    sweep = read_rows_file(str(path))
    assert sweep.names == ("lr", "bs", "opt")
    assert sweep.rows == (("1e-3", "32", "adam"), ("0.10", "64", "sgd"))


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('{"lr": 1}\n{"lr": \n', 2, "not JSON"),
        ('{"lr": 1}\n[1]\n', 2, "not a JSON object"),
        ('{"lr": 1}\n\n{"bs": 1}\n', 3, "differ from the first row's"),
        ('{"lr": [1]}\n', 1, "is not text or a number"),
    ],
)
def test_bad_jsonl_names_its_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(text)
    with pytest.raises(SpecError, match=message) as err:
        read_rows_file(str(path))
    assert err.value.field == f"{path}:{line}"


def test_row_files_refused_whole(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        read_rows_file(str(tmp_path / "none.csv"))
    other = tmp_path / "p.txt"
    other.write_text("lr\n1\n")
    with pytest.raises(SpecError, match=r"\.csv or \.jsonl"):
        read_rows_file(str(other))
    empty = tmp_path / "p.csv"
    empty.write_text("lr\n")
    with pytest.raises(SpecError, match="no rows"):
        read_rows_file(str(empty))
    big = tmp_path / "big.csv"
    big.write_text("x\n" + "1\n" * (MAX_ROWS + 1))
    with pytest.raises(SpecError, match="more than 100000 rows") as err:
        read_rows_file(str(big))
    assert err.value.field == f"{big}:{MAX_ROWS + 2}"


def test_substitution_and_escapes() -> None:
    values = {"lr": "0.1", "bs": "32"}
    assert substitute("train --lr {lr} --bs={bs}", values, "command") == "train --lr 0.1 --bs=32"
    assert substitute("echo {{lr}} {{ }}", values, "command") == "echo {lr} { }"
    # Braces that are not placeholders, and the shell's ${NAME}, stay as written.
    text = "awk '{print $1}' {a,b} ${HOME} { lr }"
    assert substitute(text, values, "command") == text


def test_unknown_placeholder_is_refused_naming_it() -> None:
    with pytest.raises(SpecError) as err:
        check_templates(("/bin/sh", "-c", "train --lr {lrr}"), ("lr",), None, "job")
    assert err.value.field == "command"
    assert "{lrr} is not a parameter of the sweep" in err.value.message
    with pytest.raises(SpecError, match=r"\{x\} is not") as err:
        check_templates(("run",), ("lr",), "{name}-{x}", "job")
    assert err.value.field == "--name-template"
    check_templates(("run", "{lr}"), ("lr",), "{name}-{lr}", "job")


def test_task_spec_substitutes_each_argv_item_and_names_the_task() -> None:
    spec = JobSpec(name="train", command=("python", "t.py", "--lr={lr}", "{bs}"))
    sweep = parse_param_options(["lr=1e-3,1e-2", "bs=32"])
    task = task_spec(spec, sweep, 1, "{name}-lr{lr}/bs {bs}")
    assert task.command == ("python", "t.py", "--lr=1e-2", "32")
    assert task.name == "train-lr1e-2_bs_32"  # what a job name cannot hold becomes _
    assert task.params == (("lr", "1e-2"), ("bs", "32"))
    assert task_spec(spec, sweep, 0, None).name == "train"


def test_params_survive_the_store_and_stay_out_of_other_specs() -> None:
    spec = JobSpec(name="t", command=("x",), params=(("lr", "1"), ("bs", "2")))
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert "params" not in JobSpec(name="t", command=("x",)).to_dict()


def test_a_task_sees_its_params_upper_cased() -> None:
    from gbatch.core.model import Job, JobState

    spec = JobSpec(name="t", command=("x",), params=(("lr", "1e-3"), ("Batch_size", "32")))
    job = Job(id=1, uid=0, user="u", spec=spec, state=JobState.RUNNING, submit_time=0.0)
    env = job_env(job, 1, [], "local")
    assert env["GBATCH_PARAM_LR"] == "1e-3"
    assert env["GBATCH_PARAM_BATCH_SIZE"] == "32"


@pytest.mark.parametrize(
    "data",
    [
        None,
        {"names": ["lr"], "rows": []},
        {"names": ["lr"], "rows": [["1", "2"]]},
        {"names": ["lr"], "rows": [[1]]},
        {"names": ["l r"], "rows": [["1"]]},
        {"names": ["lr"], "rows": [["a\nb"]]},
    ],
)
def test_daemon_refuses_a_malformed_wire_sweep(data: object) -> None:
    with pytest.raises(SpecError):
        sweep_from_wire(data)


def test_scontrol_and_sacct_show_a_tasks_params() -> None:
    from gbatch.core.model import Job, JobState
    from gbatch.render.formatting import format_job_details, format_sacct

    spec = JobSpec(name="t", command=("x",), params=(("lr", "1e-3"), ("bs", "32")))
    job = Job(id=7, uid=0, user="u", spec=spec, state=JobState.PENDING, submit_time=0.0)
    assert "   Params=lr=1e-3,bs=32\n" in format_job_details(job, [], 0.0)
    out = format_sacct([job], 0.0, fields=["JobID", "Params"], parsable=True)
    assert out.splitlines() == ["JobID|Params", "7|lr=1e-3,bs=32"]
    plain = Job(
        id=8,
        uid=0,
        user="u",
        spec=JobSpec(name="t", command=("x",)),
        state=JobState.PENDING,
        submit_time=0.0,
    )
    assert "Params=" not in format_job_details(plain, [], 0.0)


@pytest.mark.parametrize(
    ("text", "options", "field"),
    [
        ('{"command": "true", "name_template": "r{lr}"}', (), "name_template"),
        ('{"command": "true"}', ("--name-template", "r{lr}"), "--name-template"),
    ],
)
def test_a_name_template_without_a_sweep_is_refused(
    text: str, options: tuple[str, ...], field: str
) -> None:
    from gbatch.cli.exits import CliError
    from gbatch.cli.sbatch import request_for_text

    with pytest.raises(CliError, match=f"{field}: names the tasks of a sweep"):
        request_for_text(text, "job.json", options)


def test_a_job_file_without_a_sweep_sends_none() -> None:
    from gbatch.cli.sbatch import request_for_text

    request = request_for_text('{"command": "true"}', "job.json")
    assert request.sweep is None and request.name_template is None
