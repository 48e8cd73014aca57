"""The corpus through a real Slurm and through gbatch, side by side (issue 14): the same
script, unchanged, submitted from two submit dirs by real `sbatch` and by `gbatch
sbatch`; then, per script, both must leave the same files (names compared through their
patterns, since the ids differ), the same text in them (the SLURM_* values the scripts
print, their $1, ...; the submit dir written as {submit_dir}), and end in the same state
with the same exit code (Slurm's from `scontrol show job`, see slurm.py; gbatch's from
`gbatch sacct`), which must also be what the corpus expects.

Slurm comes from .ci/setup-slurm.sh (run by the fixture; as root it installs and starts
a one-node Slurm): without root and without a running Slurm the test is skipped
locally, and fails with CI=true."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Head, kill_leftover_jobs, make_head
from corpus import (
    CORPUS_GPUS,
    Entry,
    Run,
    files_left,
    gbatch_finals,
    gbatch_run,
    load_corpus,
    normalized_outputs,
    output_problems,
)
from slurm import ensure_slurm, finals, slurm_run

ENTRIES = [e for e in load_corpus() if not e.gbatch_only]


@dataclass
class Pair:
    slurm: Run
    gbatch: Run
    slurm_finals: dict[int | None, tuple[str, str]]
    gbatch_finals: dict[int | None, tuple[str, str]]


@pytest.fixture(scope="module")
def slurm_ready() -> None:
    ensure_slurm()


@pytest.fixture(scope="module")
def diff_head(slurm_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    head = make_head(tmp_path_factory.mktemp("diff-head") / "home", CORPUS_GPUS)
    head.start()
    yield head
    head.stop()
    kill_leftover_jobs(head.home)


@pytest.fixture(scope="module")
def pairs(diff_head: Head, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pair]:
    """Every script submitted to both at once, then waited on (states, never sleeps)."""
    # Under /tmp, not pytest's private base dir: slurmd (root here) reads and writes there,
    # and the two submit dirs differ only in their last-but-one part.
    base = tmp_path_factory.mktemp("differential")
    base.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GBATCH_", "SLURM_"))}
    started = [
        (
            entry,
            slurm_run(entry, base / "slurm" / entry.script.stem, env),
            gbatch_run(diff_head, entry, base / "gbatch" / entry.script.stem),
        )
        for entry in ENTRIES
    ]
    done = {}
    for entry, on_slurm, on_gbatch in started:
        slurm_end = finals(on_slurm) if on_slurm.refused is None else {}
        gbatch_end = gbatch_finals(diff_head, on_gbatch) if on_gbatch.refused is None else {}
        done[entry.name] = Pair(on_slurm, on_gbatch, slurm_end, gbatch_end)
    return done


def both_took(pairs: dict[str, Pair], entry: Entry) -> Pair:
    pair = pairs[entry.name]
    assert pair.slurm.refused is None, f"Slurm refused {entry.name}: {pair.slurm.refused}"
    assert pair.gbatch.refused is None, f"gbatch refused {entry.name}: {pair.gbatch.refused}"
    return pair


def test_the_differential_covers_most_of_the_corpus() -> None:
    assert len(ENTRIES) >= 8


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_gbatch_ends_a_script_as_slurm_does(pairs: dict[str, Pair], entry: Entry) -> None:
    pair = both_took(pairs, entry)
    expected = {task: (entry.state, entry.exit_code) for task in entry.task_keys}
    assert pair.slurm_finals == expected, "the corpus no longer says what Slurm does"
    assert pair.gbatch_finals == pair.slurm_finals


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_gbatch_leaves_the_files_slurm_leaves(pairs: dict[str, Pair], entry: Entry) -> None:
    pair = both_took(pairs, entry)
    assert output_problems(pair.slurm) == [], "the corpus no longer says what Slurm does"
    assert files_left(pair.gbatch) == files_left(pair.slurm)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_gbatch_jobs_print_what_slurm_jobs_print(pairs: dict[str, Pair], entry: Entry) -> None:
    """SLURM_JOB_NAME, SLURM_ARRAY_TASK_*, SLURM_SUBMIT_DIR, SLURM_NTASKS,
    SLURM_CPUS_PER_TASK, SLURM_JOB_NUM_NODES, $1...: whatever each script prints."""
    pair = both_took(pairs, entry)
    assert normalized_outputs(pair.gbatch) == normalized_outputs(pair.slurm)


def test_the_slurm_setup_script_is_idempotent(slurm_ready: None) -> None:
    """A second run leaves the running Slurm alone and answers ready."""
    ensure_slurm()
    assert Path("/etc/slurm/slurm.conf").is_file()
