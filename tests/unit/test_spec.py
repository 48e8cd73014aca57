from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gbatch.core.model import JobSpec, NotifyHook
from gbatch.jobspec.reader import MAX_FILE_BYTES, load_job_file
from gbatch.jobspec.slurmopts import parse_gres
from gbatch.jobspec.spec import KEYS, OVERRIDE_OPTION, SpecError, build_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def build(data: dict[str, object], **overrides: object) -> JobSpec:
    return build_spec({"command": "true", **data}, overrides, default_name="job")


def refusal(data: dict[str, object], **overrides: object) -> SpecError:
    with pytest.raises(SpecError) as caught:
        build(data, **overrides)
    return caught.value


def write(tmp_path: Path, text: str | bytes, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def load_refusal(path: Path) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load_job_file(path)
    assert caught.value.field == str(path)
    return caught.value


# --------------------------------------------------------------------------- SpecError


def test_spec_error_prints_field_then_message() -> None:
    err = SpecError("gpus", "bad. Do this")
    assert (err.field, err.message, str(err)) == ("gpus", "bad. Do this", "gpus: bad. Do this")


# ------------------------------------------------------------------------ load_job_file


def test_job_file_is_read_as_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "name: a\ncommand: [python, x.py]\ngpus: 2\n")
    assert load_job_file(path) == {"name": "a", "command": ["python", "x.py"], "gpus": 2}


def test_missing_file_is_named_and_the_user_told_to_check_the_path(tmp_path: Path) -> None:
    err = load_refusal(tmp_path / "nope.yaml")
    assert err.message == "no such file. Check the path"


def test_directory_is_refused_asking_for_a_yaml_file(tmp_path: Path) -> None:
    assert "Name a .yaml file" in load_refusal(tmp_path).message


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_says_make_it_readable(tmp_path: Path) -> None:
    path = write(tmp_path, "command: x\n")
    path.chmod(0)
    assert "Make the file readable" in load_refusal(path).message


def test_file_over_one_mib_is_refused_without_parsing(tmp_path: Path) -> None:
    path = write(tmp_path, "command: x\n#" + "x" * MAX_FILE_BYTES)
    assert "larger than 1 MiB" in load_refusal(path).message


def test_file_of_exactly_one_mib_is_read(tmp_path: Path) -> None:
    head = "command: x\n#"
    path = write(tmp_path, head + "x" * (MAX_FILE_BYTES - len(head)))
    assert load_job_file(path) == {"command": "x"}


def test_non_utf8_file_is_refused_asking_for_utf8(tmp_path: Path) -> None:
    path = write(tmp_path, b"command: caf\xe9\n")
    assert "Save the file as UTF-8" in load_refusal(path).message


def test_yaml_syntax_error_gives_the_line_and_says_fix_the_syntax(tmp_path: Path) -> None:
    path = write(tmp_path, "name: a\ngpus: 1\ncommand: [unclosed\n")
    err = load_refusal(path)
    assert err.message.startswith("line ")
    assert "could not parse YAML (" in err.message
    assert "Fix the syntax" in err.message


def test_syntax_error_line_is_one_based(tmp_path: Path) -> None:
    path = write(tmp_path, "name: a\n  bad: indent\n")
    assert load_refusal(path).message.startswith("line 2: could not parse YAML")


def test_control_character_is_a_one_line_parse_error(tmp_path: Path) -> None:
    path = write(tmp_path, "command: a\x07b\n")
    err = load_refusal(path)
    assert "could not parse YAML" in err.message
    assert "\n" not in err.message


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n", "~\n"])
def test_empty_file_is_refused_asking_for_a_mapping(tmp_path: Path, text: str) -> None:
    err = load_refusal(write(tmp_path, text))
    assert err.message.startswith("the file is empty. Write a mapping")


@pytest.mark.parametrize(("text", "kind"), [("- a\n- b\n", "list"), ("hello\n", "plain string")])
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str, kind: str) -> None:
    err = load_refusal(write(tmp_path, text))
    assert f"the top level is a {kind}, not a mapping. Write keys at the top level" in err.message


def test_several_documents_are_refused(tmp_path: Path) -> None:
    err = load_refusal(write(tmp_path, "command: a\n---\ncommand: b\n"))
    assert "could not parse YAML" in err.message


def test_any_yaml_alias_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "env: &e {A: '1'}\ncommand: x\nmounts: *e\n")
    err = load_refusal(path)
    assert "YAML alias" in err.message
    assert "write the value out in full" in err.message


def test_billion_laughs_is_refused_quickly(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 30)]
    err = load_refusal(write(tmp_path, "\n".join(lines) + "\n"))
    assert "YAML alias" in err.message


def test_anchor_without_alias_is_harmless(tmp_path: Path) -> None:
    assert load_job_file(write(tmp_path, "command: &c x\n")) == {"command": "x"}


