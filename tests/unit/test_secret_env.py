"""Secret env values: job file and CLI -> names in the spec and values apart; sealed in
the store; handed out only for a launch; shown as NAME=<secret>."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gbatch.cli import sbatch
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.head import store as store_module
from gbatch.head.secretbox import SecretBox, SecretKeyError
from gbatch.head.store import SECRET_KEY_FILE, Store, StoreError
from gbatch.jobspec.spec import SpecError, build_spec, load_job_file, secret_env_values
from gbatch.nodes.base import LaunchError, launch_secrets
from gbatch.render.formatting import format_job_details, format_job_details_json

T0 = 1_767_225_600.0
SECRET = "s3cr3t-Vf9q2-not-anywhere"


def spec_with(*names: str, env: tuple[tuple[str, str], ...] = ()) -> JobSpec:
    return JobSpec(name="train", command=("python", "t.py"), env=env, secret_env=names)


def submit_token(store: Store) -> int:
    [job_id] = store.submit(
        [spec_with("TOKEN")], 1000, "alice", T0, secret_values={"TOKEN": SECRET}
    )
    return job_id


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "home" / "gbatch.db")
    yield s
    s.close()


# -- spec -----------------------------------------------------------------------------


def test_job_file_secret_env_keeps_names_in_the_spec_and_values_apart(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(f'command: "true"\nenv:\n  A: "1"\nsecret_env:\n  TOKEN: "{SECRET}"\n')
    data = load_job_file(path)
    spec = build_spec(data, {}, default_name="job")
    assert spec.secret_env == ("TOKEN",)
    assert spec.env == (("A", "1"),)
    assert SECRET not in json.dumps(spec.to_dict()) and SECRET not in repr(spec)
    assert secret_env_values(data, {}) == {"TOKEN": SECRET}


def test_option_replaces_the_file_secret_env_whole() -> None:
    data = {"command": "true", "secret_env": {"A": "x"}}
    overrides = {"secret_env": {"B": "y"}}
    assert build_spec(data, overrides, default_name="j").secret_env == ("B",)
    assert secret_env_values(data, overrides) == {"B": "y"}


def test_spec_without_secrets_stores_the_same_json_as_before() -> None:
    assert "secret_env" not in spec_with().to_dict()
    again = JobSpec.from_dict(spec_with("T", "U").to_dict())
    assert again.secret_env == ("T", "U")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"1BAD": "v"}, "not a variable name"),
        ({"NVIDIA_VISIBLE_DEVICES": "v"}, "cannot be set"),
        ({"CUDA_VISIBLE_DEVICES": "v"}, "cannot be set"),
        ({"GBATCH_X": "v"}, "cannot be set"),
        ({"PIN": 4567}, "not a string. Quote it"),
        ({"T": "a\nb"}, "line break"),
        ({"T": "a\0b"}, "NUL"),
        (["T"], "not a mapping"),
        ({"T": "x" * 70_000}, "larger than 64 KiB"),
    ],
)
def test_bad_secret_env_is_refused_without_showing_the_value(value: object, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        build_spec({"command": "true", "secret_env": value}, {}, default_name="j")
    assert caught.value.field == "secret_env"
    assert words in caught.value.message
    for shown in ("4567", "a\nb", "x" * 20):
        assert shown not in caught.value.message


def test_refusal_names_the_option_when_the_cli_set_it() -> None:
    with pytest.raises(SpecError) as caught:
        build_spec({"command": "true"}, {"secret_env": {"GBATCH_X": "v"}}, default_name="j")
    assert caught.value.field == "--secret-env"


def test_a_name_in_both_env_and_secret_env_is_refused() -> None:
    data = {"command": "true", "env": {"TOKEN": "plain"}, "secret_env": {"TOKEN": "s"}}
    with pytest.raises(SpecError) as caught:
        build_spec(data, {}, default_name="j")
    assert caught.value.field == "secret_env"
    assert "TOKEN is set in both env and secret_env" in caught.value.message


def test_sbatch_secret_env_reads_values_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    assert sbatch._secret_env_option(["HF_TOKEN"], os.environ) == {"HF_TOKEN": SECRET}
    assert sbatch._secret_env_option(None, os.environ) is None
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(SpecError) as caught:
        sbatch._secret_env_option(["HF_TOKEN"], os.environ)
    assert caught.value.field == "--secret-env"
    assert "HF_TOKEN is not set in your environment" in caught.value.message


def test_sbatch_parser_takes_repeated_secret_env_names() -> None:
    parser = argparse.ArgumentParser()
    sbatch.add_parser(parser.add_subparsers())
    args = parser.parse_args(["sbatch", "--secret-env", "A", "--secret-env", "B", "--wrap", "x"])
    assert args.secret_env == ["A", "B"]


# -- store ----------------------------------------------------------------------------


def test_secret_values_are_sealed_and_never_in_plain_columns(store: Store) -> None:
    [job_id] = store.submit(
        [spec_with("TOKEN")], 1000, "alice", T0, secret_values={"TOKEN": SECRET}
    )
    store.close()
    raw = sqlite3.connect(store.path)
    tables = [r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert "job_secrets" in tables
    for table in tables:
        for row in raw.execute(f"SELECT * FROM {table}"):
            assert all(SECRET not in str(cell) for cell in row), (table, row)
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    assert SECRET.encode() not in store.path.read_bytes()
    key = store.path.parent / SECRET_KEY_FILE
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    reopened = Store(store.path)
    try:
        assert reopened.require(job_id).secret_values == ()
    finally:
        reopened.close()


def test_only_the_move_to_configuring_hands_out_the_values(store: Store) -> None:
    [job_id] = store.submit(
        [spec_with("TOKEN")], 1000, "alice", T0, secret_values={"TOKEN": SECRET}
    )
    assert store.require(job_id).secret_values == ()
    assert all(j.secret_values == () for j in store.jobs())
    job = store.set_state(job_id, JobState.CONFIGURING, "allocated", T0, node="n1", attempt=1)
    assert job.secret_values == (("TOKEN", SECRET),)
    assert SECRET not in repr(job)
    assert launch_secrets(job) == {"TOKEN": SECRET}
    running = store.set_state(job_id, JobState.RUNNING, "", T0)
    assert running.secret_values == ()
    assert all(SECRET not in e.reason for e in store.events(job_id))


def test_an_array_shares_one_sealed_value_per_task(store: Store) -> None:
    ids = store.submit([spec_with("T")] * 3, 1000, "alice", T0, secret_values={"T": SECRET})
    for job_id in ids:
        job = store.set_state(job_id, JobState.CONFIGURING, "allocated", T0, attempt=1)
        assert launch_secrets(job) == {"T": SECRET}


def test_values_that_do_not_match_the_names_are_a_callers_bug(store: Store) -> None:
    with pytest.raises(ValueError, match="secret values given"):
        store.submit([spec_with("A")], 1000, "alice", T0, secret_values={"B": "x"})
    with pytest.raises(ValueError, match="secret values given"):
        store.submit([spec_with("A")], 1000, "alice", T0)
    assert store.count() == 0


def test_a_replaced_key_leaves_the_job_unlaunchable_not_secretless(
    store: Store, tmp_path: Path
) -> None:
    [job_id] = store.submit(
        [spec_with("TOKEN")], 1000, "alice", T0, secret_values={"TOKEN": SECRET}
    )
    store.close()
    key = store.path.parent / SECRET_KEY_FILE
    key.unlink()
    reopened = Store(store.path)  # makes a new key on first use
    try:
        job = reopened.set_state(job_id, JobState.CONFIGURING, "allocated", T0, attempt=1)
        assert job.secret_values == ()
        with pytest.raises(LaunchError, match=r"secret env \(TOKEN\) cannot be read"):
            launch_secrets(job)
    finally:
        reopened.close()


def test_a_key_file_that_cannot_be_made_fails_the_submit(tmp_path: Path) -> None:
    store = Store(tmp_path / "gbatch.db")
    try:
        (tmp_path / SECRET_KEY_FILE).mkdir()  # a directory where the key should be
        with pytest.raises(StoreError):
            store.submit([spec_with("T")], 1000, "alice", T0, secret_values={"T": "v"})
        assert store.count() == 0
    finally:
        store.close()


def test_a_store_at_version_3_gains_the_secrets_table(tmp_path: Path) -> None:
    path = tmp_path / "gbatch.db"
    raw = sqlite3.connect(path)
    for script in store_module.MIGRATIONS[:3]:
        raw.executescript(script)
    raw.execute("PRAGMA user_version = 3")
    raw.commit()
    raw.close()
    store = Store(path)
    try:
        assert store.schema_version == len(store_module.MIGRATIONS)
        [job_id] = store.submit([spec_with("T")], 0, "root", T0, secret_values={"T": "v"})
        job = store.set_state(job_id, JobState.CONFIGURING, "allocated", T0, attempt=1)
        assert launch_secrets(job) == {"T": "v"}
    finally:
        store.close()


def test_secret_box_refuses_a_token_sealed_with_another_key(tmp_path: Path) -> None:
    token = SecretBox(tmp_path / "a.key").seal({"T": SECRET})
    assert SECRET.encode() not in token
    assert SecretBox(tmp_path / "a.key").open(token) == {"T": SECRET}
    with pytest.raises(SecretKeyError, match="another key"):
        SecretBox(tmp_path / "b.key").open(token)
    (tmp_path / "c.key").write_text("not a key\n")
    with pytest.raises(SecretKeyError, match="does not hold a key"):
        SecretBox(tmp_path / "c.key").seal({})


# -- showing --------------------------------------------------------------------------


def test_details_show_secret_names_masked() -> None:
    job = Job(
        id=7,
        uid=1000,
        user="alice",
        spec=spec_with("TOKEN", env=(("A", "1"),)),
        state=JobState.PENDING,
        submit_time=T0,
        secret_values=(("TOKEN", SECRET),),  # even a Job that carries them
    )
    text = format_job_details(job, [], T0)
    assert "Environment=A,TOKEN=<secret>" in text
    assert SECRET not in text
    data = json.loads(format_job_details_json(job, [], T0))
    assert (data["env_names"], data["secret_env_names"]) == (["A"], ["TOKEN"])
    assert SECRET not in json.dumps(data)
