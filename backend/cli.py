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
