"""sprio, seff and sreport through the real CLI and daemon: a finished 2-GPU job's
efficiency and its GPU-hours in the period's report, pending jobs' ordering factors (held
ones left out, as Slurm's sprio does), a running job's GPU samples in seff and sacct."""

from __future__ import annotations

import json
import re

from conftest import Head, wait_for


def test_seff_sreport_and_sprio_report_what_the_daemon_recorded(head: Head) -> None:
    done = head.sbatch("-G", "2", "-t", "1:00", "--wrap", "sleep 1")
    head.wait_state(done, "COMPLETED")
    # Pending behind a held job: sprio lists them, and leaves the held one out (Slurm's
    # held jobs have priority 0 and are not the scheduler's to consider).
    gate = head.sbatch("--hold", "--wrap", "true")
    after = f"afterok:{gate}"
    low = head.sbatch("-d", after, "--nice", "5", "--wrap", "true")
    high = head.sbatch("-d", after, "--priority", "3", "--wrap", "true")

    seff = head.run("seff", str(done), check=True).stdout
    assert f"Job ID: {done}\n" in seff
    assert "State: COMPLETED (exit code 0)\n" in seff
    assert "Time Limit Efficiency: " in seff and "of 00:01:00 time limit" in seff
    assert "GPUs: 2 (node local, GPU 0,1)\n" in seff
    assert "CPU Utilized: not measured\n" in seff
    pending = head.run("seff", str(low), check=True).stdout
    assert "Efficiency not available for jobs in the PENDING state." in pending

    report = head.run("sreport", "-S", "2000-01-01", "-E", "now", "--json", check=True)
    (row,) = json.loads(report.stdout)["rows"]
    assert row["jobs"] == 1
    assert 2 * 1 <= row["gpu_seconds"] < 2 * 60  # 2 GPUs, a run of about a second
    text = head.run("sreport", "-S", "2000-01-01", "-E", "now", "-P", "-n", check=True).stdout
    assert text == f"{row['name']}|{row['gpu_seconds'] / 3600:.2f}|1\n"
    # Slurm's default period is yesterday: today's job is not in it
    assert json.loads(head.run("sreport", "--json", check=True).stdout)["rows"] == []

    lines = head.run("sprio", "-l", "-h", check=True).stdout.splitlines()
    by_id = {int(line.split()[0]): line.split() for line in lines}
    assert set(by_id) == {low, high}
    # JOBID PARTITION USER RANK PRIORITY JOBPRIO NICE FAIRSHARE AGE SUBMIT_TIME
    assert by_id[high][3:7] == ["1", "3", "3", "0"]
    assert by_id[low][3:7] == ["2", "-5", "0", "5"]
    header = head.run("sprio", "-j", str(high), check=True).stdout.splitlines()
    assert header[0].split() == [
        "JOBID",
        "PARTITION",
        "USER",
        "PRIORITY",
        "AGE",
        "FAIRSHARE",
        "NICE",
        "QOS",
    ]
    assert len(header) == 2 and header[1].split()[0] == str(high)
    held = head.run("sprio", "-j", str(gate), check=True).stdout
    assert held == "Unable to find jobs matching user/id(s) specified\n"


def test_sreport_refuses_a_period_that_ends_before_it_starts(head: Head) -> None:
    result = head.run("sreport", "-S", "2024-02-01", "-E", "2024-01-01")
    assert result.returncode == 2
    assert result.stderr.startswith("gbatch sreport: error: --end: ")


def test_scontrol_show_job_without_an_id_lists_every_queued_job(head: Head) -> None:
    # As Slurm: `scontrol show job` and `show jobs` with no id list the jobs held.
    for words in (["job"], ["jobs"]):
        empty = head.run("scontrol", "show", *words)
        assert (empty.returncode, empty.stdout) == (0, "No jobs in the system\n"), empty.stderr
    first = head.sbatch("-H", "-J", "first", "--wrap", "true")
    second = head.sbatch("-H", "-J", "second", "--wrap", "true")
    for words in (["job"], ["JOBS"]):
        out = head.run("scontrol", "show", *words, check=True).stdout
        records = out.split("\n\n")
        assert [r.split()[0] for r in records] == [f"JobId={first}", f"JobId={second}"], out
        assert "JobName=first" in records[0] and "JobName=second" in records[1]
    listed = json.loads(head.run("scontrol", "show", "jobs", "--json", check=True).stdout)
    assert [item["job_id"] for item in listed] == [first, second]


def test_squeue_of_a_job_that_does_not_exist_is_an_error(head: Head) -> None:
    # Slurm: `slurm_load_jobs error: Invalid job id specified`, exit 1 (not an empty table).
    missing = head.run("squeue", "-j", "999")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == "gbatch squeue: error: Invalid job id specified: 999\n"
    # A job that exists but is filtered out still gives the (empty) table.
    job_id = head.sbatch("-H", "--wrap", "true")
    filtered = head.run("squeue", "-j", str(job_id), "-t", "R", "-h")
    assert (filtered.returncode, filtered.stdout, filtered.stderr) == (0, "", "")
    shown = head.run("squeue", "-j", f"{job_id},999", "-h", check=True)
    assert shown.stdout.split()[0] == str(job_id)


def test_squeue_of_a_user_that_does_not_exist_is_an_error(head: Head) -> None:
    # Slurm: `squeue: error: Invalid user: NAME`, exit 1; a real user with no jobs: empty.
    missing = head.run("squeue", "-u", "root,nosuchuser")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == "gbatch squeue: error: Invalid user: nosuchuser\n"
    assert head.run("squeue", "-u", "nobody", "-h", check=True).stdout == ""


def test_seff_and_sacct_report_the_gpu_samples_taken_while_the_job_ran(head: Head) -> None:
    sim = head.home / "simulated-gpus.json"
    gpus = json.loads(sim.read_text())
    for entry in gpus["gpus"]:
        entry["utilization_pct"] = 60  # busy, yet free: only memory used keeps a GPU
    sim.write_text(json.dumps(gpus))
    job = head.sbatch("-G", "1", "--wrap", "sleep 120")
    head.wait_state(job, "RUNNING")
    (index,) = head.job(job)["gpus"]  # type: ignore[misc]
    gpus["gpus"][index]["memory_used_mib"] = 11469  # 11.20 GiB, once the job runs
    # Replaced whole, never rewritten in place: an agent's read in between would see an
    # empty file, a report of no GPUs, and a sample of 0 % for the job's.
    fresh = sim.with_suffix(".new")
    fresh.write_text(json.dumps(gpus))
    fresh.replace(sim)

    def seff() -> str:
        return head.run("seff", str(job), check=True).stdout

    wait_for(lambda: "GPU Memory: max 11.20 GiB of 80.00 GiB\n" in seff(), what="memory sample")
    head.run("scancel", str(job), check=True)
    head.wait_state(job, "CANCELLED")
    text = seff()
    assert re.search(r"^GPU Utilization: 60\.0% \(mean over \d+ samples\), max 60%$", text, re.M)
    assert "GPU Memory: max 11.20 GiB of 80.00 GiB\n" in text
    tres = head.run(
        "sacct", "-X", "-j", str(job), "-P", "-n", "-o", "JobID,TRESUsageInMax", check=True
    )
    assert tres.stdout == f"{job}|gres/gpumem=11.20G,gres/gpuutil=60\n"
