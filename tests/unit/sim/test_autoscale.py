"""The autoscaling loop: pods start after their model load, leave after draining, stay in bounds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import SimpleNamespace

import numpy as np
import numpy.typing as npt
import pytest

from backend.policies.schemas import PolicySpec
from backend.scheduling.record import LevelRecord
from backend.scheduling.types import Candidate, TransferConfig
from backend.settings import CapacitySettings
from backend.sim.autoscale import (
    ARRIVAL_WINDOW_S,
    PROFILE_SIZE,
    ROLES,
    AutoscaleResult,
    Combined,
    DesiredReplicas,
    Fixed,
    Fleet,
    Foresight,
    Observation,
    PodGauges,
    PredictedSaturation,
    Probe,
    QueueHpa,
    Scaler,
    WvaSaturation,
    _candidates,
    ramp,
    run_autoscaled,
    step,
    warp,
)
from backend.sim.engine import SimConfig, Simulation
from backend.sim.fromsamples import SampleRow, estimate_replicas, record, rows_from_observations
from backend.sim.gpu import load_profile
from backend.sim.pool import PodSpec, build_pool
from backend.sim.routers import OURS, make_policy
from backend.sim.routers.predicted import PredictedLatency
from backend.sim.traces import Trace, load_trace
from backend.sim.view import Slo

from .helpers import enqueue_at, view

SLO = Slo(2000.0, 100.0)


def _never_busy(_: int) -> bool:
    return False


def test_a_pod_takes_traffic_only_after_its_startup_delay() -> None:
    fleet = Fleet(slots=6, min_pods=1, max_pods=4, startup_s=90.0, initial=1)
    assert fleet.scale_to(3, now=10.0, load=lambda p: 0) == 3
    assert fleet.pods("ready") == [0]
    assert fleet.pods("starting") == [1, 2]
    assert fleet.replicas == 3
    fleet.advance(99.9, _never_busy)
    assert fleet.pods("ready") == [0]
    fleet.advance(100.0, _never_busy)
    assert fleet.pods("ready") == [0, 1, 2]
    # A starting pod costs GPU time: 1 pod for 100 s, 2 more for 90 s.
    assert fleet.gpu_hours(100.0) == pytest.approx((100 + 2 * 90) / 3600)


def test_a_removed_pod_drains_before_it_is_off() -> None:
    fleet = Fleet(slots=4, min_pods=1, max_pods=3, startup_s=0.0, initial=3)
    work = {0: 5, 1: 1, 2: 3}
    fleet.scale_to(2, now=0.0, load=lambda p: work[p])
    # The pod holding the least work drains; it keeps its GPU until it is idle.
    assert fleet.pods("draining") == [1]
    assert fleet.replicas == 2
    fleet.advance(30.0, lambda p: p == 1)
    assert fleet.pods("draining") == [1]
    fleet.advance(60.0, _never_busy)
    assert fleet.pods("draining") == [] and fleet.pods("off") == [1, 3]
    assert fleet.gpu_hours(60.0) == pytest.approx((2 * 60 + 60) / 3600)


def test_removing_cancels_starting_pods_first_and_counts_stay_in_bounds() -> None:
    fleet = Fleet(slots=8, min_pods=2, max_pods=4, startup_s=60.0, initial=2)
    assert fleet.scale_to(100, now=0.0, load=lambda p: 0) == 4
    assert fleet.replicas == 4 and len(fleet.pods("starting")) == 2
    assert fleet.scale_to(0, now=10.0, load=lambda p: 0) == 2
    assert fleet.pods("starting") == [] and fleet.pods("draining") == []
    assert fleet.pods("ready") == [0, 1]
    with pytest.raises(ValueError):
        Fleet(slots=8, min_pods=3, max_pods=2, startup_s=0.0, initial=2)


def _obs(gauges: dict[int, PodGauges], replicas: int, starting: int = 0) -> Observation:
    def no_level(pods: object, factor: float) -> float | None:
        return None

    return Observation(0.0, replicas, starting, gauges, no_level, lambda s: None)  # type: ignore[arg-type,return-value]


def test_queue_hpa_follows_the_hpa_formula_with_its_tolerance() -> None:
    hpa = QueueHpa(target=5.0)
    two = {0: PodGauges(0.5, 15, 10), 1: PodGauges(0.5, 15, 10)}
    assert hpa.desired(_obs(two, 2)) == 6  # ceil(2 x (30 / 2) / 5)
    near = {0: PodGauges(0.5, 5, 10), 1: PodGauges(0.5, 5, 10)}
    assert hpa.desired(_obs(near, 2)) == 2  # within 10 %: no change
    idle = {0: PodGauges(0.1, 0, 1), 1: PodGauges(0.1, 0, 1)}
    assert hpa.desired(_obs(idle, 2)) == 0  # the loop clamps to min_pods


def test_wva_scales_up_on_spare_capacity_and_down_only_when_safe() -> None:
    busy = {0: PodGauges(0.75, 1, 20), 1: PodGauges(0.75, 1, 20)}
    assert WvaSaturation().desired(_obs(busy, 2)) == 3  # spare KV 0.05 < 0.10
    assert WvaSaturation().desired(_obs(busy, 3, starting=1)) == 3  # pending: no cascade
    idle = {0: PodGauges(0.1, 0, 2), 1: PodGauges(0.1, 0, 2), 2: PodGauges(0.1, 0, 2)}
    assert WvaSaturation().desired(_obs(idle, 3)) == 2
    middling = {0: PodGauges(0.5, 0, 2), 1: PodGauges(0.5, 0, 2)}
    assert WvaSaturation().desired(_obs(middling, 2)) == 2  # 1.0 KV on one pod: not safe


def _leveled(n: int, replicas: int, starting: int, table: dict[float, float]) -> Observation:
    """``n`` ready pods whose level, load scaled by a factor, reads ``table[factor]``."""
    gauges = {p: PodGauges(0.5, 2, 10) for p in range(n)}

    def level(pods: object, factor: float) -> float | None:
        return table[round(factor, 6)]

    return Observation(0.0, replicas, starting, gauges, level, lambda s: None)  # type: ignore[arg-type,return-value]


def test_the_saturation_scaler_holds_while_pods_start_and_its_gauge_form_does_not() -> None:
    # 3 ready, 2 starting; 40 % of requests miss because of load (10 % would on idle pods).
    busy = _leveled(3, 5, 2, {1.0: 0.5, 0.0: 0.1})
    assert PredictedSaturation(budget=0.05).desired(busy) == 5  # capacity on its way
    # What the service exports knows only the 3 pods sending samples: 3 + ceil(3 x 0.4).
    gauge = PredictedSaturation(budget=0.05, hold_while_starting=False)
    assert gauge.desired(busy) == 5
    worse = _leveled(3, 5, 2, {1.0: 0.9, 0.0: 0.1})
    assert PredictedSaturation(budget=0.05).desired(worse) == 5
    assert gauge.desired(worse) == 6  # the HPA scales to it at once
    # With nothing starting both forms are the same: one pod fewer when it would still fit.
    calm = _leveled(4, 4, 0, {1.0: 0.01, 0.0: 0.0, round(4 / 3, 6): 0.03})
    assert PredictedSaturation(budget=0.05).desired(calm) == gauge.desired(calm) == 3


def test_combined_scales_to_the_larger_answer_as_two_keda_triggers_do() -> None:
    obs = _obs({0: PodGauges(0.5, 1, 10)}, 4)
    assert Combined((Fixed(3), Fixed(7))).desired(obs) == 7
    assert Combined((Fixed(9), Fixed(7))).desired(obs) == 9


def test_warp_ramps_the_rate_and_keeps_the_order() -> None:
    trace = load_trace("mooncake-conversation").spread_ties(0)
    warped = warp(trace, ramp(0.5, 1.5, 300.0), 600.0)
    arrivals = warped.arrival_s
    assert np.all(np.diff(arrivals) >= 0) and arrivals[-1] <= 600.0
    first, middle = np.sum(arrivals < 60), np.sum((arrivals >= 270) & (arrivals < 330))
    assert middle > 2 * first  # about 1.45x against 0.55x the trace's rate
    burst = warp(trace, step(0.5, 1.5, 100.0, 100.0), 300.0).arrival_s
    assert np.sum((burst >= 100) & (burst < 200)) > 2 * np.sum(burst < 100)


def _run(rate: float, seconds: float, scaler: Scaler, fleet: Fleet) -> AutoscaleResult:
    """Mooncake at a constant ``rate`` x its own for ``seconds``, Headroom's router."""
    pods = build_pool(fleet.slots)
    fabric = TransferConfig(kv_bytes_per_token=load_profile(pods[0].profile).kv_bytes_per_token)
    trace = warp(
        load_trace("mooncake-conversation").spread_ties(0), step(rate, rate, 0, 1), seconds
    )
    router = make_policy(OURS, fabric, 0)
    assert isinstance(router, PredictedLatency)
    return run_autoscaled(trace, pods, router, scaler, fleet, SLO, seed=0)


