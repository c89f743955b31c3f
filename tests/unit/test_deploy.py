"""The deployment files parse and wire the components the way the README says."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import uvicorn
import yaml
from typer.testing import CliRunner

from backend import cli
from backend.cli import app
from backend.scheduling.saturation import Headroom, PodLevel, Saturation
from backend.settings import Settings, get_settings

ROOT = Path(__file__).resolve().parents[2]
_HEAD = Headroom(800, "a", 120.0, 10.0)
_SATURATION = Saturation(0.3, 0.7, (PodLevel("a", 0.3, 380.0, 40.0),), _HEAD, _HEAD, 32)


def documents() -> list[dict[str, Any]]:
    text = (ROOT / "deploy/kubernetes/headroom.yaml").read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in documents() if d["kind"] == kind}


def test_kubernetes_manifests_have_every_component_with_probes() -> None:
    deployments = by_kind("Deployment")
    assert set(deployments) == {"headroom-api", "headroom-worker", "headroom-beat"}
    commands = {
        name: d["spec"]["template"]["spec"]["containers"][0]["command"]
        for name, d in deployments.items()
    }
    assert commands["headroom-api"][:2] == ["headroom", "serve"]
    assert commands["headroom-worker"][:2] == ["headroom", "worker"]
    assert commands["headroom-beat"] == ["headroom", "beat"]
    assert deployments["headroom-beat"]["spec"]["replicas"] == 1
    api = deployments["headroom-api"]["spec"]["template"]["spec"]["containers"][0]
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    job = by_kind("Job")["headroom-migrate"]
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "headroom",
        "db",
        "upgrade",
    ]


def test_selectors_match_and_config_names_real_settings() -> None:
    for d in by_kind("Deployment").values():
        assert d["spec"]["selector"]["matchLabels"].items() <= (
            d["spec"]["template"]["metadata"]["labels"].items()
        )
        refs = d["spec"]["template"]["spec"]["containers"][0]["envFrom"]
        assert {"secretRef": {"name": "headroom"}} in refs  # secrets by reference only
    service = by_kind("Service")["headroom"]
    api_labels = by_kind("Deployment")["headroom-api"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= api_labels.items()
    config = by_kind("ConfigMap")["headroom"]["data"]
    for key, value in config.items():
        # Every key is a setting Headroom reads, and its value parses.
        section, _, field = key.removeprefix("HEADROOM_").lower().partition("__")
        settings = Settings(**{section: {field: value}} if field else {section: value})
        assert settings is not None
    assert "Secret" not in {d["kind"] for d in documents()}  # never commit real values


def test_compose_runs_migrations_once_and_two_api_replicas() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "migrate", "api-1", "api-2", "lb", "worker", "beat"} <= set(
        services
    )
    assert services["migrate"]["command"] == ["headroom", "db", "upgrade"]
    for name in ("api-1", "api-2", "worker", "beat"):
        assert services[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully"
        )
    assert "healthcheck" in services["api-1"] and "healthcheck" in services["postgres"]
    nginx = (ROOT / "deploy/nginx/nginx.conf").read_text()
    assert "server api-1:8000" in nginx and "server api-2:8000" in nginx


def test_behind_nginx_the_api_sees_the_real_client_address(monkeypatch: Any) -> None:
    """The console's per-address sign-in limit needs the client, not the proxy: nginx names the
    peer in X-Forwarded-For (overwriting whatever the client sent), the API replicas believe
    it, and `headroom serve` hands the setting to uvicorn."""
    nginx = (ROOT / "deploy/nginx/nginx.conf").read_text()
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in nginx
    assert "$proxy_add_x_forwarded_for" not in nginx  # appending would let clients choose
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name in ("api-1", "api-2"):
        assert services[name]["environment"]["HEADROOM_FORWARDED_ALLOW_IPS"] == "*"
    assert "ports" not in services["api-1"] and "ports" not in services["api-2"]

    calls: list[uvicorn.Config] = []
    monkeypatch.setattr(cli, "run_server", lambda config, _: calls.append(config))
    monkeypatch.setattr(sys, "setswitchinterval", lambda _: None)
    monkeypatch.setenv("HEADROOM_DATABASE_URL", "sqlite://")
    monkeypatch.setenv("HEADROOM_FORWARDED_ALLOW_IPS", "10.0.0.0/8")
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["serve"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert calls[0].forwarded_allow_ips == "10.0.0.0/8"


def test_the_epp_data_plane_has_its_own_port_and_network_rule() -> None:
    config = by_kind("ConfigMap")["headroom"]["data"]
    assert config["HEADROOM_DATA_PLANE_PORT"] == "8001"
    api = by_kind("Deployment")["headroom-api"]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "data-plane", "containerPort": 8001} in api["ports"]
    services = by_kind("Service")
    # The EPP's Service carries the data plane only; the console has a Service of its own.
    assert [p["port"] for p in services["headroom"]["spec"]["ports"]] == [8001]
    assert [p["port"] for p in services["headroom-console"]["spec"]["ports"]] == [8000]
    rules = by_kind("NetworkPolicy")["headroom-api"]["spec"]["ingress"]
    sources = {
        rule["ports"][0]["port"]: {
            f["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            for f in rule["from"]
        }
        for rule in rules
    }
    assert sources == {8001: {"llm-d", "monitoring"}, 8000: {"ingress-nginx"}}


def test_production_manifests_send_cookies_over_tls_only() -> None:
    assert by_kind("ConfigMap")["headroom"]["data"]["HEADROOM_UI__SECURE_COOKIES"] == "true"
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name in ("api-1", "api-2"):
        value = services[name]["environment"]["HEADROOM_UI__SECURE_COOKIES"]
        assert value == "${HEADROOM_SECURE_COOKIES:-true}"  # on unless the operator says off


def test_compose_publishes_on_localhost_unless_told_otherwise() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    published = [p for s in services.values() for p in s.get("ports", [])]
    assert published == [
        "${HEADROOM_PUBLISH_ADDRESS:-127.0.0.1}:8000:8000",
        "${HEADROOM_DATA_PLANE_ADDRESS:-127.0.0.1}:8001:8001",
    ]
    for name in ("api-1", "api-2"):
        assert services[name]["environment"]["HEADROOM_DATA_PLANE_PORT"] == "8001"
    nginx = (ROOT / "deploy/nginx/nginx.conf").read_text()
    assert "server api-1:8001" in nginx and "listen 8001" in nginx
    assert "proxy_pass http://headroom_data_plane" in nginx


def test_keda_scaled_object_reads_both_replica_gauges_headroom_exports() -> None:
    from prometheus_client.core import GaugeMetricFamily

    from backend.capacity.metrics import CapacityCollector
    from backend.capacity.models import DesiredReplicas
    from backend.capacity.service import OK, PoolReport

    (scaled,) = [
        d
        for d in yaml.safe_load_all((ROOT / "deploy/kubernetes/keda-scaledobject.yaml").read_text())
        if d
    ]
    assert scaled["kind"] == "ScaledObject"
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    triggers = scaled["spec"]["triggers"]
    assert [t["type"] for t in triggers] == ["prometheus", "prometheus"]
    queries = {t["name"]: t["metadata"]["query"] for t in triggers}

    class Monitor:  # what the collector reads: the monitor's last tick and copy of the table
        def reports(self) -> dict[str, PoolReport]:
            now = datetime.now(UTC)
            return {
                "llama-8b": PoolReport("llama-8b", OK, now, _SATURATION, 4, (), 2000.0, 100.0, 1, 6)
            }

        def desired(self, pool: str) -> DesiredReplicas | None:
            return self.all_desired().get(pool)

        def all_desired(self) -> dict[str, DesiredReplicas]:
            return {"llama-8b": DesiredReplicas(replicas=5, profile="a100-llama3-8b")}

    families = list(CapacityCollector(Monitor(), namespace="llm-d").collect())  # type: ignore[arg-type]
    for trigger, metric, value in (
        ("headroom-desired-replicas", "headroom_desired_replicas", 5),
        ("headroom-saturation-replicas", "headroom_saturation_replicas", 6),
    ):
        (family,) = [f for f in families if f.name == metric]
        assert isinstance(family, GaugeMetricFamily)
        (sample,) = family.samples
        query = queries[trigger]
        # The query names the exported metric and only labels it carries, with these values.
        assert f"{sample.name}{{" in query
        for label in ("variant_name", "namespace"):
            assert f'{label}="{sample.labels[label]}"' in query
        assert sample.labels["accelerator_type"] == "a100-llama3-8b"
        assert sample.value == value


def test_keda_pd_scaled_objects_each_read_their_roles_gauge() -> None:
    """A P/D pool's two Deployments: each ScaledObject's query names the per-role series the
    collector exports for a stored P/D answer, with its role's value; an aggregated pool's
    answer exports none."""
    from backend.capacity.metrics import CapacityCollector
    from backend.capacity.models import DesiredReplicas
    from backend.capacity.service import OK, PoolReport

    docs = [
        d
        for d in yaml.safe_load_all(
            (ROOT / "deploy/kubernetes/keda-scaledobject-pd.yaml").read_text()
        )
        if d
    ]
    assert [d["kind"] for d in docs] == ["ScaledObject", "ScaledObject"]
    targets = {d["spec"]["scaleTargetRef"]["name"]: d["spec"]["triggers"] for d in docs}
    assert set(targets) == {"llama-8b-prefill", "llama-8b-decode"}

    stored = {
        "llama-8b": DesiredReplicas(replicas=7, prefill_replicas=3, profile="a100-llama3-8b"),
        "flat": DesiredReplicas(replicas=4, prefill_replicas=None, profile="a100-llama3-8b"),
    }
    now = datetime.now(UTC)
    ticked = {
        "llama-8b": PoolReport(
            "llama-8b",
            OK,
            now,
            _SATURATION,
            7,
            (),
            2000.0,
            100.0,
            1,
            8,
            {"prefill": 5, "decode": 3},
        ),
        "flat": PoolReport("flat", OK, now, _SATURATION, 4, (), 2000.0, 100.0, 1, 4),
    }

    class Monitor:
        def reports(self) -> dict[str, PoolReport]:
            return ticked

        def desired(self, pool: str) -> DesiredReplicas | None:
            return stored.get(pool)

        def all_desired(self) -> dict[str, DesiredReplicas]:
            return stored

    families = list(CapacityCollector(Monitor(), namespace="llm-d").collect())  # type: ignore[arg-type]
    for metric, name, values in (
        ("headroom_desired_role_replicas", "desired", {"prefill": 3, "decode": 4}),
        ("headroom_saturation_role_replicas", "saturation", {"prefill": 5, "decode": 3}),
    ):
        (family,) = [f for f in families if f.name == metric]
        by_variant = {s.labels["variant_name"]: s for s in family.samples}
        assert set(by_variant) == {"llama-8b-prefill", "llama-8b-decode"}  # none for "flat"
        for role, value in values.items():
            deployment = f"llama-8b-{role}"
            (trigger,) = [
                t for t in targets[deployment] if t["name"].startswith(f"headroom-{name}")
            ]
            query = trigger["metadata"]["query"]
            sample = by_variant[deployment]
            assert sample.labels["role"] == role and sample.value == value
            assert sample.labels["accelerator_type"] == "a100-llama3-8b"
            assert f"{sample.name}{{" in query
            for label in ("variant_name", "namespace"):
                assert f'{label}="{sample.labels[label]}"' in query
    assert all(len(t) == 2 for t in targets.values())  # both triggers, the HPA takes the larger
