"""squeue's usual Slurm flags through the real CLI and daemon (issue 15, item 4):
-n/-p/-w filters, -S, -l, -O, --start with the planner's reservation, -i, bad values."""

from __future__ import annotations

import signal
import subprocess

from conftest import GBATCH, Head, wait_for

from gbatch.core.model import IMPLICIT_PARTITION


def _ids(head: Head, *args: str) -> list[int]:
    out = head.run("squeue", "-h", "-o", "%i", *args, check=True).stdout
    return [int(line) for line in out.split()]


def test_filters_sort_layouts_and_expected_start(head: Head) -> None:
    hog = head.sbatch("-J", "hog", "--gpus=2", "-t", "10", "--wrap", "sleep 300")
    head.wait_state(hog, "RUNNING")
    big = head.sbatch("-J", "big", "--gpus=2", "-t", "5", "--wrap", "true")
    held = head.sbatch("-J", "other", "--gpus=1", "--hold", "--wrap", "true")

    assert _ids(head, "-n", "big,nosuch") == [big]
    # Slurm's default order P,t,-p: pending before running, a held job (priority 0) last.
    assert _ids(head, "-p", IMPLICIT_PARTITION) == [big, held, hog]
    assert _ids(head, "-p", "nosuch") == []
    assert _ids(head, "-w", "local") == [hog]
    assert _ids(head, "--sort=-i") == [held, big, hog]
    assert _ids(head, "-S", "t,-i", "-a") == [held, big, hog]  # PENDING before RUNNING
    assert _ids(head, "-S", "-t,i") == [hog, big, held]  # as Slurm's getopt: a value
    assert _ids(head, "--sort", "-i") == [held, big, hog]
    assert _ids(head, "-S-t,-i") == [hog, held, big]

    # The planner reserves the 2 GPUs for `big` when `hog` reaches its limit.
    def start_of_big() -> str:
        lines = head.run("squeue", "--start", "-h", "-j", str(big), check=True).stdout
        return lines.split()[5] if lines.strip() else ""

    wait_for(lambda: start_of_big() not in ("", "N/A"), what="big's expected start")
    start = head.run("squeue", "--start", check=True).stdout.splitlines()
    assert start[0].split()[:6] == ["JOBID", "PARTITION", "NAME", "USER", "ST", "START_TIME"]
    # No RUNNING; held has no estimate, which Slurm sorts as now + 100 s: before big's.
    assert [line.split()[0] for line in start[1:]] == [str(held), str(big)]
    assert start[1].split()[5] == "N/A"

    long = head.run("squeue", "-l", "-j", str(hog), check=True).stdout.splitlines()
    assert len(long) == 3 and long[0].split()[-1].isdigit()  # "Tue Mar 05 10:00:00 2024"
    assert long[1].split()[4:7] == ["STATE", "TIME", "TIME_LIMI"]
    assert long[2].split()[4] == "RUNNING" and long[2].split()[6] == "10:00"
    assert head.run("squeue", "-l", "-h", "-j", str(hog), check=True).stdout.count("\n") == 1

    fields = head.run(
        "squeue", "-O", "JobID:8,Name:6,StateCompact:.3,NumCPUs:5,TimeLeft", "-n", "hog", check=True
    ).stdout.splitlines()
    assert fields[0].rstrip() == "JOBID   NAME   STCPUS TIME_LEFT"  # no gaps, as Slurm
    assert fields[1].startswith(f"{hog:<8}hog     R1    ")


def test_bad_values_name_their_flag_and_exit_2(head: Head) -> None:
    for args, flag in (
        (("-S", "i,x"), "-S/--sort"),
        (("-S", "-g"), "-S/--sort"),
        (("-O", "JobID,Bogus"), "-O/--Format"),
        (("-o", "%i %!"), "--format"),
        (("-i", "0"), "-i/--iterate"),
        (("-i", "soon"), "-i/--iterate"),
    ):
        result = head.run("squeue", *args)
        assert result.returncode == 2, args
        assert result.stderr.startswith(f"gbatch squeue: error: {flag}: "), result.stderr
        assert result.stderr.count("\n") == 1 and result.stdout == ""


def test_iterate_repeats_under_a_date_line_until_ctrl_c(head: Head) -> None:
    proc = subprocess.Popen(
        [*GBATCH, "squeue", "-i", "1"],
        env=head.env,
        cwd=head.home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    headers = 0
    lines = []
    while headers < 2:
        line = proc.stdout.readline()
        assert line, "squeue -i ended by itself"
        lines.append(line)
        headers += line.startswith("             JOBID")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert lines[0].split()[-1].isdigit() and lines[2] == "\n"  # date, header, blank


def test_ended_jobs_show_the_node_they_ran_on_or_slurms_reason(head: Head) -> None:
    # As a real Slurm 22.05's `squeue -t all`: a job cancelled while running or completed
    # shows its node; one cancelled while pending, none (a blank); a timed-out or failed
    # job its reason in parentheses, as a pending one: TimeLimit, as Slurm's. A failed
    # one's says its exit code (Slurm's: NonZeroExitCode).
    ran = head.sbatch("-J", "ran", "--gpus=1", "--wrap", "sleep 300")
    head.wait_state(ran, "RUNNING")
    waiting = head.sbatch("-J", "waiting", "--gpus=1", "--hold", "--wrap", "true")
    slow = head.sbatch("-J", "slow", "--gpus=1", "-t", "0:01", "--wrap", "sleep 300")
    failed = head.sbatch("-J", "failed", "--gpus=1", "--wrap", "exit 3")
    done = head.sbatch("-J", "done", "--gpus=1", "--wrap", "true")
    head.run("scancel", str(ran), str(waiting), check=True)
    head.wait_state(slow, "TIMEOUT")
    head.wait_state(failed, "FAILED")
    head.wait_state(done, "COMPLETED")
    head.wait_state(ran, "CANCELLED")

    out = head.run("squeue", "-h", "-t", "all", "-o", "%i|%t|%R", check=True).stdout
    rows = {
        int(i): (st, nodelist)
        for i, st, nodelist in (ln.split("|") for ln in out.split("\n") if ln)
    }
    assert rows[ran] == ("CA", "local")
    assert rows[waiting] == ("CA", "")
    assert rows[done] == ("CD", "local")
    assert rows[slow] == ("TO", "(TimeLimit)")
    assert rows[failed] == ("F", "(exit code 3)")