def test_the_loop_routes_only_to_ready_pods_and_keeps_the_bounds() -> None:
    fleet = Fleet(slots=4, min_pods=1, max_pods=2, startup_s=60.0, initial=1)
    result = _run(0.3, 120.0, Fixed(10), fleet)
    assert max(r for _, r, _, _ in result.timeline) == 2  # asked for 10, max is 2
    # The second pod was asked for at t = 0 and is ready from t = 60 only.
    assert [ready for t, _, ready, _ in result.timeline if t < 60] == [1] * 4
    assert all(ready == 2 for t, _, ready, _ in result.timeline if t >= 60)
    # Before t = 60 every request went to the one ready pod.
    early = result.outcomes.arrival < 59.0
    assert early.any() and set(result.outcomes.pod[early].tolist()) == {0}
    assert set(result.outcomes.pod[~early].tolist()) <= {0, 1}
    assert 0.0 < result.attainment <= 1.0
    # Two pods for (about) the 120 s of traffic, one of them from t = 0 while it loaded.
    assert result.gpu_hours == pytest.approx(2 * 120 / 3600, rel=0.15)


def test_recovery_is_measured_against_the_level_before_the_step() -> None:
    # Light enough for one pod: the level before the step is high.
    result = _run(0.04, 400.0, Fixed(1), Fleet(2, 1, 1, 0.0, 1))
    arrival = result.outcomes.arrival
    result.ok[:] = True
    # Pretend every request arriving in [200, 290) missed: the first minute of arrivals clear
    # of them ends at a period boundary (every 15 s) at 345 or 360.
    result.ok[(arrival >= 200) & (arrival < 290)] = False
    recovered = result.recovery_s(200.0)
    assert recovered is not None and 145.0 <= recovered <= 160.0
    assert result.recovery_s(10_000.0) is None  # no step inside the run


