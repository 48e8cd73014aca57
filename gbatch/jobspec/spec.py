"""Job files (YAML, or JSON read alike) and CLI overrides -> a validated JobSpec.

Every refusal is a SpecError naming the job-file key (or the CLI option that set it)
and saying, in one line, what is wrong and what to do. Checks that need the fleet
(more GPUs than any node has, mounts outside the allowlist) belong to the daemon.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from json import JSONDecoder

from gbatch.core.model import JOB_EVENTS, JobSpec, NotifyHook
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

MAX_FILE_BYTES = 1024 * 1024
MAX_COMMAND_BYTES = 64 * 1024
MAX_ENV_BYTES = 64 * 1024
MAX_GPUS = 64
MAX_NESTING = 32  # a job file needs 3 levels; libyaml itself stops at 1000
MAX_PATH_BYTES = 4095  # Linux's PATH_MAX, less its NUL
MAX_SHM_BYTES = 1 << 50  # 1 PiB: past any machine's memory, well short of docker's int64
MAX_CPUS = 4096
MAX_MEM_MB = 1 << 30  # 1 PiB in MiB, as for shm_size

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
    "output",
    "error",
    "open_mode",
    "ntasks",
    "notify",
)
# Keys the CLI sends with every submit, beside a job file's: where it was submitted
# from. A job file may not set them (build_spec's `wire`).
SUBMIT_KEYS = ("submit_dir", "submit_host")

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
    "output": "-o/--output",
    "error": "-e/--error",
    "open_mode": "--open-mode",
    "ntasks": "-n/--ntasks",
    "notify": "--notify",
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
}

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}", re.ASCII)
_HOST_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
_DATE_START_RE = re.compile(r"\s*[0-9]{4}-")
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
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1 control characters
_SHM_RE = re.compile(r"([0-9]{1,15})\s*(?:([bkmg])(?:i?b)?)?", re.ASCII | re.IGNORECASE)


class SpecError(Exception):
    """A job file or option that cannot become a JobSpec.

    `field` is the job-file key, the CLI option, or the file name; `message` is one
    line saying what is wrong and what to do. `str(err)` is `"<field>: <message>"`.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# ---------------------------------------------------------------------------- reading


def load_job_file(path: str | os.PathLike[str]) -> dict[str, object]:
    """Read a job file: a YAML mapping of at most MAX_FILE_BYTES.

    Refuses (SpecError, field = the path as given) a missing or unreadable file, a
    syntax error (with its line), more than one document, a top level that is not a
    mapping, a key written twice, nesting deeper than MAX_NESTING, and any YAML alias
    (`*name`): aliases are what "billion laughs" bombs are made of and a job file never
    needs them, so they are refused outright rather than counted.

    YAML 1.1 quirks are read the YAML 1.2 way where they would surprise: a plain
    `1:30` is the string "1:30" (not sexagesimal 90), so `time_limit: 1:30` means one
    minute thirty; and names and values under `env:` keep the text as written (`UMASK: 0022`,
    `DEBUG: yes`, `LR: 0.10` stay "0022", "yes", "0.10").
    """
    where = os.fspath(path)
    return parse_job_text(read_job_text(where), where)


def parse_job_text(text: str, where: str) -> dict[str, object]:
    """load_job_file's reading of a job file's text (`where` names it in errors). A
    file in JSON (a mapping, `{` first) is read by json, the same values as PyYAML
    would make of it (_json_job); anything json or that reading declines goes to
    PyYAML, whose refusals are the ones a user reads."""
    if text.lstrip(" \n\r")[:1] == "{":
        data = _json_job(text)
        if data is not None:
            return data
    return _yaml_job(text, where)


