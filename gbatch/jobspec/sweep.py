"""Parameter sweeps: an array whose task k takes row k of a table of parameters.

A sweep is names and rows of text values. It comes from a job file's `sweep:` (a grid
mapping, or `{file: rows.csv|rows.jsonl}`) or from sbatch's `--param NAME=V1,V2`
(a grid), read by the CLI as the submitter and sent with the job. The daemon checks
it again (check_sweep) and makes task k's spec with task_spec: `{name}` in the command
replaced by the value (`{{` and `}}` stand for `{` and `}`), the task named by the
name template, the row kept as JobSpec.params (GBATCH_PARAM_<NAME> at the job's start).

Pure: no file is read here except by read_rows_file, which the CLI calls.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gbatch.core.model import JobSpec
from gbatch.core.timefmt import show_value
from gbatch.jobspec.spec import MAX_COMMAND_BYTES, SpecError

MAX_ROWS = 100_000  # as many as one array submit may have (limits.ARRAY_HARD_CAP)
MAX_NAMES = 64
MAX_VALUE_CHARS = 4096
MAX_FILE_BYTES = 32 * 1024 * 1024
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}", re.ASCII)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# `{{`, `}}`, or a placeholder `{identifier}`; any other brace is text as written
# (awk's `{print $1}`, brace expansion `{a,b}`), and so is the shell's `${NAME}`.
_TOKEN_RE = re.compile(r"\{\{|\}\}|(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}", re.ASCII)
PARAM_ENV_PREFIX = "GBATCH_PARAM_"


@dataclass(frozen=True)
class Sweep:
    """Parameter names and one row of values (text, as written) per task, in order."""

    names: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def to_wire(self) -> dict[str, object]:
        return {"names": list(self.names), "rows": [list(row) for row in self.rows]}

    def params(self, k: int) -> tuple[tuple[str, str], ...]:
        return tuple(zip(self.names, self.rows[k], strict=True))


# ----------------------------------------------------------------------- grids


def grid(axes: Sequence[tuple[str, Sequence[str]]], field: str) -> Sweep:
    """The sweep of every combination of `axes` (name, values): their cartesian product.

    In itertools.product's order: the last name varies fastest. Names are checked
    (check_names); each axis needs a value; at most MAX_ROWS rows.
    """
    names = tuple(name for name, _ in axes)
    check_names(names, field)
    size = 1
    for name, values in axes:
        if not values:
            raise SpecError(field, f"{name} has no values. Give one or more, e.g. {name}=1,2")
        size *= len(values)
        if size > MAX_ROWS:
            raise SpecError(
                field, f"the grid has more than {MAX_ROWS} combinations. Sweep fewer values"
            )
    rows = tuple(itertools.product(*(tuple(values) for _, values in axes)))
    sweep = Sweep(names, rows)
    _check_values(sweep, field)
    return sweep


def parse_param_options(texts: Sequence[str], field: str = "--param") -> Sweep:
    """sbatch's `--param NAME=V1,V2,...` (repeatable): a grid, in the options' order."""
    axes: list[tuple[str, list[str]]] = []
    for text in texts:
        name, eq, values = text.partition("=")
        if not eq:
            raise SpecError(
                field, f"{show_value(text)} has no '='. Write NAME=V1,V2, e.g. --param lr=1e-3,1e-2"
            )
        axes.append((name.strip(), [] if values == "" else values.split(",")))
    return grid(axes, field)


def sweep_from_yaml(value: object, field: str = "sweep") -> Sweep | str:
    """A job file's `sweep:` as a Sweep, or as the name of the file of rows it names.

    A grid mapping NAME: [values] or NAME: value gives a Sweep; `{file: NAME}` gives
    the file name (str), which the caller reads (read_rows_file).
    """
    if not isinstance(value, Mapping) or not value:
        raise SpecError(
            field,
            "write a mapping of names to lists of values, e.g. `sweep: {lr: [1e-3, 1e-2]}`, "
            "or `sweep: {file: params.csv}`",
        )
    if "file" in value:
        path = value["file"]
        if len(value) > 1:
            raise SpecError(field, "a sweep from a file takes no other keys. Keep `file:` alone")
        if not isinstance(path, str) or not path.strip():
            raise SpecError(f"{field}.file", "give a file name, e.g. params.csv or params.jsonl")
        return path
    axes: list[tuple[str, list[str]]] = []
    for name, values in value.items():
        items = values if isinstance(values, list) else [values]
        texts = []
        for item in items:
            if isinstance(item, Mapping | list) or item is None:
                raise SpecError(
                    f"{field}.{name}",
                    f"{show_value(item)} is not a value. Give text or numbers, e.g. [1, 2]",
                )
            texts.append(_text(item))
        axes.append((str(name), texts))
    return grid(axes, field)


def _text(item: object) -> str:
    if isinstance(item, bool):  # only when written as true/false and read as such
        return "true" if item else "false"
    return str(item)


# ----------------------------------------------------------------------- files


def read_rows_file(path: str, field: str = "sweep.file") -> Sweep:
    """The sweep a CSV or JSONL file of rows holds, read by its suffix.

    CSV: a header of names. JSONL: one object a line, the first one's keys the names,
    in its order. Refusals name the file and line.
    """
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(field, f"{path}: no such file. Check the path") from None
    except OSError as err:
        raise SpecError(field, f"{path}: cannot read it ({err.strerror}). Check the path") from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError(field, f"{path} is larger than 32 MiB. Sweep fewer rows")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise SpecError(field, f"{path}: byte {err.start} is not UTF-8. Save it as UTF-8") from None
    lower = path.lower()
    if lower.endswith(".csv"):
        return parse_csv(text, path)
    if lower.endswith((".jsonl", ".ndjson")):
        return parse_jsonl(text, path)
    raise SpecError(field, f"{path}: name a .csv or .jsonl file (one task a row)")


def parse_csv(text: str, where: str) -> Sweep:
    """CSV rows under a header of names; blank lines skipped; every row as wide as it."""
    import csv

    reader = csv.reader(text.splitlines())
    names: tuple[str, ...] | None = None
    rows: list[tuple[str, ...]] = []
    try:
        for record in reader:
            line = reader.line_num
            if not record or all(not cell.strip() for cell in record):
                continue
            if names is None:
                names = tuple(cell.strip() for cell in record)
                check_names(names, f"{where}:{line}")
                continue
            if len(record) != len(names):
                raise SpecError(
                    f"{where}:{line}",
                    f"{len(record)} values for {len(names)} names ({','.join(names)}). "
                    "Give one value per column",
                )
            _row_cap(len(rows), where, line)
            rows.append(tuple(record))
    except csv.Error as err:
        raise SpecError(f"{where}:{reader.line_num}", f"not CSV ({err}). Fix the line") from None
    if names is None:
        raise SpecError(where, "the file is empty. Write a header line of names, then rows")
    return _file_sweep(names, rows, where)


def parse_jsonl(text: str, where: str) -> Sweep:
    """The sweep of JSONL text: one JSON object per line, all with the same keys.

    Blank lines are skipped; values are text, numbers or booleans (a number keeps its
    written form).
    """
    names: tuple[str, ...] | None = None
    rows: list[tuple[str, ...]] = []
    for line, source in enumerate(text.splitlines(), start=1):
        if not source.strip():
            continue
        at = f"{where}:{line}"
        try:
            # Numbers as written: 1e-3 stays "1e-3", 0.10 stays "0.10".
            record = json.loads(source, parse_float=str, parse_int=str)
        except (json.JSONDecodeError, RecursionError) as err:
            message = getattr(err, "msg", "too deeply nested")
            raise SpecError(at, f"not JSON ({message}). Write one object a line") from None
        if not isinstance(record, dict):
            raise SpecError(at, 'not a JSON object. Write one object a line, e.g. {"lr": 0.1}')
        if names is None:
            names = tuple(record)
            check_names(names, at)
        elif set(record) != set(names):
            raise SpecError(
                at,
                f"keys {','.join(record) or '(none)'} differ from the first row's "
                f"({','.join(names)}). Give every row the same keys",
            )
        values = []
        for name in names:
            value = record[name]
            if isinstance(value, dict | list) or value is None:
                raise SpecError(at, f"{name}: {show_value(value)} is not text or a number")
            values.append(_text(value))
        _row_cap(len(rows), where, line)
        rows.append(tuple(values))
    if names is None:
        raise SpecError(where, "the file has no rows. Write one JSON object a line")
    return _file_sweep(names, rows, where)


def _row_cap(count: int, where: str, line: int) -> None:
    if count >= MAX_ROWS:
        raise SpecError(f"{where}:{line}", f"more than {MAX_ROWS} rows. Split the sweep")


def _file_sweep(names: tuple[str, ...], rows: list[tuple[str, ...]], where: str) -> Sweep:
    if not rows:
        raise SpecError(where, "the file has names but no rows. Add one row per task")
    sweep = Sweep(names, tuple(rows))
    _check_values(sweep, where)
    return sweep


# ----------------------------------------------------------------------- checks


def check_names(names: Sequence[str], field: str) -> None:
    """Refuse parameter names that are not identifiers each given once (SpecError).

    Names become {name} and GBATCH_PARAM_NAME, so each is given once, also once
    upper-cased (lr and LR would set one variable); at least one, at most MAX_NAMES.
    """
    if not names:
        raise SpecError(field, "no parameter names. Name at least one")
    if len(names) > MAX_NAMES:
        raise SpecError(field, f"more than {MAX_NAMES} parameters. Sweep fewer")
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise SpecError(
                field,
                f"{show_value(name)} is not a parameter name. Use letters, digits and _, "
                "not starting with a digit (e.g. lr, batch_size)",
            )
        if name.upper() in seen:
            raise SpecError(
                field,
                f"{name} is given twice (names are upper-cased for GBATCH_PARAM_{name.upper()}). "
                "Keep one",
            )
        seen.add(name.upper())


def _check_values(sweep: Sweep, field: str) -> None:
    for k, row in enumerate(sweep.rows):
        for name, value in zip(sweep.names, row, strict=True):
            if len(value) > MAX_VALUE_CHARS or _CONTROL_RE.search(value):
                raise SpecError(
                    field,
                    f"row {k + 1}: the value of {name} is over {MAX_VALUE_CHARS} characters or "
                    "holds a control character (a line break, a tab). Give one line of text",
                )


def sweep_from_wire(data: object) -> Sweep:
    """A submit request's sweep, checked again (any client may send one)."""
    field = "sweep"
    if not isinstance(data, Mapping):
        raise SpecError(field, "not a mapping of names and rows")
    names, rows = data.get("names"), data.get("rows")
    if not isinstance(names, list) or not isinstance(rows, list):
        raise SpecError(field, "names and rows must be lists")
    check_names(names, field)
    if not 1 <= len(rows) <= MAX_ROWS:
        raise SpecError(field, f"{len(rows)} rows; a sweep has 1 to {MAX_ROWS}")
    checked = []
    for k, row in enumerate(rows):
        if (
            not isinstance(row, list)
            or len(row) != len(names)
            or not all(isinstance(value, str) for value in row)
        ):
            raise SpecError(field, f"row {k + 1} is not {len(names)} text values")
        checked.append(tuple(row))
    sweep = Sweep(tuple(names), tuple(checked))
    _check_values(sweep, field)
    return sweep


