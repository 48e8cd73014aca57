"""The `limits:` block of the head's config: defaults, the example in docs/security.md,
how user and group entries combine, and one clear line for every bad setting."""

from __future__ import annotations

import grp
import os
import pwd
import re
from pathlib import Path

import pytest
import yaml
from docexamples import yaml_block_with

from gbatch.core.limits import (
    ARRAY_HARD_CAP,
    Limits,
    LimitsError,
    PendingLimitReached,
    UserLimits,
    UserShare,
    array_refusal,
    gpus_refusal,
    parse_limits,
    unix_groups,
)
from gbatch.render.formatting import format_sshare
from gbatch.site.config import Config, ConfigError, Paths, load_config

DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def docs_section() -> str:
    text = DOCS.read_text()
    return text.split("\n## Limits\n", 1)[1].split("\n## ", 1)[0]


def docs_blocks(language: str) -> list[str]:
    """The section's fenced blocks in `language` ("" for plain ones), as written."""
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", docs_section(), re.S | re.M)
    return [body for lang, body in blocks if lang == language]


def parse(raw: object) -> Limits:
    """parse_limits with every name taken as existing (the lookups have their own tests)."""
    return parse_limits(raw, user_exists=lambda _: True, group_exists=lambda _: True)


# -- defaults and the documented example -------------------------------------------------


def test_the_submit_limits_are_on_by_default_and_the_running_limits_off() -> None:
    for limits in (Config().limits, parse(None), parse({})):
        assert limits.for_user("anyone", ["any-group"]) == UserLimits(
            max_pending_jobs=10_000, max_running_jobs=None, max_gpus=None, max_array_size=10_001
        )
        assert not limits.limits_running


def test_the_example_in_the_docs_loads_as_documented() -> None:
    example = yaml_block_with("security.md", "max_pending_jobs:")
    assert example in docs_blocks("yaml")  # the one of the Limits section
    checked: list[tuple[str, str]] = []

    def exists(kind: str) -> object:
        return lambda name: checked.append((kind, name)) or True

    limits = parse_limits(
        yaml.safe_load(example)["limits"], user_exists=exists("user"), group_exists=exists("group")
    )
    assert checked == [("user", "alice"), ("group", "students")]
    assert limits.default == UserLimits(10_000, None, None, 10_001)
    student = limits.for_user("carol", ["students", "staff"])
    assert student == UserLimits(10_000, 4, 2, 10_001)
    # As the docs say: alice, a student, 4 jobs on 8 GPUs.
    assert limits.for_user("alice", ["students"]) == UserLimits(10_000, 4, 8, 10_001)
    assert limits.for_user("alice", []) == UserLimits(10_000, None, 8, 10_001)
    assert limits.limits_running


def test_the_sshare_example_in_the_docs_is_what_the_formatter_prints() -> None:
    shown = [b for b in docs_blocks("") if b.startswith("$ gbatch sshare\n")]
    (block,) = shown
    row = UserShare("alice", 36_000.0, 0.75, 0.353553, 3, 4, 8, UserLimits(10_000, 4, 8, 10_001))
    assert block.removeprefix("$ gbatch sshare\n") == format_sshare([row])


def test_the_refusals_in_the_docs_are_what_a_submit_says() -> None:
    (block,) = [b for b in docs_blocks("") if b.startswith("gbatch sbatch: error: limits:")]
    said = [
        str(PendingLimitReached("alice", 10_000, 1, 10_000)),
        str(PendingLimitReached("alice", 9_995, 10, 10_000)),
        array_refusal(20_000, 10_001),
        gpus_refusal(4, 2),
    ]
    assert block.splitlines() == [f"gbatch sbatch: error: {line}" for line in said]
    assert array_refusal(10_001, 10_001) is None and array_refusal(5, None) is None
    assert gpus_refusal(2, 2) is None and gpus_refusal(8, None) is None


# -- how entries combine ------------------------------------------------------------------


def test_a_user_entry_wins_over_every_group_entry_for_the_settings_it_names() -> None:
    limits = parse(
        {
            "max_running_jobs": 10,
            "users": {"alice": {"max_gpus": 1}},
            "groups": {"big": {"max_gpus": 16, "max_running_jobs": 2}},
        }
    )
    # max_gpus from alice's entry; max_running_jobs, which it does not name, from her group.
    assert limits.for_user("alice", ["big"]) == UserLimits(10_000, 2, 1, 10_001)


def test_among_groups_the_most_generous_value_applies_setting_by_setting() -> None:
    limits = parse(
        {
            "groups": {
                "students": {"max_running_jobs": 4, "max_gpus": 2},
                "vision": {"max_gpus": 6},
                "tiny": {"max_running_jobs": 1, "max_gpus": 1},
            }
        }
    )
    assert limits.for_user("u", ["students", "vision", "tiny"]) == UserLimits(10_000, 4, 6, 10_001)
    assert limits.for_user("u", ["tiny"]) == UserLimits(10_000, 1, 1, 10_001)


def test_null_in_a_group_means_no_limit_and_beats_any_number() -> None:
    limits = parse(
        {
            "max_gpus": 2,
            "groups": {"staff": {"max_gpus": None}, "students": {"max_gpus": 1}},
        }
    )
    assert limits.for_user("u", ["students", "staff"]).max_gpus is None
    assert limits.for_user("u", ["students"]).max_gpus == 1