def _yaml_job(text: str, where: str) -> dict[str, object]:
    """parse_job_text by PyYAML: every job file's reading but JSON's."""
    # Deferred: PyYAML costs import time that commands which never read a job file
    # (squeue, sacct) should not pay for.
    import yaml

    loader_class: Any = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_tree(where, node, loader.resolve)
        data = None if node is None else loader.construct_document(node)
    except yaml.MarkedYAMLError as err:
        line = f"line {err.problem_mark.line + 1}: " if err.problem_mark else ""
        problem = err.problem or err.context or "invalid YAML"
        raise SpecError(
            where,
            f"{line}could not parse YAML ({problem}). "
            "Fix the syntax there (indentation, a missing colon or an unclosed quote)",
        ) from None
    except yaml.YAMLError as err:
        problem = " ".join(str(err).split())  # one line, whatever PyYAML wrote
        raise SpecError(where, f"could not parse YAML ({problem}). Fix the file") from None
    except RecursionError:
        raise SpecError(where, "the YAML is nested too deeply. Flatten it") from None
    finally:
        loader.dispose()
    if data is None:
        raise SpecError(where, "the file is empty. Write a mapping such as `command: ...`")
    if not isinstance(data, dict):
        raise SpecError(
            where,
            f"the top level is a {_yaml_kind(data)}, not a mapping. "
            "Write keys at the top level, e.g. `command: python train.py`",
        )
    # Non-string keys (`1:`, `on:`) become text so that build_spec names them as unknown.
    return {str(key): value for key, value in data.items()}


# What PyYAML reads otherwise than json does, or refuses, in text json accepts: a tab
# (PyYAML refuses it in places), characters YAML does not allow or reads as line
# breaks, a BOM inside the text, the escape `\/`, escaped UTF-16 surrogates (libyaml
# refuses them; json pairs them), and a key whose colon is on a later line or far
# after it (a YAML key ends on its line, within 1,024 characters). Text with any of
# these goes to PyYAML.
_NOT_JSON_ALIKE = re.compile(
    r"[^\x0a\x0d\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
    r"|\\/|\\u[dD][89abcdefABCDEF]"
    r'|"(?:[ ]{64,}|[ ]*[\r\n][ \r\n]*):'
)
_LONGEST_KEY = 150  # characters: written with \uXXXX escapes, YAML's 1,024 at most
# YAML 1.1's int and float, as PyYAML resolves a plain scalar json calls a number (json
# forbids the rest of YAML's spellings: `0x`, `_`, `:`, `.5`); a number neither matches
# (`1e5`, `1.5e3`: YAML's exponent takes a sign and a point) is text in YAML, as NaN is.
_YAML_INT = re.compile(r"[-+]?(?:0|[1-9][0-9_]*)")
_YAML_FLOAT = re.compile(r"[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?")


class _JsonNumber(str):
    """A number (or NaN, Infinity) as json read it, kept as written until its role is
    known: text under env, secret_env and sweep, a number elsewhere."""


class _NotAlike(Exception):
    """A JSON job that PyYAML reads otherwise or refuses: PyYAML's reading stands."""


def _json_job(text: str) -> dict[str, object] | None:
    """The job file `text` (JSON, a mapping) as _yaml_job would read it, by json:
    None where PyYAML could read it otherwise or refuse it (see _NOT_JSON_ALIKE, a key
    written twice, nesting past MAX_NESTING, a number past _MAX_NUMBER_CHARS; json's
    own refusals), which then reads it. A tenth of PyYAML's time for an API submit."""
    if _NOT_JSON_ALIKE.search(text):
        return None
    try:
        data = _json_decoder().decode(text)
        if not isinstance(data, dict):
            return None
        return {key: _as_yaml(value, 2, _role_of(key, "", 1)) for key, value in data.items()}
    except (ValueError, RecursionError, _NotAlike):
        return None  # json.JSONDecodeError is a ValueError


@functools.cache
def _json_decoder() -> JSONDecoder:
    """_json_job's decoder, made once (json.loads with hooks makes one per call); shared
    by threads as json's own default decoder is."""
    from json import JSONDecoder  # deferred: commands that read no job file skip it

    return JSONDecoder(
        object_pairs_hook=_json_mapping,
        parse_int=_JsonNumber,
        parse_float=_JsonNumber,
        parse_constant=_JsonNumber,
    )


def _json_mapping(pairs: list[tuple[str, object]]) -> dict[str, object]:
    data = dict(pairs)
    if len(data) != len(pairs):
        raise _NotAlike  # a key written twice: PyYAML's refusal names its line
    if any(len(key) > _LONGEST_KEY for key in data):
        raise _NotAlike
    return data


