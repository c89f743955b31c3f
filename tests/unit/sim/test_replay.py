"""Live replay: a simulation run in slices of simulated time, reporting what the router observed."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from backend.samples.schemas import TrainingEntry
from backend.scheduling.types import TransferConfig
from backend.sim.engine import SimConfig, SimResult, Simulation
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.replay import (
    DEFAULT_SLO,
    Observation,
    ReplaySpec,
    TraceReplay,
)
from backend.sim.routers import make_policy
from backend.sim.traces import load_trace

H100 = "h100-llama2-7b"
FABRIC = TransferConfig(kv_bytes_per_token=load_profile(H100).kv_bytes_per_token)
# 30 s of Azure's conversation trace at four times its rate: about 500 requests on two H100s.
SPEC = ReplaySpec(
    trace="azure-conv", gpu=H100, pods=2, load=4.0, duration_s=30.0, policy="least-request", seed=5
)


def _simulation(policy: str, n: int = 150, seed: int = 3) -> Simulation:
    pool = build_pool(4, "a100-llama3-8b")
    return Simulation(
        load_trace("mooncake-conversation").head(n).scaled(1.5),
        pool,
        make_policy(policy, TransferConfig(), seed),
        SimConfig(DEFAULT_SLO, seed=seed),
    )


def _same(a: SimResult, b: SimResult) -> None:
    for name in ("first_token", "done", "pod", "hit_tokens", "predicted_ttft_ms", "shed"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.events == b.events


@pytest.mark.parametrize("policy", ["least-request", "headroom"])
def test_running_in_slices_gives_exactly_the_results_of_one_run(policy: str) -> None:
    whole = _simulation(policy).run()
    sliced = _simulation(policy)
    t, more = 0.0, True
    while more:
        t += 0.37  # cuts anywhere: mid-iteration, mid-transfer, between retrains
        more = sliced.run_until(t)
    _same(whole, sliced._result(0.0, sliced._events))
    assert not sliced.run_until(t + 100.0)  # nothing left, and nothing happens


def _lap(replay: TraceReplay, slice_s: float = 1.0) -> tuple[list[Observation], list[float]]:
    """Advance slice by slice until the current lap is over; its observations, and the end of
    the slice that delivered each one (simulated seconds since the lap started)."""
    lap = replay.lap
    out: list[Observation] = []
    ends: list[float] = []
    t = 0.0
    while replay.lap == lap:
        t += slice_s
        for o in replay.advance(slice_s):
            if o.lap == lap:
                out.append(o)
                ends.append(t)
    return out, ends


def test_observations_are_the_trace_replayed_slice_by_slice() -> None:
    replay = TraceReplay(SPEC)
    trace = load_trace("azure-conv").scaled(4.0).window(0.0, 30.0)
    assert np.array_equal(replay.trace.input_tokens, trace.input_tokens)  # nothing clipped
    observations, ends = _lap(replay)
    # The same trace through the same pool, policy and seed in one plain run.
    plain = Simulation(
        trace,
        build_pool(2, H100),
        make_policy("least-request", FABRIC, 5),
        SimConfig(DEFAULT_SLO, seed=5, transfer=FABRIC),
    ).run()
    ttft = [o for o in observations if o.target == "ttft"]
    tpot = [o for o in observations if o.target == "tpot"]
    # Every request of the trace once, with its own prompt, in the order of the trace.
    assert sorted(o.rid for o in ttft) == list(range(len(trace)))
    by_rid = sorted(ttft, key=lambda o: o.rid)
    assert [int(o.row[1]) for o in by_rid] == trace.input_tokens.tolist()
    assert [o.features()["input_token_length"] for o in by_rid] == trace.input_tokens.tolist()
    assert sorted(o.rid for o in tpot) == np.flatnonzero(trace.output_tokens > 1).tolist()
    # Labels are what the simulation measured, on the pod it routed to.
    for o in ttft:
        assert o.label_ms == pytest.approx(plain.ttft_ms[o.rid], rel=1e-12)
        assert o.pod == f"pod-{plain.pod[o.rid]}"
    for o in tpot:
        assert o.label_ms == pytest.approx(plain.tpot_ms[o.rid], rel=1e-12)
        assert o.row is next(t for t in ttft if t.rid == o.rid).row  # same pod without P/D
    # Each observation came with the slice in which it happened, in the order it happened.
    times = [o.time_s for o in observations]
    assert times == sorted(times)
    assert all(end - 1.0 < o.time_s <= end for o, end in zip(observations, ends, strict=True))
    per_slice = np.bincount(np.asarray(ends, dtype=int))
    assert (per_slice[1:30] > 0).all()  # samples in every second of the trace
    # The first request found an idle pool; later ones saw load.
    first = by_rid[0]
    assert (first.row[0], first.row[2], first.row[3]) == (0.0, 0.0, 0.0)
    assert max(o.row[3] for o in ttft) > 10  # requests running on the pod
    assert max(o.row[0] for o in ttft) > 0.1  # KV cache in use
    assert max(o.row[4] for o in ttft) > 0.5  # prefix hits (the tenants' system prompts)


def test_the_replay_loops_with_the_next_seed() -> None:
    replay = TraceReplay(SPEC)
    observations: list[Observation] = []
    slices = 0
    while replay.lap < 2:
        observations += replay.advance(1.0)
        slices += 1
    first, second = ([o for o in observations if o.lap == lap] for lap in (0, 1))
    for lap in (first, second):
        ttft = sorted((o for o in lap if o.target == "ttft"), key=lambda o: o.rid)
        assert [int(o.row[1]) for o in ttft] == replay.trace.input_tokens.tolist()
    # Another seed, other routing: not a copy of the first lap.
    assert [o.pod for o in first] != [o.pod for o in second]
    # Simulated time runs on across laps, every slice of it accounted for.
    assert replay.elapsed_s == pytest.approx(slices * 1.0)
    assert replay.elapsed_s > 2 * 30.0


def test_a_lap_ending_inside_a_slice_hands_the_rest_to_the_next() -> None:
    replay = TraceReplay(SPEC)
    observations = replay.advance(50.0)  # the 30 s lap and its drain, then the next lap
    assert replay.lap == 1
    assert replay.elapsed_s == pytest.approx(50.0)
    assert 0.0 < replay.now < 50.0 - 30.0
    assert {o.lap for o in observations} == {0, 1}
    # On the replay's one clock the slice's observations run on across the lap's end, within
    # the slice (what the demo stamps them with).
    on_clock = [replay.elapsed_at(o) for o in observations]
    assert on_clock == sorted(on_clock) and on_clock[0] > 0.0 and on_clock[-1] <= 50.0
    ends = max(o.time_s for o in observations if o.lap == 0)
    assert min(replay.elapsed_at(o) for o in observations if o.lap == 1) >= ends
    # Many laps in one slice: each starts where the previous one ended.
    many = replay.advance(200.0)
    assert replay.lap > 5
    assert replay.elapsed_s == pytest.approx(250.0)
    on_clock = [replay.elapsed_at(o) for o in many]
    assert on_clock == sorted(on_clock) and on_clock[0] > 50.0 and on_clock[-1] <= 250.0


def test_observations_are_wire_entries() -> None:
    replay = TraceReplay(SPEC)
    observations = replay.advance(20.0)
    ttft = next(o for o in observations if o.target == "ttft")
    tpot = next(o for o in observations if o.target == "tpot")
    a = TrainingEntry.model_validate(ttft.entry())
    assert (a.actual_ttft_ms, a.actual_tpot_ms) == (ttft.label_ms, 0.0)
    assert a.input_token_length == int(ttft.row[1]) and a.num_tokens_generated == 0
    assert a.pod == ttft.pod and a.pod_type == "" and a.predicted_ttft_ms is None
    b = TrainingEntry.model_validate(tpot.entry())
    assert (b.actual_ttft_ms, b.actual_tpot_ms) == (0.0, tpot.label_ms)
    assert b.num_tokens_generated == 1


def test_a_predicting_router_reports_its_predictions() -> None:
    spec = ReplaySpec(
        trace="azure-conv", gpu=H100, pods=2, load=4.0, duration_s=60.0, policy="headroom"
    )
    observations = TraceReplay(spec).advance(40.0)
    predicted = [o.predicted_ms for o in observations if o.target == "ttft"]
    # Heuristic fallback until the router's first model (10 simulated seconds), then predictions.
    assert math.isnan(predicted[0]) and math.isfinite(predicted[-1])
    entry = TrainingEntry.model_validate(
        next(o for o in observations if math.isfinite(o.predicted_ms)).entry()
    )
    assert (entry.predicted_ttft_ms or entry.predicted_tpot_ms or 0.0) > 0


def test_observations_carry_the_floor_when_sampled_and_it_only_observes() -> None:
    spec = ReplaySpec(
        trace="azure-conv", gpu=H100, pods=2, load=4.0, duration_s=90.0, seed=5, floor_every=5
    )
    plain = TraceReplay(dataclasses.replace(spec, floor_every=0)).advance(90.0)
    sampled = TraceReplay(spec).advance(90.0)
    # The copy of the pod runs aside: the replay itself is unchanged, and so is what the EPP
    # is sent (the floor is not a wire field).
    assert [(o.rid, o.target, o.label_ms) for o in sampled] == [
        (o.rid, o.target, o.label_ms) for o in plain
    ]
    assert all(math.isnan(o.floor_ms) for o in plain)
    assert [o.entry() for o in sampled] == [o.entry() for o in plain]
    ttft = [o for o in sampled if o.target == "ttft"]
    with_floor = [o for o in ttft if math.isfinite(o.floor_ms)]
    # Every 5th request dispatched after the lap's first minute.
    late = [o for o in ttft if o.time_s - o.label_ms / 1000.0 >= SimConfig.floor_warmup_s]
    assert all(o in late for o in with_floor)
    assert 0.15 * len(late) < len(with_floor) < 0.25 * len(late)
    # No later arrivals and no step noise: the copy is never much slower than the pod was.
    ratio = np.array([o.floor_ms / o.label_ms for o in with_floor])
    assert np.median(ratio) <= 1.0 and ratio.max() < 1.5