def test_key_written_twice_is_refused_with_its_line(tmp_path: Path) -> None:
    err = load_refusal(write(tmp_path, "gpus: 1\ncommand: x\ngpus: 2\n"))
    assert err.message == 'line 3: key "gpus" is written twice. Keep one of them'


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("command: !!binary aGk=\n", 'the YAML tag "!!binary" is not accepted'),
        ("command: !!python/object/apply:os.system [id]\n", "is not accepted"),
        ("command: x\nenv: !!set {A}\n", 'the YAML tag "!!set" is not accepted'),
        ("command: !foo x\n", 'the YAML tag "!foo" is not accepted'),
        ("command: x\ngpus: !!int x\n", '"x" is not a "!!int". Remove the tag'),
        ("command: x\nrequeue: !!bool maybe\n", 'is not a "!!bool"'),
        ("command: x\ngpus: !!float ''\n", 'is not a "!!float"'),
        ("command: x\nname: !!timestamp x\n", "is not accepted"),
        ("command: x\n<<: {gpus: 1}\n", "merge keys (<<) are not accepted"),
        ("command: x\ngpus: " + "9" * 5000 + "\n", "is longer than 64 characters"),
        ("command: x\npriority: 0x" + "f" * 80 + "\n", "is longer than 64 characters"),
    ],
)
def test_yaml_beyond_plain_data_is_refused_with_its_line(
    tmp_path: Path, text: str, says: str
) -> None:
    err = load_refusal(write(tmp_path, text))
    assert "line " in err.message and says in err.message


def test_dates_and_equals_signs_are_read_as_text(tmp_path: Path) -> None:
    data = load_job_file(write(tmp_path, "command: x\nname: 2024-01-31\nimage: =\n"))
    assert (data["name"], data["image"]) == ("2024-01-31", "=")


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    err = load_refusal(write(tmp_path, "command: " + "[" * 100 + "]" * 100 + "\n"))
    assert "Flatten it" in err.message


def test_unquoted_colon_time_is_text_not_yaml11_sexagesimal(tmp_path: Path) -> None:
    data = load_job_file(write(tmp_path, "command: x\ntime_limit: 1:30\n"))
    assert data["time_limit"] == "1:30"
    assert build_spec(data, {}, default_name="j").time_limit == 90


def test_env_values_keep_the_text_as_written(tmp_path: Path) -> None:
    text = "command: x\nenv:\n  UMASK: 0022\n  DEBUG: yes\n  LR: 0.10\n  N: 4\n  ON: true\n"
    spec = build_spec(load_job_file(write(tmp_path, text)), {}, default_name="j")
    assert dict(spec.env) == {"UMASK": "0022", "DEBUG": "yes", "LR": "0.10", "N": "4", "ON": "true"}


def test_numbers_outside_env_stay_numbers(tmp_path: Path) -> None:
    data = load_job_file(write(tmp_path, "command: x\ngpus: 2\nretries: 010\n"))
    assert data["gpus"] == 2
    assert isinstance(data["retries"], int)


def test_non_text_top_level_keys_become_unknown_keys(tmp_path: Path) -> None:
    data = load_job_file(write(tmp_path, "command: x\n1: y\n"))
    with pytest.raises(SpecError) as caught:
        build_spec(data, {}, default_name="j")
    assert caught.value.message.startswith('unknown key "1". Valid keys: ')


# --------------------------------------------------------------------------- keys


def test_unknown_key_suggests_nearest_valid_one() -> None:
    err = refusal({"gpu": 1})
    assert err.field == "job file"
    assert err.message == 'unknown key "gpu". Did you mean "gpus"?'


@pytest.mark.parametrize(
    ("key", "guess"),
    [
        ("time", "time_limit"),
        ("timelimit", "time_limit"),
        ("job-name", "name"),
        ("volumes", "mounts"),
        ("GPUS", "gpus"),
        ("environment", "env"),
        ("shm-size", "shm_size"),
        ("working_dir", "workdir"),
        ("network_mode", "network"),
    ],
)
def test_unknown_key_from_slurm_or_docker_suggests_the_gbatch_key(key: str, guess: str) -> None:
    assert refusal({key: 1}).message == f'unknown key "{key}". Did you mean "{guess}"?'


def test_unknown_key_without_close_match_lists_the_valid_keys() -> None:
    err = refusal({"zzzz": 1})
    assert err.message == f'unknown key "zzzz". Valid keys: {", ".join(sorted(KEYS))}'


def test_unknown_key_names_the_source_the_caller_gives() -> None:
    with pytest.raises(SpecError) as caught:
        build_spec({"command": "x", "gpu": 1}, {}, default_name="j", source="train.yaml")
    assert str(caught.value) == 'train.yaml: unknown key "gpu". Did you mean "gpus"?'


