"""The corpus of real-world Slurm batch scripts (tests/slurm_corpus/) and what Slurm does
with each: loading the expectations beside every script, preparing a submit dir, and
checking the files a run left there. Shared by the corpus test (gbatch alone) and the
differential test (gbatch and a real Slurm side by side).

An expectations file `NAME.json` beside `NAME.sh`/`NAME.py` holds:
  about      one line: what the script shows
  args       the script's arguments ($1...), after the script on the sbatch line
  files      {relative path: text} written into the submit dir before the submit
  env        {VAR: value} set in the environment sbatch runs in
  tasks      an array's task ids (absent: not an array)
  per_task   {task: {name: value}} extra placeholders per task
  outputs    {file pattern: [lines]}: the file must exist and hold these lines, in this
             order (other lines may come between)
  not_in     {file pattern: [lines]}: lines the file must not hold
  absent     [file pattern]: files that must not exist
  state      final state (sacct / scontrol show job)
  exit_code  Slurm's N:S
  after      {script, type}: submitted by the driver right after that script (in the same
             submit dir) with --dependency=TYPE:ID of it
  gbatch_only  true: the script uses an option Slurm lacks (left out of the differential)
Patterns and lines use placeholders: {job} (the job's id; an array task's own id), {array}
(the array's id), {task} (the task id), {submit_dir}, and the per_task names.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from conftest import GBATCH, Head

CORPUS = Path(__file__).resolve().parent.parent / "slurm_corpus"
# The embedded node's partition as the partitions work names it; the corpus scripts that
# say `-p` use this name, and .ci/setup-slurm.sh gives real Slurm the same one.
PARTITION = "gpu"  # gbatch.core.model.IMPLICIT_PARTITION (i14-partitions)
# The corpus node's GPUs, for GBATCH_SIMULATE_GPUS: two A100s, as .ci/setup-slurm.sh gives
# real Slurm (gres.conf Type=a100), so scripts may ask for the model (--gres=gpu:a100:1).
CORPUS_GPUS = "a100-80gb:2"
FINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"}
)
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_SRUN_NODE = re.compile(r"^(srun: error: )[^:\s]+: task", re.M)
_SRUN_WAITED = re.compile(
    r"^srun: (Job \d+ step creation temporarily disabled, retrying.*|Step created for .*)\n",
    re.M,
)


@dataclass(frozen=True)
class Entry:
    """One corpus script and what Slurm does with it."""

    script: Path
    about: str
    state: str
    exit_code: str
    args: tuple[str, ...] = ()
    files: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    tasks: tuple[int, ...] | None = None
    per_task: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    outputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    not_in: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    absent: tuple[str, ...] = ()
    after: tuple[str, str] | None = None
    gbatch_only: bool = False  # uses an option real Slurm lacks: not in the differential

    @property
    def name(self) -> str:
        return self.script.name

    @property
    def task_keys(self) -> tuple[int | None, ...]:
        return self.tasks if self.tasks is not None else (None,)


def load_entry(script: Path) -> Entry:
    data = json.loads(script.with_suffix(".json").read_text())
    after = data.get("after")
    return Entry(
        script=script,
        about=data["about"],
        state=data["state"],
        exit_code=data["exit_code"],
        args=tuple(data.get("args", ())),
        files=dict(data.get("files", {})),
        env=dict(data.get("env", {})),
        tasks=tuple(data["tasks"]) if "tasks" in data else None,
        per_task={k: dict(v) for k, v in data.get("per_task", {}).items()},
        outputs={k: tuple(v) for k, v in data.get("outputs", {}).items()},
        not_in={k: tuple(v) for k, v in data.get("not_in", {}).items()},
        absent=tuple(data.get("absent", ())),
        after=(after["script"], after["type"]) if after else None,
        gbatch_only=bool(data.get("gbatch_only", False)),
    )


def load_corpus() -> list[Entry]:
    scripts = sorted(p for p in CORPUS.iterdir() if p.suffix in (".sh", ".py"))
    return [load_entry(p) for p in scripts]


def entry_named(name: str) -> Entry:
    return load_entry(CORPUS / name)


def prepare(entry: Entry, submit_dir: Path) -> None:
    """The submit dir as the user has it: the script (copied unchanged) and its inputs."""
    submit_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(entry.script, submit_dir / entry.name)
    for rel, text in entry.files.items():
        path = submit_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@dataclass
class Run:
    """One entry as submitted: its submit dir and the job id of each task (None: the job)."""

    entry: Entry
    submit_dir: Path
    ids: dict[int | None, int] = field(default_factory=dict)
    array_id: int | None = None
    refused: str | None = None  # sbatch's stderr when the submit failed
    before: Run | None = None  # the pipeline step submitted first (entry.after)


def _srun_node_named(text: str) -> str:
    """`srun: error: NODE: task ...` with NODE as {node}: Slurm's is this host's name,
    gbatch's the node's (`local`). srun's lines about a step that had to wait for the one
    before it to let go of the node go: whether they come is a race, under Slurm too."""
    return _SRUN_NODE.sub(r"\1{node}: task", _SRUN_WAITED.sub("", text))


def placeholders(run: Run, task: int | None) -> dict[str, str]:
    # {node} stays as written: _srun_node_named writes the files' node names so.
    values = {"job": str(run.ids[task]), "submit_dir": str(run.submit_dir), "node": "{node}"}
    if task is not None:
        values.update(task=str(task), array=str(run.array_id))
        values.update(run.entry.per_task.get(str(task), {}))
    return values


def expand(text: str, values: Mapping[str, str]) -> str:
    """Fill {name} placeholders; an unknown name is a corpus mistake, not a literal."""

    def one(match: re.Match[str]) -> str:
        if match.group(1) not in values:
            raise KeyError(f"unknown placeholder {match.group(0)} in {text!r}")
        return values[match.group(1)]

    return _PLACEHOLDER.sub(one, text)


def in_order(wanted: tuple[str, ...], lines: list[str]) -> bool:
    """`wanted` occurs in `lines` in this order (other lines may come between)."""
    position = 0
    for line in lines:
        if position < len(wanted) and line == wanted[position]:
            position += 1
    return position == len(wanted)


def output_problems(run: Run) -> list[str]:
    """What differs between the submit dir after the run and what Slurm leaves there."""
    problems: list[str] = []
    for task in run.entry.task_keys:
        values = placeholders(run, task)
        for pattern, lines in run.entry.outputs.items():
            rel = expand(pattern, values)
            path = run.submit_dir / rel
            if not path.is_file():
                found = sorted(
                    str(p.relative_to(run.submit_dir)) for p in run.submit_dir.rglob("*")
                )
                problems.append(f"{rel}: missing (the submit dir holds {found})")
                continue
            have = _srun_node_named(path.read_text(errors="replace")).splitlines()
            want = tuple(expand(line, values) for line in lines)
            if not in_order(want, have):
                problems.append(f"{rel}: wanted the lines {list(want)} in order, found {have}")
        for pattern, lines in run.entry.not_in.items():
            rel = expand(pattern, values)
            path = run.submit_dir / rel
            have = path.read_text(errors="replace").splitlines() if path.is_file() else []
            for line in lines:
                if expand(line, values) in have:
                    problems.append(f"{rel}: holds {expand(line, values)!r}, which goes elsewhere")
        for pattern in run.entry.absent:
            rel = expand(pattern, values)
            if (run.submit_dir / rel).exists():
                problems.append(f"{rel}: exists, but Slurm writes no such file here")
    return problems


def job_output_lines(run: Run, task: int | None) -> list[str]:
    """The expected lines the job itself prints (not what a file held before it ran, nor
    files the script writes on its own): what `gbatch logs` must show too."""
    values = placeholders(run, task)
    given = {line for text in run.entry.files.values() for line in text.splitlines()}
    job_files = {
        pattern
        for pattern in run.entry.outputs
        if pattern.endswith((".out", ".err", ".log"))
        or any(p in pattern for p in ("{job}", "{task}", "{array}"))
    }
    return [
        expand(line, values)
        for pattern in sorted(job_files)
        for line in run.entry.outputs[pattern]
        if expand(line, values) not in given
    ]


def normalized_outputs(run: Run) -> dict[str, str]:
    """Every expected output file's text with the submit dir written as {submit_dir} and
    the name as its pattern with the task: what must be equal under gbatch and Slurm."""
    texts: dict[str, str] = {}
    for task in run.entry.task_keys:
        values = placeholders(run, task)
        for pattern in run.entry.outputs:
            path = run.submit_dir / expand(pattern, values)
            text = path.read_text(errors="replace") if path.is_file() else "<missing>"
            text = text.replace(str(run.submit_dir), "{submit_dir}")
            texts[f"{pattern} task={task}"] = _srun_node_named(text)
    return texts


def parse_parsable(entry: Entry, out: str) -> tuple[dict[int | None, int], int | None]:
    """`sbatch --parsable`'s answer -> (job id per task, array id). Both print an array's
    id (`N`, or Slurm's `N;cluster`); gbatch's tasks have consecutive ids from it."""
    text = out.strip().split(";")[0]
    first = int(text)
    if entry.tasks is None:
        return {None: first}, None
    return {task: first + pos for pos, task in enumerate(entry.tasks)}, first


def gbatch_submit(head: Head, entry: Entry, submit_dir: Path, dependency: str | None) -> Run:
    """`gbatch sbatch --parsable [--dependency=...] SCRIPT ARGS` from the submit dir."""
    run = Run(entry, submit_dir)
    options = [f"--dependency={dependency}"] if dependency else []
    done = subprocess.run(
        [*GBATCH, "sbatch", "--parsable", *options, entry.name, *entry.args],
        env={**head.env, **entry.env},
        cwd=submit_dir,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        run.refused = done.stderr.strip() or f"exit status {done.returncode}"
    else:
        run.ids, run.array_id = parse_parsable(entry, done.stdout)
    return run


def gbatch_run(head: Head, entry: Entry, submit_dir: Path) -> Run:
    """The driver step of a pipeline: the script it waits on first, then the script with
    --dependency=TYPE:ID, both from the same submit dir (as a user's driver does)."""
    prepare(entry, submit_dir)
    dependency = None
    first: Run | None = None
    if entry.after is not None:
        before = entry_named(entry.after[0])
        prepare(before, submit_dir)
        first = gbatch_submit(head, before, submit_dir, None)
        if first.refused is not None:
            run = Run(entry, submit_dir)
            run.refused = f"its prerequisite {before.name} was refused: {first.refused}"
            return run
        dependency = f"{entry.after[1]}:{':'.join(str(i) for i in first.ids.values())}"
    run = gbatch_submit(head, entry, submit_dir, dependency)
    run.before = first
    return run


def sacct(head: Head, job_id: int | str) -> tuple[str, str]:
    """`job_id`: one job, or an array task as `N_K` (an array's id `N` lists all its tasks)."""
    # -X: the job's own line, not its steps' (N.batch, N.0, ...).
    out = head.run(
        "sacct",
        "-X",
        "-j",
        str(job_id),
        "-S",
        "all",
        "-n",
        "-P",
        "-o",
        "State,ExitCode",
        check=True,
    ).stdout
    state, exit_code = out.strip().split("|")
    return state, exit_code


def gbatch_finals(head: Head, run: Run, timeout: float = 90.0) -> dict[int | None, tuple[str, str]]:
    """Wait (on states) until every task of the run has ended; `gbatch sacct`'s (State,
    ExitCode) per task."""
    for job_id in run.ids.values():
        head.wait_state(job_id, *FINAL_STATES, timeout=timeout)
    return {
        task: sacct(head, job_id if task is None else f"{run.array_id}_{task}")
        for task, job_id in run.ids.items()
    }


def files_left(run: Run) -> set[str]:
    """The files in the submit dir after the run, an expected output's name written as its
    pattern (so gbatch's and Slurm's ids compare equal; the pipeline step's before it as
    `before:PATTERN`); the prepared files left out."""
    by_name: dict[str, str] = {}
    for one, prefix in ((run.before, "before:"), (run, "")):
        if one is None or not one.ids:
            continue
        for task in one.entry.task_keys:
            values = placeholders(one, task)
            for pattern in (*one.entry.outputs, *one.entry.absent):
                by_name[expand(pattern, values)] = f"{prefix}{pattern} task={task}"
    prepared = {run.entry.name, *run.entry.files}
    if run.before is not None:
        prepared |= {run.before.entry.name, *run.before.entry.files}
    left = set()
    for path in run.submit_dir.rglob("*"):
        rel = str(path.relative_to(run.submit_dir))
        if path.is_file() and rel not in prepared:
            left.add(by_name.get(rel, rel))
    return left
