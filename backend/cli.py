"""The `headroom` command."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import typer
import uvicorn
from rich.console import Console
from uvicorn.supervisors import Multiprocess

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
    demo: bool = typer.Option(
        False,
        "--demo",
        help="Feed the embedded service with samples from the simulator replaying the shipped "
        "traces, so that models train and the console at /ui/ fills within a minute; prints the "
        "demo user's password.",
    ),
) -> None:
    """Run the API service (and, with no Redis configured, the whole product in-process)."""
    if demo:
        _enable_demo()
    settings = get_settings()
    if settings.embedded and workers > 1:
        raise typer.BadParameter("the embedded mode runs one process; set HEADROOM_REDIS_URL")
    if settings.ui.demo and not settings.embedded:
        raise typer.BadParameter("--demo feeds the embedded mode; unset HEADROOM_REDIS_URL")
    mode = "embedded (SQLite, in-process training)" if settings.embedded else "production"
    console.print(f"[bold]headroom[/] {mode}; database {_redact(settings.database_url)}")
    if demo:
        password = settings.ui.demo_password
        assert password is not None
        console.print(
            f"[bold]demo mode[/]: open http://{host or settings.host}:{port or settings.port}/ui/ "
            f"and sign in as [bold]demo[/] / [bold]{password.get_secret_value()}[/]"
        )
    _tune_interpreter()
    config = uvicorn.Config(
        "backend.app:create_app",
        factory=True,
        host=host or settings.host,
        port=port or settings.port,
        workers=workers,
        log_level=settings.log_level,
        # Which peers may name the client in X-Forwarded-For: the console's sign-in limit counts
        # per client address, and behind a proxy every client would otherwise be the proxy.
        # None keeps uvicorn's default (FORWARDED_ALLOW_IPS, else 127.0.0.1 and ::1).
        forwarded_allow_ips=settings.forwarded_allow_ips,
    )
    data_plane = None
    if settings.data_plane_port is not None:
        # The EPP's port: the same application, which tells the two apart by the local port.
        data_plane = (settings.data_plane_host or config.host, settings.data_plane_port)
        console.print(f"data plane (upstream routes only) on port {settings.data_plane_port}")
    run_server(config, data_plane)


def run_server(config: uvicorn.Config, data_plane: tuple[str, int] | None) -> None:
    """What `uvicorn.run` does, with a second listening socket when a data-plane port is set
    (uvicorn serves any number of sockets, in one worker or several)."""
    sockets = [config.bind_socket()]
    if data_plane is not None:
        host, port = data_plane
        sockets.append(uvicorn.Config(config.app, host=host, port=port).bind_socket())
    server = uvicorn.Server(config)
    try:
        if config.workers > 1:
            Multiprocess(config, sockets=sockets).run()
        else:
            server.run(sockets=sockets)
    except KeyboardInterrupt:
        pass
    if config.workers == 1 and not server.started:
        sys.exit(3)  # uvicorn's STARTUP_FAILURE: the application did not start


def _tune_interpreter() -> None:
    """Settings of the CPython runtime for a long-running API process."""
    # Ingestion's CPU work runs in worker threads; a short GIL switch interval lets the event
    # loop answer predictions between their slices instead of waiting up to 5 ms each time.
    sys.setswitchinterval(0.0005)
    # The cyclic GC scanned every long-lived object (modules, classes, the ORM's metadata) over
    # and over while an ingestion call allocated its thousands of entries: half of parsing
    # time. Importing the application first and freezing what exists moves those objects out
    # of the collector's sight; a larger first generation makes collections rarer.
    import backend.app  # noqa: F401 - imported for its side effect: everything is loaded

    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


@app.command()
def worker(
    beat: bool = typer.Option(False, "--beat", help="Also run the periodic scheduler in-process."),
    concurrency: int = typer.Option(2, help="Worker processes."),
    loglevel: str = typer.Option("info", help="Celery log level."),
) -> None:
    """Run a Celery worker (production mode: training, window trimming)."""
    from backend.tasks import create_celery

    argv = ["worker", f"--concurrency={concurrency}", f"--loglevel={loglevel}"]
    create_celery(get_settings()).worker_main(argv + (["--beat"] if beat else []))


@app.command()
def beat(loglevel: str = typer.Option("info", help="Celery log level.")) -> None:
    """Run the Celery beat scheduler that enqueues periodic work (run exactly one)."""
    from backend.tasks import create_celery

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
    from backend.auth.service import add_user
    from backend.db import short_lived_sessions
    from backend.exceptions import AppError, Invalid

    try:
        with short_lived_sessions(get_settings().database_url) as sessions, sessions() as session:
            add_user(session, username, password, role)
    except AppError as exc:
        field = exc.field if isinstance(exc, Invalid) and exc.field else "username"
        raise typer.BadParameter(exc.detail, param_hint=field) from None
    console.print(f"user {username} ({role}) created")


@user_app.command("token")
def user_token(
    username: str,
    name: str = typer.Option("cli", help="A label to recognise the token by."),
    scopes: str = typer.Option("admin", help="Comma-separated: ingest, predict, admin."),
) -> None:
    """Create an API token for USERNAME; it is printed once and stored only as a hash."""
    from backend.auth.service import is_valid_username, issue_token, user_by_name
    from backend.db import short_lived_sessions
    from backend.exceptions import AppError

    with short_lived_sessions(get_settings().database_url) as sessions, sessions() as session:
        user = user_by_name(session, username) if is_valid_username(username) else None
        if user is None:
            raise typer.BadParameter(f"no user {username!r}", param_hint="username")
        try:
            _, clear = issue_token(session, user, name, scopes.split(","))
        except AppError as exc:
            raise typer.BadParameter(exc.detail) from None
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


def _enable_demo() -> None:
    """Demo mode travels to the app factory (which uvicorn calls) through the environment."""
    import os
    import secrets

    os.environ["HEADROOM_UI__DEMO"] = "true"
    # A fresh password each start, printed here: nobody else can know it.
    os.environ.setdefault("HEADROOM_UI__DEMO_PASSWORD", secrets.token_urlsafe(9))
    get_settings.cache_clear()


def _redact(url: str) -> str:
    # Never print a password into a log.
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url


@app.command("bench")
def bench(
    trace: str = typer.Option(
        "mooncake-conversation",
        help="Trace to replay: mooncake-conversation, mooncake-synthetic, azure-code, azure-conv.",
    ),
    pods: int = typer.Option(8, help="Pods in the simulated pool."),
    gpu: str = typer.Option(
        "a100-llama3-8b",
        help="GPU profile of every pod, or a mix with counts: a100-llama2-7b:4,h100-llama2-7b:4.",
    ),
    pd: str | None = typer.Option(
        None, "--pd", help="Prefill/decode disaggregation as P:D pods, e.g. 4:4 (default: off)."
    ),
    layout: str = typer.Option(
        "rack", help="Topology: rack, racks:N, zones:N, regions:N or regions:N,racks:M."
    ),
    loads: str = typer.Option(
        "0.5,0.75,1.0,1.15", help="Load levels: multiples of the trace's request rate."
    ),
    policies: str = typer.Option(
        "all", help="Comma-separated policy names, or all (the P/D ablation only with --pd)."
    ),
    seed: int = typer.Option(0, help="Seed of every random choice (router, picker, sampling)."),
    ttft_slo_ms: float = typer.Option(2000.0, help="TTFT SLO of every request (ms)."),
    tpot_slo_ms: float = typer.Option(100.0, help="TPOT SLO of every request (ms)."),
    limit: int | None = typer.Option(None, help="Replay only the first N requests."),
    max_model_len: int | None = typer.Option(
        None, help="Clip requests to this context (default: what the pods' KV caches hold)."
    ),
    sheddable_fraction: float = typer.Option(
        0.0, help="Share of requests with priority -1, which the SLO admitter may shed."
    ),
    out: Path = typer.Option(Path("bench-results"), help="Directory for JSON, table and plots."),
) -> None:
    """Replay a real trace through a simulated pool under each routing policy and compare them.

    Writes results.json, results.md (a table) and PNG plots (latency CDFs, SLO attainment and
    TTFT p90 against load) into OUT.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from backend.sim.bench import BenchConfig, run_bench, total_requests, write_outputs
    from backend.sim.routers import MAIN_POLICIES, POLICIES

    everything = tuple(POLICIES) if pd else MAIN_POLICIES
    names = everything if policies == "all" else tuple(p.strip() for p in policies.split(","))
    try:
        config = BenchConfig(
            trace=trace,
            pods=pods,
            gpu=gpu,
            pd=pd,
            layout=layout,
            loads=tuple(float(x) for x in loads.split(",")),
            policies=names,
            seed=seed,
            ttft_slo_ms=ttft_slo_ms,
            tpot_slo_ms=tpot_slo_ms,
            limit=limit,
            max_model_len=max_model_len,
            sheddable_fraction=sheddable_fraction,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} requests"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("simulating", total=total_requests(config))

        def done(row: dict[str, object]) -> None:
            bar.console.print(
                f"load {row['load']:g} {row['policy']}: SLO met {row['slo_attainment']}, "
                f"wall {row['wall_s']} s"
            )

        try:
            data = run_bench(config, progress=lambda n: bar.advance(task, n), on_result=done)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    for path in write_outputs(data, out):
        console.print(f"wrote {path}")
    typer.echo((out / "results.md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    app()