def test_override_for_a_field_that_does_not_exist_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown override"):
        build_spec({"command": "x"}, {"gres": 1}, default_name="j")


# ----------------------------------------------------------------------- name, command


def test_minimal_spec_has_the_documented_defaults() -> None:
    assert build_spec({"command": "true"}, {}, default_name="job") == JobSpec(
        name="job", command=("/bin/sh", "-c", "true")
    )


@pytest.mark.parametrize(
    ("default", "name"),
    [("train", "train"), ("my run", "my_run"), ("--x", "x"), ("", "job"), ("é", "job")],
)
def test_default_name_is_made_valid(default: str, name: str) -> None:
    assert build_spec({"command": "x"}, {}, default_name=default).name == name


@pytest.mark.parametrize("name", ["", "-a", ".a", "a b", "a/b", "a" * 129, 5, "ünï"])
def test_bad_name_is_refused_with_the_allowed_characters(name: object) -> None:
    err = refusal({"name": name})
    assert err.field == "name"
    assert "Use 1 to 128 letters, digits" in err.message


def test_name_of_128_characters_is_accepted() -> None:
    assert build({"name": "a" * 128}).name == "a" * 128


def test_missing_command_says_add_it_or_use_wrap() -> None:
    with pytest.raises(SpecError) as caught:
        build_spec({"name": "x"}, {}, default_name="j")
    assert caught.value.field == "command"
    assert "Add `command: ...` to the job file, or pass --wrap" in caught.value.message


def test_no_file_and_no_wrap_is_a_missing_command() -> None:
    with pytest.raises(SpecError) as caught:
        build_spec(None, {}, default_name="j")
    assert caught.value.field == "command"


def test_command_of_64_kib_counting_each_arguments_nul_is_accepted() -> None:
    argv = ["x" * 1023] * 64  # 64 * (1023 + 1) bytes
    assert build({"command": argv}).command == tuple(argv)


def test_text_that_is_not_utf8_is_refused_in_every_field() -> None:
    # How Python carries bytes that are not UTF-8: from argv (--wrap $'\\xff'), or JSON.
    bad = "echo \udcff"
    for data in (
        {"command": bad},
        {"command": ["echo", bad]},
        {"env": {"A": bad}},
        {"workdir": "/" + bad},
        {"mounts": ["/a:/" + bad]},
        {"name": bad},
    ):
        err = refusal(data)
        assert err.field == next(iter(data))
        assert "has a character that is not UTF-8 text (at position" in err.message
        assert "udcff" not in err.message
    err = refusal({}, command=bad)
    assert err.field == "--wrap"


def test_string_command_runs_through_sh() -> None:
    assert build({"command": "echo hi | wc"}).command == ("/bin/sh", "-c", "echo hi | wc")


def test_list_command_is_the_exact_argv_with_numbers_as_text() -> None:
    assert build({"command": ["python", "t.py", "--lr", 0.1, "-n", 3]}).command == (
        "python",
        "t.py",
        "--lr",
        "0.1",
        "-n",
        "3",
    )


@pytest.mark.parametrize(
    ("command", "advice"),
    [
        ("", "Give the command to run"),
        ("   \n", "Give the command to run"),
        ([], "Give the program and its args"),
        (["python", True], "Quote each argument"),
        (["python", None], "Quote each argument"),
        (["python", ["x"]], "Quote each argument"),
        (["", "x"], "Name the program"),
        ("a\0b", "Remove it"),
        (["a", "b\0"], "Remove it"),
        ("x" * (64 * 1024 + 1), "Put it in a script"),
        (["x", *[""] * (64 * 1024)], "Put it in a script"),
        (5, "Write a shell command as a string"),
        ({"a": 1}, "Write a shell command as a string"),
    ],
)
def test_bad_command_is_refused_with_advice(command: object, advice: str) -> None:
    err = refusal({"command": command})
    assert err.field == "command"
    assert advice in err.message


# ----------------------------------------------------------------------------- image


@pytest.mark.parametrize(
    "image",
    [
        "ubuntu",
        "ubuntu:22.04",
        "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
        "nvcr.io/nvidia/pytorch:24.05-py3",
        "localhost:5000/team/app:v1",
        "localhost/app",
        "registry.example.org/a/b/c",
        "ubuntu@sha256:" + "a" * 64,
        "ghcr.io/org/app:v1@sha256:" + "0" * 64,
    ],
)
def test_docker_image_references_are_accepted(image: str) -> None:
    assert build({"image": image}).image == image