def _role_of(key: str, role: str, depth: int) -> str:
    """_check_tree's role of the value of `key` in a mapping of `role` at `depth`."""
    if role in ("env", "sweep"):
        return "env_value"
    if depth == 1 and key in ("env", "secret_env"):
        return "env"
    if depth == 1 and key == "sweep":
        return "sweep"
    return ""


def _as_yaml(value: object, depth: int, role: str) -> object:
    """json's `value` at `depth` (the root is 1) in `role`, as PyYAML's reading with
    _check_tree's: numbers and true/false under env_value stay text as written."""
    if depth > MAX_NESTING:
        raise _NotAlike
    if isinstance(value, _JsonNumber):
        if len(value) > _MAX_NUMBER_CHARS:
            raise _NotAlike
        if role == "env_value":
            return str(value)
        if _YAML_INT.fullmatch(value):
            return int(value)
        if _YAML_FLOAT.fullmatch(value):
            return float(value)
        return str(value)
    if isinstance(value, bool):
        return ("true" if value else "false") if role == "env_value" else value
    if isinstance(value, list):
        item_role = "env_value" if role == "env_value" else ""
        return [_as_yaml(item, depth + 1, item_role) for item in value]
    if isinstance(value, dict):
        if value and depth + 1 > MAX_NESTING:
            raise _NotAlike  # its keys are one level down
        return {
            key: _as_yaml(item, depth + 1, _role_of(key, role, depth))
            for key, item in value.items()
        }
    return value


