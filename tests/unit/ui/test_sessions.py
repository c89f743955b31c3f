"""Console session keys: random per start when embedded, required and strong in production."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from backend.app import create_app
from backend.auth.sessions import InsecureSecret, csrf_matches, csrf_token, session_secret
from backend.settings import Settings, UISettings

PRODUCTION = {"database_url": "postgresql+psycopg://x@127.0.0.1/none", "redis_url": "redis://x"}


def test_embedded_mode_makes_a_random_key_per_start() -> None:
    settings = Settings(database_url="sqlite://")
    first, second = session_secret(settings), session_secret(settings)
    assert first != second
    assert len(first) >= 32


def test_production_mode_refuses_to_start_without_a_key() -> None:
    with pytest.raises(InsecureSecret, match="HEADROOM_UI__SESSION_SECRET is not set"):
        create_app(Settings(**PRODUCTION))  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["changethis", "CHANGEME", "secret", "x" * 31])
def test_placeholder_or_short_keys_are_refused(value: str) -> None:
    settings = Settings(**PRODUCTION, ui=UISettings(session_secret=SecretStr(value)))  # type: ignore[arg-type]
    with pytest.raises(InsecureSecret, match="placeholder or shorter than 32"):
        session_secret(settings)


def test_a_proper_key_is_used_as_given() -> None:
    key = "k" * 40
    settings = Settings(**PRODUCTION, ui=UISettings(session_secret=SecretStr(key)))  # type: ignore[arg-type]
    assert session_secret(settings) == key


def test_csrf_token_is_made_once_and_compared_exactly() -> None:
    session: dict[str, object] = {}
    token = csrf_token(session)
    assert csrf_token(session) == token
    assert csrf_matches(session, token)
    assert not csrf_matches(session, token[:-1])
    assert not csrf_matches(session, None)
    assert not csrf_matches({}, token)
