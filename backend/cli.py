"""The `headroom` command."""

from __future__ import annotations

import typer
import uvicorn
from rich.console import Console

from backend import migrate
from backend.settings import get_settings

app = typer.Typer(help="Headroom: predicted-latency routing control plane.", no_args_is_help=True)
db_app = typer.Typer(help="Database schema management.", no_args_is_help=True)
app.add_typer(db_app, name="db")
console = Console(stderr=True)


@app.command()
def serve(
    host: str | None = typer.Option(None, help="Bind address (default HEADROOM_HOST)."),
    port: int | None = typer.Option(None, help="Port (default HEADROOM_PORT)."),
    workers: int = typer.Option(1, help="Uvicorn worker processes."),
) -> None:
    """Run the API service (and, with no Redis configured, the whole product in-process)."""
    settings = get_settings()
    if settings.embedded and workers > 1:
        raise typer.BadParameter("the embedded mode runs one process; set HEADROOM_REDIS_URL")
    mode = "embedded (SQLite, in-process training)" if settings.embedded else "production"
    console.print(f"[bold]headroom[/] {mode}; database {_redact(settings.database_url)}")
    uvicorn.run(
        "backend.app:create_app",
        factory=True,
        host=host or settings.host,
        port=port or settings.port,
        workers=workers,
        log_level=settings.log_level,
    )


@app.command()
def worker(
    beat: bool = typer.Option(False, "--beat", help="Also run the periodic scheduler in-process."),
    concurrency: int = typer.Option(2, help="Worker processes."),
    loglevel: str = typer.Option("info", help="Celery log level."),
) -> None:
    """Run a Celery worker (production mode: training, window trimming)."""
    from workers.celery_app import create_celery

    argv = ["worker", f"--concurrency={concurrency}", f"--loglevel={loglevel}"]
    create_celery(get_settings()).worker_main(argv + (["--beat"] if beat else []))


@app.command()
def beat(loglevel: str = typer.Option("info", help="Celery log level.")) -> None:
    """Run the Celery beat scheduler that enqueues periodic work (run exactly one)."""
    from workers.celery_app import create_celery

    create_celery(get_settings()).start(["beat", f"--loglevel={loglevel}"])


user_app = typer.Typer(help="Users and API tokens.", no_args_is_help=True)
app.add_typer(user_app, name="user")


@user_app.command("create")
def user_create(
    username: str,
    role: str = typer.Option("admin", help="viewer, editor or admin."),
    password: str = typer.Option(
        ..., prompt=True, hide_input=True, confirmation_prompt=True, help="At least 8 characters."
    ),
) -> None:
    """Create a user (the first one is usually an admin)."""
    from backend.auth.service import UserExists, create_user
    from backend.db import make_engine, make_sessionmaker, unit_of_work

    sessions = make_sessionmaker(make_engine(get_settings().database_url))
    try:
        with unit_of_work(sessions) as session:
            create_user(session, username, password, role)  # type: ignore[arg-type]
    except (UserExists, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    console.print(f"user {username} ({role}) created")


@user_app.command("token")
def user_token(
    username: str,
    name: str = typer.Option("cli", help="A label to recognise the token by."),
    scopes: str = typer.Option("admin", help="Comma-separated: ingest, predict, admin."),
) -> None:
    """Create an API token for USERNAME; it is printed once and stored only as a hash."""
    from sqlalchemy import select

    from backend.auth.models import User
    from backend.auth.service import create_token
    from backend.db import make_engine, make_sessionmaker, unit_of_work

    sessions = make_sessionmaker(make_engine(get_settings().database_url))
    with unit_of_work(sessions) as session:
        user = session.scalar(select(User).where(User.username == username))
        if user is None:
            raise typer.BadParameter(f"no user {username!r}")
        try:
            _, clear = create_token(session, user, name, scopes.split(","))
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    typer.echo(clear)


@db_app.command("upgrade")
def db_upgrade(revision: str = typer.Argument("head")) -> None:
    """Apply migrations up to REVISION (default: the newest)."""
    url = get_settings().database_url
    migrate.upgrade(url, revision)
    console.print(f"database {_redact(url)} at {revision}")


@db_app.command("downgrade")
def db_downgrade(revision: str) -> None:
    """Revert migrations down to REVISION."""
    migrate.downgrade(get_settings().database_url, revision)


@db_app.command("current")
def db_current() -> None:
    """Show the schema revision of the database."""
    migrate.current(get_settings().database_url)


def _redact(url: str) -> str:
    # Never print a password into a log.
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url


if __name__ == "__main__":
    app()
