"""MIG slices (issue 30): the agent lists a card's MIG devices (NVML, and the simulation),
the head makes each a GPU of its own typed `<card>_<profile>` (Slurm's naming), hands out
a card in MIG mode never whole, gives a job asking no type whole cards only, and runs a
slice's job with its `MIG-` UUID as the device."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pynvml
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_agent_contract import AGENT, load_agent_module, run_agent
from test_node_loss_rules import Clocks, FakeNode

from gbatch.core.gputypes import parse_simulated, type_matches
from gbatch.core.model import Gpu, Job, JobSpec, JobState, NodeInfo, NodeState
from gbatch.core.plan import NodeView
from gbatch.head.fleet import Fleet
from gbatch.head.scheduler import NodeSize, plan
from gbatch.nodes.base import visible_devices
from gbatch.nodes.docker import docker_run_argv, gpus_option_value
from gbatch.nodes.local import write_simulation_file
from gbatch.nodes.report import NodeReport, ReportError, parse_report, to_gpus
from gbatch.site.config import Config, ConfigError, Paths, load_config

A100 = "NVIDIA A100-SXM4-80GB"
NOW = 1_000_000.0

# -- the agent, through NVML ------------------------------------------------------------


class _Memory:
    def __init__(self, total_mib: int, used_mib: int) -> None:
        self.total, self.used = total_mib << 20, used_mib << 20


class _Process:
    def __init__(self, pid: int, used_mib: int | None) -> None:
        self.pid = pid
        self.usedGpuMemory = None if used_mib is None else used_mib << 20


class _Attributes:
    def __init__(self, gpu_slices: int, compute_slices: int, memory_mb: int) -> None:
        self.gpuInstanceSliceCount = gpu_slices
        self.computeInstanceSliceCount = compute_slices
        self.memorySizeMB = memory_mb


class _Device:
    def __init__(self, uuid: str, name: str, total: int, used: int = 0, **extra: Any) -> None:
        self.uuid, self.name, self.memory = uuid, name, _Memory(total, used)
        self.processes: list[_Process] = extra.get("processes", [])
        self.mig_mode: Any = extra.get("mig_mode", [0, 0])
        self.slots: list[_Device | BaseException | None] = extra.get("slots", [])
        self.attributes: _Attributes | None = extra.get("attributes")


def fake_nvml(cards: Sequence[_Device]) -> types.ModuleType:
    """A pynvml module over `cards`: pynvml's own error classes, these devices' answers."""
    fake = types.ModuleType("pynvml")
    for name in dir(pynvml):
        if name.startswith(("NVMLError", "NVML_")):
            setattr(fake, name, getattr(pynvml, name))

    def answer(value: Any) -> Any:
        if isinstance(value, BaseException):
            raise value
        return value

    def mig_handle(card: _Device, slot: int) -> _Device:
        device = card.slots[slot] if slot < len(card.slots) else None
        if device is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return answer(device)

    def attributes(device: _Device) -> _Attributes:
        if device.attributes is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return device.attributes

    functions = {
        "nvmlDeviceGetCount": lambda: len(cards),
        "nvmlDeviceGetHandleByIndex": lambda index: cards[index],
        "nvmlDeviceGetUUID": lambda d: d.uuid,
        "nvmlDeviceGetName": lambda d: d.name,
        "nvmlDeviceGetMemoryInfo": lambda d: d.memory,
        "nvmlDeviceGetUtilizationRates": lambda d: types.SimpleNamespace(gpu=7),
        "nvmlDeviceGetComputeRunningProcesses": lambda d: d.processes,
        "nvmlDeviceGetMigMode": lambda d: answer(d.mig_mode),
        "nvmlDeviceGetMaxMigDeviceCount": lambda d: 7,
        "nvmlDeviceGetMigDeviceHandleByIndex": mig_handle,
        "nvmlDeviceGetAttributes": attributes,
    }
    for name, function in functions.items():
        setattr(fake, name, function)
    return fake


def _report(gpus: list[dict[str, Any]]) -> NodeReport:
    return parse_report(
        {
            "schema": 1,
            "time": 0,
            "host": "h",
            "source": "nvml",
            "note": "",
            "gpus": gpus,
            "containers": [],
            "facts": {"disk_free_bytes": None},
        }
    )


def _read(cards: Sequence[_Device], monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], str]:
    agent = load_agent_module()
    monkeypatch.setattr(agent, "pynvml", fake_nvml(cards))
    gpus, note = agent.read_nvml_gpus()
    return gpus, note


def test_the_agent_lists_a_mig_cards_devices_with_uuid_profile_memory_and_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slices = [
        _Device("MIG-aaaa", f"{A100} MIG 3g.40gb", 40192, 1200, processes=[_Process(77, 1100)]),
        None,  # an empty slot
        _Device("MIG-bbbb", f"{A100} MIG 1g.10gb", 9856, 13),
    ]
    card = _Device("GPU-card", A100, 81920, 1213, mig_mode=[1, 1], slots=slices)
    plain = _Device("GPU-plain", A100, 81920)
    gpus, note = _read([card, plain], monkeypatch)

    assert note == ""
    assert gpus[0]["mig_enabled"] is True
    assert [(d["uuid"], d["profile"], d["memory_total_mib"]) for d in gpus[0]["mig"]] == [
        ("MIG-aaaa", "3g.40gb", 40192),
        ("MIG-bbbb", "1g.10gb", 9856),
    ]
    assert gpus[0]["mig"][0]["processes"][0]["pid"] == 77
    assert "mig" not in gpus[1] and "mig_enabled" not in gpus[1]
    # What the head makes of it: the card, the plain card, then the slices after them.
    made = to_gpus(_report(gpus), gbatch_sessions=(), gbatch_containers=())
    assert [(g.index, g.uuid, g.type, g.mig, g.parent) for g in made] == [
        (0, "GPU-card", "a100", True, None),
        (1, "GPU-plain", "a100", False, None),
        (2, "MIG-aaaa", "a100_3g.40gb", False, 0),
        (3, "MIG-bbbb", "a100_1g.10gb", False, 0),
    ]
    assert made[2].foreign_processes == 1


def test_a_card_without_mig_or_that_cannot_say_reports_no_mig_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = _Device(
        "GPU-4090",
        "NVIDIA GeForce RTX 4090",
        24564,
        mig_mode=pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED),
    )
    gpus, note = _read([consumer, _Device("GPU-off", A100, 81920, mig_mode=[0, 1])], monkeypatch)
    assert note == ""
    assert all("mig" not in g for g in gpus)


def test_a_mig_devices_profile_comes_from_its_slices_when_its_name_lacks_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unnamed = _Device("MIG-cccc", "NVIDIA A100", 40192, attributes=_Attributes(3, 3, 40192))
    small_ci = _Device("MIG-dddd", "NVIDIA A100", 19968, attributes=_Attributes(2, 1, 19968))
    card = _Device("GPU-card", A100, 81920, mig_mode=[1, 1], slots=[unnamed, small_ci])
    gpus, _ = _read([card], monkeypatch)
    assert [d["profile"] for d in gpus[0]["mig"]] == ["3g.40gb", "1c.2g.20gb"]


def test_a_mig_device_that_cannot_be_read_is_left_out_and_named_in_the_note(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lost = pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
    good = _Device("MIG-eeee", f"{A100} MIG 1g.10gb", 9856)
    card = _Device("GPU-card", A100, 81920, mig_mode=[1, 1], slots=[lost, good])
    gpus, note = _read([card], monkeypatch)
    assert [d["uuid"] for d in gpus[0]["mig"]] == ["MIG-eeee"]
    assert note.startswith("GPU 0 MIG slot 0: ")


# -- the agent's simulation ---------------------------------------------------------------


def test_a_simulated_card_takes_a_mig_layout_with_memory_from_the_profiles(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gpus.json"
    layout = [
        {"profile": "3g.40gb"},
        {"profile": "1g.10gb", "processes": [{"pid": 999999, "used_memory_mib": 900}]},
        {"profile": "1g.10gb", "uuid": "MIG-fixed", "memory_used_mib": 5},
    ]
    path.write_text(json.dumps({"gpus": [{"name": A100, "mig": layout}, {}]}))
    report = run_agent("probe", "--simulation-file", str(path))

    card = report.gpus[0]
    assert card.mig_enabled and not report.gpus[1].mig_enabled
    assert [(d.profile, d.memory_total_mib, d.memory_used_mib) for d in card.mig] == [
        ("3g.40gb", 40960, 0),
        ("1g.10gb", 10240, 0),
        ("1g.10gb", 10240, 5),
    ]
    assert card.mig[0].uuid.startswith("MIG-sim-") and card.mig[2].uuid == "MIG-fixed"
    gpus = to_gpus(report, gbatch_sessions=(), gbatch_containers=())
    assert [(g.index, g.type, g.parent, g.foreign_processes) for g in gpus[2:]] == [
        (2, "a100_3g.40gb", 0, 0),
        (3, "a100_1g.10gb", 0, 1),
        (4, "a100_1g.10gb", 0, 0),
    ]


@pytest.mark.parametrize(
    ("mig", "named"),
    [
        ([{"profile": "9g.10gb"}], "gpus[0].mig[0].profile: expected a MIG profile"),
        ([{"profile": "1g.10gb"}, {}], "gpus[0].mig[1].profile: expected a MIG profile"),
        ([{"profile": "1g.10gb", "size": 1}], "gpus[0].mig[0]: unknown keys size"),
        ({"profile": "1g.10gb"}, "gpus[0].mig: expected a list"),
    ],
)
def test_a_bad_mig_layout_in_the_simulation_file_is_a_note_naming_the_field(
    tmp_path: Path, mig: object, named: str
) -> None:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"gpus": [{"name": A100, "mig": mig}]}))
    report = run_agent("probe", "--simulation-file", str(path))
    assert report.gpus == ()
    assert named in report.note


def test_simulate_gpus_takes_a_mig_layout_after_a_slash(tmp_path: Path) -> None:
    config = load_config(
        Paths(tmp_path), {"GBATCH_SIMULATE_GPUS": "a100-80gb:1/3g.40gb+2g.20gb+2x1g.10gb,t4"}
    )
    assert config.simulated_models == ("a100-80gb/3g.40gb+2g.20gb+1g.10gb+1g.10gb", "t4")
    path = tmp_path / "gpus.json"
    write_simulation_file(path, 2, config.simulated_models)
    written = json.loads(path.read_text())["gpus"]
    assert [m["profile"] for m in written[0]["mig"]] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert "mig" not in written[1]
    # Another layout is written again.
    write_simulation_file(path, 2, parse_simulated("a100-80gb/7x1g.10gb,t4"))
    assert len(json.loads(path.read_text())["gpus"][0]["mig"]) == 7


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("a100/9g.10gb", "'9g.10gb' is not a MIG profile"),
        ("rtx4090/1g.10gb", "'rtx4090' has no MIG mode"),
        ("a100/7g.80gb+1g.10gb", "the slices take 8 compute slices and 90 GB"),
        ("a100-40gb/3g.40gb+3g.40gb", "more than the card's 7 and 40 GB"),
    ],
)
def test_a_bad_simulated_mig_layout_is_refused_in_one_line(
    tmp_path: Path, text: str, error: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(Paths(tmp_path), {"GBATCH_SIMULATE_GPUS": text})
    message = str(raised.value)
    assert message.startswith(f"GBATCH_SIMULATE_GPUS: {text!r}") and error in message
    assert "\n" not in message


# -- the head's reading ------------------------------------------------------------------


def _card(index: int, mig: list[dict[str, Any]] | None, name: str = A100) -> dict[str, Any]:
    gpu: dict[str, Any] = {
        "index": index,
        "uuid": f"GPU-{index}",
        "name": name,
        "memory_total_mib": 81920,
        "memory_used_mib": 0,
        "utilization_pct": None,
        "simulated": True,
        "processes": [],
    }
    if mig is not None:
        gpu["mig_enabled"] = True
        gpu["mig"] = mig
    return gpu


def _slice(uuid: str, profile: str = "1g.10gb", used: int = 0, pids: Sequence[int] = ()) -> dict:
    return {
        "uuid": uuid,
        "profile": profile,
        "memory_total_mib": 10240,
        "memory_used_mib": used,
        "processes": [
            {"pid": pid, "sid": None, "used_memory_mib": 100, "container": None} for pid in pids
        ],
    }


@pytest.mark.parametrize(
    "uuid", ['MIG-a","device=all', "GPU-not-a-mig", "MIG-a,1", "MIG-" + "a" * 200, "MIG-x y"]
)
def test_a_report_whose_mig_uuid_could_name_other_devices_is_refused(uuid: str) -> None:
    with pytest.raises(ReportError, match=r"report.gpus\[0\].mig\[0\].uuid: expected a MIG"):
        _report([_card(0, [_slice(uuid)])])


def test_a_mig_uuid_that_repeats_a_cards_is_refused() -> None:
    with pytest.raises(ReportError, match=r"gpus\[1\].mig\[0\].uuid: 'MIG-0' repeats"):
        _report([_card(0, [_slice("MIG-0")]), _card(1, [_slice("MIG-0")])])


def test_a_slice_of_a_typeless_card_is_typed_by_its_profile_plus_me_as_dash() -> None:
    report = _report([_card(0, [_slice("MIG-a", "1g.10gb+me")], name="Simulated GPU")])
    gpus = to_gpus(report, gbatch_sessions=(), gbatch_containers=())
    assert [(g.type, g.profile) for g in gpus] == [("", ""), ("1g.10gb-me", "1g.10gb-me")]


def test_a_profile_alone_matches_its_slices_on_any_card_and_a_card_type_none() -> None:
    assert type_matches("a100_1g.10gb", "1g.10gb") and type_matches("h100_1g.10gb", "1g.10gb")
    assert type_matches("a100_1g.10gb", "a100_1g.10gb")
    assert not type_matches("a100_1g.10gb", "a100")
    assert not type_matches("a100_1g.10gb", "h100_1g.10gb")
    assert not type_matches("a100_2g.20gb", "1g.10gb")
    size = NodeSize("n", 1, None, None, (("a100", 1), ("a100_1g.10gb", 2), ("h100_1g.10gb", 1)))
    assert (size.gpus_of("1g.10gb"), size.gpus_of("a100_1g.10gb"), size.gpus_of("a100")) == (
        3,
        2,
        1,
    )
    assert size.holds(3, 1, 0, "1g.10gb") and not size.holds(2, 1, 0, "a100")


# -- the fleet: what the planner and the views see ----------------------------------------


class MigNode(FakeNode):
    """A reporting node whose GPUs are those `to_gpus` makes of `cards` (report dicts)."""

    runs_bare_processes = True

    def __init__(self, name: str, cards: list[dict[str, Any]]) -> None:
        super().__init__(name, Clocks())
        self.cards = cards

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        return to_gpus(_report(self.cards), gbatch_sessions=(), gbatch_containers=())

    def poke(self) -> None:
        pass


class Allocations:
    def __init__(self, jobs: Sequence[Job]) -> None:
        self.jobs = list(jobs)

    def jobs_in(self, states: object) -> list[Job]:
        return self.jobs

    def drained_nodes(self) -> dict[str, str]:
        return {}

    def drain_times(self) -> dict[str, float]:
        return {}


def _running(job_id: int, gpus: tuple[int, ...], node: str = "gpu01") -> Job:
    spec = JobSpec(name="x", command=("true",), gpus=len(gpus), time_limit=600)
    return Job(job_id, 0, "root", spec, JobState.RUNNING, 0.0, node=node, gpus=gpus, start_time=NOW)


def _fleet(node: MigNode, jobs: Sequence[Job] = ()) -> Fleet:
    clocks = node.clocks
    return Fleet(
        [node],
        Config(gpu_memory_threshold_mib=512),
        Allocations(jobs),  # type: ignore[arg-type]
        clock=lambda: clocks.wall,
        monotonic=lambda: clocks.mono,  # type: ignore[arg-type]
    )


# GPU 0: an A100 in MIG mode (slices 3: 3g.40gb, 4: 1g.10gb with a foreign process, 5:
# 1g.10gb held by job 7); GPU 1: a whole A100; GPU 2: a whole 4090.
MIXED = [
    _card(0, [_slice("MIG-a", "3g.40gb"), _slice("MIG-b", pids=[4242]), _slice("MIG-c")]),
    _card(1, None),
    _card(2, None, name="NVIDIA GeForce RTX 4090"),
]


def test_a_mig_card_is_never_free_its_slices_are_typed_gpus_and_whole_cards_count_alone() -> None:
    node = MigNode("gpu01", MIXED)
    held = _running(7, (5,))
    fleet = _fleet(node, [held])
    view = fleet.node_view(node, [held], {})

    assert view.gpus_total == 2  # the whole A100 and the 4090: what a job of no type gets
    assert view.free_gpus == (1, 2)
    assert view.free_slices == (3,)  # 4 has a foreign process, 5 is held
    assert dict(view.gpu_types) == {
        1: "a100",
        2: "rtx4090",
        3: "a100_3g.40gb",
        4: "a100_1g.10gb",
        5: "a100_1g.10gb",
    }
    assert view.releases == ()  # the slice job frees no whole card
    assert view.typed_releases == ((NOW + 600, "a100_1g.10gb", 1),)
    assert {"a100", "a100_1g.10gb"} <= view.features

    (info,) = fleet.node_infos()
    assert info.gpus_total == 5 and info.gpus_allocated == 1 and info.gpus_free == 3
    assert info.free_indices == frozenset(view.free_gpus) | set(view.free_slices)
    assert info.gpus_busy_outside == 1  # the slice with a foreign process; never the card
    assert [g.index for g in info.gpus_by_card] == [0, 3, 4, 5, 1, 2]
    (size,) = fleet.sizes_for(None) or []
    assert size.gpus == 2 and dict(size.gpu_types)["a100_1g.10gb"] == 2
    assert fleet.uuids(node, (1, 5)) == ("GPU-1", "MIG-c")


slice_states = st.lists(
    st.tuples(
        st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb"]),
        st.integers(0, 1),  # foreign processes
        st.sampled_from([0, 511, 512, 9000]),  # MiB in use
        st.booleans(),  # held by a gbatch job
    ),
    min_size=1,
    max_size=7,
)


@settings(max_examples=100, deadline=None)
@given(slice_states, st.booleans())
def test_sinfo_and_the_planner_agree_on_which_slices_are_free(
    states: list, whole_card_too: bool
) -> None:
    slices = [
        {**_slice(f"MIG-{i}", profile, used, [9000 + i] * foreign)}
        for i, (profile, foreign, used, _) in enumerate(states)
    ]
    cards = [_card(0, slices)] + ([_card(1, None)] if whole_card_too else [])
    first = len(cards)
    held = tuple(first + i for i, (_, _, _, h) in enumerate(states) if h)
    jobs = [_running(1, held)] if held else []
    node = MigNode("gpu01", cards)
    fleet = _fleet(node, jobs)
    view = fleet.node_view(node, jobs, {})
    (info,) = fleet.node_infos()
    assert 0 not in info.free_indices  # the card in MIG mode, never
    assert info.free_indices == frozenset(view.free_gpus) | set(view.free_slices)
    expected = {
        first + i
        for i, (_, foreign, used, h) in enumerate(states)
        if not h and not foreign and used < 512
    }
    assert set(view.free_slices) == expected
    assert info.gpus_allocated + info.gpus_free + info.gpus_busy_outside == info.gpus_total


# -- the planner ------------------------------------------------------------------------


def job(
    job_id: int, gpus: int = 1, gpu_type: str | None = None, time_limit: int | None = 3600
) -> Job:
    spec = JobSpec(
        name=f"j{job_id}", command=("true",), gpus=gpus, gpu_type=gpu_type, time_limit=time_limit
    )
    return Job(job_id, 1000, "alice", spec, JobState.PENDING, NOW - 10_000 + job_id)


def mig_node(
    name: str,
    cards: Sequence[str],
    slices: Sequence[tuple[str, int]] = (),
    busy: Sequence[int] = (),
    ends: float = math.inf,
) -> NodeView:
    """A node of whole cards of `cards`' types, then MIG slices (type, card index) after
    them; the GPUs `busy` are held by 1-GPU jobs ending at `ends`."""
    whole = range(len(cards))
    first = len(cards) + len({card for _, card in slices})
    sliced = range(first, first + len(slices))
    types = [*((i, t) for i, t in zip(whole, cards, strict=True) if t)]
    types += [(i, t) for i, (t, _) in zip(sliced, slices, strict=True)]
    kinds = dict(types)
    return NodeView(
        name,
        len(cards),
        tuple(i for i in whole if i not in busy),
        releases=tuple((ends, 1) for i in busy if i in whole),
        gpu_types=tuple(types),
        features=frozenset(kinds.values()),
        typed_releases=tuple((ends, kinds[i], 1) for i in busy if i in kinds),
        free_slices=tuple(i for i in sliced if i not in busy),
    )


def test_a_job_of_no_type_never_gets_a_slice_and_is_refused_where_only_slices_are() -> None:
    only_slices = mig_node("m", [], [("a100_1g.10gb", 0)] * 2)
    result = plan([job(1)], [only_slices], {}, NOW)
    assert result.assignments == () and result.reasons[1] == "BadConstraints"
    mixed = mig_node("m", ["rtx4090"], [("a100_1g.10gb", 1)])
    result = plan([job(1), job(2)], [mixed], {}, NOW)
    assert [(a.job_id, a.gpus) for a in result.assignments] == [(1, (0,))]
    assert result.reasons[2] == "Resources"


def test_a_profile_alone_gets_a_slice_of_it_on_any_card_and_an_exact_type_only_its_own() -> None:
    h100 = mig_node("h", [], [("h100_1g.10gb", 0)])
    a100 = mig_node("a", [], [("a100_3g.40gb", 0), ("a100_1g.10gb", 0)])
    result = plan(
        [job(1, 1, "1g.10gb"), job(2, 1, "1g.10gb"), job(3, 1, "a100_3g.40gb")],
        [h100, a100],
        {},
        NOW,
    )
    assert sorted((a.job_id, a.node, a.gpus) for a in result.assignments) == [
        (1, "a", (2,)),
        (2, "h", (1,)),
        (3, "a", (1,)),
    ]
    assert plan([job(1, 1, "h100_1g.10gb")], [a100], {}, NOW).reasons[1] == "BadConstraints"


def test_a_card_type_never_gets_its_slices_nor_its_card_in_mig_mode() -> None:
    node = mig_node("m", [], [("a100_1g.10gb", 0)] * 7)
    assert plan([job(1, 1, "a100")], [node], {}, NOW).reasons[1] == "BadConstraints"


def test_slice_jobs_backfill_around_a_reservation_for_whole_cards() -> None:
    # The whole card is busy for an hour: the 1-GPU job of no type reserves it; a slice
    # job without a time limit still starts on the reserved node (it takes no card).
    node = mig_node("m", ["a100"], [("a100_1g.10gb", 1)], busy=[0], ends=NOW + 3600)
    result = plan([job(1), job(2, 1, "1g.10gb", time_limit=None)], [node], {}, NOW)
    assert result.starts == {1: NOW + 3600}
    assert [(a.job_id, a.gpus) for a in result.assignments] == [(2, (2,))]


def test_a_reservation_for_a_profile_holds_against_an_exact_slice_type() -> None:
    # Both slices busy until +1h; job 1 asks two `1g.10gb` slices and reserves; job 2
    # asks one `a100_1g.10gb` (the same slices) without a time limit: it must not start
    # when one comes free early... here none is free, so it waits Priority.
    node = mig_node("m", [], [("a100_1g.10gb", 0)] * 2, busy=[1], ends=NOW + 3600)
    result = plan([job(1, 2, "1g.10gb"), job(2, 1, "a100_1g.10gb", None)], [node], {}, NOW)
    assert result.starts == {1: NOW + 3600}
    assert result.assignments == () and result.reasons[2] == "Priority"


KINDS = ["a100_1g.10gb", "a100_3g.40gb", "h100_1g.10gb"]
ASKED = [None, "a100", "rtx4090", "1g.10gb", "3g.40gb", *KINDS]


@st.composite
def mig_fleets(draw: st.DrawFn) -> list[NodeView]:
    nodes = []
    for n in range(draw(st.integers(1, 3))):
        cards = draw(st.lists(st.sampled_from(["a100", "rtx4090", ""]), max_size=3))
        slices = draw(st.lists(st.sampled_from(KINDS), max_size=5))
        total = len(cards) + (1 if slices else 0) + len(slices)
        everything = [i for i in range(total) if i != len(cards) or not slices]
        busy = draw(st.lists(st.sampled_from(everything), unique=True)) if everything else []
        ends = draw(st.sampled_from([NOW + 60, NOW + 7200, math.inf]))
        nodes.append(mig_node(f"n{n}", cards, [(k, len(cards)) for k in slices], busy, ends))
    return nodes


@settings(max_examples=300, deadline=None)
@given(
    mig_fleets(),
    st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from(ASKED), st.sampled_from([60, 7200, None])),
        min_size=1,
        max_size=12,
    ),
)
def test_no_gpu_twice_whole_cards_for_no_type_and_matching_slices_for_a_type(
    nodes: list[NodeView], asks: list[tuple[int, str | None, int | None]]
) -> None:
    jobs = [job(i + 1, gpus, kind, limit) for i, (gpus, kind, limit) in enumerate(asks)]
    result = plan(jobs, nodes, {}, NOW)
    by_name = {node.name: node for node in nodes}
    by_id = {j.id: j for j in jobs}
    taken: set[tuple[str, int]] = set()
    for assignment in result.assignments:
        node = by_name[assignment.node]
        spec = by_id[assignment.job_id].spec
        assert len(assignment.gpus) == spec.gpus
        kinds = dict(node.gpu_types)
        for gpu in assignment.gpus:
            assert (node.name, gpu) not in taken
            taken.add((node.name, gpu))
            if spec.gpu_type is None:
                assert gpu in node.free_gpus  # a whole card, never a slice
            else:
                assert gpu in node.free_gpus or gpu in node.free_slices
                assert type_matches(kinds.get(gpu, ""), spec.gpu_type)


# -- the run: its devices --------------------------------------------------------------


def test_a_slice_is_named_by_its_mig_uuid_and_a_card_by_its_index() -> None:
    assert visible_devices((0, 5), ("GPU-0", "MIG-c")) == [0, "MIG-c"]
    assert visible_devices((0, 5), ()) == [0, 5]  # a run from before UUIDs were kept
    assert gpus_option_value(["MIG-c"]) == '"device=MIG-c"'
    with pytest.raises(ValueError, match="is not a MIG device's UUID"):
        gpus_option_value(['MIG-c","device=all'])
    spec = JobSpec(name="j", command=("true",), image="busybox", gpus=1)
    argv = docker_run_argv(
        job_id=1, attempt=1, user="alice", spec=spec, gpus=["MIG-c"], env_file=None
    )
    assert argv[argv.index("--gpus") + 1] == '"device=MIG-c"'


# -- the views -------------------------------------------------------------------------


def _info() -> NodeInfo:
    node = MigNode("gpu01", MIXED)
    held = _running(7, (5,))
    (info,) = _fleet(node, [held]).node_infos()
    return info


def test_sinfo_scontrol_and_sinfo_gpus_show_slices_by_type_with_their_card() -> None:
    from gbatch.render.scontrol import format_node_details
    from gbatch.render.sinfo import format_sinfo_gpus, format_sinfo_json, sinfo_gres

    info = _info()
    assert sinfo_gres(info) == "gpu:a100:1,gpu:rtx4090:1,gpu:a100_3g.40gb:1,gpu:a100_1g.10gb:2"
    details = format_node_details(info)
    assert (
        "Gres=gpu:a100:1,gpu:rtx4090:1,gpu:a100_3g.40gb:1,gpu:a100_1g.10gb:2 "
        "GresUsed=gpu:a100:0,gpu:rtx4090:0,gpu:a100_3g.40gb:0,gpu:a100_1g.10gb:1"
    ) in details
    assert f"GpuType=2x {A100}" not in details
    assert f"{A100} MIG 3g.40gb+2x1g.10gb" in details
    line = format_sinfo_gpus([info], header=False)
    assert line.split()[3:7] == ["5", "1", "3", "1"]  # GPUS ALLOC FREE BUSY
    gpus = json.loads(format_sinfo_json([info]))["nodes"][0]["gpus"]
    shown = [(g["index"], g.get("mig"), g.get("parent"), g.get("profile"), g["free"]) for g in gpus]
    assert shown[:3] == [
        (0, True, None, None, False),
        (3, None, 0, "3g.40gb", True),
        (4, None, 0, "1g.10gb", False),
    ]
    assert "mig" not in gpus[4] and "parent" not in gpus[4]  # a whole card: as before MIG


def test_the_tui_metrics_and_web_page_show_slices_under_their_card() -> None:
    from gbatch.api.metrics import _nodes_text
    from gbatch.api.web import _by_card
    from gbatch.protocol.codec import node_from_wire, node_to_wire
    from gbatch.tui.rows import GpuUse, node_rows

    info = _info()
    wire = node_to_wire(info)
    assert node_from_wire(wire) == info
    rows = node_rows([info], {7: "root"})
    assert [(row.cells[0].split()[0], row.use) for row in rows[1:4]] == [
        ("gpu0", GpuUse.MIG),
        ("gpu3", GpuUse.FREE),
        ("gpu4", GpuUse.FOREIGN),
    ]
    assert rows[2].cells[0].startswith("    gpu3 a100_3g.40gb: MIG 3g.40gb")
    text = _nodes_text([wire], {})
    assert 'gpu_type="a100_1g.10gb",mig_parent="0",mig_profile="1g.10gb",model_name=' in text
    assert 'gpu_type="a100",mig_mode="enabled",model_name=' in text
    assert 'gbatch_node_gpus{node="gpu01"} 5.0' in text
    assert [g["index"] for g in _by_card(wire)["gpus"]] == [0, 3, 4, 5, 1, 2]


def test_the_agent_file_still_runs_on_its_own() -> None:
    result = subprocess.run(
        [sys.executable, str(AGENT), "--version"], capture_output=True, text=True, check=True
    )
    assert "schema 1" in result.stdout


def test_node_state_counts_slices_not_their_card() -> None:
    info = _info()
    assert info.state is NodeState.MIXED


def test_a_slice_jobs_gpu_memory_is_sampled_for_seff_and_sacct() -> None:
    import threading

    from gbatch.head.loop.gpus import GpuSampler
    from gbatch.head.store.usage import RunningGpus

    class Samples:
        def __init__(self) -> None:
            self.added: list[tuple[int, int, Any]] = []

        def running_gpus(self) -> list[RunningGpus]:
            return [RunningGpus(7, 1, "gpu01", (1,), None)]  # the 3g.40gb slice, after its card

        def add_gpu_samples(self, samples: list[tuple[int, int, Any]]) -> None:
            self.added.extend(samples)

        def jobs_in(self, states: object) -> list[Job]:
            return []

    cards = [_card(0, [_slice("MIG-a", "3g.40gb", used=2048), _slice("MIG-b")])]
    node = MigNode("gpu01", cards)
    store = Samples()
    sampler = GpuSampler(store, _fleet(node), Config(), threading.Event())  # type: ignore[arg-type]
    sampler.sample(NOW)
    ((job_id, attempt, usage),) = store.added
    assert (job_id, attempt, usage.mem_max_mib, usage.mem_total_mib) == (7, 1, 2048, 10240)
    assert usage.util_samples == 0  # NVML tells no utilisation per MIG device


def test_a_slice_jobs_own_processes_count_against_its_gpu_memory_budget() -> None:
    """run_gpu_memory reads a slice's processes by the number the job holds it by (after
    the cards), not the card's: a budget on a slice job was measured as nothing."""
    from gbatch.nodes.report import RunOwner, processes_by_gpu, run_gpu_memory

    report = _report(
        [_card(0, [_slice("MIG-a", pids=[41]), _slice("MIG-b", pids=[42, 43])]), _card(1, None)]
    )
    assert sorted(processes_by_gpu(report)) == [0, 1, 2, 3]  # cards, then card 0's slices
    assert run_gpu_memory(report, (3,), RunOwner(pids=frozenset({42, 43}))) == 200
    assert run_gpu_memory(report, (2,), RunOwner(pids=frozenset({42}))) is None


def test_with_every_gpu_shareable_a_mig_card_and_its_slices_take_no_shares() -> None:
    """share_gpus: true on a node with a card in MIG mode: the whole cards take shares, the
    card in MIG mode (never handed out) and its slices (each handed out whole) do not."""
    from gbatch.core.shares import Sharing

    node = MigNode("gpu01", MIXED)
    fleet = _fleet(node)
    fleet.sharing = {"gpu01": Sharing(True)}
    view = fleet.node_view(node, [], {})
    assert [index for index, _ in view.shareable] == [1, 2]
    assert [index for index, _, _ in view.share_room] == [1, 2]
