from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

# Pool names are used in URL paths and mirror Kubernetes object names (RFC 1123 labels).
POOL_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class PoolCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        pattern=POOL_NAME_PATTERN, description="DNS-label style name, e.g. `llama-70b`."
    )
    description: str = Field("", max_length=500)


class PoolRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    description: str
    created_at: datetime
