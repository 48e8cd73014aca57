"""Where a job's output files are, as sbatch names them. Pure: no disk, no clock.

sbatch names them with `-o/--output`, `-e/--error` and their filename patterns
(sbatch(1), "filename pattern").

A job submitted through sbatch (it has a submit_dir) writes `slurm-%j.out`, or
`slurm-%A_%a.out` for an array task, when it names no output. A relative path starts
from the job's working dir (-D) for a bare process, else from the submit dir (a
container's workdir is a path inside the container, not on this machine).
"""

from __future__ import annotations

import os
import re
import stat

# For annotations only: the shim imports this module (gbatch.nodes.outfiles) at a job's
# start, and the model is more than it needs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gbatch.core.model import Job, JobSpec

DEFAULT_OUTPUT = "slurm-%j.out"
DEFAULT_ARRAY_OUTPUT = "slurm-%A_%a.out"
# What Slurm's %a gives for a job that is not an array task (NO_VAL - 1).
NO_ARRAY_TASK = 4294967294
OPEN_MODES = ("append", "truncate")

# %[pad]X: a number of at most 10 zero-pads a numeric field (sbatch(1)).
_PATTERN = re.compile(r"%(\d{0,2})([%AaJjNnstux])")
_NUMERIC = frozenset("AaJjnst")
# Fields known when sbatch submits (the rest only once the job has an id and a node).
SUBMIT_FIELDS = frozenset("%ux")


def expand(pattern: str, fields: dict[str, str]) -> str:
    """`pattern` with each %X that `fields` knows replaced, zero-padded as %NX asks.

    A %X it does not know is left as written; padding applies to numeric fields only, at
    most 10 wide. As in Slurm, a pattern holding a backslash is taken literally,
    backslashes removed.
    """
    if "\\" in pattern:
        return pattern.replace("\\", "")

    def one(match: re.Match[str]) -> str:
        pad, key = match.groups()
        if key not in fields:
            return match.group(0)
        value = fields[key]
        if pad and key in _NUMERIC:
            value = value.zfill(min(int(pad), 10))
        return value

    return _PATTERN.sub(one, pattern)


def job_fields(job: Job, node: str | None) -> dict[str, str]:
    """What each pattern letter stands for in `job` (on `node`, when known)."""
    array_id = job.array_job_id
    fields = {
        "%": "%",
        "j": str(job.id),
        "J": str(job.id),
        "A": str(array_id if array_id is not None else job.id),
        "a": str(job.spec.array_task if job.spec.array_task is not None else NO_ARRAY_TASK),
        "u": job.user,
        "x": job.spec.name,
        "n": "0",
        "t": "0",
        "s": "batch",
    }
    if node is not None:
        fields["N"] = node
    return fields


def submit_fields(user: str, name: str) -> dict[str, str]:
    """The fields sbatch knows before the job has an id: %u, %x and %%."""
    return {"%": "%", "u": user, "x": name}


def base_dir(spec: JobSpec) -> str | None:
    """Where a relative output path starts, or None when the job has no such place."""
    if spec.image is None and spec.workdir is not None:
        return spec.workdir
    return spec.submit_dir


def without_a_start(spec: JobSpec) -> tuple[str, str] | None:
    """(field, pattern) of a relative -o/-e path with no place to start from, or None.

    Such a file would never be written (base_dir is None). Only a job submitted without
    a submit directory has such a path: over the HTTP API, or from a client other than
    gbatch's own. The submit refuses it.
    """
    if base_dir(spec) is not None:
        return None
    for field, pattern in (("output", spec.output), ("error", spec.error)):
        literal = pattern.replace("\\", "") if pattern and "\\" in pattern else pattern
        if literal is not None and not literal.startswith("/"):
            return field, pattern or ""
    return None


def output_paths(job: Job, node: str | None) -> tuple[str, str] | None:
    """The job's (stdout file, stderr file), expanded and absolute, or None if it has none.

    The same path twice when stderr goes with stdout. None when the job writes no output
    file (one queued before sbatch recorded its submit dir, and naming no output; an
    srun/salloc allocation, whose output goes to its client), and when a relative path
    has no place to start from (base_dir is None).
    """
    if job.spec.interactive is not None:
        return None
    base = base_dir(job.spec)
    pattern = job.spec.output
    if pattern is None:
        if job.spec.submit_dir is None:
            return None
        pattern = DEFAULT_ARRAY_OUTPUT if job.array_job_id is not None else DEFAULT_OUTPUT
    fields = job_fields(job, node)
    out = _absolute(expand(pattern, fields), base)
    err = out if job.spec.error is None else _absolute(expand(job.spec.error, fields), base)
    if out is None or err is None:
        return None
    return out, err


def _absolute(path: str, base: str | None) -> str | None:
    if path.startswith("/"):
        return path
    if base is None:
        return None
    return os.path.join(base, path)


def refusal(path: str, mode: int, is_devnull: bool) -> str | None:
    """Why the file at `path`, of `mode`, may not take a job's output; None when it may.

    A regular file may, and /dev/null (`is_devnull`: the caller compared the device).
    Nothing else: a FIFO's or a terminal's open and writes wait on whoever reads them,
    and a device or socket is no place for a log.
    """
    if stat.S_ISREG(mode) or (stat.S_ISCHR(mode) and is_devnull):
        return None
    kind = (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a directory"
        if stat.S_ISDIR(mode)
        else "not a regular file"
    )
    return f"{path} is {kind}; a job writes only to a regular file or /dev/null"


def appends(job: Job, attempt: int) -> bool:
    """Whether this attempt adds to its files rather than starting them afresh.

    It does with --open-mode=append, and (as Slurm does for a requeued job) for every
    attempt after the first.
    """
    return job.spec.open_mode == "append" or attempt > 1


def submit_check_dir(pattern: str, user: str, name: str, base: str) -> str | None:
    """The directory sbatch can check for `pattern` before the job has an id, or None.

    The directory part expanded with %u, %x and %%, made absolute from `base` (`base`
    itself when the pattern has no directory part). None when the directory part holds
    a field known only later (%j, %A, %a, %N).
    """
    head = os.path.dirname(pattern)
    if not head:
        return base
    if "\\" not in head and any(m.group(2) not in SUBMIT_FIELDS for m in _PATTERN.finditer(head)):
        return None
    head = expand(head, submit_fields(user, name))
    return head if head.startswith("/") else os.path.normpath(os.path.join(base, head))