def _no_level(pods: object, factor: float) -> float | None:
    return None


def test_desired_replicas_runs_the_services_estimate_on_the_posted_samples() -> None:
    t = load_trace("azure-code").scaled(3.0).window(0.0, 60.0)
    _, observations = record(t, 2, "a100-llama3-8b", "llm-d-322", SLO)
    rows = rows_from_observations(observations)
    asked: list[float] = []

    def samples(seconds: float) -> list[SampleRow]:
        asked.append(seconds)
        return rows

    scaler = DesiredReplicas(SLO, target=0.9, lookback_s=90.0, min_pods=1, max_pods=6)
    obs = Observation(100.0, 2, 0, {}, _no_level, lambda s: None, samples)  # type: ignore[arg-type,return-value]
    got = scaler.desired(obs)
    # The service's path on the same rows gives the same count (the simulations are seeded),
    # with the service's look-ahead, its trend read over 300 s of samples.
    assert scaler.lead_s == CapacitySettings().desired_lead_s
    assert scaler.plateau == PolicySpec().desired_plateau  # one default for both
    expected = estimate_replicas(
        rows, SLO, 0.9, router="llm-d-322", max_replicas=6, lead_s=scaler.lead_s, trend_rows=rows
    )
    assert expected is not None and got == expected.desired.replicas
    assert asked == [90.0, 300.0] and scaler.runs[0].calibrated
    # Within every_s it holds its answer without a run.
    assert scaler.desired(replace(obs, now=120.0)) == got and len(scaler.runs) == 1
    # The next run keeps the calibration, as the service keeps a pool's.
    scaler.desired(replace(obs, now=131.0))
    assert not scaler.runs[1].calibrated
    assert scaler.runs[1].calibration is scaler.runs[0].calibration
    # Too few samples: no estimate, the count stays.
    few = DesiredReplicas(SLO, max_pods=6)
    assert few.desired(replace(obs, replicas=5, samples=lambda s: rows[:10])) == 5
    assert few.runs == []