def test_null_in_a_user_entry_lifts_a_default() -> None:
    limits = parse({"users": {"bob": {"max_pending_jobs": None, "max_array_size": None}}})
    assert limits.for_user("bob") == UserLimits(None, None, None, None)
    assert limits.for_user("carol") == UserLimits()


def test_groups_and_users_the_config_does_not_name_change_nothing() -> None:
    limits = parse({"max_running_jobs": 3, "groups": {"students": {"max_running_jobs": 9}}})
    assert limits.for_user("u", ["wheel", "video"]) == UserLimits(10_000, 3, None, 10_001)
    assert limits.for_user("u") == limits.default


def test_an_entry_that_names_nothing_is_allowed_and_changes_nothing() -> None:
    limits = parse({"users": {"alice": None, "bob": {}}})
    assert limits.for_user("alice") == limits.for_user("bob") == UserLimits()


def test_limits_running_is_set_only_when_a_running_limit_is() -> None:
    assert not parse({"max_pending_jobs": 5, "users": {"a": {"max_array_size": 3}}}).limits_running
    assert parse({"users": {"a": {"max_gpus": 0}}}).limits_running
    assert parse({"groups": {"g": {"max_running_jobs": 1}}}).limits_running
    assert not parse({"groups": {"g": {"max_running_jobs": None}}}).limits_running


# -- one line for every mistake -------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([1], "limits: [1] is not a mapping of settings like {max_pending_jobs: 10000}. Fix"),
        (
            {"max_pending": 5},
            'limits: unknown setting "max_pending". Did you mean "max_pending_jobs"?',
        ),
        ({"zzz": 5}, 'limits: unknown setting "zzz". Valid keys: max_pending_jobs, '),
        ({"max_gpus": -1}, "limits.max_gpus: -1 is not zero or more. Fix the value"),
        ({"max_gpus": 1.5}, "limits.max_gpus: 1.5 is not a whole number, or null for no limit"),
        ({"max_gpus": "2"}, "limits.max_gpus: '2' is not a whole number, or null for no limit"),
        ({"max_gpus": True}, "limits.max_gpus: True is not a whole number, or null for no limit"),
        ({"max_array_size": 0}, "limits.max_array_size: 0 is not at least 1. Fix the value"),
        (
            {"max_array_size": ARRAY_HARD_CAP + 1},
            f"limits.max_array_size: {ARRAY_HARD_CAP + 1} is over gbatch's cap of "
            f"{ARRAY_HARD_CAP} tasks per submit",
        ),
        ({"users": [1]}, "limits.users: [1] is not a mapping of user names to settings"),
        ({"groups": "students"}, "limits.groups: 'students' is not a mapping of Unix group"),
        ({"users": {"alice": 4}}, "limits.users.alice: 4 is not a mapping of settings like"),
        (
            {"groups": {"students": {"max_gpu": 2}}},
            'limits.groups.students: unknown setting "max_gpu". Did you mean "max_gpus"?',
        ),
        (
            {"users": {"alice": {"users": {}}}},
            'limits.users.alice: unknown setting "users".',
        ),
        (
            {"groups": {"students": {"max_running_jobs": -3}}},
            "limits.groups.students.max_running_jobs: -3 is not zero or more",
        ),
        ({"users": {5: {}}}, "limits.users: 5 is not a user name"),
    ],
)
def test_each_bad_setting_is_one_line_naming_the_key(raw: object, message: str) -> None:
    with pytest.raises(LimitsError) as caught:
        parse(raw)
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_bad_setting_in_the_file_names_the_file_and_stops_the_load(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    paths.config_file.write_text("limits:\n  max_running_jobs: -1\n")
    with pytest.raises(ConfigError) as caught:
        load_config(paths, {})
    assert str(caught.value) == (
        f"{paths.config_file}: limits.max_running_jobs: -1 is not zero or more. Fix the value"
    )


@pytest.mark.parametrize(("kind", "made_with"), [("users", "useradd"), ("groups", "groupadd")])
def test_a_user_or_group_the_system_does_not_know_is_refused(
    tmp_path: Path, kind: str, made_with: str
) -> None:
    paths = Paths(tmp_path)
    paths.config_file.write_text(f"limits:\n  {kind}:\n    gbatch-no-such-x9q: {{max_gpus: 1}}\n")
    what = "user" if kind == "users" else "Unix group"
    with pytest.raises(ConfigError) as caught:
        load_config(paths, {})
    assert str(caught.value) == (
        f"{paths.config_file}: limits.{kind}: 'gbatch-no-such-x9q' is not an existing {what} "
        f"(create it with {made_with}, or fix the name). Fix the value"
    )


def test_existing_users_and_groups_are_read_from_the_system(tmp_path: Path) -> None:
    me = pwd.getpwuid(os.getuid())
    group = grp.getgrgid(me.pw_gid).gr_name
    paths = Paths(tmp_path)
    paths.config_file.write_text(
        f"limits:\n  users: {{{me.pw_name}: {{max_gpus: 3}}}}\n"
        f"  groups: {{{group}: {{max_running_jobs: 2}}}}\n"
    )
    limits = load_config(paths, {}).limits
    assert limits.for_user(me.pw_name, unix_groups(me.pw_name, 0)) == UserLimits(
        10_000, 2, 3, 10_001
    )


def test_unix_groups_has_the_primary_group_and_nothing_for_an_unknown_user() -> None:
    me = pwd.getpwuid(os.getuid())
    assert grp.getgrgid(me.pw_gid).gr_name in unix_groups(me.pw_name, 0)
    assert unix_groups("gbatch-no-such-x9q", 0) == frozenset()
