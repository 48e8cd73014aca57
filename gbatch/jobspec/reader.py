"""A job file's text (YAML, or JSON read alike) -> a plain mapping, read safely.

Refuses what a job file never needs and a hostile one could use (aliases, tags other
than plain data, nesting past MAX_NESTING, more than MAX_FILE_BYTES), each as a
SpecError naming the file (and the line). What the keys mean is gbatch.jobspec.spec's.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable

from gbatch.core.timefmt import show_value
from gbatch.jobspec.errors import SpecError
from gbatch.jobspec.optvalues import MAX_FILE_BYTES as MAX_FILE_BYTES

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from json import JSONDecoder
    from typing import Any

MAX_NESTING = 32  # a job file needs 3 levels; libyaml itself stops at 1000


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
    """A job file's text read as load_job_file reads it; `where` names it in errors.

    A file in JSON (a mapping, `{` first) is read by json, the same values as PyYAML
    would make of it (_json_job); anything json or that reading declines goes to PyYAML,
    whose refusals are the ones a user reads.
    """
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
            f"the top level is a {yaml_kind(data)}, not a mapping. "
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


def yaml_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "plain string"
    return type(value).__name__
