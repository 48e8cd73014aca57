"""Parameter sweeps through the real CLI and daemon (issue 15, item 3): --param grids,
a job file's sweep: of CSV rows, task names from --name-template, and the refusals."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import GBATCH, Head, wait_for


def sbatch_in(head: Head, where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GBATCH, "sbatch", *args],
        env=head.env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=where,
    )


def outputs(where: Path, count: int) -> list[str]:
    """The out-K.txt of tasks 0..count-1, once each has its line (the job writes it)."""
    files = [where / f"out-{k}.txt" for k in range(count)]
    wait_for(
        lambda: all(f.exists() and f.read_text().endswith("\n") for f in files),
        60,
        "every task's output file",
    )
    return [f.read_text().strip() for f in files]


def sacct_rows(head: Head) -> list[list[str]]:
    """(JobName, Params) of the caller's jobs, once all have COMPLETED."""

    def rows() -> list[list[str]] | None:
        out = head.run(
            "sacct", "-X", "-S", "all", "-P", "-n", "-o", "JobName,State,Params", check=True
        )
        found = [line.split("|") for line in out.stdout.splitlines()]
        done = found and all(state == "COMPLETED" for _, state, _ in found)
        return [[name, params] for name, _, params in found] if done else None

    return wait_for(rows, 60, "the sweep's tasks to complete")  # type: ignore[return-value]


def test_a_param_grid_runs_one_task_per_combination(head: Head, tmp_path: Path) -> None:
    result = sbatch_in(
        head,
        tmp_path,
        "-J",
        "sw",
        "--param",
        "lr=1e-3,1e-2",
        "--param",
        "bs=32,64",
        "--name-template",
        "{name}-lr{lr}-bs{bs}",
        "-o",
        "out-%a.txt",
        "--wrap",
        "echo lr={lr} bs={bs} env=$GBATCH_PARAM_LR,$GBATCH_PARAM_BS {{lr}}",
    )
    assert result.returncode == 0, result.stderr
    assert outputs(tmp_path, 4) == [
        "lr=1e-3 bs=32 env=1e-3,32 {lr}",
        "lr=1e-3 bs=64 env=1e-3,64 {lr}",
        "lr=1e-2 bs=32 env=1e-2,32 {lr}",
        "lr=1e-2 bs=64 env=1e-2,64 {lr}",
    ]
    assert sorted(sacct_rows(head)) == [
        ["sw-lr1e-2-bs32", "lr=1e-2,bs=32"],
        ["sw-lr1e-2-bs64", "lr=1e-2,bs=64"],
        ["sw-lr1e-3-bs32", "lr=1e-3,bs=32"],
        ["sw-lr1e-3-bs64", "lr=1e-3,bs=64"],
    ]


def test_a_job_files_sweep_of_csv_rows(head: Head, tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "rows.csv").write_text("opt,lr\nadam,0.10\nsgd,1e-3\n")
    (tmp_path / "conf" / "job.yaml").write_text(
        "name: csv\n"
        "command: [/bin/sh, -c, 'echo {opt} {lr} $GBATCH_PARAM_OPT', ignored]\n"
        "sweep: {file: rows.csv}\n"  # beside the job file
        'name_template: "{name}-{opt}"\n'
        "output: out-%a.txt\n"
    )
    result = sbatch_in(head, tmp_path, "conf/job.yaml")
    assert result.returncode == 0, result.stderr
    assert outputs(tmp_path, 2) == ["adam 0.10 adam", "sgd 1e-3 sgd"]
    assert sorted(sacct_rows(head)) == [
        ["csv-adam", "opt=adam,lr=0.10"],
        ["csv-sgd", "opt=sgd,lr=1e-3"],
    ]


def test_sweep_refusals_are_one_line_and_queue_nothing(head: Head, tmp_path: Path) -> None:
    (tmp_path / "rows.csv").write_text("lr\n1\n2,3\n")
    (tmp_path / "job.yaml").write_text("command: echo {lr}\nsweep: {file: rows.csv}\n")
    cases = [
        (("--param", "lr=1,2", "--wrap", "echo {lrr}"), "command: {lrr} is not a parameter"),
        (
            ("--param", "lr=1", "--array", "0-3", "--wrap", "echo {lr}"),
            "--array: a sweep is its own",
        ),
        (("--param", "l r=1", "--wrap", "echo"), "--param: "),
        (("--name-template", "{name}", "--wrap", "echo"), "--name-template: names the tasks"),
        (("job.yaml",), f"{tmp_path}/rows.csv:3: 2 values for 1 names"),
    ]
    for args, message in cases:
        result = sbatch_in(head, tmp_path, *args)
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"gbatch sbatch: error: {message}"), lines
    assert head.run("squeue", "-h", check=True).stdout == ""