@dataclass
class _Spy:
    """Reads the samples of the last 30 s at every period and changes nothing."""

    name: str = "spy"
    seen: list[tuple[float, list[SampleRow]]] = field(default_factory=list)

    def desired(self, obs: Observation) -> int:
        self.seen.append((obs.now, obs.samples(30.0)))
        return obs.replicas


def test_the_loop_hands_scalers_the_samples_the_epp_posted() -> None:
    spy = _Spy()
    result = _run(0.3, 120.0, spy, Fleet(slots=4, min_pods=1, max_pods=2, startup_s=0, initial=2))
    first = result.outcomes.arrival + result.outcomes.ttft_ms / 1000.0
    assert len(spy.seen) >= 8
    for now, rows in spy.seen:
        assert all(now - 30.0 <= r.time_s <= now for r in rows)
        ttft = [r for r in rows if r.target == "ttft"]
        # One TTFT sample per request whose first token came in the window.
        in_window = int(np.sum((first >= now - 30.0) & (first <= now)))
        assert abs(len(ttft) - in_window) <= 1
        assert {r.pod for r in rows} <= {"pod-0", "pod-1"}
    late = [rows for now, rows in spy.seen if now >= 60.0]
    assert all(any(r.target == "tpot" for r in rows) for rows in late)


def _progress(c: Candidate) -> tuple[float, float, float]:
    return c.ms_since_last_token, c.oldest_prefill_wait_ms, c.ms_since_last_first_token


def test_the_idle_counterfactual_carries_no_progress() -> None:
    """The predicted-saturation scaler prices its requests on the pods scaled to no load (what
    would miss anyway). An idle pod has nothing in flight, so its progress fields are 0, as the
    wire defines them; scaled by any other factor a pod keeps where its work stands."""
    v = view(0.0)
    enqueue_at(v, 1.0, 3)
    v.dispatched[0], v.prefill_since[0] = 3, {0: 1.0, 1: 1.0, 2: 1.0}
    v.now = 1.2
    sim = SimpleNamespace(view=v)
    busy, progress = _candidates(sim, [0], 1.0)[0], v.progress(0)  # type: ignore[arg-type]
    assert progress[1] > 0.0 and busy.num_request_running + busy.num_request_waiting == 3
    assert _progress(busy) == progress
    fewer = _candidates(sim, [0], 2.0)[0]  # type: ignore[arg-type]
    assert _progress(fewer) == progress
    idle = _candidates(sim, [0], 0.0)[0]  # type: ignore[arg-type]
    assert idle.num_request_running + idle.num_request_waiting == 0
    assert _progress(idle) == (0.0, 0.0, 0.0)


def _probed(
    seconds: float,
    keep: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.bool_]] | None = None,
    rate: float = 4.0,
    pods_n: int = 1,
) -> Probe:
    """Mooncake's first 300 requests at 4x its rate (all within 27 s) on one pod (a queue
    builds), run to ``seconds``; the replay's window is 10 s."""
    pods = build_pool(pods_n)
    fabric = TransferConfig(kv_bytes_per_token=load_profile(pods[0].profile).kv_bytes_per_token)
    full = load_trace("mooncake-conversation").spread_ties(0)
    trace = full.select(np.arange(len(full)) < 300).scaled(rate)
    if keep is not None:
        trace = trace.select(keep(trace.arrival_s))
    router = make_policy(OURS, fabric, 0)
    assert isinstance(router, PredictedLatency)
    sim = Simulation(trace, pods, router, SimConfig(slo=SLO, seed=0, spread_ties=False))
    sim.run_until(seconds)
    sim.view.now = seconds
    return Probe(sim, router, profile_size=8, arrival_window_s=10.0)


