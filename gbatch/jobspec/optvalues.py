"""The readers of sbatch's everyday option values, one copy for both of sbatch's paths.

-G/--gpus, --gres, -t, -J, -p, -q, -o/-e, -c, --mem, -a, -D: each reader takes the value
as given and the option (or job-file key) it came from and returns what gbatch keeps, or
raises SpecError naming that option in one line. The full path (jobspec.slurmopts, spec,
submit: build_submit) and the everyday one (gbatch/cli/everyday_sbatch.py) both call
these, so that they read every value alike. Kept light to import: no model, dataclasses,
argparse or typing, and `re` only inside the readers whose grammar is a pattern (imported
there, at the first such value: `--gpus 1` and `--gres=gpu:1` load none).
"""

from __future__ import annotations

import os

from gbatch.core.constants import MAX_COMMAND_BYTES
from gbatch.core.submitenv import filter_submit_env, is_env_name, reserved_env_reason
from gbatch.core.timefmt import ACCEPTED_FORMS, TimeLimitError, parse_time_limit, show_value
from gbatch.jobspec.errors import SpecError

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

MAX_GPUS = 64
MAX_MEM_MB = 1 << 30  # 1 PiB in MiB, as for shm_size
MAX_PATH_BYTES = 4095  # Linux's PATH_MAX, less its NUL
MAX_CPUS = 4096
MAX_NODES = 1024
MAX_FILE_BYTES = 1024 * 1024  # a job file's or batch script's (jobspec.reader)
MAX_ARRAY_INDEX = 4_000_000  # Slurm's MaxArraySize is at most 4000001
ARRAY_FORMS = "N (tasks 0 to N-1), A-B, A-B:STEP or a list such as 1,4,10-12"

# The patterns (compiled where a module needs them compiled: slurmopts, spec).
CONTROL_PATTERN = r"[\x00-\x1f\x7f-\x9f]"  # C0, DEL and C1 control characters
# A partition's name, as the inventory and `-p` spell it (no comma: `-p a,b` is a list).
PARTITION_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}"
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}"  # a job's name
_MEM_PATTERN = r"([0-9]{1,13})\s*(?:([kmgt])(?:i?b)?)?"
_MEM_UNITS_KB = {"k": 1, "": 1 << 10, "m": 1 << 10, "g": 1 << 20, "t": 1 << 30}
_MAIL_PATTERN = r"[^\s@,]{1,64}(?:@[^\s@,]{1,255})?"  # --mail-user's (Unicode \s)
_NODES_PATTERN = r"\s*([0-9]{1,9})\s*(?:-\s*([0-9]{1,9})\s*)?"  # -N's N or MIN-MAX
_RUN_PATTERN = r"([0-9]{1,7})(?:-([0-9]{1,7})(?::([0-9]{1,7}))?)?"  # --array's A-B:S
_DIGITS = frozenset("0123456789")
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_NAME_CHARS = _ALNUM | frozenset("._+-")  # NAME_PATTERN's, after its first
_PARTITION_CHARS = _ALNUM | frozenset("_.-")  # PARTITION_PATTERN's, after its first


def _ascii_digits(text: str, most: int) -> bool:
    """Whether `text` is 1 to `most` ASCII digits (the pattern [0-9]{1,most})."""
    return 0 < len(text) <= most and all(char in _DIGITS for char in text)


def _fullmatch(pattern: str, text: str, ignore_case: bool = False, ascii: bool = True) -> object:
    import re

    flags = (re.ASCII if ascii else 0) | (re.IGNORECASE if ignore_case else 0)
    return re.fullmatch(pattern, text, flags)


def _spelled(text: str, rest: frozenset[str], most: int) -> bool:
    """Whether `text` is a letter or digit then up to `most` - 1 characters of `rest`
    (NAME_PATTERN's and PARTITION_PATTERN's form, read without re)."""
    return 0 < len(text) <= most and text[0] in _ALNUM and all(char in rest for char in text)


def has_control(text: str) -> bool:
    """Whether `text` holds a control character (CONTROL_PATTERN's: C0, DEL, C1)."""
    if text.isprintable():  # all of them are Unicode's Cc, which isprintable() is not
        return False
    return any(char <= "\x1f" or "\x7f" <= char <= "\x9f" for char in text)


class FrozenValue:
    """A frozen value of the fields named by __slots__ (a dataclass's eq, hash and repr).

    Not a dataclass: dataclasses (and inspect) cost sbatch's everyday path, which reads
    scripts and --export, most of its start-up (bench/bench_sbatch_script.py)."""

    __slots__: tuple[str, ...] = ()

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({shown})"


