"""The grammars of sbatch's options and of the job-file keys that share them.

--gres and --gpus (with GPU types), -C/--constraint, --time, --mem, --partition,
--dependency, --export, --begin, --signal, --mail-type and --mail-user, --comment,
--notify, --open-mode and --array.

Each takes the value as given and the option (or key) it came from, and returns the
value gbatch keeps, or raises SpecError naming that option in one line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gbatch.core.model import JOB_EVENTS, NotifyHook, TaskArray
from gbatch.core.submitenv import (
    MAX_SUBMIT_ENV_BYTES,
    submit_env_bytes,
)
from gbatch.core.timefmt import (
    BEGIN_FORMS,
    TimeLimitError,
    parse_begin,
    show_value,
)
from gbatch.core.urls import DOT_SEGMENT_REFUSAL, has_dot_segment
from gbatch.jobspec.errors import SpecError

# The everyday options' readers: one copy, in a module the everyday path loads alone.
from gbatch.jobspec.optvalues import (
    ARRAY_FORMS as ARRAY_FORMS,
)
from gbatch.jobspec.optvalues import (
    CONTROL_PATTERN,
    PARTITION_PATTERN,
    parse_array_runs,
)
from gbatch.jobspec.optvalues import (
    DEFAULT_SIGNAL_SECONDS as DEFAULT_SIGNAL_SECONDS,
)
from gbatch.jobspec.optvalues import (
    EXPORT_FORMS as EXPORT_FORMS,
)
from gbatch.jobspec.optvalues import (
    MAIL_TYPES as MAIL_TYPES,
)
from gbatch.jobspec.optvalues import (
    MAX_ARRAY_INDEX as MAX_ARRAY_INDEX,
)
from gbatch.jobspec.optvalues import (
    MAX_GPUS as MAX_GPUS,
)
from gbatch.jobspec.optvalues import (
    MAX_MEM_MB as MAX_MEM_MB,
)
from gbatch.jobspec.optvalues import (
    Export as Export,
)
from gbatch.jobspec.optvalues import (
    JobSignal as JobSignal,
)
from gbatch.jobspec.optvalues import (
    check_comment as check_comment,
)
from gbatch.jobspec.optvalues import (
    check_gpu_type as check_gpu_type,
)
from gbatch.jobspec.optvalues import (
    check_gpus as check_gpus,
)
from gbatch.jobspec.optvalues import (
    check_mail_type as check_mail_type,
)
from gbatch.jobspec.optvalues import (
    check_mail_user as check_mail_user,
)
from gbatch.jobspec.optvalues import (
    check_mem as check_mem,
)
from gbatch.jobspec.optvalues import (
    check_open_mode as check_open_mode,
)
from gbatch.jobspec.optvalues import (
    check_partition as check_partition,
)
from gbatch.jobspec.optvalues import (
    check_qos as check_qos,
)
from gbatch.jobspec.optvalues import (
    check_time_limit as check_time_limit,
)
from gbatch.jobspec.optvalues import (
    exported_env as exported_env,
)
from gbatch.jobspec.optvalues import (
    parse_export as parse_export,
)
from gbatch.jobspec.optvalues import (
    parse_gpus as parse_gpus,
)
from gbatch.jobspec.optvalues import (
    parse_gres as parse_gres,
)
from gbatch.jobspec.optvalues import (
    parse_shards as parse_shards,
)
from gbatch.jobspec.optvalues import (
    parse_signal as parse_signal,
)

_DATE_START_RE = re.compile(r"\s*[0-9]{4}-")
CONTROL_RE = re.compile(CONTROL_PATTERN)  # C0, DEL and C1 control characters
# A partition's name, as the inventory and `-p` spell it (no comma: `-p a,b` is a list).
PARTITION_NAME = re.compile(PARTITION_PATTERN, re.ASCII)

# ------------------------------------------------- --gpus, --time, --mem, -p, -d, ...


def check_dependency(value: object, field: str) -> str:
    """Slurm's dependency text (gbatch/core/dependency.py), normalized: `afterok:12:13`."""
    from gbatch.core.dependency import USAGE, DependencyError, normalize

    if isinstance(value, int) and not isinstance(value, bool):
        raise SpecError(field, f"{value} is a job id, not a dependency. Write afterok:{value}")
    if not isinstance(value, str):
        raise SpecError(field, f"{show_value(value)} is not a dependency. {USAGE}")
    try:
        return normalize(value)
    except DependencyError as err:
        raise SpecError(field, str(err)) from None


# ----------------------------------------------------------------------------- --gres


def check_constraint(value: object, field: str) -> str:
    """Slurm's -C/--constraint: node features joined by & and |, normalized."""
    from gbatch.core.constraints import ConstraintError, normalize

    if not isinstance(value, str):
        raise SpecError(field, f"{show_value(value)} is not a constraint. Write e.g. a100|h100")
    try:
        return normalize(value)
    except ConstraintError as err:
        raise SpecError(field, str(err)) from None