def test_the_probe_replays_only_what_the_service_has_heard_of() -> None:
    """The service learns of a request from its TTFT sample, at its first token, and of its
    output length when it finishes: a request still queued is in no replay and no profile."""
    probe = _probed(20.0)
    sim, now = probe.sim, 20.0
    arrived = sim.trace.arrival_s <= now
    first, done = sim._first, sim._done
    with np.errstate(invalid="ignore"):
        heard = arrived & (first <= now)
        finished = arrived & (done <= now)
    window = arrived & (sim.trace.arrival_s > now - 10.0)
    assert (window & ~heard).sum() > 0  # a queue: some arrivals have no first token yet
    arrivals = probe.arrivals_at(now)
    assert arrivals is not None
    assert len(arrivals.times_s) == int((window & heard).sum())
    expected = sorted((sim.trace.arrival_s[window & heard] - (now - 10.0)).tolist())
    assert arrivals.times_s == pytest.approx(expected)
    # The mean output of the newest 8 finished requests, not of the window's arrivals.
    assert finished.sum() > 0
    newest = np.flatnonzero(finished)[np.argsort(done[finished])][-8:]
    assert arrivals.output_tokens == pytest.approx(sim.trace.output_tokens[newest].mean())
    # The profile: the newest 8 first tokens, every one a representative (32 asked).
    assert heard.sum() > 8
    profile = np.flatnonzero(heard)[np.argsort(first[heard])][-8:]
    reps = probe.representatives_at(now)
    assert [r.prompt_tokens for r in reps] == sim.trace.input_tokens[profile].tolist()


def test_after_a_quiet_minute_the_probe_keeps_its_profile_as_the_service_does() -> None:
    """With no arrival in the window the service still reports the present level from its
    profile; the probe gave none, and the requests of the next burst went unmeasured."""
    probe = _probed(120.0, keep=lambda t: t < 30.0)
    assert probe.sim.trace.arrival_s[-1] < 30.0
    arrivals = probe.arrivals_at(120.0)
    assert arrivals is not None and arrivals.times_s == ()
    assert len(probe.representatives_at(120.0)) == 8
    level = probe.saturation([0])  # the present one: nothing to replay
    assert level is not None and level.next_level is None and level.level == level.present_level


def test_the_future_reference_replays_the_coming_arrivals_not_the_past() -> None:
    """``future_s`` (a bench reference): the replay is of the trace's arrivals over the next
    ``future_s`` seconds, from now, whatever the service has heard of; the requests already
    sent are in the pods' gauges, not replayed again."""
    probe = _probed(10.0)
    probe.future_s = 5.0
    arrival = probe.sim.trace.arrival_s
    coming = arrival[(arrival > 10.0) & (arrival <= 15.0)]
    assert coming.size > 0 and (arrival <= 10.0).any()
    arrivals = probe.arrivals_at(10.0)
    assert arrivals is not None and arrivals.window_s == 5.0
    assert arrivals.times_s == pytest.approx((coming - 10.0).tolist())
    assert arrivals.served is not None  # the latency the service holds, as its own replay's


def test_the_probes_profile_and_window_are_the_services() -> None:
    settings = CapacitySettings()
    assert (settings.profile_size, settings.arrival_window_s) == (PROFILE_SIZE, ARRIVAL_WINDOW_S)


def _at(now: float, replicas: int = 3) -> Observation:
    return replace(_obs({}, replicas), now=now)


