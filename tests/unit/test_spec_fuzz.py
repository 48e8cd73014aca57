"""Hostile job files: load_job_file + build_spec never crash, and what they accept is safe.

Thousands of generated files (random structures dumped as YAML, the same text mutated
with YAML's sharp edges, raw bytes, valid specs with one field swapped for something
hostile, and the CLI's overrides) go through the real reader and validator. Every
refusal must be a SpecError with a field and a one-line, printable message; every
accepted spec must satisfy the invariants the daemon and the docker argv builder rely
on, checked here against rules written independently of gbatch/jobspec/spec.py (docker's
reference grammar from distribution/reference, the env-file format, PATH_MAX).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gbatch.core.model import JobSpec
from gbatch.jobspec.spec import KEYS, MAX_FILE_BYTES, SpecError, build_spec, load_job_file
from gbatch.nodes.docker import docker_run_argv, env_file_text

# Derandomized and without the example database: the same examples on every run, so CI
# is stable and a failure reproduces; the seeds below are hypothesis' own per test.
FUZZ = settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# ------------------------------------------------------------------ the oracle's rules

# distribution/reference's grammar (regexp.go), Go's \w being ASCII.
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
REFERENCE = re.compile(
    rf"(?P<name>(?:(?P<domain>{_DOMAIN})/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::{_TAG})?(?:@{_DIGEST})?"
)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SHM = re.compile(r"[1-9][0-9]*[bkmg]?")
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def is_docker_reference(image: str) -> bool:
    match = REFERENCE.fullmatch(image)
    if match is None or len(match["name"]) > 255:
        return False
    # docker reads the first component as a registry only with a "." or ":" in it, or
    # as localhost; otherwise it is a path component, which must be lowercase.
    first = image.split("/", 1)[0]
    is_registry = "/" in image and ("." in first or ":" in first or first == "localhost")
    return is_registry or match["domain"] is None or first == first.lower()


def assert_safe(spec: JobSpec) -> None:
    """What an accepted spec promises the daemon, the store and the docker argv."""
    assert NAME.fullmatch(spec.name), spec.name
    assert spec.command and all(isinstance(a, str) for a in spec.command)
    assert spec.command[0], "the program is empty"
    assert not any("\0" in a for a in spec.command)
    assert sum(len(a.encode()) + 1 for a in spec.command) <= 64 * 1024
    if spec.image is not None:
        assert is_docker_reference(spec.image), spec.image
        assert not spec.image.startswith("-")
    assert type(spec.gpus) is int and 0 <= spec.gpus <= 64
    assert type(spec.retries) is int and 0 <= spec.retries <= 100
    assert spec.time_limit is None or (type(spec.time_limit) is int and spec.time_limit > 0)
    assert type(spec.requeue) is bool
    for name, value in spec.env:
        assert ENV_NAME.fullmatch(name), name
        assert not name.startswith(("NVIDIA_", "GBATCH_")) and not name.endswith("_VISIBLE_DEVICES")
        assert not set(value) & {"\0", "\n", "\r"}
        value.encode()  # real text: docker refuses an env-file that is not UTF-8
    assert len({name for name, _ in spec.env}) == len(spec.env)
    env_file_text(dict(spec.env))  # the node writes exactly this; it must not refuse
    for mount in spec.mounts:
        assert isinstance(mount, str) and not set(mount) & {"\0", "\n", "\r", ","}
        mount.encode()
    if spec.workdir is not None:
        assert spec.workdir.startswith("/") and not CONTROL.search(spec.workdir)
        assert len(spec.workdir.encode()) <= 4095
    assert spec.shm_size is None or SHM.fullmatch(spec.shm_size), spec.shm_size
    # The daemon validates the CLI's spec again from the wire: same spec, unchanged.
    again = build_spec({**spec.to_dict(), "time_limit": None}, {}, default_name="x")
    assert again == replace(spec, time_limit=None)
    if spec.image is not None:
        # Mounts are the site's to allow (gbatch/site/policy.py, tested there): left out here.
        unmounted = replace(spec, mounts=())
        argv = docker_run_argv(
            job_id=1, attempt=1, user="u", spec=unmounted, gpus=[0], env_file="/e"
        )
        assert argv[-len(spec.command) - 1 :] == [spec.image, *spec.command]
        # The remote shell gets shlex.join(argv): it must read back the same words.
        assert shlex.split(shlex.join(argv)) == argv


def assert_one_line_error(err: SpecError) -> None:
    assert err.field and err.message
    text = str(err)
    # printable: no line break of any kind, and no escape sequence for the terminal
    assert text.isprintable(), repr(text)


def outcome(path: Path, overrides: dict[str, object] | None = None) -> JobSpec | None:
    try:
        data = load_job_file(path)
        spec = build_spec(data, overrides or {}, default_name=path.stem)
    except SpecError as err:
        assert_one_line_error(err)
        return None
    assert_safe(spec)
    return spec


# ----------------------------------------------------------------------- the strategies

# The characters an injection is made of, YAML's own, and some that are not text at all.
SHARP = ";$()`'\"*?[]{}<>|&!#%@:,=~\\-\n\r\t\0\x0b\x0c\x1b\x7f\x85\u2028\ufeff\udcff/ "
hostile_text = st.text(
    alphabet=st.one_of(st.sampled_from(SHARP), st.characters(codec="utf-8")), max_size=40
) | st.sampled_from(
    [
        "; touch /tmp/x",
        "$(touch /tmp/x)",
        "`touch /tmp/x`",
        "-v",
        "--privileged",
        "a\nb",
        "'",
        '"',
        "*",
        "../../etc",
        "yes",
        "0x1F",
        "1:30",
        "2024-01-31",
        "~",
        "",
        " ",
        "=",
        "<<",
    ]
)
numbers = st.one_of(
    st.integers(-(10**30), 10**30),
    st.integers(-5, 130),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(hostile_text, numbers, st.booleans(), st.none())
any_key = st.one_of(st.sampled_from(KEYS), hostile_text)
structures = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_key, inner, max_size=4),
    max_leaves=16,
)

VALID_IMAGES = [
    "busybox",
    "ubuntu:22.04",
    "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
    "localhost:5000/team/app:v1",
    "registry.example.org/a/b_c__d---e:v1.0",
    "ghcr.io/org/app@sha256:" + "0" * 64,
]


@st.composite
def mutated(draw: st.DrawFn, base: str) -> str:
    """`base` with a few insertions, deletions and swaps of hostile characters."""
    text = base
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "upper", "prefix"]))
        if op == "insert":
            text = text[:at] + draw(st.sampled_from(SHARP + "A._/:@")) + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + 1 :]
        elif op == "upper":
            text = text[:at] + text[at:].upper()
        else:
            text = draw(st.sampled_from(["-", "--", " ", "/", ":", "@"])) + text
    return text


field_values: dict[str, st.SearchStrategy[object]] = {
    "name": st.one_of(st.sampled_from(["train", "a.b+c-1"]), mutated("train-1"), scalars),
    "image": st.one_of(
        st.sampled_from(VALID_IMAGES),
        st.sampled_from(VALID_IMAGES).flatmap(mutated),
        st.text(st.sampled_from("abcXYZ019._-/:@"), max_size=300),
        scalars,
    ),
    "command": st.one_of(
        hostile_text, st.lists(st.one_of(hostile_text, numbers), max_size=5), structures
    ),
    "gpus": st.one_of(st.integers(-2, 70), scalars),
    "time_limit": st.one_of(st.sampled_from(["1:30", "2-00:00:00", "UNLIMITED", 10]), scalars),
    "retries": st.one_of(st.integers(-1, 101), scalars),
    "env": st.one_of(
        st.dictionaries(
            st.one_of(
                st.sampled_from(["A", "_x", "CUDA_VISIBLE_DEVICES", "NVIDIA_DRIVER", "GBATCH_X"]),
                hostile_text,
            ),
            scalars,
            max_size=4,
        ),
        structures,
    ),
    "mounts": st.one_of(
        st.lists(
            st.one_of(
                st.sampled_from(["/data:/data", "/a:/b:ro", "/var/run/docker.sock:/s"]),
                mutated("/data:/data:ro"),
                hostile_text,
            ),
            max_size=3,
        ),
        structures,
    ),
    "workdir": st.one_of(st.just("/work"), hostile_text.map(lambda t: "/" + t), scalars),
    "priority": st.one_of(st.integers(-10001, 10001), scalars),
    "nice": st.one_of(st.integers(-10001, 10001), scalars),
    "shm_size": st.one_of(st.sampled_from(["8g", "512m", "1048577g"]), mutated("64m"), scalars),
    "requeue": st.one_of(st.booleans(), scalars),
}
valid_names = st.sampled_from(["A", "_x", "LR", "PYTHONPATH", "a1"])
valid_values: dict[str, st.SearchStrategy[object]] = {
    "name": st.sampled_from(["train", "a.b+c-1", "x" * 128]),
    "image": st.sampled_from(VALID_IMAGES),
    "command": st.one_of(
        st.sampled_from(["echo hi", "python train.py --lr 0.1"]),
        st.lists(st.sampled_from(["python", "-c", "print(1)", "3"]), min_size=1, max_size=4),
    ),
    "gpus": st.integers(0, 64),
    "time_limit": st.sampled_from(["1:30", "2-00:00:00", "UNLIMITED", 10]),
    "retries": st.integers(0, 100),
    "env": st.dictionaries(valid_names, st.sampled_from(["1", "x y", ""]), max_size=3),
    "mounts": st.sampled_from([[], ["/data:/data"], ["/a:/b:ro", "/c:/d:rw"]]),
    "workdir": st.sampled_from(["/work", "/"]),
    "priority": st.integers(-10000, 10000),
    "nice": st.integers(-10000, 10000),
    "shm_size": st.sampled_from(["8g", "512m", 1024]),
    "requeue": st.booleans(),
}
# Hostile values where they are most likely to get through: text under valid names.
field_values["env"] = st.one_of(
    field_values["env"], st.dictionaries(valid_names, hostile_text, min_size=1, max_size=3)
)
field_values["command"] = st.one_of(
    field_values["command"],
    st.lists(st.sampled_from(["echo", "sh", "-c"]), min_size=1, max_size=1).flatmap(
        lambda head: st.lists(hostile_text, max_size=4).map(lambda tail: head + tail)
    ),
)


@st.composite
def valid_looking_specs(draw: st.DrawFn) -> dict[str, object]:
    """A valid spec with one to three fields swapped for hostile values."""
    spec = draw(
        st.fixed_dictionaries(
            {"command": valid_values["command"]},
            optional={k: v for k, v in valid_values.items() if k != "command"},
        )
    )
    for key in draw(st.lists(st.sampled_from(sorted(field_values)), max_size=3, unique=True)):
        spec[key] = draw(field_values[key])
    return spec


def dump(data: object, flow: bool, unicode: bool) -> str:
    return yaml.safe_dump(data, default_flow_style=flow, allow_unicode=unicode)


# YAML constructs a job file never needs: every one must be refused or read as data.
YAML_TOKENS = [
    "&a ",
    "*a",
    "!!binary ",
    "!!python/object/apply:os.system ",
    "!!set ",
    "!!omap ",
    "!foo ",
    "!!int ",
    "!!float ",
    "!!bool ",
    "!!null ",
    "!!timestamp ",
    "!!str ",
    "<<: ",
    "? ",
    "- ",
    ": ",
    "\t",
    "\n",
    "{",
    "[",
    "'",
    '"',
    "%YAML 1.1\n",
    "%TAG ! tag:yaml.org,2002:\n",
    "---\n",
    "...\n",
    "|\n",
    ">-\n",
    "0x" + "f" * 80,
    "9" * 5000,
    "2001-13-40",
    "[" * 40,
    "{a: " * 40,
]


@st.composite
def yaml_texts(draw: st.DrawFn) -> str:
    data = draw(st.one_of(valid_looking_specs(), structures))
    text = dump(data, draw(st.booleans()), draw(st.booleans()))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(YAML_TOKENS)) + text[at:]
    return text


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "job.yaml"


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    return path


# ---------------------------------------------------------------------------- the tests


@FUZZ
@given(text=yaml_texts())
def test_random_yaml_never_crashes_and_what_passes_is_safe(scratch: Path, text: str) -> None:
    outcome(write(scratch, text))


@settings(FUZZ, max_examples=800)
@given(data=valid_looking_specs(), flow=st.booleans(), unicode=st.booleans())
def test_specs_with_hostile_fields_are_refused_by_field_or_safe(
    scratch: Path, data: dict[str, object], flow: bool, unicode: bool
) -> None:
    spec = outcome(write(scratch, dump(data, flow, unicode)))
    if spec is not None and isinstance(data.get("command"), list):
        # An argv list is kept word for word: never re-split, never given to a shell.
        assert spec.command == tuple(str(a) for a in data["command"])  # type: ignore[union-attr]


@settings(FUZZ, max_examples=400)
@given(raw=st.binary(max_size=600))
def test_random_bytes_never_crash(scratch: Path, raw: bytes) -> None:
    outcome(write(scratch, raw))


@settings(FUZZ, max_examples=400)
@given(
    data=st.one_of(st.none(), valid_looking_specs()),
    name=st.one_of(st.none(), hostile_text),
    image=st.one_of(st.none(), st.sampled_from(VALID_IMAGES).flatmap(mutated), hostile_text),
    wrap=st.one_of(st.none(), hostile_text),
    workdir=st.one_of(st.none(), hostile_text, hostile_text.map(lambda t: "/" + t)),
    time_limit=st.one_of(st.none(), hostile_text),
    ints=st.lists(st.one_of(st.none(), st.integers(-(10**20), 10**20)), min_size=4, max_size=4),
)
def test_cli_overrides_are_refused_by_option_or_safe(
    data: dict[str, object] | None,
    name: str | None,
    image: str | None,
    wrap: str | None,
    workdir: str | None,
    time_limit: str | None,
    ints: list[int | None],
) -> None:
    from gbatch.jobspec.spec import OVERRIDE_OPTION as OPTION_NAMES

    overrides: dict[str, object] = {
        "name": name,
        "image": image,
        "command": wrap,
        "workdir": workdir,
        "time_limit": time_limit,
        "gpus": ints[0],
        "retries": ints[1],
        "priority": ints[2],
        "nice": ints[3],
    }
    try:
        spec = build_spec(data, overrides, default_name="wrap", option_names=OPTION_NAMES)
    except SpecError as err:
        assert_one_line_error(err)
        given_options = {OPTION_NAMES[k] for k, v in overrides.items() if v is not None}
        assert err.field in given_options | set(KEYS) | {"job file"}
        return
    assert_safe(spec)
    if wrap is not None:
        assert spec.command == ("/bin/sh", "-c", wrap)


# ------------------------------------------------------------- hostile files, by hand


def _laughs(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\ncommand: echo\n"


HOSTILE_FILES = {
    "billion laughs": _laughs(9),
    "deep flow nesting": "command: " + "[" * 5000 + "]" * 5000 + "\n",
    "deep block nesting": "".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "x\n",
    "huge int": "command: x\ngpus: " + "9" * 5000 + "\n",
    "huge hex": "command: x\npriority: 0x" + "f" * 5000 + "\n",
    "bad date": "command: x\ngpus: 2001-13-40\n",
    "python tag": "command: !!python/object/apply:os.system ['touch /tmp/x']\n",
    "explicit int on text": "command: x\ngpus: !!int x\n",
    "empty explicit float": "command: x\ngpus: !!float ''\n",
    "bool tag on text": "command: x\nrequeue: !!bool maybe\n",
    "timestamp tag on text": "command: x\nname: !!timestamp x\n",
    "merge key": "command: x\n<<: {gpus: 1}\n",
    "set": "command: x\nenv: !!set {A, B}\n",
    "binary command": "command: !!binary dG91Y2ggL3RtcC94\n",
    "one MiB string": "command: " + "x" * (MAX_FILE_BYTES - 10) + "\n",
    "over one MiB": "command: " + "x" * MAX_FILE_BYTES + "\n",
    "a million empty args": "command: [a" + ', ""' * 100_000 + "]\n",
    "nul escape": 'command: "a\\0b"\n',
    "surrogate escape": 'command: ["\\udcff"]\n',
}


@pytest.mark.parametrize("case", sorted(HOSTILE_FILES))
def test_hand_written_hostile_files_are_refused_with_one_line(tmp_path: Path, case: str) -> None:
    path = write(tmp_path / "job.yaml", HOSTILE_FILES[case])
    with pytest.raises(SpecError) as caught:
        build_spec(load_job_file(path), {}, default_name="job")
    assert_one_line_error(caught.value)


def test_oracle_agrees_with_dockers_own_examples() -> None:
    # Sanity of the test's grammar, so that assert_safe means something.
    for good in [*VALID_IMAGES, "a", "a.b/c", "localhost/x", "x:5000/y"]:
        assert is_docker_reference(good), good
    for bad in ["-a", "A", "Foo/bar", "a:", "a b", "a@sha256:12", "a//b", "a..b", "a/"]:
        assert not is_docker_reference(bad), bad