# ----------------------------------------------------------------- substitution


def substitute(template: str, values: Mapping[str, str], field: str) -> str:
    """`template` with each `{name}` replaced by values[name], `{{` by `{` and `}}` by `}`.

    An identifier in braces that is not a name is refused, named.
    """

    def one(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        name = match.group(1)
        if name not in values:
            known = ", ".join("{" + n + "}" for n in values) or "none"
            raise SpecError(
                field,
                f"{{{name}}} is not a parameter of the sweep (they are {known}). "
                f"Write {{{{{name}}}}} for the text {{{name}}}",
            )
        return values[name]

    return _TOKEN_RE.sub(one, template)


def check_templates(
    command: Sequence[str], names: Sequence[str], name_template: str | None, job_name: str
) -> None:
    """Refuse, before anything is queued, a placeholder that names no parameter."""
    blank = dict.fromkeys(names, "")
    for item in command:
        substitute(item, blank, "command")
    if name_template is not None:
        substitute(name_template, {"name": job_name, **blank}, "--name-template")


def task_spec(spec: JobSpec, sweep: Sweep, k: int, name_template: str | None) -> JobSpec:
    """Task k's spec: row k substituted into the command, the task named, the row kept.

    Row k is substituted in each argv item; the task is named by `name_template`
    (`{name}` is the job's name; characters a name cannot hold become _); row k is kept
    as params. SpecError when the command grows past MAX_COMMAND_BYTES.
    """
    params = sweep.params(k)
    values = dict(params)
    command = tuple(substitute(item, values, "command") for item in spec.command)
    if sum(len(item.encode("utf-8", "surrogatepass")) for item in command) > MAX_COMMAND_BYTES:
        raise SpecError(
            "command",
            f"task {k}'s command is longer than 64 KiB with its parameters. Shorten the values",
        )
    name = spec.name
    if name_template is not None:
        name = safe_name(
            substitute(name_template, {"name": spec.name, **values}, "--name-template")
        )
    return replace(spec, command=command, name=name, params=params)


def safe_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", text, flags=re.ASCII)
    name = re.sub(r"^[^A-Za-z0-9]+", "", name, flags=re.ASCII)[:128]
    return name or "job"


def param_env(params: Sequence[tuple[str, str]]) -> dict[str, str]:
    """GBATCH_PARAM_<NAME upper-cased> for each parameter of a task."""
    return {PARAM_ENV_PREFIX + name.upper(): value for name, value in params}


def params_text(params: Sequence[tuple[str, str]]) -> str:
    """`lr=1e-3,bs=32`, as scontrol and sacct show a task's parameters."""
    return ",".join(f"{name}={value}" for name, value in params)
