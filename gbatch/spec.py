"""Job files (YAML) and CLI overrides -> a validated JobSpec.

Every refusal is a SpecError naming the job-file key (or the CLI option that set it)
and saying, in one line, what is wrong and what to do. Checks that need the fleet
(more GPUs than any node has, mounts outside the allowlist) belong to the daemon.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from gbatch.model import JobSpec
from gbatch.timefmt import ACCEPTED_FORMS, TimeLimitError, parse_time_limit, show_value

MAX_FILE_BYTES = 1024 * 1024
MAX_COMMAND_BYTES = 64 * 1024
MAX_ENV_BYTES = 64 * 1024
MAX_GPUS = 64
MAX_NESTING = 32  # a job file needs 3 levels; libyaml itself stops at 1000
MAX_PATH_BYTES = 4095  # Linux's PATH_MAX, less its NUL
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
    "output",
    "error",
    "open_mode",
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
    "output": "-o/--output",
    "error": "-e/--error",
    "open_mode": "--open-mode",
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
    "export": "env",
    "volumes": "mounts",
    "volume": "mounts",
    "chdir": "workdir",
    "cwd": "workdir",
    "working_dir": "workdir",
    "shm": "shm_size",
    "network_mode": "network",
    "networks": "network",
    "net": "network",
    "stdout": "output",
    "out": "output",
    "stderr": "error",
    "err": "error",
    "openmode": "open_mode",
    "open-mode": "open_mode",
}

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}", re.ASCII)
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
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


def _reserved_env_reason(name: str) -> str | None:
    """Why gbatch keeps `name` for itself, or None when a job may set it."""
    if name.startswith("NVIDIA_"):
        return "NVIDIA_* variables decide which GPUs a container sees, so gbatch sets them"
    if name.endswith("_VISIBLE_DEVICES"):
        return "*_VISIBLE_DEVICES variables are set by gbatch from the GPUs it allocates"
    if name.startswith("GBATCH_"):
        return "GBATCH_* variables are reserved for what gbatch tells the job"
    return None


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
    """load_job_file's reading of a job file's text (`where` names it in errors)."""
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
            stack.extend((item, depth + 1, "") for item in node.value)
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
                if role == "env":
                    value_role = "env_value"
                elif depth == 1 and key.value in ("env", "secret_env"):
                    value_role = "env"
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
    SUBMIT_KEYS (the daemon's call).
    """
    unknown_override = set(overrides) - set(KEYS)
    if unknown_override:
        # The CLI's wiring is wrong, not the user's input.
        raise ValueError(f"unknown override fields: {sorted(unknown_override)}")
    file_data: Mapping[str, object] = data or {}
    allowed = (*KEYS, *SUBMIT_KEYS) if wire else KEYS
    for key in file_data:
        if key not in allowed:
            raise SpecError(source, _unknown_key_message(key))

    values: dict[str, tuple[object, str]] = {}
    for key in KEYS:
        if overrides.get(key) is not None:
            option = option_names.get(key) or OVERRIDE_OPTION.get(key, key)
            values[key] = (overrides[key], option)
        elif file_data.get(key) is not None:
            values[key] = (file_data[key], key)

    def pick(key: str, check: Callable[[object, str], Any], default: Any) -> Any:
        if key not in values:
            return default
        value, field = values[key]
        _check_utf8(value, field)
        return check(value, field)

    if "command" not in values:
        raise SpecError(
            "command",
            'no command given. Add `command: ...` to the job file, or pass --wrap "..."',
        )
    spec = JobSpec(
        name=pick("name", _check_name, _safe_default_name(default_name)),
        command=pick("command", _check_command, ()),
        image=pick("image", _check_image, None),
        gpus=pick("gpus", check_gpus, 0),
        time_limit=pick("time_limit", _check_time_limit, None),
        retries=pick("retries", _int_check(0, 100), 0),
        env=pick("env", _check_env, ()),
        mounts=pick("mounts", _check_mounts, ()),
        workdir=pick("workdir", _check_workdir, None),
        priority=pick("priority", _int_check(-10000, 10000), 0),
        nice=pick("nice", _int_check(-10000, 10000), 0),
        shm_size=pick("shm_size", _check_shm_size, None),
        requeue=pick("requeue", _check_bool, True),
        secret_env=tuple(name for name, _ in pick("secret_env", check_secret_env, ())),
        network=pick("network", _check_network, None),
        output=pick("output", _check_output_path, None),
        error=pick("error", _check_output_path, None),
        open_mode=pick("open_mode", _check_open_mode, None),
        submit_dir=_submit_value(file_data, "submit_dir", _check_workdir),
        submit_host=_submit_value(file_data, "submit_host", _check_host_name),
    )
    _check_secret_env_apart(spec, values.get("secret_env", (None, ""))[1])
    return spec


def _submit_value(
    data: Mapping[str, object], key: str, check: Callable[[object, str], str]
) -> str | None:
    value = data.get(key)
    return None if value is None else check(value, key)


def _check_host_name(value: object, field: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", value):
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


def check_gpus(value: object, field: str = "gpus") -> int:
    """A GPU count: an int from 0 to MAX_GPUS (bool refused). Also used for --gres."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GPUS:
        raise SpecError(
            field,
            f"{show_value(value)} is not a GPU count. Use a whole number from 0 to {MAX_GPUS}"
            + (", without quotes" if isinstance(value, str) and value.isdigit() else ""),
        )
    return value


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
    if not isinstance(name, str) or not _ENV_NAME_RE.fullmatch(name):
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
    hold filename patterns (%j, %x, ...: gbatch.outputs)."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(
            field,
            f"{show_value(value)} is not a file name. Give a path such as slurm-%j.out "
            "or /scratch/%u/%x-%j.out",
        )
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