def test_foresight_sizes_for_the_prompt_tokens_arriving_one_start_up_ahead() -> None:
    # 1,000 tokens a second from t = 100 to 160, 10,000 a second from t = 200 to 260.
    arrival = np.concatenate([np.arange(100.0, 160.0), np.arange(200.0, 260.0, 0.1)])
    tokens = np.full(len(arrival), 1000, dtype=np.int64)
    oracle = Foresight(arrival, tokens, pods_per_ktok=0.5, lead_s=90.0, window_s=60.0)
    assert oracle.desired(_at(10.0)) == 1  # [100, 160): 1 ktok/s x 0.5, rounded up
    assert oracle.desired(_at(110.0)) == 5  # [200, 260): 10 ktok/s x 0.5
    # Half the window inside the burst: half its rate.
    assert oracle.desired(_at(80.0)) == 3  # [170, 230): 300 s of 10 ktok/s over 60 s -> 5 / 2
    # What has arrived or arrives before the pods could be ready is not what it sizes for.
    assert oracle.desired(_at(200.0)) == 1
    # Nothing arrives in [260, 320): one pod, whatever the pool holds now.
    assert oracle.desired(_at(170.0, replicas=9)) == 1


def test_foresight_rejects_what_it_cannot_read() -> None:
    one = np.zeros(1)
    with pytest.raises(ValueError):
        Foresight(one, np.zeros(1, np.int64), pods_per_ktok=0.0)
    with pytest.raises(ValueError):
        Foresight(one, np.zeros(2, np.int64), pods_per_ktok=1.0)


def test_the_probes_record_holds_what_the_samples_posted_by_now_measured() -> None:
    """The record's outcomes are the service's samples: a TTFT once the first token came (at
    the request's arrival), a TPOT once it finished (at its first token, as the service reads
    it back from the sample's time less TPOT x the further tokens)."""
    probe = _probed(20.0)
    probe.record = LevelRecord(horizon_s=60.0)  # the whole run so far
    sim, now = probe.sim, 20.0
    seen = probe.outcomes_at(now)
    first, done = sim._first, sim._done
    with np.errstate(invalid="ignore"):
        has_first = np.flatnonzero(first <= now)
        out = sim.trace.output_tokens
        finished = np.flatnonzero((done <= now) & (out > 1))
    assert 0 < has_first.size < int((sim.trace.arrival_s <= now).sum())  # a queue: some wait
    assert seen.ttft_at_s.tolist() == pytest.approx(sim.trace.arrival_s[has_first].tolist())
    assert seen.ttft_ms == pytest.approx((first - sim.trace.arrival_s)[has_first] * 1000.0)
    assert finished.size > 0 and seen.tpot_at_s.size == finished.size
    back = seen.tpot_at_s + seen.tpot_ms * (out[finished] - 1) / 1000.0
    assert back == pytest.approx(done[finished])


def test_a_probe_with_a_record_corrects_the_level_by_it() -> None:
    # The same requests at their own rate on two pods: most are served within seconds.
    probe = _probed(10.0, rate=1.0, pods_n=2)
    probe.record = LevelRecord(horizon_s=60.0, delay_s=5.0, min_requests=5)
    sim = probe.sim
    biases = []
    for t in np.arange(10.0, 60.0, 1.0):
        sim.run_until(float(t))
        sim.view.now = float(t)
        sat = probe.saturation([0, 1])
        if sat is None:  # the models are not ready yet
            continue
        if sat.record_bias is not None:
            biases.append(sat.record_bias)
            assert sat.uncorrected_level is not None
            assert 1.0 - sat.level == pytest.approx(
                min(1.0, max(0.0, 1.0 - sat.uncorrected_level - sat.record_bias))
            )
    assert biases  # once the first levels were checked against their requests
    assert len(probe.record.ticks) > 1
    # A scaled counterfactual (a scaler's "one pod fewer") is no tick of the record.
    ticks = len(probe.record.ticks)
    probe.saturation([0, 1], factor=2.0)
    assert len(probe.record.ticks) == ticks


def _pd_fleets(pods: tuple[PodSpec, ...], initial: dict[str, int], hi: int) -> dict[str, Fleet]:
    return {
        role: Fleet(
            4,
            1,
            hi,
            0.0,
            initial[role],
            indices=tuple(i for i, p in enumerate(pods) if p.role == role),
        )
        for role in ROLES
    }


