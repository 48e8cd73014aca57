"""The corpus of real-world Slurm batch scripts (tests/slurm_corpus/) through the real
gbatch CLI and one real daemon: each script submitted unchanged from its own submit dir,
then, per script, the files where Slurm puts them with the lines Slurm's run prints, the
same lines in `gbatch logs`, and the final state and exit code in `gbatch sacct`.

Every expectation was checked against a real Slurm (22.05, .ci/setup-slurm.sh; see
test_slurm_differential.py, which runs both side by side)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from conftest import Head, kill_leftover_jobs, make_head
from corpus import (
    CORPUS,
    CORPUS_GPUS,
    FINAL_STATES,
    PARTITION,
    Entry,
    Run,
    gbatch_run,
    job_output_lines,
    load_corpus,
    output_problems,
    sacct,
)

ENTRIES = load_corpus()


@pytest.fixture(scope="module")
def corpus_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    head = make_head(tmp_path_factory.mktemp("corpus-head") / "home", CORPUS_GPUS)
    head.start()
    yield head
    head.stop()
    kill_leftover_jobs(head.home)


@pytest.fixture(scope="module")
def runs(corpus_head: Head, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every corpus script submitted at once (each from its own dir), then waited on."""
    base = tmp_path_factory.mktemp("corpus-submit")
    done = {
        entry.name: gbatch_run(corpus_head, entry, base / entry.script.stem) for entry in ENTRIES
    }
    for run in done.values():
        for job_id in run.ids.values():
            corpus_head.wait_state(job_id, *FINAL_STATES, timeout=90)
    return done


def submitted(runs: dict[str, Run], entry: Entry) -> Run:
    run = runs[entry.name]
    assert run.refused is None, f"{entry.name} ({entry.about}) was refused: {run.refused}"
    return run


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_a_corpus_script_ends_as_under_slurm(
    runs: dict[str, Run], corpus_head: Head, entry: Entry
) -> None:
    run = submitted(runs, entry)
    for task, job_id in run.ids.items():
        named = job_id if task is None else f"{run.array_id}_{task}"  # N alone: every task
        assert sacct(corpus_head, named) == (entry.state, entry.exit_code), f"task {task}"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_a_corpus_script_prints_what_it_prints_under_slurm(
    runs: dict[str, Run], corpus_head: Head, entry: Entry
) -> None:
    """The job's lines, stdout and stderr together, in `gbatch logs` (the head's copy)."""
    run = submitted(runs, entry)
    for task, job_id in run.ids.items():
        log = corpus_head.run("logs", str(job_id), check=True).stdout.splitlines()
        for line in job_output_lines(run, task):
            assert line in log, f"task {task}: {line!r} not in the log {log}"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_a_corpus_script_leaves_its_files_where_slurm_does(
    runs: dict[str, Run], entry: Entry
) -> None:
    run = submitted(runs, entry)
    problems = output_problems(run)
    assert not problems, "\n".join(problems)


def test_the_corpus_is_whole_and_names_one_partition() -> None:
    """Every script has its expectations; a script's -p names PARTITION (change both
    together); each runs bare (sh, bash or python3) on the embedded node."""
    assert len(ENTRIES) >= 20
    names = {e.name for e in ENTRIES}
    for entry in ENTRIES:
        text = entry.script.read_text()
        assert text.splitlines()[0] in ("#!/bin/bash", "#!/bin/sh", "#!/usr/bin/env python3")
        assert "--image" not in text and "--container-image" not in text
        assert "# SBATCH" not in text, f"{entry.name}: a formatter broke its #SBATCH lines"
        for found in re.findall(r"^#SBATCH\s+(?:-p\s*|--partition[= ])(\S+)", text, re.M):
            assert found == PARTITION, f"{entry.name}: -p {found}, the test says {PARTITION}"
        if entry.after is not None:
            assert entry.after[0] in names and entry.after[1] in ("afterok", "afterany")
    scripts = {e.script.stem for e in ENTRIES}
    orphans = [p.name for p in CORPUS.glob("*.json") if p.stem not in scripts]
    assert not orphans, f"expectations without a script: {orphans}"
