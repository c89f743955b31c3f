from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from backend.deps import RuntimeDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """Liveness: the process answers. Upstream's exact body."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(runtime: RuntimeDep) -> JSONResponse:
    """Readiness: the database answers and its schema is migrated."""
    try:
        with runtime.engine.connect() as conn:
            conn.execute(text("SELECT 1 FROM pools LIMIT 1"))
    except Exception as exc:  # any failure means "do not route traffic here"
        return JSONResponse(
            status_code=503, content={"detail": f"database not ready: {type(exc).__name__}"}
        )
    return JSONResponse({"status": "ready"})
