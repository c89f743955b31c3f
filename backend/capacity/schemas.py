from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from backend.capacity.service import PoolReport
from backend.scheduling.saturation import Headroom


class PodSaturationRead(BaseModel):
    pod: str
    saturation: float = Field(description="Share of representative requests that would miss.")
    ttft_ms_p50: float = Field(description="Predicted TTFT of the median request on this pod.")
    tpot_ms_p50: float = Field(description="Predicted TPOT of the median request on this pod.")


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


class SaturationRead(BaseModel):
    pool: str
    saturation: float | None = Field(
        description="Share of representative requests that would miss an SLO if routed now by "
        "the pool's chain: 0 all fit, 1 none does. Null when it cannot be computed (see status)."
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
    headroom_p50: HeadroomRead | None = Field(description="At the median request (by prompt).")
    headroom_p90: HeadroomRead | None = Field(description="At the p90 request (by prompt).")
    fresh_pods: int
    stale_pods: list[str] = Field(description="Pods not heard from recently; left out.")
    pods: list[PodSaturationRead]

    @classmethod
    def of(cls, pool: str, report: PoolReport | None) -> SaturationRead:
        if report is None:
            return cls(
                pool=pool,
                saturation=None,
                status="not_computed",
                computed_at=None,
                ttft_slo_ms=None,
                tpot_slo_ms=None,
                policy_version=None,
                representatives=0,
                headroom_p50=None,
                headroom_p90=None,
                fresh_pods=0,
                stale_pods=[],
                pods=[],
            )
        sat = report.saturation
        return cls(
            pool=pool,
            saturation=sat.level if sat else None,
            status=report.status,
            computed_at=report.computed_at,
            ttft_slo_ms=report.ttft_slo_ms,
            tpot_slo_ms=report.tpot_slo_ms,
            policy_version=report.policy_version,
            representatives=sat.representatives if sat else 0,
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
                )
                for p in (sat.pods if sat else ())
            ],
        )
