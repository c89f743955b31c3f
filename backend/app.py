"""The FastAPI application factory: routers, middleware, and the start-up/shut-down lifespan."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from backend import logs, migrate
from backend.advisor.router import router as advisor_router
from backend.background import start_background
from backend.capacity.metrics import CapacityCollector
from backend.capacity.router import router as capacity_router
from backend.compat.prediction import pool_router as compat_pool_router
from backend.compat.prediction import root_router as compat_root_router
from backend.compat.training import router as compat_training_router
from backend.dataplane import DataPlaneOnly
from backend.db import dispose, make_engine, make_sessionmaker, unit_of_work
from backend.deps import Runtime
from backend.docs import install_docs
from backend.errors import ERROR_RESPONSES, BodySizeLimit, install_error_handlers
from backend.health import router as health_router
from backend.logs import RequestContext
from backend.policies.router import router as policies_router
from backend.pools.router import router as pools_router
from backend.pools.service import ensure_default_pool
from backend.prediction.router import router as serving_router
from backend.registry.router import router as registry_router
from backend.routing.router import router as routing_router
from backend.samples import offload
from backend.samples.offload import IngestPool
from backend.samples.router import router as samples_router
from backend.settings import Settings, get_settings
from backend.telemetry import ServingCollector, Telemetry
from backend.ui.app import PREFIX as CONSOLE_PREFIX
from backend.ui.app import Console

log = logging.getLogger("headroom")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.should_auto_migrate:
            migrate.upgrade(settings.database_url)
        logs.configure(settings.log_level)
        engine = make_engine(settings.database_url)
        try:
            runtime = Runtime(
                settings=settings,
                engine=engine,
                sessions=make_sessionmaker(engine),
                telemetry=telemetry,
            )
            collector = ServingCollector(runtime.store, runtime.sessions, runtime.failures)
            telemetry.registry.register(collector)
            capacity = CapacityCollector(runtime.capacity, settings.capacity.namespace)
            telemetry.registry.register(capacity)
            with unit_of_work(runtime.sessions) as session:
                ensure_default_pool(session)
            if processes := offload.wanted(settings):
                runtime.ingest_pool = IngestPool(settings, processes)
                await run_in_threadpool(runtime.ingest_pool.warm_up)
            app.state.runtime = runtime
            background = start_background(runtime)
            console.start(runtime)
        except BaseException:
            dispose(engine)  # a start that failed leaves no connection behind
            raise
        log.info("headroom ready (%s mode)", "embedded" if settings.embedded else "production")
        try:
            yield
        finally:
            console.stop()
            background.stop()
            if "advisor" in vars(runtime):  # started only if someone asked for advice
                runtime.advisor.stop()
            if runtime.ingest_pool is not None:
                await run_in_threadpool(runtime.ingest_pool.close)
            telemetry.registry.unregister(collector)
            telemetry.registry.unregister(capacity)
            dispose(engine)

    app = FastAPI(
        title="Headroom",
        summary="Predicted-latency routing control plane for LLM inference pools.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # served by install_docs, with a Content-Security-Policy
        redoc_url=None,
    )
    install_docs(app)
    install_error_handlers(app)
    telemetry = Telemetry()
    app.state.telemetry = telemetry
    app.add_middleware(
        BodySizeLimit,
        limit=settings.ingest.max_body_bytes,
        telemetry=telemetry,
        read_timeout_s=settings.ingest.body_read_timeout_s,
    )
    # The EPP's port serves its routes only (see backend/dataplane.py).
    if settings.data_plane_port is not None:
        data_plane = (compat_training_router, compat_root_router, compat_pool_router, health_router)
        app.add_middleware(
            DataPlaneOnly,
            port=settings.data_plane_port,
            routes=[route for router in data_plane for route in router.routes],
        )
    # Outermost: every response, errors and 413s included, gets a request id and is timed.
    app.add_middleware(RequestContext, telemetry=telemetry)
    # Routes are matched in order, one by one: the EPP's hot paths (bulk predictions on every
    # scheduling decision, training samples every second) come first.
    for router in (
        compat_training_router,
        compat_root_router,
        serving_router,
        samples_router,
        compat_pool_router,
        health_router,
        pools_router,
        registry_router,
        policies_router,
        routing_router,
        capacity_router,
        advisor_router,
    ):
        app.include_router(router, responses=ERROR_RESPONSES)

    # The web console: its own sub-application (sessions, CSRF, HTML errors), see backend/ui.
    console = Console(settings)
    app.state.console = console  # its state (clock, renderer) is reachable for tests
    app.mount(CONSOLE_PREFIX, console.app)

    return app
