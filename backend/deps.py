"""What routes depend on: the process-wide runtime and a per-request database session."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from backend.pools.service import PoolCache
from backend.samples.window import WindowSpec
from backend.settings import Settings


@dataclass
class Runtime:
    """Everything a process builds once at start-up and shares between requests."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    pools: PoolCache = field(default_factory=PoolCache)
    rng: random.Random = field(default_factory=random.Random)

    @property
    def window(self) -> WindowSpec:
        return WindowSpec.from_settings(self.settings.window)


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_session(runtime: RuntimeDep) -> Iterator[Session]:
    # Routes commit explicitly before answering; anything uncommitted is rolled back here.
    with runtime.sessions() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]
