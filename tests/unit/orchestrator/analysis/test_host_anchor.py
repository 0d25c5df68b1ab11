"""Each host against the fleet, judged also against an anchor timed beside each case on its GPU
(`diff RUN --across-hosts --anchor`, hosteffect.host_effects): a host whose kernel is 2% slower while
each host's GPU state moves its cases by ±4% is named only against the anchor; a fleet alike names nobody;
an anchored point outside the host's time interval judges nothing; a GPU slower in everything stays named
on its time; a host whose anchor may have moved itself (another torch) gets no anchored estimate."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from orchestrator.analysis import hosteffect
from orchestrator.analysis.diff import Side
from orchestrator.analysis.hosteffect import host_effects
from orchestrator.runs.slots import SlotData
from worker.contract.schema import TimingOptions

from .test_anchor import record, slot_of

THRESHOLD = 0.015
MS = (16, 32, 48, 64, 96, 128, 192, 256)  # x 2 backends (the anchor and mm): 16 cases per host
HOSTS = ("h1", "h2", "h3", "h4")


def slot(host: str, ms, state, kernel, anchor, torch: str) -> SlotData:
    """One host's slot: at each M the anchor (torch-bf16) and mm timed beside it in 3 rounds, the GPU
    state `state[m]` moving both, the anchor by `anchor` more and mm by `kernel[m]` more."""
    opts = TimingOptions()
    recs = []
    for m in ms:
        base = [100.0 * state[m] * anchor * (1 + j) for j in (0.0, 0.002, -0.002)]
        recs.append(record("torch-bf16", base, opts, m))
        recs.append(record("mm", [us * kernel[m] / anchor for us in base], opts, m))
    return slot_of(host, recs, torch)


def fleet(
    *,
    seed: int = 3,
    state_sd: float = 0.04,
    kernel: dict | None = None,
    gpu: dict | None = None,
    anchor: dict | None = None,
    torch: dict | None = None,
    names: tuple[str, ...] = HOSTS,
) -> Side:
    """A run of HOSTS, each host's GPU state moving each case by a factor uniform within ±state_sd (both
    kernels of a shape alike), each kernel's ratio to the anchor by ±0.3% more. Per host: `kernel` (mm's
    own effect), `gpu` (both kernels' effect: a slower GPU), `anchor` (the anchor's alone), `torch`."""
    rng = np.random.default_rng(seed)
    kernel, gpu, anchor, torch = kernel or {}, gpu or {}, anchor or {}, torch or {}
    slots = []
    for h in names:
        state = {m: gpu.get(h, 1.0) * (1 + rng.uniform(-state_sd, state_sd)) for m in MS}
        own = {m: kernel.get(h, 1.0) * (1 + rng.uniform(-0.003, 0.003)) for m in MS}
        slots.append(slot(h, MS, state, own, anchor.get(h, 1.0), torch.get(h, "2.11.0")))
    store = SimpleNamespace(dir=None, manifest=lambda: SimpleNamespace(worker_sha256="w1"))
    return Side(store=store, slots=slots, label="fleet")


def hosts(side: Side, anchor: str | None = "torch-bf16") -> dict:
    return {h.slot: h for h in host_effects(side, THRESHOLD, anchor).hosts}


def test_a_kernel_2pct_slower_the_time_cannot_see_is_named_against_the_anchor():
    side = fleet(kernel={"h2": 1.02})
    on_time = hosts(side, None)
    assert not any(h.named for h in on_time.values())  # the GPU state's ±4% hides it
    assert on_time["h2"].effect.low < 1 < on_time["h2"].effect.high
    found = hosts(side)
    h2 = found["h2"]
    assert h2.verdict == "SLOWER" and h2.judged_on == "anchor"
    assert h2.anchored.ratio == pytest.approx(1.02, abs=0.003) and h2.anchored.cases == len(MS)
    assert h2.anchored.low > 1 and h2.anchor_agrees
    assert [h.slot for h in found.values() if h.named] == ["h2"]
    assert all(h.judged_on == "time" and h.anchored is not None for s, h in found.items() if s != "h2")


def test_an_identical_fleet_names_no_host_against_the_anchor():
    # mm takes 1.3 times the anchor on every host: a host is judged on its ratio against the fleet's
    found = hosts(fleet(kernel=dict.fromkeys(HOSTS, 1.3)))
    assert not any(h.named for h in found.values())
    assert all(h.anchored is not None and abs(h.anchored.ratio - 1) < 0.003 for h in found.values())
    assert all(hosteffect.host_verdict(h.anchored, THRESHOLD) == "SAME" for h in found.values())


def test_an_anchored_point_outside_the_host_s_time_interval_judges_nothing():
    # h4's anchor ran 2.5% faster while its kernel held: their ratio says +2.5%, the kernel's own times
    # 1.000: the two kernels answered its GPU differently (its time over all cases, the anchor's among
    # them, about -1.2%: not named)
    side = fleet(state_sd=0.002, anchor={"h4": 0.975})
    h4 = hosts(side)["h4"]
    assert hosteffect.host_verdict(h4.anchored, THRESHOLD) == "SLOWER" and h4.anchored.low > 1 + THRESHOLD
    assert h4.anchor_agrees is False
    assert not h4.named and h4.judged_on == "time"


def test_a_gpu_slower_in_everything_stays_named_on_its_time():
    # both kernels 5% slower on h4: the anchor moved with the kernel, whose ratio to it held
    h4 = hosts(fleet(gpu={"h4": 1.05}))["h4"]
    assert h4.verdict == "SLOWER" and h4.judged_on == "time" and h4.effect.low > 1
    assert h4.anchored.ratio == pytest.approx(1.0, abs=0.003)


def test_a_host_named_on_its_time_is_not_judged_again_on_the_anchor():
    # h4's GPU 2.5% slower in everything and its kernel 2% more: named on its time, whose interval also
    # holds the anchored 1.02; the verdict stays the time's
    h4 = hosts(fleet(seed=5, state_sd=0.06, gpu={"h4": 1.025}, kernel={"h4": 1.02}))["h4"]
    assert h4.verdict == "SLOWER" and h4.judged_on == "time"
    assert hosteffect.host_verdict(h4.anchored, THRESHOLD) == "SLOWER"
    assert h4.anchor_agrees


@pytest.mark.parametrize("fact", ["torch", "driver", "worker_version"])
def test_a_host_whose_anchor_may_have_moved_gets_no_anchored_estimate(fact):
    side = fleet(kernel={"h4": 1.02})
    h4_facts = side.slots[-1].facts
    side.slots[-1].facts = h4_facts.model_copy(update={fact: "other"})
    found = hosts(side)
    assert found["h4"].anchored is None and not found["h4"].named
    assert all(found[h].anchored is not None for h in ("h1", "h2", "h3"))


def test_in_a_fleet_of_three_with_one_anchor_apart_the_other_two_are_still_anchored():
    side = fleet(kernel={"h2": 1.03}, names=("h1", "h2", "h3"))
    side.slots[-1].facts = side.slots[-1].facts.model_copy(update={"torch": "other"})
    found = hosts(side)
    assert found["h3"].anchored is None
    # two hosts split their ratio between them, as a fleet of two does on its time
    assert found["h2"].anchored.ratio == pytest.approx(1.015, abs=0.003) and found["h2"].anchored.cases == len(MS)
    assert found["h1"].anchored.ratio == pytest.approx(1 / 1.015, abs=0.003)


def test_the_table_the_line_and_the_json_say_what_the_host_was_judged_against():
    from orchestrator.views.hosts import host_effect_section, named_line

    effects = host_effects(fleet(kernel={"h2": 1.02}), THRESHOLD, "torch-bf16")
    section = host_effect_section(effects)
    assert "against torch-bf16" in section.headers
    rows = {r[0]: r for r in section.rows}
    assert "SLOWER (judged against torch-bf16)" in rows["h2"] and rows["h2"][4].startswith("1.019 [")
    (h2,) = effects.named
    assert "judged against torch-bf16 1.019 [" in named_line(h2, effects.anchor)
    doc = effects.as_dict()
    assert doc["anchor"] == "torch-bf16"
    (d2,) = [h for h in doc["hosts"] if h["slot"] == "h2"]
    assert d2["judged_on"] == "anchor" and d2["anchored"]["cases"] == len(MS) and d2["anchor_agrees"] is True
    # without an anchor: no column, nothing anchored
    plain = host_effects(fleet(kernel={"h2": 1.02}), THRESHOLD)
    assert "against torch-bf16" not in host_effect_section(plain).headers
    assert all(h.anchored is None and h.anchor_agrees is None for h in plain.hosts)


def test_the_anchored_interval_holds_the_spread_one_process_shares():
    # cases in perfect agreement: the interval by t over them is nil, the process spread is not
    e = hosteffect.estimate([0.02] * 8, hosteffect.ANCHOR_PROCESS_SD)
    half = (math.log(e.high) - math.log(e.low)) / 2
    assert half == pytest.approx(hosteffect.Z95 * hosteffect.ANCHOR_PROCESS_SD, rel=1e-6)


@pytest.mark.parametrize(("h2_mhz", "work_vetoes"), [(1500.0, True), (1450.0, False)])
def test_a_host_s_work_vetoes_its_anchor_only_where_the_work_may_judge_it(monkeypatch, h2_mhz, work_vetoes):
    """As for a case (diff.anchor_agrees): where h2's clock is the fleet's, its work may judge it and must
    hold the anchored point; where its clock is 3.3% lower and its time did not follow, its work is no
    measure of the kernel's cycles and vetoes nothing."""
    side = fleet(kernel={"h2": 1.02})
    for s in side.slots:
        for _, rec in s.records.values():
            for r in rec.timing.rounds:
                r.sm_clock_stream_mhz = h2_mhz if s.slot == "h2" else 1500.0
    seen = {}
    agrees = hosteffect._anchor_agrees

    def spy(anchored, time, work):
        seen[id(anchored)] = work
        return agrees(anchored, time, work)

    monkeypatch.setattr(hosteffect, "_anchor_agrees", spy)
    h2 = hosts(side)["h2"]
    assert h2.work is not None and h2.anchored is not None
    assert (seen[id(h2.anchored)] is not None) == work_vetoes
