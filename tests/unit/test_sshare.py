"""`gbatch sshare`'s output: Slurm's sshare columns, then use beside each limit; and its
rows through the wire."""

from __future__ import annotations

import json

import pytest

from gbatch.cli._main import main
from gbatch.core.limits import UserLimits, UserShare
from gbatch.protocol import wire
from gbatch.render.formatting import format_sshare, format_sshare_json

ROWS = [
    UserShare("alice", 36_000.4, 0.75, 0.353553, 3, 4, 8, UserLimits(10_000, 4, 8, 10_001)),
    UserShare("bob\x1b[2J", 12_000.0, 0.25, 0.707107, 0, 0, 0, UserLimits(None, None, None, 50)),
]


def test_text_has_a_header_right_justified_counts_and_a_dash_for_no_limit() -> None:
    assert format_sshare(ROWS) == (
        "User    RawUsage EffectvUsage FairShare Pending MaxPending Running MaxRunning GPUs"
        " MaxGPUs MaxArray\n"
        "alice      36000     0.750000  0.353553       3      10000       4          4    8"
        "       8    10001\n"
        "bob?[2J    12000     0.250000  0.707107       0          -       0          -    0"
        "       -       50\n"
    )
    assert format_sshare(ROWS, header=False).splitlines()[0].startswith("alice ")
    assert format_sshare([], header=False) == ""


def test_parsable_joins_with_bars_and_leaves_no_limit_empty() -> None:
    assert format_sshare(ROWS, parsable=True).splitlines() == [
        "User|RawUsage|EffectvUsage|FairShare|Pending|MaxPending|Running|MaxRunning|GPUs|MaxGPUs"
        "|MaxArray",
        "alice|36000|0.750000|0.353553|3|10000|4|4|8|8|10001",
        "bob?[2J|12000|0.250000|0.707107|0||0||0||50",
    ]


def test_json_has_null_for_no_limit() -> None:
    data = json.loads(format_sshare_json(ROWS))
    assert data["users"][1] == {
        "user": "bob\x1b[2J",
        "raw_usage": 12_000.0,
        "effective_usage": 0.25,
        "fairshare": 0.707107,
        "pending": 0,
        "running": 0,
        "gpus": 0,
        "limits": {
            "max_pending_jobs": None,
            "max_running_jobs": None,
            "max_gpus": None,
            "max_array_size": 50,
        },
    }


def test_a_row_comes_back_from_the_wire_as_it_was_sent() -> None:
    for row in ROWS:
        assert wire.share_from_wire(json.loads(json.dumps(wire.share_to_wire(row)))) == row


def test_help_names_the_columns_the_reasons_and_where_limits_are_set(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["sshare", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for words in (
        "-a, --all",
        "--users USER[,USER]",
        "-P, --parsable2",
        "--json",
        "QOSMaxJobsPerUserLimit",
        "QOSMaxGRESPerUser",
        "config.yaml (`limits:`)",
    ):
        assert words in text, words
