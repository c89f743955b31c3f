from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

# Free text (descriptions): line breaks and tabs, but no other control character (a NUL is
# refused by PostgreSQL with an error, the rest end up in logs and exports).
FREE_TEXT = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*$"

# Pool names are used in URL paths and mirror Kubernetes object names (RFC 1123 labels).
POOL_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class PoolCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        pattern=POOL_NAME_PATTERN, description="DNS-label style name, e.g. `llama-70b`."
    )
    description: str = Field("", max_length=500, pattern=FREE_TEXT)


class PoolRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    description: str
    created_at: datetime
