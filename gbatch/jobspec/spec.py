"""A job file's mapping and the options over it -> a validated JobSpec (build_spec).

Every refusal is a SpecError naming the job-file key (or the CLI option that set it)
and saying, in one line, what is wrong and what to do. Checks that need the fleet
(more GPUs than any node has, mounts outside the allowlist) belong to the daemon.
Reading the file is gbatch.jobspec.reader's; the options' grammars are
gbatch.jobspec.slurmopts'.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from gbatch.core.constants import MAX_COMMAND_BYTES as MAX_COMMAND_BYTES
from gbatch.core.model import INTERACTIVE_KINDS, JobSpec
from gbatch.core.submitenv import is_env_name
from gbatch.core.submitenv import reserved_env_reason as _reserved_env_reason
from gbatch.core.timefmt import show_value

# SpecError is named here too, where most callers met it before the reader and the
# option grammars moved out of this module.
from gbatch.jobspec.errors import SpecError as SpecError
from gbatch.jobspec.nodeopts import (
    check_exclusive,
    check_host_list,
    check_nodes,
    check_ntasks,
    check_ntasks_per_node,
    settle_nodes,
)
from gbatch.jobspec.optvalues import MAX_CPUS as MAX_CPUS
from gbatch.jobspec.optvalues import MAX_PATH_BYTES as MAX_PATH_BYTES
from gbatch.jobspec.optvalues import check_command as _check_command
from gbatch.jobspec.optvalues import check_command as check_command
from gbatch.jobspec.optvalues import check_name as _check_name
from gbatch.jobspec.optvalues import check_output_path as _check_output_path
from gbatch.jobspec.optvalues import check_workdir as _check_workdir
from gbatch.jobspec.optvalues import int_check as _int_check
from gbatch.jobspec.optvalues import safe_default_name as _safe_default_name
from gbatch.jobspec.reader import yaml_kind
from gbatch.jobspec.slurmopts import (
    CONTROL_RE,
    MAX_MEM_MB,
    Export,
    check_begin,
    check_comment,
    check_constraint,
    check_dependency,
    check_gpu_type,
    check_gpus,
    check_mail_type,
    check_mail_user,
    check_mem,
    check_notify,
    check_open_mode,
    check_partition,
    check_qos,
    check_reservation,
    check_time_limit,
    parse_export,
    parse_gpus,
    parse_signal,
)

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

MAX_ENV_BYTES = 64 * 1024
MAX_SHM_BYTES = 1 << 50  # 1 PiB: past any machine's memory, well short of docker's int64

KEYS = (
    "name",
    "image",
    "command",
    "gpus",
    "time_limit",
    "retries",
    "env",
    "mounts",
    "workdir",
    "priority",
    "nice",
    "shm_size",
    "requeue",
    "secret_env",
    "network",
    "partition",
    "cpus",
    "mem",
    "mem_per_gpu",
    "mem_per_cpu",
    "dependency",
    "export",
    "begin",
    "signal",
    "mail_type",
    "mail_user",
    "comment",
    "reservation",
    "output",
    "error",
    "open_mode",
    "ntasks",
    "notify",
    "gpu_type",
    "constraint",
    "gpu_mem",
    "gpu_shards",
    "nodes",
    "ntasks_per_node",
    "gpus_per_node",
    "nodelist",
    "exclude",
    "exclusive",
    "qos",
)
# Keys the CLI sends with every submit, beside a job file's: where it was submitted
# from, (srun, salloc) that the job is an interactive allocation, and (a job file's
# command across nodes) that it runs on every node. A job file may not set them
# (build_spec's `wire`).
SUBMIT_KEYS = ("submit_dir", "submit_host", "interactive", "every_node")

# The CLI option that sets each field, for error messages about overrides. The CLI may
# pass its own mapping to build_spec when its spelling differs.
OVERRIDE_OPTION: Mapping[str, str] = {
    "name": "-J/--job-name",
    "image": "--image",
    "command": "--wrap",
    "gpus": "--gpus",
    "time_limit": "-t/--time",
    "retries": "--retries",
    "env": "--env",
    "mounts": "--mount",
    "workdir": "-D/--chdir",
    "priority": "--priority",
    "nice": "--nice",
    "shm_size": "--shm-size",
    "requeue": "--no-requeue",
    "secret_env": "--secret-env",
    "network": "--network",
    "partition": "-p/--partition",
    "qos": "-q/--qos",
    "cpus": "-c/--cpus-per-task",
    "mem": "--mem",
    "mem_per_gpu": "--mem-per-gpu",
    "mem_per_cpu": "--mem-per-cpu",
    "dependency": "-d/--dependency",
    "export": "--export",
    "begin": "-b/--begin",
    "signal": "--signal",
    "mail_type": "--mail-type",
    "mail_user": "--mail-user",
    "comment": "--comment",
    "reservation": "--reservation",
    "output": "-o/--output",
    "error": "-e/--error",
    "open_mode": "--open-mode",
    "ntasks": "-n/--ntasks",
    "notify": "--notify",
    "gpu_type": "--gpus",
    "constraint": "-C/--constraint",
    "gpu_mem": "--gpu-mem",
    "gpu_shards": "--gres",
    "nodes": "-N/--nodes",
    "ntasks_per_node": "--ntasks-per-node",
    "gpus_per_node": "--gpus-per-node",
    "nodelist": "-w/--nodelist",
    "exclude": "-x/--exclude",
    "exclusive": "--exclusive",
}

# Names people bring from Slurm, docker and compose files, for "Did you mean".
_KEY_ALIASES = {
    "job_name": "name",
    "job-name": "name",
    "cmd": "command",
    "wrap": "command",
    "script": "command",
    "container": "image",
    "gres": "gpus",
    "gpu": "gpus",
    "time": "time_limit",
    "timelimit": "time_limit",
    "walltime": "time_limit",
    "environment": "env",
    "exports": "export",
    "begin_time": "begin",
    "mail-type": "mail_type",
    "mail-user": "mail_user",
    "volumes": "mounts",
    "volume": "mounts",
    "chdir": "workdir",
    "cwd": "workdir",
    "working_dir": "workdir",
    "shm": "shm_size",
    "network_mode": "network",
    "networks": "network",
    "net": "network",
    "queue": "partition",
    "partitions": "partition",
    "cpus_per_task": "cpus",
    "cpus-per-task": "cpus",
    "cpu": "cpus",
    "memory": "mem",
    "mem-per-gpu": "mem_per_gpu",
    "mem-per-cpu": "mem_per_cpu",
    "gpu-mem": "gpu_mem",
    "gpu_memory": "gpu_mem",
    "gpu-memory": "gpu_mem",
    "depend": "dependency",
    "depends_on": "dependency",
    "after": "dependency",
    "stdout": "output",
    "out": "output",
    "stderr": "error",
    "err": "error",
    "openmode": "open_mode",
    "open-mode": "open_mode",
    "webhook": "notify",
    "webhooks": "notify",
    "notifications": "notify",
    "gpu_model": "gpu_type",
    "gpu-type": "gpu_type",
    "model": "gpu_type",
    "features": "constraint",
    "feature": "constraint",
    "constraints": "constraint",
    "node_count": "nodes",
    "num_nodes": "nodes",
    "nnodes": "nodes",
    "replicas": "nodes",
    "tasks": "ntasks",
    "num_tasks": "ntasks",
    "tasks_per_node": "ntasks_per_node",
    "ntasks-per-node": "ntasks_per_node",
    "gpus-per-node": "gpus_per_node",
    "node": "nodelist",
    "hosts": "nodelist",
    "node_list": "nodelist",
    "exclude_nodes": "exclude",
    "excluded": "exclude",
}

_HOST_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
# docker's reference grammar (distribution/reference): [host[:port]/]path[:tag][@digest].
# Stricter than docker in one way: a registry host must contain "." or ":port" or be
# localhost, so "Pytorch/x" is refused as uppercase instead of pulled from host "Pytorch".
_IMAGE_RE = re.compile(
    r"""
    (?:(?:{dc}(?:\.{dc})+(?::[0-9]+)?|{dc}:[0-9]+|localhost)/)?   # registry: has . or :port
    [a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*                 # path component
    (?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*           # more path components
    (?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?               # :tag
    (?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?  # @digest
    """.replace("{dc}", r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"),
    re.ASCII | re.VERBOSE,
)
_SHM_RE = re.compile(r"([0-9]{1,15})\s*(?:([bkmg])(?:i?b)?)?", re.ASCII | re.IGNORECASE)


def build_spec(
    data: Mapping[str, object] | None,
    overrides: Mapping[str, object],
    *,
    default_name: str,
    option_names: Mapping[str, str] = OVERRIDE_OPTION,
    source: str = "job file",
    wire: bool = False,
    now: float | None = None,
) -> JobSpec:
    """Merge a job file's mapping with CLI overrides and validate every field.

    `data` is load_job_file's result, or None when there is no file (--wrap).
    `overrides` maps spec field names to raw option values; a value of None means
    "option not given". An override replaces the file's value whole (env and mounts
    included). Errors in an override name the option (`option_names`); errors in the
    file name the key; an unknown key in the file names `source`. A file value of
    None (`image:` with nothing after it) counts as absent. `default_name` is used
    when no name is given, made valid first (a file called "my run.yaml" gives
    "my_run"). `wire`: `data` is a submit request's spec, which may also hold
    SUBMIT_KEYS (the daemon's call). `now` (epoch seconds) reads a `begin` given as
    text; without it only epoch seconds are taken (the wire's form).
    """
    unknown_override = overrides.keys() - _KEY_SET
    if unknown_override:
        # The CLI's wiring is wrong, not the user's input.
        raise ValueError(f"unknown override fields: {sorted(unknown_override)}")
    file_data: Mapping[str, object] = data or {}
    allowed = (*KEYS, *SUBMIT_KEYS) if wire else KEYS
    for key in file_data:
        if key not in allowed:
            raise SpecError(source, _unknown_key_message(key))

    # What the file gives (a submit request's spec: its SUBMIT_KEYS apart), and over it
    # each option given. Only the keys given are visited: the API's submit gives a few
    # of the ~40 (a loop over KEYS was a visible share of its request_for_text).
    values = {k: (v, k) for k, v in file_data.items() if v is not None and k in _KEY_SET}
    for key, value in overrides.items():
        if value is not None:
            values[key] = (value, option_names.get(key) or OVERRIDE_OPTION.get(key, key))

    _gpus_per_node_key(values)
    _split_gpu_type(values, overrides)
    if "command" not in values:
        raise SpecError(
            "command",
            'no command given. Add `command: ...` to the job file, or pass --wrap "..."',
        )
    # Each given field checked in _FIELD_CHECKS' order (the first error is the one
    # reported); a field not given keeps JobSpec's default. SUBMIT_KEYS are the
    # request's own (never a file's or an option's), taken as they came.
    given = [*values, *(key for key in SUBMIT_KEYS if file_data.get(key) is not None)]
    fields: dict[str, Any] = {}
    for key in sorted(given, key=_FIELD_ORDER.__getitem__):
        attribute, check = _FIELD_CHECKS[key]
        if key in SUBMIT_KEYS:
            fields[attribute] = check(file_data[key], key)
            continue
        value, field = values[key]
        _check_utf8(value, field)
        fields[attribute] = (
            check_begin(value, field, now) if check is check_begin else check(value, field)
        )
    if "name" not in fields:
        fields["name"] = _safe_default_name(default_name)
    if "gpu_mem_mb" in fields or "gpu_shards" in fields:
        _one_gpu_shared(fields, values)
    settle_nodes(fields, {key: _label(key, values, option_names) for key in _NODE_LABELS})
    spec = JobSpec(**fields)
    _check_memory_apart(spec, values)
    if spec.gpu_type is not None and spec.gpus == 0:
        raise SpecError(
            values["gpu_type"][1],
            f"GPU type {spec.gpu_type} but no GPUs asked for. Ask for some ({spec.gpu_type}:1), "
            "or drop the type",
        )
    _check_secret_env_apart(spec, values.get("secret_env", (None, ""))[1])
    return spec


# The keys settle_nodes names in its refusals.
_NODE_LABELS = (
    "nodes",
    "ntasks",
    "ntasks_per_node",
    "nodelist",
    "exclude",
    "exclusive",
    "gpu_mem",
    "gpu_shards",
    "gpu_type",
)


def _label(key: str, values: Mapping[str, tuple[object, str]], names: Mapping[str, str]) -> str:
    """How the user named `key`: the option or job-file key that gave it, else its option."""
    given = values.get(key)
    return given[1] if given is not None else names.get(key) or OVERRIDE_OPTION[key]


def _gpus_per_node_key(values: dict[str, tuple[object, str]]) -> None:
    """A job file's `gpus_per_node:` as its `gpus` (both are per node); not both."""
    given = values.pop("gpus_per_node", None)
    if given is None:
        return
    if "gpus" in values and values["gpus"][1] == "gpus":
        raise SpecError(
            "gpus_per_node",
            "gpus is given too, and both are GPUs on each node. Keep one of them",
        )
    values.setdefault("gpus", given)


def _split_gpu_type(values: dict[str, tuple[object, str]], overrides: Mapping[str, object]) -> None:
    """`gpus: a100:2` (Slurm's --gpus form in a job file) as gpus 2 of gpu_type a100.

    An option asking for GPUs replaces the file's request whole, its type too, as the
    command line replaces any other key."""
    if overrides.get("gpus") is not None and overrides.get("gpu_type") is None:
        values.pop("gpu_type", None)
    given = values.get("gpus")
    if given is None or not isinstance(given[0], str) or ":" not in given[0]:
        return
    text, field = str(given[0]), given[1]
    kind, count = parse_gpus(text, field)
    values["gpus"] = (count, field)
    if kind is None:
        return
    other = values.get("gpu_type")
    if other is not None and other[0] != kind:
        raise SpecError(
            field, f"{text} names GPU type {kind} but gpu_type is {show_value(other[0])}. Keep one"
        )
    values["gpu_type"] = (kind, field)


def _one_gpu_shared(fields: dict[str, Any], values: Mapping[str, tuple[object, str]]) -> None:
    """A share of a GPU's memory (--gpu-mem) is of one GPU: gpus defaults to 1, and a
    job asking for another count is refused (a share is not spread over cards). Slurm's
    shards (--gres=shard:N) are such a share, sized by the daemon: not both."""
    key = "gpu_mem" if "gpu_mem" in values else "gpu_shards"
    if "gpu_mem" in values and "gpu_shards" in values:
        raise SpecError(
            values["gpu_mem"][1],
            f"{values['gpu_shards'][1]} asks for shards too. Give one: a size, or shards",
        )
    gpus = fields.setdefault("gpus", 1)
    if gpus != 1:
        raise SpecError(
            values[key][1],
            f"a share of one GPU's memory, but {values['gpus'][1]} asks for {gpus} GPUs. "
            "Drop the GPU count (a share is of one GPU; --gpus=TYPE:1 names its model), "
            "or drop --gpu-mem for whole GPUs",
        )


def _check_memory_apart(spec: JobSpec, values: Mapping[str, tuple[object, str]]) -> None:
    """As Slurm: --mem, --mem-per-gpu and --mem-per-cpu exclude each other, and a size
    per GPU needs GPUs. The job's total must stay a size (MAX_MEM_MB)."""
    given = [values[key][1] for key in ("mem", "mem_per_gpu", "mem_per_cpu") if key in values]
    if len(given) > 1:
        raise SpecError(given[1], f"{given[0]} is given too. Give one memory size only")
    if spec.mem_per_gpu_mb is not None and spec.gpus == 0:
        raise SpecError(
            values["mem_per_gpu"][1],
            "the job asks for no GPUs. Ask for GPUs (--gpus N), or give --mem instead",
        )
    total = spec.memory_mb
    if total is not None and total > MAX_MEM_MB:
        raise SpecError(given[0], f"{total}M in all is more than 1P. Ask for less memory")


def _check_interactive(value: object, field: str) -> str:
    if value not in INTERACTIVE_KINDS:
        raise SpecError(field, f"{show_value(value)} is not one of {', '.join(INTERACTIVE_KINDS)}")
    return str(value)


def _check_host_name(value: object, field: str) -> str:
    if not isinstance(value, str) or not _HOST_NAME_RE.fullmatch(value):
        raise SpecError(field, f"{show_value(value)} is not a host name")
    return value


def secret_env_values(
    data: Mapping[str, object] | None,
    overrides: Mapping[str, object],
    *,
    option_names: Mapping[str, str] = OVERRIDE_OPTION,
) -> dict[str, str]:
    """The secret_env values whose names build_spec (same arguments) keeps in the spec.

    Kept apart from the JobSpec on purpose: a spec is shown, stored and sent in full;
    the values travel once, in the submit request, and are stored sealed.
    """
    if overrides.get("secret_env") is not None:
        field = option_names.get("secret_env") or OVERRIDE_OPTION["secret_env"]
        return dict(check_secret_env(overrides["secret_env"], field))
    if data is not None and data.get("secret_env") is not None:
        return dict(check_secret_env(data["secret_env"], "secret_env"))
    return {}


def check_secret_env(value: object, field: str) -> tuple[tuple[str, str], ...]:
    """A `secret_env:` mapping NAME -> value, checked, as (name, value) pairs.

    Names follow env's rules; values are strings only (a YAML number or bool would be
    rewritten on reading: `0123` is 83, `yes` true), with no line break or NUL, and all
    of them together at most MAX_ENV_BYTES. A refusal names the variable, never its
    value.
    """
    if not isinstance(value, Mapping):
        raise SpecError(
            field,
            f"a {yaml_kind(value)} is not a mapping (its value is not shown). Write "
            "secret_env as NAME: value pairs",
        )
    pairs: list[tuple[str, str]] = []
    for name, raw in value.items():
        _check_env_name(name, field, "secret_env")
        # The value is never shown, not even in an error: name the variable only.
        if not isinstance(raw, str):
            raise SpecError(
                field, f'the value of {name} is not a string. Quote it, e.g. {name}: "0123"'
            )
        if "\0" in raw or "\n" in raw or "\r" in raw:
            raise SpecError(
                field,
                f"the value of {name} contains a line break or NUL. Pass multi-line secrets "
                "in a mounted file instead",
            )
        pairs.append((name, raw))
    if sum(len(n) + len(v) + 2 for n, v in pairs) > MAX_ENV_BYTES:
        raise SpecError(field, "secret_env is larger than 64 KiB. Pass large data in a file")
    return tuple(pairs)


def _check_secret_env_apart(spec: JobSpec, field: str) -> None:
    both = sorted(set(spec.secret_env) & {name for name, _ in spec.env})
    if both:
        raise SpecError(
            field or "secret_env",
            f"{both[0]} is set in both env and secret_env. Keep it in secret_env only",
        )


def _check_utf8(value: object, field: str) -> None:
    """Refuse text that cannot be written as UTF-8: a lone surrogate, which is how Python
    carries bytes that are not UTF-8 (in argv or JSON `\\udcff`). Docker's env-file
    reader, SSH and the store all need real text; better refused here than at launch."""
    kind = type(value)
    if kind is int or kind is bool or kind is float:  # most fields: nothing to look at
        return
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as err:
                # Not echoed: the text may be a secret_env value.
                raise SpecError(
                    field,
                    f"a value has a character that is not UTF-8 text (at position {err.start} "
                    "of it). Use UTF-8 text",
                ) from None
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())


def _unknown_key_message(key: str) -> str:
    import difflib  # only on this error path

    lowered = str(key).strip().lower()
    guess = lowered if lowered in KEYS else _KEY_ALIASES.get(lowered.replace(" ", "_"))
    if guess is None:
        close = difflib.get_close_matches(lowered, KEYS, n=1)
        guess = close[0] if close else None
    if guess is not None:
        return f'unknown key {show_value(key)}. Did you mean "{guess}"?'
    return f"unknown key {show_value(key)}. Valid keys: {', '.join(sorted(KEYS))}"


def _check_image(value: object, field: str) -> str:
    if isinstance(value, str) and len(value) <= 255 and _IMAGE_RE.fullmatch(value):
        return value
    hint = ""
    if isinstance(value, str) and len(value) <= 255 and _IMAGE_RE.fullmatch(value.lower()):
        hint = "Repository names must be lowercase. "
    raise SpecError(
        field,
        f"{show_value(value)} is not a docker image reference. {hint}"
        'Use e.g. "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime" or '
        '"registry.example.org:5000/team/app:v1"',
    )


def check_image(value: object, field: str) -> str:
    """A docker image reference (the inventory's default_image uses it too)."""
    return _check_image(value, field)


def _check_bool(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(field, f"{show_value(value)} is not true or false. Write true or false")
    return value


def _check_env_name(name: object, field: str, key: str) -> None:
    """A variable name `env` or `secret_env` (`key`) may set."""
    if not isinstance(name, str) or not is_env_name(name):
        raise SpecError(
            field,
            f"{show_value(name)} is not a variable name. Use letters, digits and _, "
            "not starting with a digit",
        )
    reason = _reserved_env_reason(name)
    if reason is not None:
        raise SpecError(field, f"{name} cannot be set: {reason}. Remove it from {key}")


def _check_env(value: object, field: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, Mapping):
        raise SpecError(
            field, f"{show_value(value)} is not a mapping. Write env as NAME: value pairs"
        )
    pairs: list[tuple[str, str]] = []
    for name, raw in value.items():
        _check_env_name(name, field, "env")
        if isinstance(raw, bool):
            text = "true" if raw else "false"
        elif isinstance(raw, str | int | float):
            text = str(raw)
        else:
            raise SpecError(
                field,
                f"{name} has no usable value ({show_value(raw)}). Give a string or a number "
                '("" for empty)',
            )
        if "\0" in text or "\n" in text or "\r" in text:
            # The daemon passes env through docker's --env-file: one line per variable.
            raise SpecError(field, f"the value of {name} contains a line break or NUL. Remove it")
        pairs.append((name, text))
    if sum(len(n) + len(v) + 2 for n, v in pairs) > MAX_ENV_BYTES:
        raise SpecError(field, "env is larger than 64 KiB. Pass large data through a mounted file")
    return tuple(pairs)


def _check_mounts(value: object, field: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise SpecError(
            field, f'{show_value(value)} is not a list. Write mounts as a list of "SRC:DST[:ro]"'
        )
    mounts: list[str] = []
    targets: set[str] = set()
    for item in value:
        usage = 'Use "SRC:DST", "SRC:DST:ro" or "SRC:DST:rw" with absolute paths'
        if not isinstance(item, str):
            raise SpecError(field, f"{show_value(item)} is not a mount. {usage}")
        parts = item.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise SpecError(field, f"{show_value(item)} is not a mount. {usage}")
        if "," in item or CONTROL_RE.search(item):
            raise SpecError(
                field, f"{show_value(item)} contains a comma or a control character. {usage}"
            )
        if len(item.encode("utf-8", "surrogatepass")) > 2 * MAX_PATH_BYTES + 3:
            raise SpecError(field, f"{show_value(item)} is too long. {usage}")
        if not all(p.startswith("/") for p in parts[:2]):
            raise SpecError(field, f"{show_value(item)} has a relative path. {usage}")
        if parts[1] in targets:
            raise SpecError(
                field, f"{show_value(parts[1])} is mounted twice. Keep one mount per target"
            )
        targets.add(parts[1])
        mounts.append(item)
    return tuple(mounts)


def _check_network(value: object, field: str) -> str:
    """A docker network name; which ones a job may use is the head's policy
    (job_network, job_networks), checked when the daemon takes the job."""
    if not isinstance(value, str) or not NETWORK_NAME.fullmatch(value):
        raise SpecError(
            field,
            f"{show_value(value)} is not a docker network name. Use a name like none or "
            "labnet (one of those the admins offer)",
        )
    return value


# A docker network name, as a job file and the head's config (job_network, job_networks)
# may give one; "container:<name>" (another container's namespace) is never one.
NETWORK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", re.ASCII)


def _check_shm_size(value: object, field: str) -> str:
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    match = _SHM_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or int(match.group(1)) == 0:
        raise SpecError(
            field,
            f"{show_value(value)} is not a size. Use bytes with an optional unit b, k, m or g, "
            'e.g. "512m" or "8g"',
        )
    number, unit = match.groups()
    unit = (unit or "").lower()
    if int(number) * _SHM_UNITS[unit] > MAX_SHM_BYTES:
        raise SpecError(
            field, f"{show_value(value)} is larger than 1 PiB. Use a size such as 8g or 64g"
        )
    # Docker reads k/m/g (and kb, KiB, ...) as powers of 1024; keep its shortest spelling.
    return f"{int(number)}{unit}"


_SHM_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def export_of(
    data: Mapping[str, object] | None,
    overrides: Mapping[str, object],
    *,
    option_names: Mapping[str, str] = OVERRIDE_OPTION,
) -> Export | None:
    """The export build_spec (same arguments) took, with its values, or None if none given.

    None when neither the option nor the file gives one: the caller's default applies.
    """
    if overrides.get("export") is not None:
        field = option_names.get("export") or OVERRIDE_OPTION["export"]
        return parse_export(overrides["export"], field)
    if data is not None and data.get("export") is not None:
        return parse_export(data["export"], "export")
    return None


def _export_mode(value: object, field: str) -> str:
    return parse_export(value, field).mode_text


def _signal_text(value: object, field: str) -> str:
    return parse_signal(value, field).text


def _secret_env_names(value: object, field: str) -> tuple[str, ...]:
    return tuple(name for name, _ in check_secret_env(value, field))


_KEY_SET = frozenset(KEYS)
# build_spec's checks, in the order it runs them: key -> (JobSpec field, check). Built
# once (the checks' closures too), not per submit. check_begin also takes `now`.
_FIELD_CHECKS: dict[str, tuple[str, Callable[..., object]]] = {
    key: (attribute, check)
    for key, attribute, check in (
        ("name", "name", _check_name),
        ("command", "command", _check_command),
        ("image", "image", _check_image),
        ("gpus", "gpus", check_gpus),
        ("gpu_type", "gpu_type", check_gpu_type),
        ("time_limit", "time_limit", check_time_limit),
        ("retries", "retries", _int_check(0, 100)),
        ("env", "env", _check_env),
        ("mounts", "mounts", _check_mounts),
        ("workdir", "workdir", _check_workdir),
        ("priority", "priority", _int_check(-10000, 10000)),
        ("nice", "nice", _int_check(-10000, 10000)),
        ("shm_size", "shm_size", _check_shm_size),
        ("requeue", "requeue", _check_bool),
        ("secret_env", "secret_env", _secret_env_names),
        ("network", "network", _check_network),
        ("dependency", "dependency", check_dependency),
        ("output", "output", _check_output_path),
        ("error", "error", _check_output_path),
        ("open_mode", "open_mode", check_open_mode),
        ("ntasks", "ntasks", check_ntasks),
        ("nodes", "nodes", check_nodes),
        ("ntasks_per_node", "ntasks_per_node", check_ntasks_per_node),
        ("nodelist", "nodelist", check_host_list),
        ("exclude", "exclude", check_host_list),
        ("exclusive", "exclusive", check_exclusive),
        ("every_node", "every_node", _check_bool),
        ("submit_dir", "submit_dir", _check_workdir),
        ("submit_host", "submit_host", _check_host_name),
        ("interactive", "interactive", _check_interactive),
        ("partition", "partition", check_partition),
        ("qos", "qos", check_qos),
        ("constraint", "constraint", check_constraint),
        ("cpus", "cpus", _int_check(1, MAX_CPUS)),
        ("mem", "mem_mb", check_mem),
        ("mem_per_gpu", "mem_per_gpu_mb", check_mem),
        ("mem_per_cpu", "mem_per_cpu_mb", check_mem),
        ("gpu_mem", "gpu_mem_mb", check_mem),
        ("gpu_shards", "gpu_shards", _int_check(1, 9999)),
        ("export", "export", _export_mode),
        ("begin", "begin", check_begin),
        ("signal", "signal", _signal_text),
        ("mail_type", "mail_type", check_mail_type),
        ("mail_user", "mail_user", check_mail_user),
        ("comment", "comment", check_comment),
        ("reservation", "reservation", check_reservation),
        ("notify", "notify", check_notify),
    )
}
_FIELD_ORDER = {key: position for position, key in enumerate(_FIELD_CHECKS)}
