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
from dataclasses import dataclass

from gbatch.core.model import JOB_EVENTS, NotifyHook, TaskArray
from gbatch.core.submitenv import (
    MAX_SUBMIT_ENV_BYTES,
    filter_submit_env,
    is_env_name,
    submit_env_bytes,
)
from gbatch.core.submitenv import reserved_env_reason as _reserved_env_reason
from gbatch.core.timefmt import (
    ACCEPTED_FORMS,
    BEGIN_FORMS,
    TimeLimitError,
    parse_begin,
    parse_time_limit,
    show_value,
)
from gbatch.core.urls import DOT_SEGMENT_REFUSAL, has_dot_segment
from gbatch.jobspec.errors import SpecError

MAX_GPUS = 64
MAX_MEM_MB = 1 << 30  # 1 PiB in MiB, as for shm_size
_DATE_START_RE = re.compile(r"\s*[0-9]{4}-")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1 control characters

# ------------------------------------------------- --gpus, --time, --mem, -p, -d, ...

_MEM_RE = re.compile(r"([0-9]{1,13})\s*(?:([kmgt])(?:i?b)?)?", re.ASCII | re.IGNORECASE)
_MEM_UNITS_KB = {"k": 1, "": 1 << 10, "m": 1 << 10, "g": 1 << 20, "t": 1 << 30}


