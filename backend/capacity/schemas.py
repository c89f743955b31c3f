from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from backend.capacity.models import DesiredReplicas
from backend.capacity.service import PoolReport
from backend.scheduling.saturation import Headroom


class PodSaturationRead(BaseModel):
    pod: str
    saturation: float = Field(description="Share of representative requests that would miss.")
    ttft_ms_p50: float = Field(description="Predicted TTFT of the median request on this pod.")
    tpot_ms_p50: float = Field(description="Predicted TPOT of the median request on this pod.")
    requests: float = Field(
        description="Requests in the system (running + waiting): the present ones, or with the "
        "present weight at 0 the next interval's middle state (where the replayed arrivals "
        "queue)."
    )


class HeadroomRead(BaseModel):
    prompt_tokens: int
    pod: str | None = Field(description="The pod the pool's chain picks for this request.")
    ttft_headroom_ms: float | None = Field(description="TTFT SLO minus predicted TTFT there.")
    tpot_headroom_ms: float | None = Field(description="TPOT SLO minus predicted TPOT there.")

    @classmethod
    def of(cls, h: Headroom) -> HeadroomRead:
        return cls(
            prompt_tokens=h.prompt_tokens,
            pod=h.pod,
            ttft_headroom_ms=h.ttft_headroom_ms,
            tpot_headroom_ms=h.tpot_headroom_ms,
        )


class DesiredReplicasRead(BaseModel):
    replicas: int = Field(
        description="Fewest pods at which the pool's recent traffic, replayed in the simulator "
        "on the calibrated pod, keeps SLO attainment at the policy's target."
    )
    met: bool = Field(
        description="False: even the most pods tried miss the target; `replicas` is then where "
        "more pods stop helping (within 1 point of the most pods' attainment). True: reached, "
        "or within that point of the most pods' attainment, where `replicas` stops too."
    )
    attainment: float = Field(description="Simulated SLO attainment at `replicas` pods.")
    target: float = Field(description="The policy's target_slo_attainment.")
    current_pods: int = Field(description="Pods seen in the replayed samples.")
    prefill_replicas: int | None = Field(
        None,
        description="A P/D pool (its samples name prefill endpoints): how many of `replicas` "
        "are prefill pods; the rest, `decode_replicas`, decode pods. Each role's count is the "
        "fewest given the other's. Null for an aggregated pool.",
    )
    decode_replicas: int | None = Field(
        None, description="A P/D pool's decode pods among `replicas`; null for an aggregated pool."
    )
    current_prefill_pods: int | None = Field(
        None, description="Of `current_pods`, the prefill endpoints; null for an aggregated pool."
    )
    requests: int = Field(description="Requests rebuilt from the samples and replayed.")
    rate_rps: float = Field(
        description="The arrival rate they were replayed at: the rate forecast "
        "`HEADROOM_CAPACITY__DESIRED_LEAD_S` ahead (the lookback's mean rate where its "
        "arrivals show no clear trend, or with a lead of 0), or with "
        "`HEADROOM_CAPACITY__DESIRED_RATE_WINDOW_S` the rate of its last seconds."
    )
    profile: str = Field(description="The GPU profile the calibration chose.")
    scale: float = Field(description="The calibrated factor on the profile's step cost.")
    calibration_error: float = Field(
        description="Mean |log(simulated/observed)| over the TTFT and TPOT deciles at the pick."
    )
    simulations: int
    cpu_s: float = Field(description="CPU seconds the computation took.")
    policy_version: int | None
    computed_at: datetime

    @classmethod
    def of(cls, row: DesiredReplicas) -> DesiredReplicasRead:
        read = cls.model_validate(row, from_attributes=True)
        if row.prefill_replicas is not None:
            read.decode_replicas = row.replicas - row.prefill_replicas
        return read