@pytest.mark.parametrize(
    "image",
    ["-ubuntu", "ubuntu latest", "a:b:c", "ubuntu:", "a" * 256, "x@sha256:abc", "", 5, "a\nb"],
)
def test_bad_image_is_refused_with_an_example(image: object) -> None:
    err = refusal({"image": image})
    assert err.field == "image"
    assert 'Use e.g. "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"' in err.message


def test_uppercase_image_is_refused_saying_lowercase() -> None:
    err = refusal({"image": "PyTorch/pytorch"})
    assert "Repository names must be lowercase" in err.message


def test_empty_image_key_means_a_bare_process() -> None:
    assert build({"image": None}).image is None


# ------------------------------------------------------------------- numbers and limits


@pytest.mark.parametrize("gpus", [0, 1, 64])
def test_gpu_counts_from_0_to_64_are_accepted(gpus: int) -> None:
    assert build({"gpus": gpus}).gpus == gpus


@pytest.mark.parametrize("gpus", [-1, 65, True, False, 1.0, "2", [1]])
def test_bad_gpu_count_is_refused_with_the_range(gpus: object) -> None:
    err = refusal({"gpus": gpus})
    assert err.field == "gpus"
    assert "Use a whole number from 0 to 64" in err.message


def test_quoted_gpu_count_is_told_to_drop_the_quotes() -> None:
    assert refusal({"gpus": "2"}).message.endswith(", without quotes")


@pytest.mark.parametrize(
    ("key", "low", "high"),
    [("retries", 0, 100), ("priority", -10000, 10000), ("nice", -10000, 10000)],
)
def test_integer_fields_accept_their_bounds_and_refuse_beyond(
    key: str, low: int, high: int
) -> None:
    assert getattr(build({key: low}), key) == low
    assert getattr(build({key: high}), key) == high
    for bad in (low - 1, high + 1, True, "3", 1.5):
        err = refusal({key: bad})
        assert err.field == key
        assert f"Use a whole number from {low} to {high}" in err.message


def test_time_limit_is_seconds_and_absent_is_none() -> None:
    assert build({"time_limit": "1-00:00:00"}).time_limit == 86400
    assert build({"time_limit": 90}).time_limit == 5400
    assert build({}).time_limit is None
    assert build({"time_limit": "UNLIMITED"}).time_limit is None


@pytest.mark.parametrize("value", ["1:2:3:4", "0", True, 1.5, [1]])
def test_bad_time_limit_names_the_key_and_lists_the_forms(value: object) -> None:
    err = refusal({"time_limit": value})
    assert err.field == "time_limit"
    assert "Use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, or UNLIMITED" in err.message


def test_time_limit_message_matches_the_documented_example() -> None:
    assert str(refusal({"time_limit": "1:2:3:4"})) == (
        'time_limit: "1:2:3:4" is not a time limit. '
        "Use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, or UNLIMITED"
    )


# --------------------------------------------------------------------------------- env


def test_env_values_are_stored_as_text_with_lowercase_bools() -> None:
    spec = build({"env": {"A": "x", "B": 3, "C": 0.5, "D": True, "E": False, "F": ""}})
    assert spec.env == (
        ("A", "x"),
        ("B", "3"),
        ("C", "0.5"),
        ("D", "true"),
        ("E", "false"),
        ("F", ""),
    )


@pytest.mark.parametrize("name", ["1A", "A-B", "A B", "", "É", 5])
def test_bad_env_name_is_refused_with_the_naming_rule(name: object) -> None:
    err = refusal({"env": {name: "x"}})
    assert err.field == "env"
    assert "Use letters, digits and _, not starting with a digit" in err.message


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_*"),
        ("NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_*"),
        ("CUDA_VISIBLE_DEVICES", "*_VISIBLE_DEVICES"),
        ("ROCR_VISIBLE_DEVICES", "*_VISIBLE_DEVICES"),
        ("HIP_VISIBLE_DEVICES", "*_VISIBLE_DEVICES"),
        ("GBATCH_JOB_ID", "GBATCH_*"),
    ],
)
def test_reserved_env_names_are_refused_with_the_reason(name: str, reason: str) -> None:
    err = refusal({"env": {name: "0"}})
    assert err.field == "env"
    assert err.message.startswith(f"{name} cannot be set: {reason}")
    assert err.message.endswith("Remove it from env")


@pytest.mark.parametrize("value", [None, [1], {"a": 1}])
def test_env_value_that_is_not_text_or_number_is_refused(value: object) -> None:
    err = refusal({"env": {"A": value}})
    assert err.field == "env"
    assert 'Give a string or a number ("" for empty)' in err.message


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\0b"])
def test_env_value_with_a_line_break_is_refused(value: str) -> None:
    assert refusal({"env": {"A": value}}).message.endswith("Remove it")


def test_env_that_is_not_a_mapping_is_refused() -> None:
    err = refusal({"env": ["A=1"]})
    assert (err.field, err.message[-30:]) == ("env", "Write env as NAME: value pairs")


