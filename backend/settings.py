"""Configuration, read from the environment (prefix ``HEADROOM_``) and an optional ``.env``.

Nested subsystems use ``__`` as the delimiter, e.g. ``HEADROOM_WINDOW__CAP=1000``.
Nothing here connects to anything: settings are plain values.
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, Field, IPvAnyNetwork, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class WindowSettings(BaseModel):
    """The stratified sliding window of training samples, per (pool, target)."""

    kv_step: float = Field(0.1, gt=0, le=1, description="Width of a KV-cache utilisation bucket.")
    prefix_step: float = Field(
        0.25, gt=0, le=1, description="Width of a prefix-cache score bucket."
    )
    queue_band_edges: list[int] = Field(
        default_factory=lambda: [1, 3, 8, 16],
        description="Lower edges of the queue-depth bands after the first; [1, 3] gives the bands "
        "0, 1-2 and >= 3 waiting requests.",
    )
    cap: int = Field(500, ge=1, description="Most samples kept per bucket; the newest are kept.")
    test_fraction: float = Field(
        0.1, ge=0, lt=1, description="Share of samples held out for evaluation, fixed at arrival."
    )
    trim_interval_s: float = Field(
        2.0, gt=0, description="How often over-full buckets are trimmed back to the cap."
    )

    @field_validator("queue_band_edges")
    @classmethod
    def _edges_increase(cls, edges: list[int]) -> list[int]:
        if any(e <= 0 for e in edges) or any(b <= a for a, b in itertools.pairwise(edges)):
            raise ValueError("queue_band_edges must be positive and strictly increasing")
        return edges


class TrainingSettings(BaseModel):
    """Online retraining of each (pool, target) model."""

    interval_s: float = Field(
        10.0, gt=0, description="How often windows are checked and retrained."
    )
    model_kind: Literal["hybrid", "xgboost"] = Field(
        "hybrid",
        description="hybrid: a physics base that extrapolates with trees on its residual; "
        "xgboost: plain trees, as upstream (kept for comparison).",
    )
    objective: Literal["mean", "quantile"] = Field("mean", description="What the model predicts.")
    quantile: float = Field(0.9, gt=0, lt=1, description="Quantile for the quantile objective.")
    min_samples_fresh: int = Field(
        10, ge=1, description="Samples a window needs before its first model is trained."
    )
    min_samples_loaded: int = Field(
        100,
        ge=1,
        description="Samples needed before replacing a model that this process found already "
        "stored when it started (so a restart does not swap in a model of a few samples).",
    )
    gate_tolerance: float = Field(
        0.1,
        ge=0,
        description="A candidate is activated when its held-out MAPE is at most (1 + tolerance) "
        "times the active model's on the same rows.",
    )
    gate_min_test: int = Field(
        10, ge=0, description="Below this many held-out rows the gate cannot judge; newest wins."
    )
    gate_drift_factor: float = Field(
        2.0,
        gt=1,
        description="Drift: when the active model's live error (from the predicted_*_ms the "
        "router sends back, on rows newer than its training) exceeds this multiple of its "
        "held-out error and of the router's live error on older rows, and the worst earlier "
        "run of as many rows, the next candidate replaces it regardless of the comparison.",
    )
    gate_high_load_bias_limit: float | None = Field(
        None,
        gt=0,
        description="Drift also when the active model's live median bias on its highest-load "
        "rows (top decile by requests running + waiting) is beyond this fraction either way; "
        "unset: off. Near saturation the predictor errs optimistic first.",
    )
    gate_drift_cut_rows: int = Field(
        100,
        ge=0,
        description="A drift cuts the window (the candidate trains only on rows newer than the "
        "active model's training) only when there are at least this many of them; with fewer "
        "it still replaces the active model, by a candidate of the whole window. The bar "
        "min_samples_loaded sets against swapping in a model of a few samples.",
    )
    outlier_factor: float = Field(
        3.0,
        gt=1,
        description="A sample whose latency is more than this factor above or below the active "
        "model's prediction is an outlier: kept and counted, but trained on only once its shift "
        "has held for shift_hold_s (the flood rule, docs/design.md).",
    )
    shift_hold_s: float = Field(
        120.0,
        ge=0,
        description="How long (and over at least two training rounds) a majority of new "
        "samples must stay outliers before they count as a new regime and train.",
    )
    lock_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Expiry of the training lock of a (pool, target): a worker killed while "
        "training blocks that target at most this long. Must exceed a full-window training.",
    )


DECIDED_HOLD_MS = 2.0
"""How long a /v1/schedule decision counts in its pod's in-flight work by default: about a
router's time from the decision to the dispatch (the simulator's is 1.15 ms). Chosen on the
protocol's tuning slices (docs/benchmarks.md, "Decisions held until dispatch"); the simulator's
Headroom policy holds its decisions as long."""


class ServingSettings(BaseModel):
    """The in-memory models of every API process."""

    poll_interval_s: float = Field(
        5.0, gt=0, description="Fallback poll of the active models, should a notification be lost."
    )
    ready_without_model: bool = Field(
        True,
        description="`/readyz` (and `/pools/{pool}/readyz`) answer 200 before the pool has a "
        "model: the EPP then routes with its composite heuristic while predictions answer 503. "
        "False: not ready until a model is loaded (upstream's prediction-sidecar behaviour).",
    )
    decided_hold_ms: float = Field(
        DECIDED_HOLD_MS,
        ge=0,
        le=60_000,
        description="How long a `/v1/schedule` decision counts in its pod's in-flight work "
        "(`dispatched_requests`, `prefill_tokens_in_flight`) in this process's later decisions, "
        "until the router's own counters show it: requests decided together see one another. "
        "About the time from the decision to the dispatch; 0 turns it off (upstream's EPP).",
    )


class AuthSettings(BaseModel):
    """Who may call the API."""

    required: bool = Field(
        False,
        description="Require bearer tokens: control-plane reads and writes, and the /v1 data "
        "plane (scopes ingest / predict). Off suits a single-user local install; production "
        "should turn it on (see README).",
    )
    trust_upstream_routes: bool = Field(
        True,
        description="Leave the upstream-compatible routes (/add_training_data_bulk, /predict/...) "
        "open even when tokens are required: the llm-d EPP sends no credentials, so they must be "
        "reachable only from its trusted network (NetworkPolicy). False requires tokens there too.",
    )
    trust_upstream_flush: bool = Field(
        True,
        description="Let the token-less upstream POST /flush (root and /pools/{pool}/flush) "
        "follow trust_upstream_routes. Flushing is destructive: set false to require an "
        "editor's admin-scope token there even when the other upstream routes are trusted "
        "(the EPP itself never calls /flush).",
    )
    upstream_networks: list[IPvAnyNetwork] = Field(
        default_factory=list,
        description='Client networks (CIDRs, e.g. ["10.42.0.0/16"]) allowed to call the '
        "token-less upstream routes and /metrics; any other client gets 403 there unless it "
        "brings a token (with `required` on). Empty: any client, as before. Behind a proxy the "
        "client is the one named by X-Forwarded-For from `forwarded_allow_ips`.",
    )


PASSWORD_MIN = 8
"""The shortest password the console accepts (``backend.auth.service`` enforces it)."""


class UISettings(BaseModel):
    """The web console (`/ui`): sessions, demo mode and the Overview's warnings."""

    session_secret: SecretStr | None = Field(
        None,
        description="Key that signs console session cookies (at least 32 characters). Required "
        "in production mode, where every API replica must share it; unset in the embedded mode "
        "means a random key per start (signing in again after a restart).",
    )
    session_max_age_s: int = Field(
        8 * 3600,
        ge=60,
        description="A console session ends this long after signing in, however active (its "
        "database row expires; signing out, a password change or disabling the user end it "
        "sooner).",
    )
    secure_cookies: bool = Field(
        False, description="Send the session cookie over HTTPS only; turn on behind TLS."
    )
    sign_in_max_failures_per_user: int = Field(
        5,
        ge=1,
        description="Failed sign-ins for one username within `sign_in_failure_window_s` after "
        "which further attempts for it are refused (429) without checking the password.",
    )
    sign_in_max_failures_per_ip: int = Field(
        20,
        ge=1,
        description="Failed sign-ins from one client address within `sign_in_failure_window_s` "
        "after which further attempts from it are refused (429). The address is the one uvicorn "
        "reports: behind a proxy, see `forwarded_allow_ips`.",
    )
    sign_in_failure_window_s: int = Field(
        15 * 60,
        ge=1,
        description="How far back failed sign-ins count towards the limits; a lock lifts when "
        "enough of them are older than this.",
    )
    purge_interval_s: float = Field(
        300.0,
        gt=0,
        description="How often expired console sessions and failed sign-ins older than the "
        "window are deleted (a thread when embedded, a beat task in production).",
    )
    demo: bool = Field(
        False,
        description="Feed the embedded service with simulated samples so that models train and "
        "the console fills (`headroom serve --demo`).",
    )
    demo_password: SecretStr | None = Field(
        None,
        # The console's rule for every password, checked here too so that a short one stops
        # the start with this field's name, not a traceback from the demo's start-up.
        min_length=PASSWORD_MIN,
        description="Password of the `demo` admin in demo mode (at least 8 characters); "
        "`headroom serve --demo` sets a random one and prints it.",
    )
    stale_after_s: float = Field(
        600.0,
        gt=0,
        description="The Overview flags a model as stale when samples arrived after it and it "
        "is older than this.",
    )
    whatif_requests: int = Field(
        1500,
        ge=50,
        le=20000,
        description="Requests of the chosen trace a what-if replays (twice: active and edited "
        "policy); 1,500 take about 30 s on one core.",
    )
    frontend_dir: str | None = Field(
        None,
        description="Folder holding the console's templates/ and static/; unset: the checkout's "
        "frontend/ or ./frontend.",
    )


