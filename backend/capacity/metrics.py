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
            "Share of representative requests that would miss an SLO if routed now (0..1).",
            labels=["pool"],
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
        for pool, row in sorted(self.monitor.all_desired().items()):
            desired.add_metric([pool, self.namespace, row.profile, pool], row.replicas)
        yield from (pool_level, pod_level, headroom, fresh, desired)
