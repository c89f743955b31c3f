"""Prometheus metrics, via prometheus-client, one registry per app instance.

`GET /metrics` exposes our own series and, for the `default` pool, the series upstream's
training server prints (`model_type{type="xgboost"} 1`, importances, bucket counts, recent
retrain errors), so dashboards built for llm-d keep working. `/pools/{pool}/metrics` carries
the upstream series of that pool.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.pools.models import Pool
from backend.predictor.serving import ModelStore
from backend.predictor.window import WindowSpec
from backend.registry.failures import FailureCounter
from backend.registry.models import ModelVersion
from backend.samples import repository
from backend.samples.models import TargetCode
from backend.samples.repository import bucket_counts

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Telemetry:
    registry: CollectorRegistry = field(
        default_factory=lambda: CollectorRegistry(auto_describe=True)
    )

    def __post_init__(self) -> None:
        r = self.registry
        self.samples = Counter(
            "headroom_samples_ingested", "Samples added to windows.", ["pool", "target"], registry=r
        )
        self.predicted_rows = Counter(
            "headroom_predicted_rows", "Rows predicted.", ["pool", "route"], registry=r
        )
        self.requests = Histogram(
            "headroom_http_request_seconds",
            "Request latency per route template and status.",
            ["method", "route", "status"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0),
            registry=r,
        )
        self.rejected = Counter(
            "headroom_ingest_rejected_batches",
            "Ingestion batches refused, by reason (nothing of a refused batch is stored).",
            ["reason"],
            registry=r,
        )
        self.predict_seconds = Histogram(
            "headroom_predict_seconds",
            "Server-side time of a prediction call.",
            ["route"],
            buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.1),
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class UpstreamCollector(Collector):
    """Upstream training-server series for one pool, computed at scrape time (not hot path)."""

    def __init__(
        self,
        pool: str,
        store: ModelStore,
        sessions: sessionmaker[Session],
        spec: WindowSpec,
        pool_id: int,
    ) -> None:
        self.pool, self.store, self.sessions, self.spec, self.pool_id = (
            pool,
            store,
            sessions,
            spec,
            pool_id,
        )

    def collect(self) -> Iterator[Metric]:
        ttft = self.store.get(self.pool, "ttft")
        objective = ttft.objective if ttft else "mean"
        quantile = ttft.quantile if ttft else 0.9
        yield _gauge("model_type", "Model type.", {"type": "xgboost"}, 1)
        yield _gauge("objective_type", "Objective.", {"type": objective}, 1)
        yield _gauge("model_quantile", "Quantile of the quantile objective.", {}, quantile)
        yield _gauge("ensemble_active", "Upstream's queue-gated ensemble (not used).", {}, 0)
        yield _gauge("ensemble_mode", "Upstream's queue-gated ensemble (not used).", {}, 0)
        for target in TargetCode:
            served = self.store.get(self.pool, target.label)
            if served is None:
                continue
            family = GaugeMetricFamily(
                f"{target.label}_importance", "Share of split gain.", labels=["feature"]
            )
            for name, value in served.model.feature_importance().items():
                family.add_metric([name], value)
            yield family
        with self.sessions() as session:
            yield from self._windows(session)
            yield from self._recent(session)

    def _windows(self, session: Session) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "training_samples_count",
            "Samples per window bucket.",
            labels=["model", "queue_bucket", "cache_bucket", "prefix_bucket"],
        )
        totals: dict[tuple[int, int], int] = {}
        for (target, bucket, _), n in bucket_counts(session, self.pool_id).items():
            totals[(target, bucket)] = totals.get((target, bucket), 0) + n
        for (target, bucket), n in sorted(totals.items()):
            k, p, q = self.spec.split(bucket)
            family.add_metric([TargetCode(target).label, str(q), str(k), str(p)], n)
        yield family

    def _recent(self, session: Session) -> Iterator[Metric]:
        for target in TargetCode:
            versions = session.scalars(
                select(ModelVersion)
                .where(ModelVersion.pool_id == self.pool_id, ModelVersion.target == int(target))
                .order_by(ModelVersion.id.desc())
                .limit(5)
            ).all()
            mae = GaugeMetricFamily(
                f"{target.label}_mae", "MAE of recent retrains.", labels=["idx"]
            )
            mape = GaugeMetricFamily(
                f"{target.label}_mape", "MAPE of recent retrains.", labels=["idx"]
            )
            for idx, v in enumerate(versions):
                if v.metrics:
                    mae.add_metric([str(idx)], v.metrics["mae"])
                    mape.add_metric([str(idx)], v.metrics["mape"])
            yield mae
            yield mape


def _gauge(name: str, doc: str, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def render_upstream(collector: UpstreamCollector) -> bytes:
    """Upstream's series as upstream prints them: every sample with its braces, empty ones
    included (`ensemble_active{} 0`), and whole numbers without a decimal point. Dashboards
    and upstream's own suite match this text; prometheus-client would print
    `ensemble_active 0.0`. Both are valid exposition format."""
    lines: list[str] = []
    for family in collector.collect():
        lines.append(f"# HELP {family.name} {family.documentation}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for sample in family.samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sample.labels.items())
            lines.append(f"{sample.name}{{{labels}}} {_number(sample.value)}")
    return ("\n".join(lines) + "\n").encode()


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class ServingCollector(Collector):
    """Per (pool, target): the served model's version, age and held-out error, the window's
    size, and failed trainings. Read at scrape time from memory, the database and Redis."""

    def __init__(
        self, store: ModelStore, sessions: sessionmaker[Session], failures: FailureCounter
    ) -> None:
        self.store, self.sessions, self.failures = store, sessions, failures

    def collect(self) -> Iterator[Metric]:
        labels = ["pool", "target"]
        version = GaugeMetricFamily(
            "headroom_active_model_version", "Model version served.", labels=labels
        )
        age = GaugeMetricFamily(
            "headroom_active_model_age_seconds",
            "Since the served model was activated.",
            labels=labels,
        )
        mape = GaugeMetricFamily(
            "headroom_active_model_mape", "Held-out MAPE of the served model.", labels=labels
        )
        now = datetime.now(UTC)
        for (pool, target), served in sorted(self.store.snapshot().items()):
            version.add_metric([pool, target], served.version_id)
            age.add_metric([pool, target], (now - served.activated_at).total_seconds())
            if "mape" in served.metrics:
                mape.add_metric([pool, target], float(served.metrics["mape"]))
        yield from (version, age, mape)
        window = GaugeMetricFamily(
            "headroom_window_samples", "Samples stored per window.", labels=labels
        )
        with self.sessions() as session:
            names = {pid: name for pid, name in session.execute(select(Pool.id, Pool.name))}
            for pid, code, n in repository.window_sizes(session):
                window.add_metric([names.get(pid, str(pid)), TargetCode(code).label], n)
        yield window
        failed = CounterMetricFamily(
            "headroom_training_failures", "Trainings that raised.", labels=["pool_id", "target"]
        )
        for key, n in sorted(self.failures.read().items()):
            pool_field, _, target_field = key.partition(":")
            failed.add_metric([pool_field, target_field], n)
        yield failed