class AdvisorSettings(BaseModel):
    """The advisor's search budget (backend/advisor/): what one advice job simulates."""

    requests: int = Field(
        1000,
        ge=10,
        le=20000,
        description="Requests per trace part (each simulation replays one part); the screening "
        "round runs about 20 candidates on one part.",
    )
    seeds: int = Field(
        3, ge=1, le=10, description="Seeds, and held-out parts (part i with seed i)."
    )
    survivors: int = Field(
        6, ge=1, le=50, description="EPP-expressible candidates kept after the screening round."
    )
    finalists: int = Field(
        3, ge=1, le=20, description="Candidates ranked on the held-out parts (plus references)."
    )
    learning_calibration_max_requests: int = Field(
        1500,
        ge=0,
        le=1_000_000,
        description="pool-replay calibrates the pod routed by the pool's predicted-latency "
        "chain, which learns online in the simulator (about 7 times the CPU of a calibration "
        "routed by desired replicas' router), only for a replay of at most this many requests; "
        "a larger one is calibrated routed by desired replicas' router, and the advice says so "
        "(0: never).",
    )


class CapacitySettings(BaseModel):
    """Saturation of each pool, computed from the samples the EPP posts (backend/capacity)."""

    interval_s: float = Field(
        5.0,
        gt=0,
        description="How often each API process recomputes every pool's saturation (a tick "
        "reads the new samples and predicts; at 1 s it cost the prediction path about 1.8 ms "
        "of p50 under 20,000 samples/s, docs/capacity.md). 2 s and 1 s were weighed on the "
        "calibration's tuning slices and read no closer than 5 s (docs/capacity.md, \"The "
        'refresh interval, weighed").',
    )
    helper_process: bool = Field(
        True,
        description="Compute saturation in a helper process of each API process, at a lower "
        "CPU priority, so that a tick never holds the GIL that predictions need "
        "(backend/capacity/helper.py). False: in a thread of the API process.",
    )
    shared: bool = Field(
        True,
        description="In production mode (Redis), the API replicas' helper processes elect one "
        "that computes and stores each tick's reports in Redis; the others serve those "
        "(backend/capacity/shared.py). False: every helper computes.",
    )
    stale_after_s: float = Field(
        30.0, gt=0, description="A pod with no sample newer than this is left out."
    )
    profile_size: int = Field(
        512, ge=1, le=100_000, description="Recent requests kept as the pool's traffic profile."
    )
    representatives: int = Field(
        32,
        ge=1,
        le=1_000,
        description="Requests from the profile placed on every pod per tick (evenly spaced).",
    )
    arrival_window_s: float = Field(
        120.0,
        ge=0,
        le=3600,
        description="Seconds of recent arrivals (their times from the TTFT samples) replayed "
        "from now onto the pods for the next interval's level, so that bursts count. 0: no "
        "replay, the level is the pods' as they stand. 120 was chosen on a tuning slice of "
        "both shipped traces once the simulator's probe saw what the service sees (60 before): "
        "a quiet minute after a burst no longer reads as idle (docs/capacity.md, on the probe).",
    )
    present_weight: float = Field(
        0.0,
        ge=0,
        le=1,
        description="The saturation level is this weight's mix of the pods' level as they "
        "stand (optimistic where bursts follow) and the next interval's: 1, the present one "
        "alone; 0, the replay alone (both are served either way). 0 was chosen on a tuning "
        "slice of both shipped traces once the replay's latency was scaled to what the pool's "
        "own requests measured (docs/capacity.md, on that calibration); 0.3 before it.",
    )
    record_correction: bool = Field(
        True,
        description="Correct the pool's saturation level by its own record: each tick's level "
        "is checked against what the requests arriving while it was in force measured (their "
        "TTFT and TPOT samples), and the mean error of the last `record_horizon_s`, up to "
        "`record_delay_s` ago, is taken off the level now (backend/scheduling/record.py; "
        'docs/capacity.md, "Corrected by its own record"). The uncorrected level and the '
        "bias are served beside it. On by the calibration's tuning slice; on fresh evaluation "
        "seeds every load of both traces then read within 1.1 points, the forecast alone up to "
        "7 optimistic at saturation. False: the forecast alone.",
    )
    record_horizon_s: float = Field(
        300.0, gt=0, le=86_400, description="The record's span, in seconds back from now."
    )
    record_delay_s: float = Field(
        30.0,
        ge=0,
        le=3_600,
        description="A level is checked once this many seconds have passed, so that most of "
        "its requests have finished (must be below `record_horizon_s`).",
    )
    record_min_requests: int = Field(
        50,
        ge=1,
        le=1_000_000,
        description="Requests of each SLO's target the record needs before it corrects.",
    )
    profile_rows: int = Field(
        512,
        ge=1,
        le=100_000,
        description="Newest samples a tick adds to the request profile (the rest of a busy "
        "second's samples only update the pods' gauges, through one aggregate per pod).",
    )
    start_back_rows: int = Field(
        20_000, ge=0, description="How many of the newest samples a starting process reads."
    )
    desired_interval_s: float = Field(
        30.0, gt=0, description="How often the worker recomputes each pool's desired replicas."
    )
    desired_lookback_s: float = Field(
        300.0, gt=0, description="Desired replicas replays the pool's samples of this long."
    )
    desired_max_samples: int = Field(
        20_000, ge=10, description="Most samples (newest first) a desired-replicas run reads."
    )
    desired_rate_window_s: float = Field(
        0.0,
        ge=0,
        description="Desired replicas replays the lookback's requests at the arrival rate of "
        "its last this many seconds, the pool's current rate (0: at the lookback's mean rate).",
    )
    desired_lead_s: float = Field(
        90.0,
        ge=0,
        description="Desired replicas replays the lookback's requests at the arrival rate "
        "forecast this many seconds ahead, the pods' start-up (model load), so that the pods "
        "asked for are sized for when they are ready (0: at the lookback's mean rate). "
        "Setting desired_rate_window_s replaces it.",
    )
    desired_short_replay_s: float = Field(
        120.0,
        ge=0,
        description="Desired replicas also replays only the newest this many seconds of its "
        "lookback (its look-ahead's line still read over the whole lookback) and answers the "
        "larger pod count: a burst weighs more in the newest requests than in the whole "
        "lookback (0: the one replay).",
    )
    desired_recalibrate_s: float = Field(
        600.0,
        ge=0,
        description="Desired replicas reuses its pod calibration this long (0: every run).",
    )
    desired_max_replicas: int = Field(
        64, ge=1, le=10_000, description="Largest pod count desired replicas may ask for."
    )
    desired_router: str = Field(
        "llm-d-322",
        description="Simulator policy that routes the replay (default: llm-d's load+prefix "
        "scorers 3:2:2, which an unchanged EPP runs).",
    )
    desired_history_s: float = Field(
        3600.0,
        gt=0,
        le=30 * 86_400,
        description="How far back each pool's desired-replica runs are kept (table "
        "`desired_replicas_history`) for the console's chart.",
    )
    namespace: str = Field(
        "default", max_length=63, description="The `namespace` label of the exported gauges."
    )
    history_points: int = Field(
        600,
        ge=1,
        le=100_000,
        description="Saturation levels kept per pool in memory for the console's chart, one a "
        "tick (600 at 1 s: the last 10 minutes).",
    )

    @model_validator(mode="after")
    def _one_rate(self) -> CapacitySettings:
        # Both choose the rate the replay runs at. A rate window asked for replaces the default
        # look-ahead (a deployment that set it before the look-ahead existed keeps working);
        # both asked for is a contradiction the job could only report on every run.
        if self.desired_rate_window_s > 0 and self.desired_lead_s > 0:
            if "desired_lead_s" in self.model_fields_set:
                raise ValueError(
                    "desired_rate_window_s and desired_lead_s both choose the rate desired "
                    "replicas replays at: set one of them"
                )
            self.desired_lead_s = 0.0
        if self.record_delay_s >= self.record_horizon_s:
            raise ValueError("record_delay_s must be below record_horizon_s")
        return self