def check_submit_env_size(env: Mapping[str, str], field: str = "--export") -> None:
    size = submit_env_bytes(env)
    if size > MAX_SUBMIT_ENV_BYTES:
        raise SpecError(
            field,
            f"the exported environment is {size // 1024} KiB, more than "
            f"{MAX_SUBMIT_ENV_BYTES // 1024} KiB. Export the variables the job needs "
            "(--export=PATH,HOME,...) or none (--export=NONE)",
        )


# -------------------------------------------------------------------- --begin


def check_begin(value: object, field: str, now: float | None) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not 0 <= value < 1e11:  # epoch seconds, before the year 5138
            raise SpecError(field, f"{show_value(value)} is not a time. Use {BEGIN_FORMS}")
        return float(value)
    if not isinstance(value, str):
        raise SpecError(field, f"{show_value(value)} is not a begin time. Use {BEGIN_FORMS}")
    absolute = _DATE_START_RE.match(value) is not None  # a date needs no clock
    if now is None and not absolute:
        raise SpecError(
            field, f"{show_value(value)} is relative to now; give a date (YYYY-MM-DDTHH:MM)"
        )
    try:
        return parse_begin(value, 0.0 if now is None else now, field=field)
    except TimeLimitError as err:
        raise SpecError(field, err.message) from None


# ---------------------------------------------------------- mail and comment


def check_reservation(value: object, field: str) -> str:
    """One reservation name (scontrol create reservation); which exist is the daemon's."""
    if not isinstance(value, str) or not PARTITION_NAME.fullmatch(value):
        raise SpecError(
            field,
            f"{show_value(value)} is not a reservation name. Name one that "
            "`gbatch scontrol show reservation` lists",
        )
    return value


# -------------------------------------------------------------------- notify

# An http:// or https:// address with a host: an admin's webhook, a job's `notify:`.
WEBHOOK_URL = re.compile(r"https?://[^\s/?#]+(/\S*)?", re.ASCII)
MAX_NOTIFY_HOOKS = 4
MAX_URL_CHARS = 2048
_NOTIFY_USAGE = (
    "a list like [{url: https://hooks.example/x, events: [END, FAIL], "
    "form: json}] (form json or slack; events among " + ", ".join(JOB_EVENTS) + ")"
)


def check_notify(value: object, field: str = "notify") -> tuple[NotifyHook, ...]:
    """The webhooks `notify:` or --notify asks for; SpecError naming `field` if malformed.

    `notify:` is a list of {url, events, form}, or of bare URLs; --notify's text is
    `URL[,EVENT...]`. Only its form is checked here: which URLs a head allows is its
    config's (webhook_prefixes_allowed, checked at submit and at delivery).
    """
    items = _notify_option(value) if isinstance(value, str) else value
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_NOTIFY_HOOKS:
        raise SpecError(field, f"{_NOTIFY_USAGE}, of 1 to {MAX_NOTIFY_HOOKS} webhooks")
    hooks: list[NotifyHook] = []
    for item in items:
        entry = {"url": item} if isinstance(item, str) else item
        if not isinstance(entry, dict) or set(entry) - {"url", "events", "form"}:
            extra = (
                sorted(set(entry) - {"url", "events", "form"}) if isinstance(entry, dict) else []
            )
            hint = f"; {extra[0]} is not one of its keys (url, events, form)" if extra else ""
            raise SpecError(field, _NOTIFY_USAGE + hint)
        url, events = entry.get("url"), entry.get("events", ["END", "FAIL"])
        form = entry.get("form", "json")
        if not isinstance(url, str) or len(url) > MAX_URL_CHARS or not WEBHOOK_URL.fullmatch(url):
            raise SpecError(field, f"{show_value(url)} is not an http:// or https:// address")
        if has_dot_segment(url):
            raise SpecError(field, f"{show_value(url)} {DOT_SEGMENT_REFUSAL}")
        if isinstance(events, str):
            events = [e.strip() for e in events.split(",")]
        if (
            not isinstance(events, list)
            or not events
            or not all(isinstance(e, str) and e.upper() in JOB_EVENTS for e in events)
        ):
            raise SpecError(field, f"events are among {', '.join(JOB_EVENTS)}")
        if form not in ("json", "slack"):
            raise SpecError(field, f"form is json or slack, not {show_value(form)}")
        hooks.append(NotifyHook(url, tuple(dict.fromkeys(e.upper() for e in events)), form))
    return tuple(hooks)


def _notify_option(text: str) -> list[object]:
    """--notify URL[,EVENT...]: one webhook, in json form."""
    url, _, events = text.partition(",")
    return [{"url": url, "events": events} if events else url]


# -------------------------------------------------------------------- --array


def parse_array(
    text: str, field: str = "--array", *, max_tasks: int = 100_000
) -> tuple[TaskArray, int | None]:
    """An --array expression's task indices, and its `%MAX` (None without one).

    `%MAX` is Slurm's limit on the tasks running at once. optvalues.parse_array_runs'
    reading (`A-B`, `A-B:STEP`, lists of them; a lone N is N tasks 0 to N-1), as a
    TaskArray. Read once where it enters (sbatch, the daemon's submit): what follows
    carries the TaskArray.
    """
    runs, throttle = parse_array_runs(text, field, max_tasks=max_tasks)
    return TaskArray(runs), throttle
