"""Saturation as Prometheus gauges, for KEDA's Prometheus scaler or an HPA on external metrics.
Read from the monitor's last result: a scrape never computes."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from backend.capacity.service import OK, CapacityMonitor


class CapacityCollector(Collector):
    def __init__(self, monitor: CapacityMonitor, namespace: str = "default") -> None:
        self.monitor = monitor
        self.namespace = namespace

    def collect(self) -> Iterator[Metric]:
        pool_level = GaugeMetricFamily(
            "headroom_pool_saturation",
            "Share of representative requests that would miss an SLO (0..1): the mix of "
            "headroom_pool_saturation_part{part=present} and {part=next_interval}.",
            labels=["pool"],
        )
        # The mix's parts, for a consumer that wants one of them: "present" (the pods as they
        # stand: optimistic where bursts follow), "next_interval" (the recent arrivals
        # replayed, the level by default; absent when nothing was replayed).
        parts = GaugeMetricFamily(
            "headroom_pool_saturation_part",
            "The saturation level with the pods as they stand (present), over the next "
            "interval (next_interval), or before its record's correction (uncorrected), 0..1.",
            labels=["pool", "part"],
        )
        pod_level = GaugeMetricFamily(
            "headroom_pod_saturation",
            "Share of representative requests that would miss an SLO on this pod (0..1).",
            labels=["pool", "pod"],
        )
        headroom = GaugeMetricFamily(
            "headroom_pool_slo_headroom_ms",
            "SLO minus predicted latency on the picked pod, at the median and p90 request.",
            labels=["pool", "target", "request"],
        )
        fresh = GaugeMetricFamily(
            "headroom_pool_fresh_pods", "Pods heard from recently.", labels=["pool"]
        )
        for pool, report in sorted(self.monitor.reports().items()):
            fresh.add_metric([pool], report.fresh_pods)
            sat = report.saturation
            if report.status != OK or sat is None:
                continue
            pool_level.add_metric([pool], sat.level)
            for part, value in (
                ("present", sat.present_level),
                ("next_interval", sat.next_level),
                ("uncorrected", sat.uncorrected_level),
            ):
                if value is not None:
                    parts.add_metric([pool, part], value)
            for pod in sat.pods:
                pod_level.add_metric([pool, pod.name], pod.level)
            for label, h in (("p50", sat.p50), ("p90", sat.p90)):
                if h.ttft_headroom_ms is not None:
                    headroom.add_metric([pool, "ttft", label], h.ttft_headroom_ms)
                if h.tpot_headroom_ms is not None:
                    headroom.add_metric([pool, "tpot", label], h.tpot_headroom_ms)
        # In the shape of WVA's desired-replica signal (`wva_desired_replicas{variant_name,
        # namespace, accelerator_type}`), so that a KEDA ScaledObject or an HPA written for WVA
        # needs only the metric name changed (deploy/kubernetes/keda-scaledobject.yaml).
        desired = GaugeMetricFamily(
            "headroom_desired_replicas",
            "Fewest pods that keep the pool's replayed recent traffic at its SLO target.",
            labels=["variant_name", "namespace", "accelerator_type", "pool"],
        )
        # A P/D pool is two deployments, scaled apart: one series per role, each a variant
        # of its own (WVA's unit of scaling), so that each deployment's ScaledObject reads
        # its own (deploy/kubernetes/keda-scaledobject-pd.yaml). The total stays above.
        by_role = GaugeMetricFamily(
            "headroom_desired_role_replicas",
            "A P/D pool's desired prefill or decode pods: each role's fewest given the other's.",
            labels=["variant_name", "namespace", "accelerator_type", "pool", "role"],
        )
        for pool, row in sorted(self.monitor.all_desired().items()):
            desired.add_metric([pool, self.namespace, row.profile, pool], row.replicas)
            if row.prefill_replicas is not None:
                for role, count in (
                    ("prefill", row.prefill_replicas),
                    ("decode", row.replicas - row.prefill_replicas),
                ):
                    by_role.add_metric(
                        [f"{pool}-{role}", self.namespace, row.profile, pool, role], count
                    )
        # The same shape, so that one ScaledObject can carry both triggers (the HPA scales to
        # the larger): the saturation level's count reacts within a tick to a burst the
        # desired replicas' replay of the last minutes sees late.
        by_saturation = GaugeMetricFamily(
            "headroom_saturation_replicas",
            "Pods the predicted-SLO saturation level asks for: the fresh pods plus the share "
            "of requests missing because of load beyond the SLO budget, or one fewer.",
            labels=["variant_name", "namespace", "accelerator_type", "pool"],
        )
        # A P/D pool's count per role, as the desired replicas' per-role series.
        by_saturation_role = GaugeMetricFamily(
            "headroom_saturation_role_replicas",
            "A P/D pool's prefill or decode pods the saturation level asks for: the role's "
            "fresh pods plus the share of requests its own pods' load makes miss, or one fewer.",
            labels=["variant_name", "namespace", "accelerator_type", "pool", "role"],
        )
        for pool, report in sorted(self.monitor.reports().items()):
            if report.status != OK or report.saturation_replicas is None:
                continue
            known = self.monitor.desired(pool)  # the calibrated profile, where there is one
            accelerator = known.profile if known is not None else ""
            by_saturation.add_metric(
                [pool, self.namespace, accelerator, pool], report.saturation_replicas
            )
            for role, count in sorted((report.role_replicas or {}).items()):
                by_saturation_role.add_metric(
                    [f"{pool}-{role}", self.namespace, accelerator, pool, role], count
                )
        yield from (
            pool_level,
            parts,
            pod_level,
            headroom,
            fresh,
            desired,
            by_role,
            by_saturation,
            by_saturation_role,
        )
