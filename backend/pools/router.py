from __future__ import annotations

from fastapi import APIRouter, status

from backend.auth.deps import ActorDep, EditorDep
from backend.deps import SessionDep
from backend.pools import service
from backend.pools.schemas import PoolCreate, PoolRead

router = APIRouter(prefix="/v1/pools", tags=["pools"])


@router.get("", response_model=list[PoolRead])
def list_pools(session: SessionDep, _: ActorDep) -> list[PoolRead]:
    """Every pool, the `default` one first."""
    return [PoolRead.model_validate(p) for p in service.list_pools(session)]


@router.post("", response_model=PoolRead, status_code=status.HTTP_201_CREATED)
def create_pool(data: PoolCreate, session: SessionDep, actor: EditorDep) -> PoolRead:
    """Create a pool, with a new pool's default policy (upstream's values but `strategy: most`;
    the upstream preset restores upstream's); its data-plane paths are `/pools/{name}/...`."""
    pool = service.add_pool(session, data, actor)
    return PoolRead.model_validate(pool)


@router.get("/{name}", response_model=PoolRead)
def get_pool(name: str, session: SessionDep, _: ActorDep) -> PoolRead:
    return PoolRead.model_validate(service.get_pool(session, name))
