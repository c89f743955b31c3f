"""The application's errors: what went wrong in the domain's words, not HTTP's.

Services raise these; `backend.errors` answers them in the one JSON error shape and
`backend.ui.errors` with the console's HTML error page, so no route translates them by hand.
"""

from __future__ import annotations

from typing import ClassVar


class AppError(Exception):
    """An error the caller can act on; `status_code` is the HTTP status both handlers answer."""

    status_code: ClassVar[int] = 400

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class NotFound(AppError, LookupError):
    status_code = 404


class Conflict(AppError):
    """The write collides with the stored state: a duplicate, or a change made meanwhile.

    `current_version` (when the record is versioned) lets the caller reload and retry.
    """

    status_code = 409

    def __init__(self, detail: str, *, current_version: int | None = None) -> None:
        super().__init__(detail)
        self.current_version = current_version


class Forbidden(AppError):
    status_code = 403


class Invalid(AppError, ValueError):
    """Input the domain refuses; `field` names it (a form shows the message beside it)."""

    status_code = 422

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.field = field
