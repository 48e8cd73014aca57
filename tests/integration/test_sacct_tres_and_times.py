"""sacct through the real CLI and daemon: TRES fields, --units, --name, -S/-E's forms."""

from __future__ import annotations

from conftest import Head


def test_sacct_shows_tres_and_narrows_by_name_and_relative_times(head: Head) -> None:
    job_id = head.sbatch("-J", "tres-job", "-c", "1", "--mem", "1500M", "--wrap", "true")
    head.sbatch("-J", "other", "--wrap", "true")
    head.wait_state(job_id, "COMPLETED")
    fields = ("-X", "-o", "JobID,JobName,AllocTRES,ReqMem,AllocCPUS", "-P", "-n")
    out = head.run(
        "sacct", "-S", "now-1hours", "-E", "now+1hours", "--name", "tres-job", "--units", "G",
        *fields, check=True,
    ).stdout  # fmt: skip
    assert out == f"{job_id}|tres-job|billing=1,cpu=1,mem=1500M,node=1|1.46G|1\n"
    # A window that ended an hour ago holds neither job.
    assert (
        head.run("sacct", "-S", "now-3days", "-E", "now-1hours", *fields, check=True).stdout == ""
    )
    bad = head.run("sacct", "-S", "now-3fortnights")
    assert bad.returncode == 2 and "--starttime" in bad.stderr and "not a unit" in bad.stderr