class SaturationRead(BaseModel):
    pool: str
    saturation: float | None = Field(
        description="Share of representative requests that would miss an SLO if routed by the "
        "pool's chain: 0 all fit, 1 none does. The mix (`HEADROOM_CAPACITY__PRESENT_WEIGHT`, "
        "by default all on the second) of `present_saturation` and "
        "`next_interval_saturation`. Null when it cannot be computed (see status)."
    )
    present_saturation: float | None = Field(
        description="The level with the pods as they stand (optimistic where bursts follow)."
    )
    uncorrected_saturation: float | None = Field(
        None,
        description="The level before its record's correction (the forecast): null when not "
        "corrected (`HEADROOM_CAPACITY__RECORD_CORRECTION` off, or too few requests measured "
        "over the record's span yet).",
    )
    record_bias: float | None = Field(
        None,
        description="The forecast's mean error over the record (forecast less measured share "
        "meeting the SLOs), taken off `saturation`'s meeting share; null when not corrected.",
    )
    next_interval_saturation: float | None = Field(
        description="The level over the next interval: the recent arrivals (the last "
        "`HEADROOM_CAPACITY__ARRIVAL_WINDOW_S`) replayed onto the pods, at the latency the "
        "pool's own requests measured. Null when nothing was replayed (no arrival in the "
        "window, window 0 or a present weight of 1)."
    )
    status: str = Field(
        description="ok, or why there is no level: no_slo (the policy sets no SLO), no_model, "
        "no_fresh_pods, no_traffic, not_computed (before the first tick)."
    )
    computed_at: datetime | None
    ttft_slo_ms: float | None
    tpot_slo_ms: float | None
    policy_version: int | None
    representatives: int = Field(description="Requests from the recent profile placed per pod.")
    arrival_rate_rps: float = Field(
        description="Arrival rate of the requests replayed for the next interval (the last "
        "`HEADROOM_CAPACITY__ARRIVAL_WINDOW_S`); 0: nothing was replayed."
    )
    headroom_p50: HeadroomRead | None = Field(description="At the median request (by prompt).")
    headroom_p90: HeadroomRead | None = Field(description="At the p90 request (by prompt).")
    fresh_pods: int
    stale_pods: list[str] = Field(description="Pods not heard from recently; left out.")
    pods: list[PodSaturationRead]
    saturation_replicas: int | None = Field(
        description="Pods the saturation level asks for, from the pods as they stand: the fresh "
        "pods plus the share of representative requests that would miss because of load "
        "beyond the policy's budget (1 - target_slo_attainment; what would miss on idle pods "
        "does not count), or one fewer where that much work on one pod fewer stays within it. "
        "A P/D pool: the sum of `saturation_role_replicas`. "
        "Exported as `headroom_saturation_replicas`; reacts within a tick where "
        "`desired_replicas` sizes the next minutes. Null without a level."
    )
    saturation_role_replicas: dict[str, int] | None = Field(
        None,
        description="A P/D pool (fresh pods of both roles): the same count per role, "
        '{"prefill": n, "decode": m}, each from the misses its own pods\' load causes (only '
        "that role's pods scaled). Exported as `headroom_saturation_role_replicas{role}`. "
        "Null for a pool of one role or without a level.",
    )
    desired_replicas: DesiredReplicasRead | None = Field(
        description="The last desired-replica count the worker computed (every "
        "`HEADROOM_CAPACITY__DESIRED_INTERVAL_S`), with when and how; null before the first, "
        "or with no SLO or too little recent traffic."
    )

    @classmethod
    def of(
        cls, pool: str, report: PoolReport | None, desired: DesiredReplicas | None = None
    ) -> SaturationRead:
        wanted = DesiredReplicasRead.of(desired) if desired is not None else None
        if report is None:
            return cls(
                pool=pool,
                saturation=None,
                present_saturation=None,
                next_interval_saturation=None,
                status="not_computed",
                computed_at=None,
                ttft_slo_ms=None,
                tpot_slo_ms=None,
                policy_version=None,
                representatives=0,
                arrival_rate_rps=0.0,
                headroom_p50=None,
                headroom_p90=None,
                fresh_pods=0,
                stale_pods=[],
                pods=[],
                saturation_replicas=None,
                desired_replicas=wanted,
            )
        sat = report.saturation
        return cls(
            pool=pool,
            saturation=sat.level if sat else None,
            present_saturation=sat.present_level if sat else None,
            next_interval_saturation=sat.next_level if sat else None,
            uncorrected_saturation=sat.uncorrected_level if sat else None,
            record_bias=sat.record_bias if sat else None,
            status=report.status,
            computed_at=report.computed_at,
            ttft_slo_ms=report.ttft_slo_ms,
            tpot_slo_ms=report.tpot_slo_ms,
            policy_version=report.policy_version,
            representatives=sat.representatives if sat else 0,
            arrival_rate_rps=sat.arrival_rate_rps if sat else 0.0,
            headroom_p50=HeadroomRead.of(sat.p50) if sat else None,
            headroom_p90=HeadroomRead.of(sat.p90) if sat else None,
            fresh_pods=report.fresh_pods,
            stale_pods=list(report.stale_pods),
            pods=[
                PodSaturationRead(
                    pod=p.name,
                    saturation=p.level,
                    ttft_ms_p50=p.ttft_ms_p50,
                    tpot_ms_p50=p.tpot_ms_p50,
                    requests=p.requests,
                )
                for p in (sat.pods if sat else ())
            ],
            saturation_replicas=report.saturation_replicas,
            saturation_role_replicas=report.role_replicas,
            desired_replicas=wanted,
        )