def test_huge_env_is_refused() -> None:
    err = refusal({"env": {f"V{i}": "x" * 1000 for i in range(70)}})
    assert "Pass large data through a mounted file" in err.message


# ---------------------------------------------------------------- mounts, workdir, shm


def test_mounts_keep_their_docker_spelling() -> None:
    mounts = ["/data:/data", "/srv/a:/a:ro", "/srv/b:/b:rw"]
    assert build({"mounts": mounts}).mounts == tuple(mounts)


@pytest.mark.parametrize(
    "mount",
    [
        "/data",
        "data:/data",
        "/data:data",
        "/a:/b:rx",
        "/a:/b:ro:z",
        "/a,b:/b",
        "/a:/b,ro",
        "/a\n:/b",
        5,
    ],
)
def test_bad_mount_is_refused_with_the_accepted_forms(mount: object) -> None:
    err = refusal({"mounts": [mount]})
    assert err.field == "mounts"
    assert 'Use "SRC:DST", "SRC:DST:ro" or "SRC:DST:rw" with absolute paths' in err.message


def test_mounts_that_are_not_a_list_are_refused() -> None:
    err = refusal({"mounts": "/a:/b"})
    assert (err.field, err.message) == (
        "mounts",
        '"/a:/b" is not a list. Write mounts as a list of "SRC:DST[:ro]"',
    )


def test_two_mounts_on_one_target_are_refused() -> None:
    err = refusal({"mounts": ["/a:/data", "/b:/data:ro"]})
    assert err.message == '"/data" is mounted twice. Keep one mount per target'


def test_workdir_must_be_absolute() -> None:
    assert build({"workdir": "/work"}).workdir == "/work"
    for bad in ("work", "", 5, "-w"):
        err = refusal({"workdir": bad})
        assert err.field == "workdir"
        assert "Use a path starting with /" in err.message


@pytest.mark.parametrize("bad", ["/a\0", "/a\nb", "/a\rb", "/a\tb", "/a\x1bb", "/a\x7f", "/a\x85"])
def test_workdir_with_a_control_character_is_refused(bad: str) -> None:
    err = refusal({"workdir": bad})
    assert err.field == "workdir"
    assert "contains a control character" in err.message and "\n" not in err.message


def test_workdir_is_capped_at_path_max() -> None:
    assert build({"workdir": "/" + "a" * 4094}).workdir == "/" + "a" * 4094
    err = refusal({"workdir": "/" + "a" * 4095})
    assert err.message == "the path is longer than 4095 bytes. Use a shorter path"


def test_workdir_with_shell_syntax_is_kept_as_a_literal_path() -> None:
    path = "/tmp/$(touch x); `id` 'q' \"d\" *"
    assert build({"workdir": path}).workdir == path


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("512m", "512m"),
        ("8g", "8g"),
        ("8G", "8g"),
        ("8GB", "8g"),
        ("8GiB", "8g"),
        ("64k", "64k"),
        ("100b", "100b"),
        ("1073741824", "1073741824"),
        (1073741824, "1073741824"),
    ],
)
def test_shm_size_accepts_docker_units(value: object, stored: str) -> None:
    assert build({"shm_size": value}).shm_size == stored


@pytest.mark.parametrize("value", ["0", "0g", "-1g", "8t", "big", "1.5g", True, [1], ""])
def test_bad_shm_size_is_refused_with_an_example(value: object) -> None:
    err = refusal({"shm_size": value})
    assert err.field == "shm_size"
    assert 'Use bytes with an optional unit b, k, m or g, e.g. "512m" or "8g"' in err.message


def test_a_network_is_a_docker_network_name_kept_out_of_other_jobs_json() -> None:
    assert build({}).network is None and "network" not in build({}).to_dict()
    assert build({"network": None}).network is None  # null: as if not given
    spec = build({"network": "lab-net_1.a"})
    assert spec.network == "lab-net_1.a" and spec.to_dict()["network"] == "lab-net_1.a"
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert build({"network": "none"}, network="labnet").network == "labnet"  # --network


@pytest.mark.parametrize("value", ["container:db", "-x", "", "a b", 3, ["none"], "n" * 129])
def test_a_bad_network_is_refused_naming_the_field(value: object) -> None:
    err = refusal({"network": value})
    assert err.field == "network"
    assert "is not a docker network name. Use a name like none or labnet" in err.message


def test_shm_size_is_capped_at_one_pib() -> None:
    assert build({"shm_size": "1048576g"}).shm_size == "1048576g"
    for bad in ("1048577g", "999999999999999g", "1099511627777k"):
        err = refusal({"shm_size": bad})
        assert err.field == "shm_size" and "is larger than 1 PiB" in err.message


# --------------------------------------------------------------------------- overrides