class IngestSettings(BaseModel):
    """Limits on the data-plane ingestion endpoints."""

    max_body_bytes: int = Field(
        32 * 1024 * 1024, ge=1024, description="Largest request body accepted, in bytes."
    )
    body_read_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Seconds from a request's start within which its whole body must arrive; a "
        "client stalling mid-body is answered 408 and its connection closed (uvicorn's "
        "keep-alive timeout does not cover a body being read).",
    )
    processes: int = Field(
        1,
        ge=0,
        le=32,
        description="Helper processes per API process that parse, validate and store "
        "ingestion batches in production mode, so that this CPU work does not compete with "
        "predictions for the API process's GIL. 0 stores in the API process (as the embedded "
        "mode always does).",
    )
    client_bytes_per_s: int = Field(
        8_000_000,
        ge=0,
        description="Ingestion a single client address may send, in request-body bytes per "
        "second averaged over client_window_s (429 with Retry-After beyond). The EPP sends at "
        "most 10,000 entries (3-4 MB) a second whatever its pod count: the default is twice "
        "that. 0 turns the limit off. Shared through Redis in production.",
    )
    client_window_s: int = Field(
        2, ge=1, le=3600, description="The sliding window of client_bytes_per_s, in seconds."
    )


class Settings(BaseSettings):
    """Everything Headroom reads from its environment."""

    model_config = SettingsConfigDict(
        env_prefix="HEADROOM_", env_nested_delimiter="__", env_file=".env", extra="ignore"
    )

    database_url: str = Field(
        "sqlite:///headroom.db",
        description="SQLAlchemy URL. The default is an embedded SQLite file in the working "
        "directory; production uses postgresql+psycopg://...",
    )
    redis_url: str | None = Field(
        None,
        description="Redis URL (Celery broker, model notifications, training locks). Unset means "
        "the embedded mode: training and notifications run inside the API process.",
    )
    auto_migrate: bool | None = Field(
        None,
        description="Run database migrations when the API starts. Unset means: only for SQLite "
        "(production runs `headroom db upgrade` once instead of racing replicas).",
    )
    host: str = Field("127.0.0.1", description="Address `headroom serve` binds.")
    port: int = Field(8000, description="Port `headroom serve` listens on.")
    data_plane_port: int | None = Field(
        None,
        description="A second port `headroom serve` listens on that serves only what the EPP "
        "calls: the upstream routes (at the root and under /pools/{pool}), /metrics, /healthz "
        "and /readyz. Expose it to the EPP's network only, and the main port (console, /v1) "
        "where operators reach it. Unset: one port serves everything.",
    )
    data_plane_host: str | None = Field(
        None, description="Address the data-plane port binds; unset: the same as `host`."
    )
    forwarded_allow_ips: str | None = Field(
        None,
        description="Comma-separated addresses or networks of the reverse proxies whose "
        "X-Forwarded-For / X-Forwarded-Proto `headroom serve` (uvicorn) believes; the console's "
        "per-address sign-in limit counts the client address that results. '*' trusts any "
        "peer: only when nothing but the proxy can reach the API. Unset: uvicorn's default "
        "(the FORWARDED_ALLOW_IPS variable, else 127.0.0.1 and ::1).",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Log level of the service."
    )
    window: WindowSettings = Field(default_factory=WindowSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    training: TrainingSettings = Field(default_factory=TrainingSettings)
    serving: ServingSettings = Field(default_factory=ServingSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    ui: UISettings = Field(default_factory=UISettings)
    capacity: CapacitySettings = Field(default_factory=CapacitySettings)
    advisor: AdvisorSettings = Field(default_factory=AdvisorSettings)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def embedded(self) -> bool:
        """True when no Redis is configured: background work runs in the API process."""
        return self.redis_url is None

    @property
    def should_auto_migrate(self) -> bool:
        return self.is_sqlite if self.auto_migrate is None else self.auto_migrate


@lru_cache
def get_settings() -> Settings:
    return Settings()