def read_job_text(where: str) -> str:
    try:
        with open(where, "rb") as file:
            # Read one byte past the cap instead of trusting stat(): the path may be a
            # pipe or a device that never ends.
            raw = file.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(where, "no such file. Check the path") from None
    except IsADirectoryError:
        raise SpecError(where, "this is a directory, not a job file. Name a .yaml file") from None
    except PermissionError:
        raise SpecError(where, "permission denied. Make the file readable by you") from None
    except OSError as err:
        raise SpecError(where, f"cannot read the file ({err.strerror}). Check the path") from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError(
            where,
            "the file is larger than 1 MiB. A job file holds settings, not data: "
            "move the data to a mounted file",
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(
            where, f"byte {err.start} is not UTF-8 text. Save the file as UTF-8"
        ) from None


_YAML_TAG = "tag:yaml.org,2002:"
_STR_TAG = _YAML_TAG + "str"
_LITERAL_TAGS = frozenset({_YAML_TAG + "int", _YAML_TAG + "float", _YAML_TAG + "bool"})
# What a job file may hold: text, numbers, booleans, null, lists and mappings. PyYAML's
# constructors for anything else (and for an explicit tag on text that does not fit it,
# such as `!!int x`) raise plain Python errors, so other tags are refused here first.
_SCALAR_TAGS = _LITERAL_TAGS | {_STR_TAG, _YAML_TAG + "null"}
_TEXT_TAGS = frozenset({_YAML_TAG + "timestamp", _YAML_TAG + "value"})  # `2024-01-31`, `=`
_COLLECTION_TAGS = frozenset({_YAML_TAG + "seq", _YAML_TAG + "map"})
_MAX_NUMBER_CHARS = 64  # Python refuses to read ints of over 4300 digits; no field needs 20


def _check_tree(
    where: str, root: Any, resolve: Callable[[Any, str, tuple[bool, bool]], str]
) -> None:
    """Walk the composed YAML nodes once, iteratively, before anything is built.

    An alias makes the composer hand back the very node it refers to, so a node seen
    twice is an alias: the walk stops there, in time linear in the file's size.
    Also re-tags the scalars described in load_job_file's docstring, reads dates as
    text, and refuses tags other than plain YAML data (`!!binary`, `!!set`, `!foo`,
    `<<` merge keys), explicit tags on text that does not fit them (`!!int x`) and
    numbers too long to be a setting. `resolve` is the loader's tag resolver.
    """
    import yaml

    seen: set[int] = set()
    # role: "env" for the env mapping, "env_value" for its values, "" elsewhere.
    stack: list[tuple[Any, int, str]] = [(root, 1, "")]
    while stack:
        node, depth, role = stack.pop()
        line = node.start_mark.line + 1
        if id(node) in seen:
            raise SpecError(
                where,
                f"line {line}: this value is reused through a YAML alias (*name). Aliases "
                "are not accepted; write the value out in full where it is used",
            )
        seen.add(id(node))
        if depth > MAX_NESTING:
            raise SpecError(
                where, f"line {line}: nested more than {MAX_NESTING} levels deep. Flatten it"
            )
        if isinstance(node, yaml.ScalarNode):
            _check_scalar(where, node, role, resolve)
        elif isinstance(node, yaml.SequenceNode):
            _check_collection_tag(where, node)
            # A sweep's list of values (`lr: [1e-3, 0.10]`) keeps them as written.
            item_role = "env_value" if role == "env_value" else ""
            stack.extend((item, depth + 1, item_role) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            _check_collection_tag(where, node)
            keys: set[str] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.tag == _YAML_TAG + "merge":
                        raise SpecError(
                            where,
                            f"line {key.start_mark.line + 1}: merge keys (<<) are not accepted. "
                            "Write the keys out in full",
                        )
                    if key.value in keys:
                        raise SpecError(
                            where,
                            f"line {key.start_mark.line + 1}: key {show_value(key.value)} is "
                            "written twice. Keep one of them",
                        )
                    keys.add(key.value)
                if role in ("env", "sweep"):
                    value_role = "env_value"
                elif depth == 1 and key.value in ("env", "secret_env"):
                    value_role = "env"
                elif depth == 1 and key.value == "sweep":
                    value_role = "sweep"  # its values are text as written, as env's
                else:
                    value_role = ""
                # Env names stay text too: `ON: 1` is the variable ON, not True.
                stack.append((key, depth + 1, "env_value" if role == "env" else ""))
                stack.append((value, depth + 1, value_role))


def _check_scalar(
    where: str, node: Any, role: str, resolve: Callable[[Any, str, tuple[bool, bool]], str]
) -> None:
    import yaml

    line = node.start_mark.line + 1
    if node.tag in _LITERAL_TAGS and (role == "env_value" or ":" in node.value):
        node.tag = _STR_TAG
        return
    if node.tag in _TEXT_TAGS and resolve(yaml.ScalarNode, node.value, (True, False)) == node.tag:
        node.tag = _STR_TAG
        return
    if node.tag not in _SCALAR_TAGS:
        raise SpecError(
            where,
            f"line {line}: the YAML tag {_show_tag(node.tag)} is not accepted. Remove it: "
            "a job file holds text, numbers, true/false, lists and mappings",
        )
    if node.tag != _STR_TAG and resolve(yaml.ScalarNode, node.value, (True, False)) != node.tag:
        raise SpecError(
            where,
            f"line {line}: {show_value(node.value)} is not a {_show_tag(node.tag)}. "
            "Remove the tag or fix the value",
        )
    if node.tag in _LITERAL_TAGS and len(node.value) > _MAX_NUMBER_CHARS:
        raise SpecError(
            where,
            f"line {line}: the number {show_value(node.value)} is longer than "
            f"{_MAX_NUMBER_CHARS} characters. Use a smaller number, or quote it if it is text",
        )


def _check_collection_tag(where: str, node: Any) -> None:
    if node.tag not in _COLLECTION_TAGS:
        raise SpecError(
            where,
            f"line {node.start_mark.line + 1}: the YAML tag {_show_tag(node.tag)} is not "
            "accepted. Remove it: a job file holds text, numbers, true/false, lists and mappings",
        )


def _show_tag(tag: str) -> str:
    return show_value(tag.replace(_YAML_TAG, "!!", 1) if tag.startswith(_YAML_TAG) else tag)


def _yaml_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "plain string"
    return type(value).__name__


# --------------------------------------------------------------------------- building


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
    # of the ~40 (a loop over KEYS was ~4 us of its ~40 us request_for_text).
    values = {k: (v, k) for k, v in file_data.items() if v is not None and k in _KEY_SET}
    for key, value in overrides.items():
        if value is not None:
            values[key] = (value, option_names.get(key) or OVERRIDE_OPTION.get(key, key))

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
            _check_begin(value, field, now) if check is _check_begin else check(value, field)
        )
    if "name" not in fields:
        fields["name"] = _safe_default_name(default_name)
    spec = JobSpec(**fields)
    _check_memory_apart(spec, values)
    _check_secret_env_apart(spec, values.get("secret_env", (None, ""))[1])
    return spec


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


_MEM_RE = re.compile(r"([0-9]{1,13})\s*(?:([kmgt])(?:i?b)?)?", re.ASCII | re.IGNORECASE)
_MEM_UNITS_KB = {"k": 1, "": 1 << 10, "m": 1 << 10, "g": 1 << 20, "t": 1 << 30}


def check_mem(value: object, field: str = "mem") -> int:
    """A memory size as Slurm writes it -> MiB: a whole number, MB by default, or with a
    K, M, G or T suffix (powers of 1024). K sizes round up to whole MiB. 0 (Slurm's "all
    of the node's memory") is refused: gbatch counts memory per job."""
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
    """A `secret_env:` mapping NAME -> value: env's name rules, and string values only
    (a YAML number or bool would be rewritten on reading: `0123` is 83, `yes` true)."""
    if not isinstance(value, Mapping):
        raise SpecError(
            field,
            f"a {_yaml_kind(value)} is not a mapping (its value is not shown). Write "
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


def _safe_default_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", text, flags=re.ASCII)
    name = re.sub(r"^[^A-Za-z0-9]+", "", name, flags=re.ASCII)[:128]
    return name or "job"


def _check_name(value: object, field: str) -> str:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise SpecError(
            field,
            f"{show_value(value)} is not a valid job name. Use 1 to 128 letters, digits, "
            '".", "_", "+" or "-", starting with a letter or digit',
        )
    return value


def _check_command(value: object, field: str) -> tuple[str, ...]:
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


def check_gpus(value: object, field: str = "gpus") -> int:
    """A GPU count: an int from 0 to MAX_GPUS (bool refused). Also used for --gres."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GPUS:
        raise SpecError(
            field,
            f"{show_value(value)} is not a GPU count. Use a whole number from 0 to {MAX_GPUS}"
            + (", without quotes" if isinstance(value, str) and value.isdigit() else ""),
        )
    return value


def _check_one_task(value: object, field: str) -> int:
    if isinstance(value, bool) or value not in (1, "1"):
        raise SpecError(
            field,
            f"{show_value(value)} asks for more than one task; a gbatch job is one task on "
            "one node. Use 1, or start the tasks inside the job",
        )
    return 1


def _check_bool(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(field, f"{show_value(value)} is not true or false. Write true or false")
    return value


def _int_check(low: int, high: int) -> Callable[[object, str], int]:
    def check(value: object, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise SpecError(
                field,
                f"{show_value(value)} is out of range. Use a whole number from {low} to {high}",
            )
        return value

    return check


def _check_time_limit(value: object, field: str) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise SpecError(field, f"{show_value(value)} is not a time limit. Use {ACCEPTED_FORMS}")
    try:
        return parse_time_limit(value, field=field)
    except TimeLimitError as err:
        raise SpecError(field, err.message) from None


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
        if "," in item or _CONTROL_RE.search(item):
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


def _check_workdir(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise SpecError(
            field, f"{show_value(value)} is not an absolute path. Use a path starting with /"
        )
    return _check_path_text(value, field)


def _check_path_text(value: str, field: str) -> str:
    """A path a job names: no control characters, at most PATH_MAX."""
    if _CONTROL_RE.search(value):
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


def _check_output_path(value: object, field: str) -> str:
    """An output file name as sbatch takes it: a path, absolute or relative, that may
    hold filename patterns (%j, %x, ...: gbatch.core.outputs)."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(
            field,
            f"{show_value(value)} is not a file name. Give a path such as slurm-%j.out "
            "or /scratch/%u/%x-%j.out",
        )
    _check_path_text(value, field)
    if value.endswith("/"):
        raise SpecError(field, f"{show_value(value)} names a directory. Name a file in it")
    return value


def _check_open_mode(value: object, field: str) -> str:
    """As sbatch: the first letter decides (a or A: append, t or T: truncate)."""
    first = value.strip()[:1].lower() if isinstance(value, str) else ""
    if first not in ("a", "t"):
        raise SpecError(field, f"{show_value(value)} is not an open mode. Use append or truncate")
    return "append" if first == "a" else "truncate"


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


# A partition's name, as the inventory and `-p` spell it (no comma: `-p a,b` is a list).
PARTITION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", re.ASCII)


def _check_partition(value: object, field: str) -> str:
    """One partition name; which exist is the daemon's to say (its inventory)."""
    if isinstance(value, str) and "," in value:
        raise SpecError(
            field,
            f"{show_value(value)} names several partitions; gbatch takes one (Slurm would "
            "start the job in whichever lets it start first). Name one of them",
        )
    if not isinstance(value, str) or not PARTITION_NAME.fullmatch(value):
        raise SpecError(
            field,
            f"{show_value(value)} is not a partition name. Name one of the partitions "
            "`gbatch sinfo` lists",
        )
    return value


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


# ----------------------------------------------------------------------------- --gres

_GRES_RE = re.compile(r"gpu(?::([A-Za-z][A-Za-z0-9_.-]*))?(?::([0-9]{1,6}))?", re.ASCII)


def parse_gres(text: str) -> int:
    """Slurm's `--gres=gpu[:TYPE][:N]` -> the GPU count (plain `gpu` is 1).

    TYPE is accepted for Slurm scripts' sake and ignored: gbatch does not match GPU
    models. Anything else (other resources, several entries) is a SpecError on --gres.
    """
    match = _GRES_RE.fullmatch(text.strip())
    if match is None:
        raise SpecError(
            "--gres",
            f"{show_value(text)} is not a GPU request. Use gpu, gpu:N or gpu:TYPE:N "
            "(or --gpus N); gbatch schedules GPUs only",
        )
    count = 1 if match.group(2) is None else int(match.group(2))
    if count > MAX_GPUS:
        raise SpecError(
            "--gres", f"{show_value(text)} asks for {count} GPUs. Use a count from 0 to {MAX_GPUS}"
        )
    return count


# ------------------------------------------------------------------- --export

EXPORT_FORMS = "ALL, NONE, or variables: NAME or NAME=value, comma separated (ALL,NAME=value)"


@dataclass(frozen=True)
class Export:
    """Slurm's --export: `everything` (ALL) or not, the names taken from the submitting
    shell, and values given outright (NAME=value)."""

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
    """`ALL`, `NONE` (or Slurm's `NIL`), or `[ALL,]NAME[=value],...`. NONE takes no
    variables with it, as in Slurm; names follow env's rules."""
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
        if _CONTROL_RE.search(text):
            raise SpecError(field, f"the value of {name} has a control character. Remove it")
        if eq:
            values.append((name, text))
        else:
            names.append(name)
    return Export(everything, tuple(names), tuple(values))


def exported_env(export: Export, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables a job takes from the submitting shell's `environ` under `export`:
    all of them (ALL) or the names listed, then the values given outright (which win).

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


def export_of(
    data: Mapping[str, object] | None,
    overrides: Mapping[str, object],
    *,
    option_names: Mapping[str, str] = OVERRIDE_OPTION,
) -> Export | None:
    """The export build_spec (same arguments) took, with its values; None when neither
    the option nor the file gives one (the caller's default applies)."""
    if overrides.get("export") is not None:
        field = option_names.get("export") or OVERRIDE_OPTION["export"]
        return parse_export(overrides["export"], field)
    if data is not None and data.get("export") is not None:
        return parse_export(data["export"], "export")
    return None


# -------------------------------------------------------------------- --begin


def _check_begin(value: object, field: str, now: float | None) -> float:
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
    """Slurm's `[{R|B}:]SIG[@SECONDS]`: SIG a name (USR1, SIGUSR1) or a number, SECONDS
    0 to 65535 (default 60). R: is accepted and means nothing here (gbatch has no
    reservations to overlap)."""
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


def _check_mail_type(value: object, field: str) -> str:
    if isinstance(value, str):
        types = [t.strip().upper() for t in value.split(",")]
        if types and all(t in MAIL_TYPES for t in types):
            return ",".join(types)
    raise SpecError(
        field,
        f"{show_value(value)} is not a mail type. Use NONE, BEGIN, END, FAIL, REQUEUE, ALL, "
        "TIME_LIMIT or ARRAY_TASKS, comma separated",
    )


def _check_mail_user(value: object, field: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[^\s@,]{1,64}(?:@[^\s@,]{1,255})?", value):
        raise SpecError(
            field, f"{show_value(value)} is not a mail address. Use e.g. ada@example.org"
        )
    if _CONTROL_RE.search(value):
        raise SpecError(field, "the address has a control character. Remove it")
    return value


def _check_comment(value: object, field: str) -> str:
    if not isinstance(value, str) or len(value) > 1024 or _CONTROL_RE.search(value):
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
    """`notify:` (a list of {url, events, form}, or of bare URLs), or --notify's
    `URL[,EVENT...]` text. Only its form: which URLs a head allows is its config's
    (webhook_prefixes_allowed, checked at submit and at delivery)."""
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


def split_throttle(text: str, field: str = "--array") -> tuple[str, int | None]:
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


def parse_array(text: str, field: str = "--array", *, max_tasks: int = 100_000) -> tuple[int, ...]:
    """The task indices of an --array expression, ascending, each once.

    `A-B`, `A-B:STEP` and lists of them (`1,4,10-12`) as in Slurm. A lone number N
    keeps gbatch's older meaning, N tasks 0 to N-1 (Slurm reads it as the index N).
    A trailing `%MAX` (Slurm's limit on tasks running at once) is read by
    split_throttle and ignored here. At most `max_tasks` indices.
    """
    usage = f"Use {ARRAY_FORMS}"
    text, _ = split_throttle(text, field)
    if re.fullmatch(r"[0-9]{1,7}", text, re.ASCII):
        count = int(text)
        if not 1 <= count <= max_tasks:
            raise SpecError(field, f"{show_value(text)} is not 1 to {max_tasks} tasks. {usage}")
        return tuple(range(count))
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
    return tuple(sorted(indices))


@functools.lru_cache(maxsize=64)
def array_summary(text: str) -> tuple[int, int, int, int]:
    """(count, min, max, step) of an --array expression parse_array takes, for the
    SLURM_ARRAY_TASK_* of each task: cached, since every task of a big array asks for
    the same expression at its start (parsing it is O(tasks))."""
    indices = parse_array(text)
    return len(indices), indices[0], indices[-1], array_step(text)


def array_step(text: str) -> int:
    """SLURM_ARRAY_TASK_STEP of an expression parse_array takes: a single range's step,
    else 1 (Slurm's value for a list)."""
    match = re.fullmatch(r"[0-9]+-[0-9]+:([0-9]+)", text.strip(), re.ASCII)
    return int(match.group(1)) if match else 1


def _export_mode(value: object, field: str) -> str:
    return parse_export(value, field).mode_text


def _signal_text(value: object, field: str) -> str:
    return parse_signal(value, field).text


def _secret_env_names(value: object, field: str) -> tuple[str, ...]:
    return tuple(name for name, _ in check_secret_env(value, field))


_KEY_SET = frozenset(KEYS)
# build_spec's checks, in the order it runs them: key -> (JobSpec field, check). Built
# once (the checks' closures too), not per submit. _check_begin also takes `now`.
_FIELD_CHECKS: dict[str, tuple[str, Callable[..., object]]] = {
    key: (attribute, check)
    for key, attribute, check in (
        ("name", "name", _check_name),
        ("command", "command", _check_command),
        ("image", "image", _check_image),
        ("gpus", "gpus", check_gpus),
        ("time_limit", "time_limit", _check_time_limit),
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
        ("open_mode", "open_mode", _check_open_mode),
        ("ntasks", "ntasks", _check_one_task),
        ("submit_dir", "submit_dir", _check_workdir),
        ("submit_host", "submit_host", _check_host_name),
        ("partition", "partition", _check_partition),
        ("cpus", "cpus", _int_check(1, MAX_CPUS)),
        ("mem", "mem_mb", check_mem),
        ("mem_per_gpu", "mem_per_gpu_mb", check_mem),
        ("mem_per_cpu", "mem_per_cpu_mb", check_mem),
        ("export", "export", _export_mode),
        ("begin", "begin", _check_begin),
        ("signal", "signal", _signal_text),
        ("mail_type", "mail_type", _check_mail_type),
        ("mail_user", "mail_user", _check_mail_user),
        ("comment", "comment", _check_comment),
        ("notify", "notify", check_notify),
    )
}
_FIELD_ORDER = {key: position for position, key in enumerate(_FIELD_CHECKS)}