def test_overrides_win_over_the_file() -> None:
    data = {"command": "a", "name": "file", "gpus": 1, "time_limit": "10", "env": {"A": "1"}}
    spec = build_spec(
        data,
        {"name": "cli", "gpus": 4, "time_limit": "1:00:00", "env": {"B": "2"}, "command": "b"},
        default_name="j",
    )
    assert (spec.name, spec.gpus, spec.time_limit) == ("cli", 4, 3600)
    assert spec.env == (("B", "2"),)
    assert spec.command == ("/bin/sh", "-c", "b")


def test_none_override_means_the_option_was_not_given() -> None:
    spec = build_spec({"command": "a", "gpus": 2}, {"gpus": None}, default_name="j")
    assert spec.gpus == 2


def test_wrap_without_a_file_builds_a_spec() -> None:
    spec = build_spec(None, {"command": "nvidia-smi", "gpus": 1}, default_name="wrap")
    assert (spec.name, spec.command, spec.gpus) == ("wrap", ("/bin/sh", "-c", "nvidia-smi"), 1)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "a b"),
        ("gpus", 65),
        ("time_limit", "1:2:3:4"),
        ("command", ""),
        ("image", "-x"),
        ("retries", -1),
        ("env", {"CUDA_VISIBLE_DEVICES": "0"}),
        ("mounts", ["x:y"]),
        ("workdir", "rel"),
        ("priority", 10**6),
        ("nice", 10**6),
        ("shm_size", "huge"),
    ],
)
def test_error_in_an_override_names_the_cli_option(field: str, value: object) -> None:
    with pytest.raises(SpecError) as caught:
        build_spec({"command": "x"}, {field: value}, default_name="j")
    assert caught.value.field == OVERRIDE_OPTION[field]


def test_override_option_names_cover_every_key_and_follow_slurm() -> None:
    assert set(OVERRIDE_OPTION) == set(KEYS)
    assert OVERRIDE_OPTION["name"] == "-J/--job-name"
    assert OVERRIDE_OPTION["time_limit"] == "-t/--time"
    assert OVERRIDE_OPTION["command"] == "--wrap"
    assert OVERRIDE_OPTION["gpus"] == "--gpus"


def test_caller_may_rename_the_options_in_messages() -> None:
    with pytest.raises(SpecError) as caught:
        build_spec({"command": "x"}, {"gpus": -1}, default_name="j", option_names={"gpus": "-G"})
    assert caught.value.field == "-G"


def test_time_override_error_is_the_documented_message_under_the_option() -> None:
    with pytest.raises(SpecError) as caught:
        build_spec({"command": "x"}, {"time_limit": "soon"}, default_name="j")
    assert str(caught.value).startswith('-t/--time: "soon" is not a time limit. Use MM,')


# ------------------------------------------------------------------------------ --gres


@pytest.mark.parametrize(
    ("text", "gpus"),
    [
        ("gpu", (None, 1)),
        ("gpu:2", (None, 2)),
        ("gpu:a100:4", ("a100", 4)),
        ("gpu:a100", ("a100", 1)),
        ("gpu:0", (None, 0)),
        (" gpu:8 ", (None, 8)),
    ],
)
def test_gres_gives_the_gpu_type_and_count(text: str, gpus: tuple[str | None, int]) -> None:
    assert parse_gres(text) == gpus