# ------------------------------------------------------------- --gpus, --gres


def check_gpus(value: object, field: str = "gpus") -> int:
    """A GPU count: an int from 0 to MAX_GPUS (bool refused). Also used for --gres."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GPUS:
        raise SpecError(
            field,
            f"{show_value(value)} is not a GPU count. Use a whole number from 0 to {MAX_GPUS}"
            + (", without quotes" if isinstance(value, str) and value.isdigit() else ""),
        )
    return value


def check_gpu_type(value: object, field: str) -> str:
    """A GPU type as a job names it (`a100`, `rtx4090`, `1g.10gb`), lowercased.

    Which types exist is the daemon's to say (the types of its nodes' GPUs)."""
    from gbatch.core.gpuname import is_type_name

    text = value.strip().lower() if isinstance(value, str) else None
    if text is None or not is_type_name(text):
        raise SpecError(
            field,
            f"{show_value(value)} is not a GPU type. Name one `gbatch sinfo -o %G` lists, "
            "e.g. a100 or rtx4090",
        )
    return text


def _is_type_name(text: str) -> bool:
    from gbatch.core.gpuname import is_type_name

    return is_type_name(text)


def parse_gres(text: str) -> tuple[str | None, int]:
    """Slurm's `--gres=gpu[:TYPE][:N]` -> (the GPU type or None for any, the count).

    Plain `gpu` is 1; TYPE is a model as `gbatch sinfo` lists them (`gpu:a100:2`),
    checked against the nodes by the daemon. Anything else (other resources, several
    entries) is a SpecError on --gres.
    """
    parts = text.strip().split(":")
    kind, count_text = None, "1"
    if len(parts) == 2:
        kind, count_text = (None, parts[1]) if parts[1].isdigit() else (parts[1], "1")
    elif len(parts) == 3:
        kind, count_text = parts[1], parts[2]
    if (
        parts[0] != "gpu"
        or len(parts) > 3
        or not _ascii_digits(count_text, 6)
        or (kind is not None and not _is_type_name(kind.lower()))
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
        or not _ascii_digits(count_text, 4)
        or int(count_text) < 1
        or (kind is not None and not _is_type_name(kind.lower()))
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
    count = count.strip()
    # isdecimal, not isdigit: the digits int() reads (a superscript ² is a digit it refuses).
    if not count.isdecimal() or (colon and not kind.strip()):
        raise SpecError(
            field,
            f"{show_value(text)} is not a GPU count. Use a number like 2, or TYPE:N like a100:2",
        )
    if nodes > 1 and len(count.strip()) <= 9 and int(count) <= MAX_GPUS * nodes:
        gpus = int(count)
    else:
        gpus = check_gpus(int(count), field)
    return (check_gpu_type(kind, field) if colon else None), gpus


# ------------------------------------------------------ --time, --mem, -p, -q, -c


def check_time_limit(value: object, field: str) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise SpecError(field, f"{show_value(value)} is not a time limit. Use {ACCEPTED_FORMS}")
    try:
        return parse_time_limit(value, field=field)
    except TimeLimitError as err:
        raise SpecError(field, err.message) from None


def check_mem(value: object, field: str = "mem") -> int:
    """A memory size as Slurm writes it, in MiB; SpecError naming `field` if it is none.

    A whole number, MB by default, or with a K, M, G or T suffix (powers of 1024). K
    sizes round up to whole MiB. 0 (Slurm's "all of the node's memory") is refused:
    gbatch counts memory per job. More than 1P is refused too.
    """
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    groups = _mem_groups(text.strip()) if isinstance(text, str) else None
    if groups is None:
        raise SpecError(
            field,
            f"{show_value(value)} is not a memory size. Use megabytes or a size with a unit "
            "K, M, G or T, e.g. 4096, 16G or 512M",
        )
    number, unit = int(groups[0]), groups[1].lower()
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


_MEM_SUFFIXES = frozenset({"", "b", "B", "ib", "iB", "Ib", "IB"})  # (?:i?b)?, any case


def _mem_groups(text: str) -> tuple[str, str] | None:
    """The number and unit ("" for none) of re.fullmatch(_MEM_PATTERN, text, re.ASCII |
    re.IGNORECASE), or None where it does not match: read without re."""
    end = 0
    while end < len(text) and text[end] in _DIGITS:
        end += 1
    number, rest = text[:end], text[end:].lstrip(" \t\n\r\f\v")  # \s, ASCII
    if not 1 <= len(number) <= 13:
        return None
    if not rest:
        return number, ""
    if rest[0] not in "kmgtKMGT" or rest[1:] not in _MEM_SUFFIXES:
        return None
    return number, rest[0]


def check_qos(value: object, field: str) -> str:
    """One QOS name; which exist, and which the user may use, is the daemon's to say."""
    if not isinstance(value, str) or not _spelled(value, _PARTITION_CHARS, 63):
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
        if not isinstance(name, str) or not _spelled(name, _PARTITION_CHARS, 63):
            raise SpecError(
                field,
                f"{show_value(value)} is not a partition name. Name one of the partitions "
                "`gbatch sinfo` lists",
            )
    return ",".join(names)  # type: ignore[arg-type]


def check_nodes(value: object, field: str) -> int:
    """-N/--nodes: N, or Slurm's N-M (a minimum and a maximum), taken as N.

    The planner allocates exactly N nodes; a job that could also run on more gets N."""
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    else:
        match: Any = _fullmatch(_NODES_PATTERN, value) if isinstance(value, str) else None
        if match is None:
            raise SpecError(
                field,
                f"{show_value(value)} is not a node count. Give a whole number such as 2 "
                "(Slurm's MIN-MAX, such as 2-4, is taken as its MIN)",
            )
        count = int(match.group(1))
        if match.group(2) is not None and int(match.group(2)) < count:
            raise SpecError(
                field, f"{show_value(value)} runs backwards. Give MIN-MAX with MIN <= MAX, or N"
            )
    if not 1 <= count <= MAX_NODES:
        raise SpecError(
            field, f"{show_value(value)} is out of range. Ask for 1 to {MAX_NODES} nodes"
        )
    return count


def int_option(text: str | None, option: str) -> int | None:
    """A whole-number option's value; None when not given.

    Checked here rather than by argparse so that a bad value is one line naming the
    option (build_spec checks the range)."""
    if text is None:  # before the pattern: five calls a submit, most with None
        return None
    digits = text.strip()
    if not _ascii_digits(digits[1:] if digits[:1] in ("+", "-") else digits, 18):
        raise SpecError(option, f"{show_value(text)} is not a whole number. Use e.g. 3")
    return int(digits)  # int() strips less than str.strip() does (\x1c-\x1f)


def int_check(low: int, high: int) -> Callable[[object, str], int]:
    """A check of a whole number from `low` to `high` (bool refused)."""

    def check(value: object, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise SpecError(
                field,
                f"{show_value(value)} is out of range. Use a whole number from {low} to {high}",
            )
        return value

    return check


check_cpus = int_check(1, MAX_CPUS)
check_nice = int_check(-10000, 10000)  # --nice's and --priority's


# ------------------------------------------- --open-mode, --mail-type, --mail-user, --comment


def check_open_mode(value: object, field: str) -> str:
    """As sbatch: the first letter decides (a or A: append, t or T: truncate)."""
    first = value.strip()[:1].lower() if isinstance(value, str) else ""
    if first not in ("a", "t"):
        raise SpecError(field, f"{show_value(value)} is not an open mode. Use append or truncate")
    return "append" if first == "a" else "truncate"


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
    if not isinstance(value, str) or not _fullmatch(_MAIL_PATTERN, value, ascii=False):
        raise SpecError(
            field, f"{show_value(value)} is not a mail address. Use e.g. ada@example.org"
        )
    if has_control(value):
        raise SpecError(field, "the address has a control character. Remove it")
    return value


def check_comment(value: object, field: str) -> str:
    if not isinstance(value, str) or len(value) > 1024 or has_control(value):
        raise SpecError(
            field, "a comment is one line of text of at most 1024 characters. Shorten it"
        )
    return value


# ------------------------------------------------------------- -J, -D, -o, -e


def check_command(value: object, field: str) -> tuple[str, ...]:
    """A command checked as a job's: a string run by /bin/sh -c, or an argv list.

    A step's argv is held to it as well."""
    if isinstance(value, str):
        if not value.strip():
            raise SpecError(field, "the command is empty. Give the command to run")
        argv: tuple[str, ...] = ("/bin/sh", "-c", value)
    elif isinstance(value, list | tuple):
        if not value:
            raise SpecError(field, "the command list is empty. Give the program and its args")
        bad = [a for a in value if isinstance(a, bool) or not isinstance(a, str | int | float)]
        if bad:
            raise SpecError(
                field,
                f"list item {show_value(bad[0])} is not a string. Quote each argument, "
                'e.g. ["python", "train.py"]',
            )
        argv = tuple(str(a) for a in value)
        if not argv[0]:
            raise SpecError(field, "the first item (the program) is empty. Name the program")
    else:
        raise SpecError(
            field,
            f"{show_value(value)} is not a command. Write a shell command as a string, "
            'or the argv as a list, e.g. ["python", "train.py"]',
        )
    if any("\0" in a for a in argv):
        raise SpecError(field, "the command contains a NUL byte. Remove it")
    # As the kernel counts argv: each argument's bytes and its terminating NUL, so that
    # a list of a million empty strings is as long as it really is.
    if sum(len(a.encode("utf-8", "surrogatepass")) + 1 for a in argv) > MAX_COMMAND_BYTES:
        raise SpecError(
            field, "the command is longer than 64 KiB. Put it in a script and run the script"
        )
    return argv


def check_name(value: object, field: str) -> str:
    if not isinstance(value, str) or not _spelled(value, _NAME_CHARS, 128):
        raise SpecError(
            field,
            f"{show_value(value)} is not a valid job name. Use 1 to 128 letters, digits, "
            '".", "_", "+" or "-", starting with a letter or digit',
        )
    return value


def safe_default_name(text: str) -> str:
    """A job's name made of `text` (its file's), where none is given: "my run" -> my_run."""
    if _spelled(text[:128], _NAME_CHARS, 128):  # a name already ("wrap", "job.sh")
        return text[:128]
    import re

    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", text, flags=re.ASCII)
    name = re.sub(r"^[^A-Za-z0-9]+", "", name, flags=re.ASCII)[:128]
    return name or "job"


def check_workdir(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise SpecError(
            field, f"{show_value(value)} is not an absolute path. Use a path starting with /"
        )
    return check_path_text(value, field)


def check_path_text(value: str, field: str) -> str:
    """A path a job names: no control characters, at most PATH_MAX."""
    if has_control(value):
        raise SpecError(
            field,
            f"{show_value(value)} contains a control character (a line break, tab or NUL). "
            "Use a path without them",
        )
    if len(value.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise SpecError(
            field, f"the path is longer than {MAX_PATH_BYTES} bytes. Use a shorter path"
        )
    return value


def check_output_path(value: object, field: str) -> str:
    """An output file name as sbatch takes it.

    A path, absolute or relative, that may hold filename patterns (%j, %x, ...:
    gbatch.core.outputs)."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(
            field,
            f"{show_value(value)} is not a file name. Give a path such as slurm-%j.out "
            "or /scratch/%u/%x-%j.out",
        )
    check_path_text(value, field)
    if value.endswith("/"):
        raise SpecError(field, f"{show_value(value)} names a directory. Name a file in it")
    return value


def user_name() -> str:
    """The submitting user's name (their uid when the system knows no name)."""
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def check_output_dirs(outputs: tuple[tuple[str | None, str], ...], name: str, base: str) -> None:
    """Refuse, before queueing, an output or error file the submitter could not write.

    `outputs`: each pattern (None: not given) and the option or key that gave it; `name`
    the job's; `base` where its relative paths start (submit.start_dir). sbatch runs as
    the submitter: its directory missing or not writable, or the file there and not
    writable, or there and not a regular file or /dev/null (a FIFO: core.outputs.
    refusal; stat, never an open, so this does not wait on it either). A directory part
    with %j, %A, %a or %N is known only at start and is not checked; the default
    slurm-%j.out is not either (as Slurm, the job runs all the same, and its log says
    why there is no file). The daemon's shim checks again as it opens them."""
    if all(pattern is None for pattern, _ in outputs):
        return
    for pattern, field in outputs:
        if pattern is None:
            continue
        directory: str | None = base  # submit_check_dir's for a name alone (outputs loads re)
        if os.path.dirname(pattern):
            from gbatch.core.outputs import submit_check_dir

            directory = submit_check_dir(pattern, user_name(), name, base)
        if directory is None:
            continue
        shown = f"{pattern}: directory {directory}"
        if not os.path.isdir(directory):
            raise SpecError(
                field,
                f"{shown} does not exist. Create it or name a file in a directory that exists",
            )
        path = os.path.join(directory, os.path.basename(pattern))
        if "%" not in os.path.basename(pattern) and os.path.exists(path):
            from gbatch.core.outputs import refusal

            info = os.stat(path)
            refused = refusal(
                path, info.st_mode, is_devnull=info.st_rdev == os.stat(os.devnull).st_rdev
            )
            if refused is not None:
                raise SpecError(field, refused)
            # An existing file (/dev/null) needs only to be writable itself.
            problem = None if os.access(path, os.W_OK) else f"{pattern}: {path}"
        else:
            problem = None if os.access(directory, os.W_OK | os.X_OK) else shown
        if problem is not None:
            raise SpecError(
                field, f"{problem} is not writable by you. Name a file in a directory you can write"
            )


# ------------------------------------------------------------------- --export

EXPORT_FORMS = "ALL, NONE, or variables: NAME or NAME=value, comma separated (ALL,NAME=value)"


class Export(FrozenValue):
    """Slurm's --export, read: which of the submitting shell's variables the job takes.

    `everything` (ALL) or not, the names taken from the submitting shell, and values
    given outright (NAME=value).
    """

    __slots__ = ("everything", "names", "values")
    everything: bool
    names: tuple[str, ...]
    values: tuple[tuple[str, str], ...]

    def __init__(
        self,
        everything: bool,
        names: tuple[str, ...] = (),
        values: tuple[tuple[str, str], ...] = (),
    ) -> None:
        object.__setattr__(self, "everything", everything)
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "values", values)

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
        reason = reserved_env_reason(name) or (
            "SLURM_* variables are set by gbatch for each job"
            if name.startswith("SLURM_")
            else None
        )
        if reason is not None:
            raise SpecError(field, f"{name} cannot be exported: {reason}. Remove it")
        if has_control(text):
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


# ------------------------------------------------------------------- --signal

_SIGNAL_PATTERN = r"(?:([RB]{1,2}):)?([A-Za-z0-9+]{1,12})(?:@([0-9]{1,5}))?"
DEFAULT_SIGNAL_SECONDS = 60  # Slurm's


class JobSignal(FrozenValue):
    """--signal: `signum` sent `seconds` before the time limit; `batch`: B: was given."""

    __slots__ = ("batch", "seconds", "signum")
    signum: int
    seconds: int
    batch: bool

    def __init__(self, signum: int, seconds: int, batch: bool = False) -> None:
        object.__setattr__(self, "signum", signum)
        object.__setattr__(self, "seconds", seconds)
        object.__setattr__(self, "batch", batch)

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
    match: Any = _fullmatch(_SIGNAL_PATTERN, text.strip()) if isinstance(text, str) else None
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


# ---------------------------------------------------------------------- --array


def split_throttle(text: str, field: str) -> tuple[str, int | None]:
    """An --array expression without its `%MAX` suffix, and MAX (None without one).

    At most MAX of the array's tasks run at once (Slurm's ArrayTaskThrottle)."""
    text = text.strip()
    body, percent, limit = text.partition("%")
    if not percent:
        return text, None
    if not _ascii_digits(limit, 7) or int(limit) < 1:
        raise SpecError(
            field,
            f"{show_value(text)}: %{limit} is not a number of tasks to run at once. "
            "Write %MAX with MAX 1 or more, e.g. 0-99%4",
        )
    return body.strip(), int(limit)


def parse_array_runs(
    text: str, field: str = "--array", *, max_tasks: int = 100_000
) -> tuple[tuple[tuple[int, int, int], ...], int | None]:
    """An --array expression's runs (first, last, step), and its `%MAX` (None without).

    slurmopts.parse_array's reading (it makes them a TaskArray): `A-B`, `A-B:STEP` and
    lists of them (`1,4,10-12`) as in Slurm; a lone number N is N tasks 0 to N-1. At
    most `max_tasks` indices. SpecError naming `field`."""
    usage = f"Use {ARRAY_FORMS}"
    text, throttle = split_throttle(text, field)
    if _ascii_digits(text, 7):
        count = int(text)
        if not 1 <= count <= max_tasks:
            raise SpecError(field, f"{show_value(text)} is not 1 to {max_tasks} tasks. {usage}")
        return ((0, count - 1, 1),), throttle
    runs: list[tuple[int, int, int]] = []
    indices: set[int] = set()
    for part in text.split(","):
        match: object = _fullmatch(
            r"([0-9]{1,7})(?:-([0-9]{1,7})(?::([0-9]{1,7}))?)?", part.strip()
        )
        if match is None:
            raise SpecError(field, f"{show_value(text)} is not an array. {usage}")
        first, last, every = match.groups()  # type: ignore[attr-defined]
        low = int(first)
        high = low if last is None else int(last)
        step = 1 if every is None else int(every)
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
    return tuple(runs), throttle


def array_request(text: str) -> str:
    """What a submit request carries for --array `text`.

    Its runs as `A-B[:S],...` (TaskArray.text's form, which the daemon reads back) and
    its `%MAX`."""
    runs, throttle = parse_array_runs(text)
    runs_text = ",".join(f"{a}-{b}:{step}" if step != 1 else f"{a}-{b}" for a, b, step in runs)
    return runs_text if throttle is None else f"{runs_text}%{throttle}"
