"""Job ids through the real CLI and daemon: one strict grammar in every command that
takes ids, and arrays addressed as Slurm does (N, N_K, N_[K-M])."""

from __future__ import annotations

import pytest
from conftest import Head

COMMANDS = {
    "scancel": ("scancel", "{}"),
    "squeue": ("squeue", "-j", "{}"),
    "sacct": ("sacct", "-j", "{}"),
    "scontrol show": ("scontrol", "show", "job", "{}"),
    "scontrol hold": ("scontrol", "hold", "{}"),
    "scontrol release": ("scontrol", "release", "{}"),
    "scontrol requeue": ("scontrol", "requeue", "{}"),
    "logs": ("logs", "{}"),
    "seff": ("seff", "{}"),
    "sprio": ("sprio", "-j", "{}"),
    "scontrol update": ("scontrol", "update", "JobId={}", "Comment=x"),
    "sbatch --dependency": ("sbatch", "--hold", "-d", "afterok:{}", "--wrap", "true"),
}


# The grammar's every case is in tests/unit/test_jobids.py; here, that each command uses it.
@pytest.mark.parametrize("bad", ["+4", "99999999999999999999", "1_000", "4,,5"])
def test_every_command_taking_ids_refuses_a_bad_one_in_one_line(head: Head, bad: str) -> None:
    array = head.sbatch("--array", "0-2", "--hold", "--wrap", "true")
    for name, template in COMMANDS.items():
        args = [part.format(bad) for part in template]
        result = head.run(*args)
        assert result.returncode == 2, (name, result.stdout, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, (name, result.stderr)
        assert lines[0].startswith(f"gbatch {name.split()[0]}: error: "), (name, lines[0])
        # --dependency's `,` joins terms: there `4,,5` has an empty term, not an empty id.
        assert "is not a job id" in lines[0] or "is not a dependency" in lines[0], lines[0]
    pending = head.run("squeue", "-r", "-h", "-o", "%i %T", check=True).stdout.splitlines()
    assert pending == [f"{array}_{k} PENDING" for k in range(3)]  # nothing touched or queued


ANY = (
    "Give N, N_K (task K of array N), N_[K-M] or FIRST-LAST, or a comma list of those, "
    "e.g. 12,13_2,20_[1-3]"
)
ONE = "Give N or N_K (task K of array N), e.g. 12 or 12_3"

# Each command's refusal: its own option or argument, the bad id, and only what it takes.
REFUSALS = [
    (COMMANDS["scancel"], "abc", "gbatch scancel: error: JOBID: 'abc' is not a job id. " + ANY),
    (
        COMMANDS["squeue"],
        "12,abc",
        "gbatch squeue: error: -j/--jobs: 'abc' is not a job id. " + ANY,
    ),
    (COMMANDS["sacct"], "abc", "gbatch sacct: error: -j/--jobs: 'abc' is not a job id. " + ANY),
    (
        COMMANDS["scontrol hold"],
        "abc",
        "gbatch scontrol: error: hold: 'abc' is not a job id. " + ANY,
    ),
    (
        COMMANDS["scontrol release"],
        "4_",
        "gbatch scontrol: error: release: '4_' is not a job id. " + ANY,
    ),
    (
        COMMANDS["scontrol requeue"],
        "abc",
        "gbatch scontrol: error: requeue: 'abc' is not a job id. " + ANY,
    ),
    (
        COMMANDS["scontrol show"],
        "abc",
        "gbatch scontrol: error: show job: 'abc' is not a job id. " + ONE,
    ),
    (
        COMMANDS["scontrol show"],
        "4-6",
        "gbatch scontrol: error: show job: '4-6': a range of ids is not taken here. " + ONE,
    ),
    (COMMANDS["logs"], "4,5", "gbatch logs: error: JOBID: '4,5': one job here, not a list. " + ONE),
    (
        COMMANDS["seff"],
        "4_[1-2]",
        "gbatch seff: error: JOBID: '4_[1-2]': one task here, not several. " + ONE,
    ),
    (
        COMMANDS["sprio"],
        "4-6",
        "gbatch sprio: error: -j/--jobs: '4-6': a range of ids is not taken here. "
        "Give N or a comma list of those, e.g. 12,13",
    ),
    (
        COMMANDS["sprio"],
        "12,4_1",
        "gbatch sprio: error: -j/--jobs: '4_1': not an array task here; name the task by its "
        "own job id (`gbatch sacct -j 4 -o JobID,JobIDRaw` shows it). "
        "Give N or a comma list of those, e.g. 12,13",
    ),
    (
        COMMANDS["scontrol update"],
        "abc",
        f"gbatch scontrol: error: update: JobId: 'abc' is not a job id. {ONE}",
    ),
]


def test_each_command_names_the_bad_id_and_its_own_syntax(head: Head) -> None:
    array = head.sbatch("--array", "0-2", "--hold", "--wrap", "true")
    for template, bad, message in REFUSALS:
        result = head.run(*[part.format(bad) for part in template])
        assert (result.returncode, result.stdout, result.stderr) == (2, "", message + "\n")
    held = head.run("squeue", "-r", "-h", "-o", "%i %T", check=True).stdout.splitlines()
    assert held == [f"{array}_{k} PENDING" for k in range(3)]  # nothing done


def test_n_k_is_task_k_of_array_n_never_job_nk(head: Head) -> None:
    array = head.sbatch("--array", "0-50", "--hold", "--wrap", "true")
    assert array < 10  # so that {array + 1}_5 reads as a job id int() would take
    not_an_array = array + 1  # task 1 of the array, not an array's id
    wrong = head.run("scancel", f"{not_an_array}_5")
    assert wrong.returncode == 1
    assert wrong.stderr == (
        f"gbatch scancel: error: Kill job error on job id {not_an_array}_5: "
        f"Invalid job id specified: {not_an_array}_5\n"
    )
    assert head.state(int(f"{not_an_array}5")) == "PENDING"  # the job int() would name
    head.run("scancel", f"{array}_44", check=True)
    assert head.state(array + 44) == "CANCELLED"
    assert head.state(array + 45) == "PENDING"
    head.run("scancel", str(array), check=True)


def test_an_array_lives_as_slurm_shows_it(head: Head) -> None:
    out = head.run(
        "sbatch", "--array", "0-4", "--gpus", "1", "--wrap", "sleep 60", check=True
    ).stdout
    assert out.startswith("Submitted batch job ")
    array = int(out.split()[-1])
    head.wait_state(array, "RUNNING")
    head.wait_state(array + 1, "RUNNING")
    rows = head.run("squeue", "-h", "-o", "%i %t", check=True).stdout
    assert rows == f"{array}_[2-4] PD\n{array}_0 R\n{array}_1 R\n"  # Slurm's P,t,-p order
    expanded = head.run("squeue", "-r", "-h", "-o", "%i %K %A", check=True).stdout.splitlines()
    assert expanded == [f"{array}_{k} {k} {array + k}" for k in (2, 3, 4, 0, 1)]

    shown = head.run("scontrol", "show", "job", f"{array}_3", check=True).stdout
    assert shown.startswith(f"JobId={array + 3} ArrayJobId={array} ArrayTaskId=3 JobName=")
    whole = head.run("scontrol", "show", "job", str(array), check=True).stdout
    assert [line.split()[0] for line in whole.splitlines() if line.startswith("JobId=")] == [
        f"JobId={array + k}" for k in range(5)
    ]
    assert head.job(array + 2)["array_job_id"] == array
    assert head.job(array + 2)["array_task_id"] == 2

    head.run("scancel", f"{array}_3", check=True)
    rows = head.run("squeue", "-h", "-t", "PD", "-o", "%i", check=True).stdout
    assert rows == f"{array}_[2,4]\n"
    head.run("scontrol", "hold", f"{array}_[2,4]", check=True)
    assert head.job(array + 4)["reason"] == "JobHeldUser"

    head.run("scancel", str(array), check=True)  # the array's id: every task
    for k in range(5):
        head.wait_state(array + k, "CANCELLED")
    acct = head.run(
        "sacct", "-X", "-j", str(array), "-n", "-P", "-o", "JobID,JobIDRaw,State"
    ).stdout
    assert acct.splitlines() == [f"{array}_{k}|{array + k}|CANCELLED" for k in range(5)]
    one = head.run("sacct", "-X", "-j", f"{array}_1", "-n", "-P", "-o", "JobID", check=True).stdout
    assert one == f"{array}_1\n"
    assert head.run("logs", f"{array}_1").returncode == 0
    missing = head.run("logs", f"{array}_9")
    assert (missing.returncode, missing.stderr) == (
        1,
        f"gbatch logs: error: Invalid job id specified: {array}_9\n",
    )