@pytest.mark.parametrize("text", ["", "mps:100", "gpu:2,mps:1", "gpus:2", "gpu:-1", "gpu::2"])
def test_gres_other_than_gpus_is_refused_with_the_forms(text: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_gres(text)
    assert caught.value.field == "--gres"
    assert "Use gpu, gpu:N or gpu:TYPE:N (or --gpus N)" in caught.value.message


def test_gres_over_the_gpu_cap_is_refused() -> None:
    with pytest.raises(SpecError) as caught:
        parse_gres("gpu:65")
    assert caught.value.field == "--gres"
    assert caught.value.message.endswith("Use a count from 0 to 64")


# ------------------------------------------------------------------ round trip, examples


def test_full_spec_round_trips_through_to_dict_and_from_dict() -> None:
    spec = build(
        {
            "name": "full",
            "image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
            "command": ["python", "train.py"],
            "gpus": 2,
            "time_limit": "1-00:00:00",
            "retries": 3,
            "env": {"A": "1", "B": "two"},
            "mounts": ["/data:/data:ro"],
            "workdir": "/work",
            "priority": 5,
            "nice": 2,
            "shm_size": "8g",
        }
    )
    assert JobSpec.from_dict(spec.to_dict()) == spec


def test_spec_rebuilt_from_its_own_dict_validates_unchanged() -> None:
    spec = build({"gpus": 1, "env": {"X": "1"}, "mounts": ["/a:/b"], "time_limit": 5})
    data = spec.to_dict()
    data["time_limit"] = str(spec.time_limit // 60) if spec.time_limit else None
    assert build_spec(data, {}, default_name="other") == spec


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_builds(path: Path) -> None:
    spec = build_spec(load_job_file(path), {}, default_name=path.stem)
    assert spec.command


def test_examples_are_the_documented_ones() -> None:
    hello = build_spec(load_job_file(EXAMPLES / "hello.yaml"), {}, default_name="hello")
    assert (hello.image, hello.gpus, hello.time_limit) == (None, 1, 120)
    assert "CUDA_VISIBLE_DEVICES" in hello.command[-1]
    train = load_job_file(EXAMPLES / "train.yaml")
    # Every key but secret_env (an example should not teach writing secrets into a file)
    # and the other ways of giving `mem`, which exclude it; dependency (it names a job id
    # of the reader's queue, which the file cannot know); the keys of a job across nodes
    # (examples/across-nodes.yaml has them); notify (a head allows only the webhook
    # addresses its admin lists); gpu_type (`gpus: a100:2` says it, as Slurm's --gpus
    # does); gpu_mem (a share of one GPU, which excludes the example's two whole ones: a
    # comment there shows it), gpu_shards (Slurm's --gres=shard:N, the same share sized by
    # the admin); reservation (it names a reservation an admin made, docs/priorities.md).
    left_out = {
        "reservation",
        "gpu_mem",
        "gpu_shards",
        "secret_env",
        "mem_per_gpu",
        "mem_per_cpu",
        "dependency",
        "ntasks",
        "notify",
        "gpu_type",
        *ACROSS_NODES,
    }
    assert set(train) | left_out == set(KEYS)
    spec = build_spec(train, {}, default_name="train", now=0.0)
    assert (spec.gpus, spec.gpu_type, spec.time_limit) == (2, "a100", 86400)
    assert spec.constraint == "nvlink"
    assert (spec.export, spec.signal, spec.mail_type) == ("NONE", "USR1@120", "END,FAIL")


ACROSS_NODES = ("nodes", "ntasks_per_node", "gpus_per_node", "nodelist", "exclude", "exclusive")


def test_the_across_nodes_example_asks_two_whole_nodes_of_four_gpus() -> None:
    data = load_job_file(EXAMPLES / "across-nodes.yaml")
    assert set(data) >= {"nodes", "gpus_per_node", "ntasks_per_node", "exclusive"}
    spec = build_spec(data, {}, default_name="across-nodes")
    assert (spec.nodes, spec.gpus, spec.total_gpus) == (2, 4, 8)
    assert (spec.ntasks_per_node, spec.exclusive) == (1, True)


@pytest.mark.parametrize("value", ["2", 0, True, "one", -1, 70000])
def test_a_bad_ntasks_is_refused_naming_the_key(value: object) -> None:
    with pytest.raises(SpecError, match=r"^ntasks: .* is not a number of tasks. Use a whole"):
        build({"ntasks": value})


def test_ntasks_is_kept_so_the_job_sees_slurm_ntasks() -> None:
    assert build({"ntasks": 1}).ntasks == 1
    assert build({"ntasks": 4}).ntasks == 4  # on one node: srun starts 4 tasks there
    assert build({}).ntasks is None
    assert JobSpec.from_dict(build({"ntasks": 1}).to_dict()).ntasks == 1


def test_importing_spec_and_timefmt_does_not_import_yaml() -> None:
    # squeue and sacct import the formatters; PyYAML is paid for only when a file is read.
    code = "import sys, gbatch.jobspec.spec, gbatch.core.timefmt; print('yaml' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert result.stdout.strip() == "False"


# -- notify: a job's own webhooks --------------------------------------------------------


def test_notify_takes_hooks_or_bare_urls_and_survives_the_wire() -> None:
    spec = build_spec(
        {
            "command": "true",
            "notify": [
                {"url": "https://hooks.slack.com/x", "events": ["end", "FAIL"], "form": "slack"},
                "https://hooks.example.org/y",
            ],
        },
        {},
        default_name="job",
    )
    assert spec.notify == (
        NotifyHook("https://hooks.slack.com/x", ("END", "FAIL"), "slack"),
        NotifyHook("https://hooks.example.org/y", ("END", "FAIL"), "json"),
    )
    assert build_spec(spec.to_dict(), {}, default_name="job", wire=True) == spec
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert "notify" not in JobSpec(name="a", command=("true",)).to_dict()


def test_the_notify_option_is_a_url_and_its_events() -> None:
    spec = build_spec(
        None, {"command": ["true"], "notify": "https://h.example.org/x,BEGIN,END"}, default_name="j"
    )
    assert spec.notify == (NotifyHook("https://h.example.org/x", ("BEGIN", "END")),)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([{"url": "file:///etc/passwd"}], "is not an http:// or https:// address"),
        (["https://h.example.org/hooks/../admin"], "has a `.` or `..` segment in its path"),
        (["https://h.example.org/hooks/%2E%2e/admin"], "has a `.` or `..` segment in its path"),
        ([{"url": "https://h.example.org/", "format": "slack"}], "format is not one of its keys"),
        ([{"url": "https://h.example.org/", "events": ["NODE_DOWN"]}], "events are among"),
        ([{"url": "https://h.example.org/", "form": "xml"}], "form is json or slack"),
        ([], "of 1 to 4 webhooks"),
        (["https://h.example.org/"] * 5, "of 1 to 4 webhooks"),
    ],
)
def test_bad_notify_names_the_field_and_the_form(value: object, message: str) -> None:
    with pytest.raises(SpecError, match=f"notify: .*{message}"):
        build_spec({"command": "true", "notify": value}, {}, default_name="j")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"command": "x", "name": "bad name", "gpus": -1}, "name"),
        ({"command": "x", "gpus": "many", "time_limit": "soon"}, "gpus"),
        ({"command": "x", "ntasks": 0, "submit_dir": "relative", "partition": "b p"}, "ntasks"),
        ({"command": "x", "submit_dir": "relative", "partition": "b p"}, "submit_dir"),
        ({"command": "x", "partition": "b p", "mem": "lots"}, "partition"),
        ({"command": "x", "mem": "lots", "begin": "never"}, "mem"),
        ({"command": "x", "begin": "never", "signal": "NOPE"}, "begin"),
        ({"command": "x", "comment": 3, "notify": 3}, "comment"),
    ],
)
def test_a_spec_with_several_bad_fields_is_refused_for_the_first_in_field_order(
    data: dict[str, object], field: str
) -> None:
    with pytest.raises(SpecError) as refused:
        build_spec(data, {}, default_name="j", source="spec", wire=True)
    assert refused.value.field == field
    # The same through CLI overrides (their option names), as sbatch builds a spec.
    overrides = {k: v for k, v in data.items() if k not in ("submit_dir",)}
    if "submit_dir" not in data:
        with pytest.raises(SpecError) as refused:
            build_spec(None, overrides, default_name="j")
        assert refused.value.field == OVERRIDE_OPTION[field]


