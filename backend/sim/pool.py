"""The simulated pool's shape: pods, their GPU profiles, roles and where they sit.

``build_pool`` reads the bench command's compact options:

* ``gpu``: one profile name for every pod (``"a100-llama3-8b"``) or a mix with counts
  (``"a100-llama2-7b:4,h100-llama2-7b:4"``), assigned to pods in order;
* ``pd``: ``None`` (every pod serves whole requests) or ``"P:D"`` prefill and decode pods,
  interleaved so that every topology group gets both roles;
* ``layout``: how pods spread over the fabric: ``"rack"`` (one rack, a host each),
  ``"racks:N"``, ``"zones:N"``, ``"regions:N"`` (N groups at that level), or combinations such
  as ``"regions:2,racks:2"`` (2 regions of 2 racks each); every pod has its own host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from backend.scheduling.types import Topology
from backend.sim.gpu import available_profiles, load_profile

Role = Literal["", "prefill", "decode"]
_LEVELS = ("racks", "zones", "regions")


@dataclass(frozen=True, slots=True)
class PodSpec:
    name: str
    profile: str
    role: Role
    topology: Topology


def parse_gpu_mix(gpu: str, pods: int) -> list[str]:
    """Profile name per pod from ``"name"`` or ``"name:count,name:count"``."""
    known = set(available_profiles())
    if ":" not in gpu:
        names = [gpu.strip()] * pods
    else:
        names = []
        for part in gpu.split(","):
            name, _, count = part.strip().partition(":")
            if not count.isdigit() or int(count) < 1:
                raise ValueError(f"bad GPU mix entry {part!r}: want name:count")
            names += [name] * int(count)
        if len(names) != pods:
            raise ValueError(f"GPU mix {gpu!r} has {len(names)} pods, the pool {pods}")
    for name in set(names):
        if name not in known:
            raise ValueError(f"unknown GPU profile {name!r}; available: {sorted(known)}")
    models = {load_profile(name).model for name in names}
    if len(models) > 1:
        raise ValueError(f"one model per pool: the mix serves {sorted(models)}")
    return names


def parse_pd(pd: str | None, pods: int) -> list[Role]:
    if pd is None or pd in ("", "none", "off"):
        return [""] * pods
    p, _, d = pd.partition(":")
    if not (p.isdigit() and d.isdigit()) or int(p) < 1 or int(d) < 1:
        raise ValueError(f"bad P/D split {pd!r}: want 'P:D', e.g. '4:4'")
    n_p, n_d = int(p), int(d)
    if n_p + n_d != pods:
        raise ValueError(f"P/D split {pd!r} is {n_p + n_d} pods, the pool {pods}")
    # Interleave so that round-robin placement puts both roles in every group.
    roles: list[Role] = []
    while len(roles) < pods:
        if roles.count("prefill") < n_p:
            roles.append("prefill")
        if roles.count("decode") < n_d and len(roles) < pods:
            roles.append("decode")
    return roles


def _groups(layout: str) -> dict[str, int]:
    if layout == "rack":
        return {}
    groups: dict[str, int] = {}
    for part in layout.split(","):
        level, _, count = part.strip().partition(":")
        if level not in _LEVELS or not count.isdigit() or int(count) < 1:
            raise ValueError(f"bad layout {layout!r}: want 'rack', 'racks:N', 'zones:N', ...")
        groups[level] = int(count)
    return groups


def layout_topology(layout: str, pods: int) -> list[Topology]:
    """Pods fill the groups in contiguous blocks (pod i goes to group i * G // pods of G), so
    that neighbours share a rack: with roles interleaved P, D, P, D every rack holds both."""
    groups = _groups(layout)
    n_region, n_zone, n_rack = (groups.get(k, 1) for k in ("regions", "zones", "racks"))
    total = n_region * n_zone * n_rack
    out = []
    for i in range(pods):
        g = i * total // pods
        rest, rack = divmod(g, n_rack)
        region, zone = divmod(rest, n_zone)
        out.append(
            Topology(
                host=f"host-{i}",
                rack=f"rack-{region}.{zone}.{rack}",
                zone=f"zone-{region}.{zone}",
                region=f"region-{region}",
            )
        )
    return out


def build_pool(
    pods: int, gpu: str = "a100-llama3-8b", pd: str | None = None, layout: str = "rack"
) -> tuple[PodSpec, ...]:
    if pods < 1:
        raise ValueError("a pool needs at least one pod")
    profiles = parse_gpu_mix(gpu, pods)
    roles = parse_pd(pd, pods)
    places = layout_topology(layout, pods)
    return tuple(
        PodSpec(f"{role or 'pod'}-{i}", profile, role, topo)
        for i, (profile, role, topo) in enumerate(zip(profiles, roles, places, strict=True))
    )
