from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query

from backend.auth.deps import ActorDep, EditorDep
from backend.deps import IdPath, RuntimeDep, SessionDep
from backend.predictor.live_bias import HighLoadBias
from backend.predictor.regressors import HybridModel, load_model
from backend.registry import service
from backend.registry.models import ModelVersion
from backend.registry.schemas import ModelVersionDetail, ModelVersionRead
from backend.samples.models import TargetCode

router = APIRouter(prefix="/v1/models", tags=["models"])


def _read(v: ModelVersion, pool: str, bias: HighLoadBias | None = None) -> dict[str, object]:
    return {
        "live_high_load_bias": bias.bias if bias else None,
        "live_high_load_n": bias.n if bias else 0,
        "id": v.id,
        "pool": pool,
        "target": TargetCode(v.target).label,
        "kind": v.kind,
        "objective": v.objective,
        "quantile": v.quantile,
        "status": v.status,
        "gate_reason": v.gate_reason,
        "metrics": v.metrics,
        "n_train": v.n_train,
        "n_test": v.n_test,
        "train_seconds": v.train_seconds,
        "artifact_bytes": v.artifact_bytes,
        "training_started_at": v.training_started_at,
        "created_at": v.created_at,
        "activated_at": v.activated_at,
    }


@router.get("", response_model=list[ModelVersionRead])
def list_models(
    runtime: RuntimeDep,
    session: SessionDep,
    _: ActorDep,
    pool: str | None = Query(None, description="Only this pool's versions."),
    target: Literal["ttft", "tpot"] | None = Query(None),
    limit: int = Query(50, ge=1, le=1000),
) -> list[ModelVersionRead]:
    """Model versions, newest first, with their held-out metrics and gate decisions."""
    pool_id = runtime.pools.resolve(session, pool) if pool is not None else None
    names = service.pool_names(session)
    versions = service.list_versions(
        session, pool_id, TargetCode.from_label(target) if target else None, limit
    )
    biases = service.high_load_biases(session, versions)
    return [
        ModelVersionRead.model_validate(_read(v, names[v.pool_id], biases.get(v.id)))
        for v in versions
    ]


@router.get("/{version_id}", response_model=ModelVersionDetail)
def get_model(version_id: IdPath, session: SessionDep, _: ActorDep) -> ModelVersionDetail:
    """One version, with feature importances and (hybrid) the physics base's coefficients."""
    version = service.get_version(session, version_id)
    model = load_model(version.artifact)
    bias = service.high_load_biases(session, [version]).get(version.id)
    return ModelVersionDetail.model_validate(
        {
            **_read(version, service.pool_names(session)[version.pool_id], bias),
            "feature_importance": model.feature_importance(),
            "coefficients": model.coefficients() if isinstance(model, HybridModel) else None,
        }
    )


@router.post("/{version_id}/activate", response_model=ModelVersionRead)
def activate_model(
    version_id: IdPath, runtime: RuntimeDep, session: SessionDep, actor: EditorDep
) -> ModelVersionRead:
    """Serve this version (e.g. roll back to an earlier one); every replica swaps within ~1 s.
    The activation is recorded as made by the token's user."""
    version = service.activate_version(session, runtime.notifier, version_id, actor.name)
    return ModelVersionRead.model_validate(
        _read(version, service.pool_names(session)[version.pool_id])
    )
