"""A real Slurm beside gbatch, for the differential test: set up by .ci/setup-slurm.sh
(one node, this host, partition corpus.PARTITION), driven through real `sbatch` and
`scontrol`.

Final states come from `scontrol show job` (setup-slurm.sh keeps finished jobs there for
an hour with MinJobAge): Slurm's `sacct` needs slurmdbd and a database, too heavy for a
test machine; with accounting_storage/none it says "Slurm accounting storage is
disabled". `sacct -c` reads the job completion file (jobcomp/filetxt) instead and shows
State and ExitCode, but 22.05 errors on an array task's record ("Unknown type
ArrayJobId"), so the file is only for a person to read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from corpus import FINAL_STATES, PARTITION, Entry, Run, entry_named, prepare

SETUP = Path(__file__).resolve().parent.parent.parent / ".ci" / "setup-slurm.sh"


def _missing(why: str) -> None:
    """A skip on a laptop, a failure in CI (where a missing component never passes)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs a real Slurm: {why}")
    pytest.skip(why)


def ensure_slurm() -> None:
    """Run .ci/setup-slurm.sh (idempotent): as root it installs and starts Slurm."""
    if os.getuid() != 0:
        if shutil.which("sbatch") and _answers():
            return
        _missing("needs root to set up Slurm (.ci/setup-slurm.sh), or a running one")
    done = subprocess.run(
        ["bash", str(SETUP)],
        env={**os.environ, "SLURM_PARTITION": PARTITION},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        _missing(f"setup-slurm.sh failed:\n{done.stdout}{done.stderr}")


def _answers() -> bool:
    done = subprocess.run(
        ["scontrol", "ping"], capture_output=True, text=True, timeout=20, check=False
    )
    return "is UP" in done.stdout


def sbatch(run: Run, env: Mapping[str, str], dependency: str | None = None) -> None:
    """Submit the run's script from its submit dir; fills run.ids (or run.refused)."""
    entry = run.entry
    options = [f"--dependency={dependency}"] if dependency else []
    done = subprocess.run(
        ["sbatch", "--parsable", *options, entry.name, *entry.args],
        cwd=run.submit_dir,
        env={**os.environ, **env, **entry.env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        run.refused = done.stderr.strip() or f"sbatch exited {done.returncode}"
        return
    job_id = int(done.stdout.strip().split(";")[0])
    if entry.tasks is None:
        run.ids[None] = job_id
        return
    run.array_id = job_id
    for task in entry.tasks:
        run.ids[task] = job_id  # until the task's own id is known (finals)


def _records(job_id: int) -> list[dict[str, str]]:
    """`scontrol show job -o ID`: one dict per job (an array: per task or pending range)."""
    done = subprocess.run(
        ["scontrol", "show", "job", "-o", str(job_id)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    records = []
    for line in done.stdout.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        records.append(fields)
    return records


def finals(run: Run, timeout: float = 180.0) -> dict[int | None, tuple[str, str]]:
    """Wait until every task of the run has ended; (state, exit code) per task. An array
    task's own job id goes into run.ids."""
    assert run.array_id is not None or None in run.ids
    job_id = run.array_id if run.array_id is not None else run.ids[None]
    deadline = time.monotonic() + timeout
    while True:
        result: dict[int | None, tuple[str, str]] = {}
        records = _records(job_id)
        for fields in records:
            task_text = fields.get("ArrayTaskId")
            key: int | None = None
            if run.entry.tasks is not None:
                if task_text is None or not task_text.isdigit():
                    continue  # still a pending range
                key = int(task_text)
                run.ids[key] = int(fields["JobId"])
            if fields["JobState"] in FINAL_STATES:
                result[key] = (fields["JobState"], fields["ExitCode"])
        if set(result) == set(run.entry.task_keys):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"Slurm job {job_id} did not end in {timeout} s: {records}")
        time.sleep(0.2)


def slurm_run(entry: Entry, submit_dir: Path, env: Mapping[str, str]) -> Run:
    """As corpus.gbatch_run, through real sbatch: the prerequisite of a pipeline step
    first, then the step with --dependency=TYPE:ID."""
    prepare(entry, submit_dir)
    dependency = None
    first: Run | None = None
    if entry.after is not None:
        before = entry_named(entry.after[0])
        prepare(before, submit_dir)
        first = Run(before, submit_dir)
        sbatch(first, env)
        if first.refused is not None:
            run = Run(entry, submit_dir)
            run.refused = f"its prerequisite {before.name} was refused: {first.refused}"
            return run
        job_id = first.array_id if first.array_id is not None else first.ids[None]
        dependency = f"{entry.after[1]}:{job_id}"
    run = Run(entry, submit_dir)
    sbatch(run, env, dependency)
    run.before = first
    return run
