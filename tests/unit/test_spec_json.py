"""A job file in JSON is read by json (spec._json_job), not PyYAML: what it makes of a
file must be what PyYAML made of it, value for value and type for type, and where
PyYAML refuses a file json reads, json's reading must step aside (None) so that
PyYAML's refusal is the one the user sees."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gbatch.cli.exits import CliError
from gbatch.cli.sbatch import request_for_text
from gbatch.jobspec.spec import MAX_NESTING, SpecError, _json_job, _yaml_job, parse_job_text
from gbatch.protocol import wire


def typed(value: Any) -> Any:
    """`value` with every scalar's type beside it: 1, 1.0, True and "1" differ."""
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [typed(item) for item in value]
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, repr(value))


def yaml_reading(text: str) -> Any:
    try:
        return typed(_yaml_job(text, "job.json"))
    except SpecError as err:
        return ("refused", str(err))


def assert_read_alike(text: str) -> None:
    """json's reading of `text` is PyYAML's, or json steps aside."""
    mine = _json_job(text)
    theirs = yaml_reading(text)
    if mine is not None:
        assert typed(mine) == theirs, text
    try:
        got = typed(parse_job_text(text, "job.json"))
    except SpecError as err:
        got = ("refused", str(err))
    assert got == theirs


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["1:30", "0022", "yes", "on", "2024-01-31", "~", "", "0x1f", "1e5", "*a"])
)
keys = st.sampled_from(["env", "secret_env", "sweep", "command", "name", "gpus", "ON", "1"]) | (
    st.text(max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)
jobs = st.dictionaries(keys, values, max_size=6)


@given(
    jobs,
    st.sampled_from([None, 0, 2]),
    st.booleans(),
    st.sampled_from([(", ", ": "), (",", ":"), (" ,", " : ")]),
)
def test_json_reads_a_json_job_as_yaml_does_or_steps_aside(
    job: dict[str, Any], indent: int | None, ascii_only: bool, separators: tuple[str, str]
) -> None:
    text = json.dumps(job, indent=indent, ensure_ascii=ascii_only, separators=separators)
    assert_read_alike(text)


@given(jobs, st.randoms(use_true_random=False))
def test_json_reads_a_job_spaced_anyhow_as_yaml_does_or_steps_aside(
    job: dict[str, Any], rnd: random.Random
) -> None:
    pieces = json.dumps(job, separators=(",", ":"))
    # Whitespace json allows between tokens, wherever a token ends (outside strings).
    spaced: list[str] = []
    in_string = escaped = False
    for char in pieces:
        spaced.append(char)
        if in_string:
            in_string = escaped or char != '"'
            escaped = not escaped and char == "\\"
            continue
        in_string = char == '"'
        if char in "{}[],:" and rnd.random() < 0.5:
            spaced.append(rnd.choice([" ", "\n", "\r\n", "  \n ", " " * 70]))
    assert_read_alike("".join(spaced))


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1.5e3, "b": 1e5, "c": 1.5e+3, "d": -0, "e": -0.0, "f": NaN, "g": -Infinity}',
        '{"env": {"A": 0.10, "B": true, "C": null, "D": [1, false]}, "sweep": {"lr": [1e-3]}}',
        '{"a": "x\\/y"}',  # json's escaped slash
        '{"a": "\\ud83d\\ude00"}',  # an escaped surrogate pair
        '{"a": "\\u0000\\u0085"}',
        '{"a":\t1}',
        '{"a"\n: 1}',
        '{"a": 1, "a": 2}',
        '{"a": "\u2028\u0085\ufeff\x7f"}',
        '{"' + "k" * 1100 + '": 1}',
        '{"' + "\\u0041" * 200 + '": 1}',
        '{"a": ' + "9" * 65 + "}",
        '{"a": 1} # a comment',
        '{"a": 1}\n---\n{"b": 2}',
        "{}",
        "{" + '"a": {' * MAX_NESTING + "}" * MAX_NESTING + "}",
        "{" + '"a": [' * (MAX_NESTING - 1) + "]" * (MAX_NESTING - 1) + "}",
        "{" + '"a": [' * 2000 + "]" * 2000 + "}",
    ],
)
def test_json_reads_odd_json_as_yaml_does_or_steps_aside(text: str) -> None:
    assert_read_alike(text)


def test_a_plain_json_job_is_read_by_json() -> None:
    """The fast reading is taken (else the tests above would pass with it never used)."""
    text = json.dumps({"command": "true", "name": "b", "env": {"A": 1}, "gpus": 1})
    assert _json_job(text) == {"command": "true", "name": "b", "env": {"A": "1"}, "gpus": 1}
    assert _json_job(json.dumps({"command": "true"}, indent=2)) is not None


JOBS = [
    {"command": "python train.py", "name": "t", "gpus": 2, "time_limit": "1:30:00"},
    {"command": ["python", "-c", "print(1)"], "env": {"LR": "0.10", "N": 3, "ON": True}},
    {"command": "true", "begin": "2099-01-01T00:00:00", "priority": 5, "retries": 1},
    {"command": "echo {lr}", "sweep": {"lr": [0.001, 0.01]}, "name": "s"},
    {"command": "true", "mounts": ["/data:/data:ro"], "image": "pytorch/pytorch:2.3"},
    # refusals
    {"command": "true", "hold": True},
    {"command": "true", "gpus": -1},
    {"command": "true", "gpus": 1.5},
    {"command": "true", "begin": "someday"},
    {"command": "true", "nmae": "x"},
    {"command": "", "name": "x"},
    {"name": "no command"},
    {"command": "true", "env": {"NVIDIA_VISIBLE_DEVICES": 0}},
    {"command": "true", "time_limit": 90},
    {"command": "true", "retries": "many"},
    {"command": "true", "priority": 1e3},
]


def _yaml_of(job: dict[str, Any]) -> str:
    """`job` written as a YAML block mapping (json's scalars, which YAML reads alike)."""
    lines = []
    for key, value in job.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [f"  {k}: {json.dumps(v)}" for k, v in value.items()]
        elif isinstance(value, list):
            lines.append(f"{key}:")
            lines += [f"  - {json.dumps(v)}" for v in value]
        else:
            lines.append(f"{key}: {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def _outcome(text: str) -> Any:
    try:
        return wire.encode_request(request_for_text(text, "api"))
    except CliError as err:
        return ("refused", err.message)


@pytest.mark.parametrize("job", JOBS)
def test_a_json_job_and_the_same_job_in_yaml_make_the_same_request_or_refusal(
    job: dict[str, Any],
) -> None:
    as_json = json.dumps(job)
    assert _json_job(as_json) is not None  # read by json, not handed to PyYAML
    json_outcome = _outcome(as_json)
    yaml_outcome = _outcome(_yaml_of(job))
    if isinstance(json_outcome, dict):
        for outcome in (json_outcome, yaml_outcome):
            outcome["spec"].pop("submitted_at", None)  # type: ignore[union-attr]
    assert json_outcome == yaml_outcome