def test_a_spec_without_a_name_takes_the_default_made_valid() -> None:
    spec = build_spec({"command": "x"}, {}, default_name="my run.yaml", source="spec", wire=True)
    assert spec == JobSpec(name="my_run.yaml", command=("/bin/sh", "-c", "x"))


def test_a_specs_replace_is_dataclasses_replace() -> None:
    import dataclasses

    spec = build_spec(
        {"command": "x", "gpus": 2, "env": {"A": "1"}, "notify": [{"url": "https://h/x"}]},
        {},
        default_name="j",
    )
    changes = {"time_limit": 60, "partition": "short", "array_task": 3, "array_pos": 1}
    copy = spec.replace(**changes)
    assert copy == dataclasses.replace(spec, **changes)  # type: ignore[arg-type]
    assert hash(copy) == hash(dataclasses.replace(spec, **changes))  # type: ignore[arg-type]
    assert (spec.time_limit, spec.partition) == (None, None)  # the original is untouched
    with pytest.raises(TypeError, match="no field colour"):
        spec.replace(colour="red")
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.gpus = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "data",
    [
        {"command": "true"},
        {"command": ["python", "train.py"], "requeue": False, "retries": 2, "gpus": 1},
        {"command": "true", "env": {"A": "1"}, "mounts": ["/a:/b"], "workdir": "/w"},
        {"command": "true", "image": "x:1", "priority": 3, "nice": -1, "shm_size": "1g"},
    ],
)
def test_the_wire_spec_leaves_out_defaults_and_builds_the_same_job(data: dict[str, object]) -> None:
    spec = build(data)
    wire_spec = spec.to_wire()
    assert build_spec(wire_spec, {}, default_name="job", wire=True) == spec
    assert build_spec(spec.to_dict(), {}, default_name="job", wire=True) == spec
    full = spec.to_dict()
    left_out = full.keys() - wire_spec.keys()
    assert all(wire_spec[key] == full[key] for key in wire_spec)
    defaults = {key for key, value in full.items() if value is None or value in ({}, [])}
    defaults |= {key for key in ("gpus", "retries", "priority", "nice") if full[key] == 0}
    assert left_out == defaults | ({"requeue"} if spec.requeue else set())


def test_a_default_spec_goes_on_the_wire_as_its_name_and_command() -> None:
    assert JobSpec(name="a", command=("true",)).to_wire() == {"name": "a", "command": ["true"]}