def _pd_setup(seconds: float) -> tuple[tuple[PodSpec, ...], Trace, PredictedLatency]:
    """Eight P/D slots (4 + 4), Azure code at half its rate for ``seconds``, Headroom's router."""
    pods = build_pool(8, pd="4:4")
    fabric = TransferConfig(kv_bytes_per_token=load_profile(pods[0].profile).kv_bytes_per_token)
    trace = warp(load_trace("azure-code").spread_ties(0), step(0.5, 0.5, 0, 1), seconds)
    router = make_policy(OURS, fabric, 0)
    assert isinstance(router, PredictedLatency)
    return pods, trace, router


def test_a_pd_pool_scales_each_role_on_its_own() -> None:
    pods, trace, router = _pd_setup(90.0)
    fleets = _pd_fleets(pods, {"prefill": 1, "decode": 2}, 3)
    scalers: dict[str, Scaler] = {"prefill": Fixed(3), "decode": Fixed(1)}
    result = run_autoscaled(trace, pods, router, scalers, fleets, SLO, seed=0)
    # Each role's Deployment went to its own count from the first period on: 1 -> 3 prefill
    # pods, 2 -> 1 decode pod, and stayed there.
    for role, want in (("prefill", 3), ("decode", 1)):
        assert {r for _, r, _ in result.by_role[role]} == {want}
    assert result.timeline[0][1] == 4
    prefill = set(fleets["prefill"].indices[:3])
    # Requests went only to the roles' routable pods: the three prefill pods asked for, and
    # after the first period (the request at t = 0 came before it) the one decode pod kept.
    later = result.outcomes.arrival > 0.0
    assert set(result.outcomes.prefill_pod.tolist()) <= prefill
    assert len(set(result.outcomes.prefill_pod[later].tolist())) == 3
    assert len(set(result.outcomes.pod[later].tolist())) == 1
    assert set(result.outcomes.pod.tolist()) <= set(fleets["decode"].indices)
    assert result.gpu_hours > 0 and 0.0 <= result.attainment <= 1.0


def test_a_pd_pool_takes_a_fleet_and_a_scaler_per_role() -> None:
    pods, trace, router = _pd_setup(10.0)
    with pytest.raises(ValueError, match="per role"):
        run_autoscaled(trace, pods, router, Fixed(2), Fleet(8, 1, 4, 0.0, 2), SLO)
    swapped = _pd_fleets(pods, {"prefill": 1, "decode": 1}, 2)
    swapped["prefill"], swapped["decode"] = swapped["decode"], swapped["prefill"]
    with pytest.raises(ValueError, match="prefill fleet"):
        run_autoscaled(trace, pods, router, {r: Fixed(1) for r in ROLES}, swapped, SLO)


def test_each_role_reads_its_count_from_one_desired_replicas_estimate() -> None:
    t = load_trace("azure-code").scaled(3.0).window(0.0, 60.0)
    _, observations = record(t, 4, "a100-llama3-8b", "llm-d-322", SLO, pd="2:2")
    rows = rows_from_observations(observations)
    desired = DesiredReplicas(SLO, target=0.9, lookback_s=90.0, min_pods=1, max_pods=6)
    prefill, decode = desired.role("prefill"), desired.role("decode")
    obs = Observation(100.0, 2, 0, {}, _no_level, lambda s: None, lambda s: rows)  # type: ignore[arg-type,return-value]
    p, d = prefill.desired(obs), decode.desired(obs)
    # One run for both roles, the service's split of the same rows.
    assert len(desired.runs) == 1
    expected = estimate_replicas(
        rows, SLO, 0.9, router="llm-d-322", max_replicas=6, lead_s=desired.lead_s, trend_rows=rows
    )
    assert expected is not None and expected.desired.prefill_replicas is not None
    assert (p, d) == (
        expected.desired.prefill_replicas,
        expected.desired.replicas - expected.desired.prefill_replicas,
    )
    with pytest.raises(ValueError, match="role"):
        desired.role("encode")
    # Samples of a pool without prefill pods give no split: each role's count stays.
    _, flat = record(t, 4, "a100-llama3-8b", "llm-d-322", SLO)
    aggregated = DesiredReplicas(SLO, target=0.9, min_pods=1, max_pods=6)
    rows_flat = rows_from_observations(flat)
    obs_flat = replace(obs, replicas=3, samples=lambda s: rows_flat)
    assert aggregated.role("prefill").desired(obs_flat) == 3
