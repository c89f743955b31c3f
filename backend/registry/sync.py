"""Keeping an API process's in-memory models in step with the active pointers in the database."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

from sqlalchemy.orm import Session, sessionmaker

from backend.predictor.features import Target, feature_names
from backend.predictor.regressors import load_model
from backend.predictor.serving import ModelStore, ServedModel
from backend.registry import service

log = logging.getLogger("headroom.sync")


class StoreSync:
    """Loads newly activated versions into a ModelStore; safe to call from several threads."""

    def __init__(self, sessions: sessionmaker[Session], store: ModelStore) -> None:
        self._sessions = sessions
        self._store = store
        self._lock = threading.Lock()

    def __call__(self, *_: object) -> int:
        """Refresh; returns how many (pool, target) models changed."""
        with self._lock, self._sessions() as session:
            refs = service.active_refs(session)
            current = self._store.snapshot()
            fresh: dict[tuple[str, Target], ServedModel] = {}
            changed = 0
            for ref in refs:
                key = (ref.pool, ref.target.label)
                served = current.get(key)
                if served is None or served.version_id != ref.version_id:
                    model = load_model(service.load_artifact(session, ref.version_id))
                    if model.feature_names != feature_names(ref.target.label, model.kind):
                        # Trained before a feature change: unusable until the next retrain,
                        # which the gate lets through because it cannot compare the two.
                        log.error("version %s has an outdated feature set", ref.version_id)
                        continue
                    served = ServedModel(
                        version_id=ref.version_id,
                        model=model,
                        kind=ref.kind,
                        objective=ref.objective,
                        quantile=ref.quantile,
                        activated_at=ref.activated_at,
                        loaded_at=datetime.now(UTC),
                        metrics=ref.metrics,
                    )
                    changed += 1
                    log.info("serving %s %s version %s", ref.pool, key[1], ref.version_id)
                fresh[key] = served
            changed += len(set(current) - set(fresh))
            if changed:
                self._store.replace(fresh)
            return changed