def check_mem(value: object, field: str = "mem") -> int:
    """A memory size as Slurm writes it, in MiB; SpecError naming `field` if it is none.

    A whole number, MB by default, or with a K, M, G or T suffix (powers of 1024). K
    sizes round up to whole MiB. 0 (Slurm's "all of the node's memory") is refused:
    gbatch counts memory per job. More than 1P is refused too.
    """
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    match = _MEM_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise SpecError(
            field,
            f"{show_value(value)} is not a memory size. Use megabytes or a size with a unit "
            "K, M, G or T, e.g. 4096, 16G or 512M",
        )
    number, unit = int(match.group(1)), (match.group(2) or "").lower()
    if number == 0:
        raise SpecError(
            field,
            "0 (all of a node's memory) is not supported: gbatch counts memory per job. "
            "Give the size the job needs, e.g. 16G",
        )
    kib = number * _MEM_UNITS_KB[unit]
    mib = -(-kib // 1024)
    if mib > MAX_MEM_MB:
        raise SpecError(field, f"{show_value(value)} is more than 1P. Ask for less memory")
    return mib


def check_gpus(value: object, field: str = "gpus") -> int:
    """A GPU count: an int from 0 to MAX_GPUS (bool refused). Also used for --gres."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GPUS:
        raise SpecError(
            field,
            f"{show_value(value)} is not a GPU count. Use a whole number from 0 to {MAX_GPUS}"
            + (", without quotes" if isinstance(value, str) and value.isdigit() else ""),
        )
    return value


def check_time_limit(value: object, field: str) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise SpecError(field, f"{show_value(value)} is not a time limit. Use {ACCEPTED_FORMS}")
    try:
        return parse_time_limit(value, field=field)
    except TimeLimitError as err:
        raise SpecError(field, err.message) from None


def check_open_mode(value: object, field: str) -> str:
    """As sbatch: the first letter decides (a or A: append, t or T: truncate)."""
    first = value.strip()[:1].lower() if isinstance(value, str) else ""
    if first not in ("a", "t"):
        raise SpecError(field, f"{show_value(value)} is not an open mode. Use append or truncate")
    return "append" if first == "a" else "truncate"


# A partition's name, as the inventory and `-p` spell it (no comma: `-p a,b` is a list).
PARTITION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", re.ASCII)


def check_qos(value: object, field: str) -> str:
    """One QOS name; which exist, and which the user may use, is the daemon's to say."""
    if not isinstance(value, str) or not PARTITION_NAME.fullmatch(value):
        raise SpecError(
            field,
            f"{show_value(value)} is not a QOS name. Name one of those "
            "`gbatch scontrol show qos` lists",
        )
    return value


def check_partition(value: object, field: str) -> str:
    """One partition name, or two (`gpu,uni`: Slurm's list of partitions to start in).

    Which exist, and which pairs may go together, is the daemon's to say."""
    names = value.split(",") if isinstance(value, str) else [value]
    if len(names) > 2 or (len(names) == 2 and names[0] == names[1]):
        raise SpecError(
            field,
            f"{show_value(value)} names several partitions; gbatch takes one, or one of the "
            "lab's and one backed by a Slurm cluster (`-p gpu,uni`: it runs where it starts "
            "first). Name one of them",
        )
    for name in names:
        if not isinstance(name, str) or not PARTITION_NAME.fullmatch(name):
            raise SpecError(
                field,
                f"{show_value(value)} is not a partition name. Name one of the partitions "
                "`gbatch sinfo` lists",
            )
    return ",".join(names)  # type: ignore[arg-type]


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


def check_gpu_type(value: object, field: str) -> str:
    """A GPU type as a job names it (`a100`, `rtx4090`, `1g.10gb`), lowercased.

    Which types exist is the daemon's to say (the types of its nodes' GPUs)."""
    from gbatch.core.gputypes import is_type_name

    text = value.strip().lower() if isinstance(value, str) else None
    if text is None or not is_type_name(text):
        raise SpecError(
            field,
            f"{show_value(value)} is not a GPU type. Name one `gbatch sinfo -o %G` lists, "
            "e.g. a100 or rtx4090",
        )
    return text


def parse_gres(text: str) -> tuple[str | None, int]:
    """Slurm's `--gres=gpu[:TYPE][:N]` -> (the GPU type or None for any, the count).

    Plain `gpu` is 1; TYPE is a model as `gbatch sinfo` lists them (`gpu:a100:2`),
    checked against the nodes by the daemon. Anything else (other resources, several
    entries) is a SpecError on --gres.
    """
    from gbatch.core.gputypes import is_type_name

    parts = text.strip().split(":")
    kind, count_text = None, "1"
    if len(parts) == 2:
        kind, count_text = (None, parts[1]) if parts[1].isdigit() else (parts[1], "1")
    elif len(parts) == 3:
        kind, count_text = parts[1], parts[2]
    if (
        parts[0] != "gpu"
        or len(parts) > 3
        or not re.fullmatch(r"[0-9]{1,6}", count_text, re.ASCII)
        or (kind is not None and not is_type_name(kind.lower()))
    ):
        raise SpecError(
            "--gres",
            f"{show_value(text)} is not a GPU request. Use gpu, gpu:N or gpu:TYPE:N "
            "(or --gpus N); gbatch schedules GPUs only",
        )
    count = int(count_text)
    if count > MAX_GPUS:
        raise SpecError(
            "--gres", f"{show_value(text)} asks for {count} GPUs. Use a count from 0 to {MAX_GPUS}"
        )
    return (None if kind is None else check_gpu_type(kind, "--gres")), count


def parse_shards(text: str) -> tuple[str | None, int] | None:
    """Slurm's `--gres=shard[:TYPE][:N]` -> (the GPU type or None, the shards).

    None when `text` asks for no shards (`gpu:2`). SpecError on --gres for a bad count
    or type."""
    from gbatch.core.gputypes import is_type_name

    parts = text.strip().split(":")
    if parts[0] != "shard":
        return None
    kind, count_text = None, "1"
    if len(parts) == 2:
        kind, count_text = (None, parts[1]) if parts[1].isdigit() else (parts[1], "1")
    elif len(parts) == 3:
        kind, count_text = parts[1], parts[2]
    if (
        len(parts) > 3
        or not re.fullmatch(r"[0-9]{1,4}", count_text, re.ASCII)
        or int(count_text) < 1
        or (kind is not None and not is_type_name(kind.lower()))
    ):
        raise SpecError(
            "--gres",
            f"{show_value(text)} is not a shard request. Use shard:N or shard:TYPE:N (N from "
            "1), or --gpu-mem=SIZE",
        )
    return (None if kind is None else check_gpu_type(kind, "--gres")), int(count_text)


def parse_gpus(text: str, field: str, nodes: int = 1) -> tuple[str | None, int]:
    """Slurm's `--gpus=[TYPE:]N` -> (the type or None for any, the count).

    Also --gpus-per-node's and --gpus-per-task's, and a job file's `gpus: a100:2`.
    `nodes`: the count is of that many nodes together (-G with -N), MAX_GPUS each."""
    kind, colon, count = text.strip().rpartition(":")
    if not count.strip().isdigit() or (colon and not kind.strip()):
        raise SpecError(
            field,
            f"{show_value(text)} is not a GPU count. Use a number like 2, or TYPE:N like a100:2",
        )
    if nodes > 1 and len(count.strip()) <= 9 and int(count) <= MAX_GPUS * nodes:
        gpus = int(count)
    else:
        gpus = check_gpus(int(count), field)
    return (check_gpu_type(kind, field) if colon else None), gpus


def check_constraint(value: object, field: str) -> str:
    """Slurm's -C/--constraint: node features joined by & and |, normalized."""
    from gbatch.core.constraints import ConstraintError, normalize

    if not isinstance(value, str):
        raise SpecError(field, f"{show_value(value)} is not a constraint. Write e.g. a100|h100")
    try:
        return normalize(value)
    except ConstraintError as err:
        raise SpecError(field, str(err)) from None


# ------------------------------------------------------------------- --export

EXPORT_FORMS = "ALL, NONE, or variables: NAME or NAME=value, comma separated (ALL,NAME=value)"


@dataclass(frozen=True)
class Export:
    """Slurm's --export, read: which of the submitting shell's variables the job takes.

    `everything` (ALL) or not, the names taken from the submitting shell, and values
    given outright (NAME=value).
    """

    everything: bool
    names: tuple[str, ...] = ()
    values: tuple[tuple[str, str], ...] = ()

    @property
    def mode_text(self) -> str:
        """What the spec keeps: the mode and names, never a value (a spec is shown)."""
        names = [*self.names, *(name for name, _ in self.values)]
        if self.everything:
            return ",".join(["ALL", *names])
        return ",".join(names) or "NONE"


def parse_export(value: object, field: str = "--export") -> Export:
    """The Export an --export value means: `ALL`, `NONE`, or `[ALL,]NAME[=value],...`.

    Slurm's `NIL` reads as NONE. NONE takes no variables with it, as in Slurm; names
    follow env's rules, and names gbatch sets (SLURM_* among them) or a value with a
    control character are refused (SpecError naming `field`).
    """
    if not isinstance(value, str) or not value.strip():
        raise SpecError(field, f"{show_value(value)} is not an export list. Use {EXPORT_FORMS}")
    items = [item.strip() for item in value.split(",")]
    if items[0].upper() in ("NONE", "NIL"):
        if len(items) > 1:
            raise SpecError(
                field,
                f"{show_value(value)}: NONE exports nothing, so it takes no variables. "
                "List the variables alone (--export=A,B=x), or use ALL,A,B=x",
            )
        return Export(everything=False)
    everything = items[0].upper() == "ALL"
    names: list[str] = []
    values: list[tuple[str, str]] = []
    for item in items[1:] if everything else items:
        name, eq, text = item.partition("=")
        if not item or not is_env_name(name):
            raise SpecError(
                field,
                f"{show_value(item)} is not a variable. Use {EXPORT_FORMS}",
            )
        reason = _reserved_env_reason(name) or (
            "SLURM_* variables are set by gbatch for each job"
            if name.startswith("SLURM_")
            else None
        )
        if reason is not None:
            raise SpecError(field, f"{name} cannot be exported: {reason}. Remove it")
        if CONTROL_RE.search(text):
            raise SpecError(field, f"the value of {name} has a control character. Remove it")
        if eq:
            values.append((name, text))
        else:
            names.append(name)
    return Export(everything, tuple(names), tuple(values))


def exported_env(export: Export, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables a job takes from the submitting shell's `environ` under `export`.

    All of them (ALL) or the names listed, then the values given outright (which win).

    Left out without a word, as they are not the job's to carry: names gbatch sets
    (GBATCH_*, NVIDIA_*, *_VISIBLE_DEVICES, SLURM_* of a job sbatch runs inside of),
    names that are not variable names (bash's exported functions) and values with a
    line break or NUL (docker's env-file is one line per variable).
    """
    if export.everything:
        chosen = dict(environ)
    else:
        chosen = {name: environ[name] for name in export.names if name in environ}
    chosen.update(export.values)
    return filter_submit_env(chosen)


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


# ------------------------------------------------------------------- --signal

_SIGNAL_RE = re.compile(r"(?:([RB]{1,2}):)?([A-Za-z0-9+]{1,12})(?:@([0-9]{1,5}))?", re.ASCII)
DEFAULT_SIGNAL_SECONDS = 60  # Slurm's


@dataclass(frozen=True)
class JobSignal:
    """--signal: `signum` sent `seconds` before the time limit; `batch`: B: was given."""

    signum: int
    seconds: int
    batch: bool = False

    @property
    def text(self) -> str:
        import signal as signals

        name = signals.Signals(self.signum).name.removeprefix("SIG")
        return f"{'B:' if self.batch else ''}{name}@{self.seconds}"


def parse_signal(value: object, field: str = "--signal") -> JobSignal:
    """The JobSignal Slurm's `[{R|B}:]SIG[@SECONDS]` asks for; SpecError naming `field`.

    SIG is a name (USR1, SIGUSR1) or a number, SECONDS 0 to 65535 (default 60). R: is
    accepted and means nothing here (gbatch has no reservations to overlap). SIGKILL and
    SIGSTOP are refused: a job cannot catch them, so they warn no one.
    """
    import signal as signals

    usage = "Use [B:]SIG[@SECONDS], e.g. USR1@120 or B:TERM@30"
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    match = _SIGNAL_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise SpecError(field, f"{show_value(value)} is not a signal. {usage}")
    flags, sig, seconds = match.groups()
    try:
        if sig.isdigit():
            signum = signals.Signals(int(sig))
        else:
            name = sig.upper()
            signum = signals.Signals[name if name.startswith("SIG") else "SIG" + name]
    except (KeyError, ValueError):
        raise SpecError(
            field, f"{show_value(sig)} is not a signal name or number. {usage}"
        ) from None
    if signum in (signals.SIGKILL, signals.SIGSTOP):
        raise SpecError(field, f"{signum.name} cannot be caught, so warns no one. {usage}")
    count = DEFAULT_SIGNAL_SECONDS if seconds is None else int(seconds)
    if count > 65535:
        raise SpecError(field, f"{count} seconds is more than 65535. {usage}")
    return JobSignal(int(signum), count, batch="B" in (flags or ""))


# ---------------------------------------------------------- mail and comment

MAIL_TYPES = frozenset(
    {
        "NONE",
        "BEGIN",
        "END",
        "FAIL",
        "REQUEUE",
        "ALL",
        "INVALID_DEPEND",
        "STAGE_OUT",
        "TIME_LIMIT",
        "TIME_LIMIT_90",
        "TIME_LIMIT_80",
        "TIME_LIMIT_50",
        "ARRAY_TASKS",
    }
)


def check_mail_type(value: object, field: str) -> str:
    if isinstance(value, str):
        types = [t.strip().upper() for t in value.split(",")]
        if types and all(t in MAIL_TYPES for t in types):
            return ",".join(types)
    raise SpecError(
        field,
        f"{show_value(value)} is not a mail type. Use NONE, BEGIN, END, FAIL, REQUEUE, ALL, "
        "TIME_LIMIT or ARRAY_TASKS, comma separated",
    )


def check_mail_user(value: object, field: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[^\s@,]{1,64}(?:@[^\s@,]{1,255})?", value):
        raise SpecError(
            field, f"{show_value(value)} is not a mail address. Use e.g. ada@example.org"
        )
    if CONTROL_RE.search(value):
        raise SpecError(field, "the address has a control character. Remove it")
    return value


def check_reservation(value: object, field: str) -> str:
    """One reservation name (scontrol create reservation); which exist is the daemon's."""
    if not isinstance(value, str) or not PARTITION_NAME.fullmatch(value):
        raise SpecError(
            field,
            f"{show_value(value)} is not a reservation name. Name one that "
            "`gbatch scontrol show reservation` lists",
        )
    return value


def check_comment(value: object, field: str) -> str:
    if not isinstance(value, str) or len(value) > 1024 or CONTROL_RE.search(value):
        raise SpecError(
            field, "a comment is one line of text of at most 1024 characters. Shorten it"
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

ARRAY_FORMS = "N (tasks 0 to N-1), A-B, A-B:STEP or a list such as 1,4,10-12"
MAX_ARRAY_INDEX = 4_000_000  # Slurm's MaxArraySize is at most 4000001


def _split_throttle(text: str, field: str) -> tuple[str, int | None]:
    """An --array expression without its `%MAX` suffix, and MAX (None without one):
    at most MAX of the array's tasks run at once (Slurm's ArrayTaskThrottle)."""
    text = text.strip()
    body, percent, limit = text.partition("%")
    if not percent:
        return text, None
    if not re.fullmatch(r"[0-9]{1,7}", limit, re.ASCII) or int(limit) < 1:
        raise SpecError(
            field,
            f"{show_value(text)}: %{limit} is not a number of tasks to run at once. "
            "Write %MAX with MAX 1 or more, e.g. 0-99%4",
        )
    return body.strip(), int(limit)


def parse_array(
    text: str, field: str = "--array", *, max_tasks: int = 100_000
) -> tuple[TaskArray, int | None]:
    """An --array expression's task indices, and its `%MAX` (None without one).

    `%MAX` is Slurm's limit on the tasks running at once.

    `A-B`, `A-B:STEP` and lists of them (`1,4,10-12`) as in Slurm. A lone number N
    keeps gbatch's older meaning, N tasks 0 to N-1 (Slurm reads it as the index N).
    At most `max_tasks` indices. Read once where it enters (sbatch, the daemon's
    submit): what follows carries the TaskArray.
    """
    usage = f"Use {ARRAY_FORMS}"
    text, throttle = _split_throttle(text, field)
    if re.fullmatch(r"[0-9]{1,7}", text, re.ASCII):
        count = int(text)
        if not 1 <= count <= max_tasks:
            raise SpecError(field, f"{show_value(text)} is not 1 to {max_tasks} tasks. {usage}")
        return TaskArray(((0, count - 1, 1),)), throttle
    runs: list[tuple[int, int, int]] = []
    indices: set[int] = set()
    for part in text.split(","):
        match = re.fullmatch(
            r"([0-9]{1,7})(?:-([0-9]{1,7})(?::([0-9]{1,7}))?)?", part.strip(), re.ASCII
        )
        if match is None:
            raise SpecError(field, f"{show_value(text)} is not an array. {usage}")
        low = int(match.group(1))
        high = low if match.group(2) is None else int(match.group(2))
        step = 1 if match.group(3) is None else int(match.group(3))
        if high < low or step < 1 or high > MAX_ARRAY_INDEX:
            raise SpecError(
                field,
                f"{show_value(part)} is not a range: it needs A <= B, a step of 1 or more and "
                f"indices up to {MAX_ARRAY_INDEX}. {usage}",
            )
        if (high - low) // step + 1 + len(indices) > max_tasks:
            raise SpecError(field, f"{show_value(text)} is more than {max_tasks} tasks. {usage}")
        indices.update(range(low, high + 1, step))
        runs.append((low, high, step))
    return TaskArray(tuple(runs)), throttle
