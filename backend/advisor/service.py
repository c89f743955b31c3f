"""The advisor's operations: start an advice job, read it, apply a candidate.

The job runs like a what-if (``backend.whatif``'s record, store and runner: a thread when
embedded, the Celery task ``headroom.advice`` in production, progress in the record). Applying a
candidate is an ordinary policy edit through the policies service, so it is audited as a new
version and the EPP config export follows; the edit names the policy version the advice started
from, so a change made meanwhile is a 409 rather than silently overwritten.
"""

from __future__ import annotations

import dataclasses
import functools
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from backend.advisor.search import Budget, advise
from backend.advisor.workloads import (
    POOL_REPLAY,
    SHIPPED,
    pool_replay,
    replay_problem,
    shipped_trace,
    workload_names,
)
from backend.auth.service import Actor
from backend.exceptions import Conflict, Invalid, NotFound
from backend.policies import service as policies
from backend.policies.models import Policy
from backend.policies.schemas import PolicySpec
from backend.settings import AdvisorSettings, Settings
from backend.tasks import ADVICE
from backend.transactions import Invalidates
from backend.whatif.jobs import Progress, WhatIfJob
from backend.whatif.runner import WhatIfRunner, make_runner
from backend.whatif.runner import run_in_worker as run_job_in_worker

KIND = "advice"


def budget_of(settings: AdvisorSettings) -> Budget:
    return Budget(
        requests=settings.requests,
        seeds=settings.seeds,
        survivors=settings.survivors,
        finalists=settings.finalists,
    )


def run_advice(
    settings: Settings, sessions: sessionmaker[Session], job: WhatIfJob, progress: Progress
) -> dict[str, Any]:
    """The job's work: build the workload, search, rank (the runner records the result)."""
    budget = Budget(**job.candidate["budget"])
    active = PolicySpec.model_validate(job.baseline)
    progress(0.0, f"building the workload {job.trace}")
    if job.trace == POOL_REPLAY:
        with sessions() as session:
            workload = pool_replay(
                session,
                job.candidate["pool_id"],
                budget,
                settings.capacity,
                datetime.fromisoformat(job.created_at),
                settings.advisor.learning_calibration_max_requests,
                progress,
            )
    else:
        workload = shipped_trace(job.trace, budget, active)
    return advise(workload, active, budget, progress)


def make_advisor(settings: Settings, sessions: sessionmaker[Session]) -> WhatIfRunner:
    return make_runner(settings, functools.partial(run_advice, settings, sessions), ADVICE, KIND)


def run_in_worker(settings: Settings, sessions: sessionmaker[Session], job_id: str) -> None:
    """The Celery task's body (production mode)."""
    run_job_in_worker(settings, job_id, functools.partial(run_advice, settings, sessions), KIND)


def default_workload(
    session: Session, settings: Settings, pool_id: int, now: datetime
) -> tuple[str, str | None]:
    """The pool's own replay when it has the traffic and SLOs for one, else the first shipped
    trace; and why the replay is not the default (None when it is)."""
    problem = replay_problem(session, pool_id, settings.capacity, budget_of(settings.advisor), now)
    return (POOL_REPLAY, None) if problem is None else (next(iter(SHIPPED)), problem)


def start_advice(
    session: Session,
    runner: WhatIfRunner,
    settings: Settings,
    pool_id: int,
    pool: str,
    workload: str | None,
    actor: Actor,
) -> WhatIfJob:
    """Start a search for the pool, against its active policy as it is now, on ``workload``
    (None: :func:`default_workload`). A pool that cannot be replayed is told why (``Invalid``)
    here, before any job starts."""
    now = datetime.now(UTC)
    if workload is None:
        workload, _ = default_workload(session, settings, pool_id, now)
    if workload not in workload_names():
        raise Invalid(
            f"unknown workload {workload!r}; available: {', '.join(workload_names())}",
            field="workload",
        )
    budget = budget_of(settings.advisor)
    if workload == POOL_REPLAY:
        problem = replay_problem(session, pool_id, settings.capacity, budget, now)
        if problem is not None:
            raise Invalid(f"pool-replay: {problem}", field="workload")
    policy = policies.policy_for_pool(session, pool_id)
    return runner.start(
        pool=pool,
        trace=workload,
        requested_by=actor.name,
        candidate={"budget": dataclasses.asdict(budget), "pool_id": pool_id},
        baseline=policies.spec_of(policy).model_dump(mode="json"),
        baseline_version=policy.version if policy is not None else None,
        requests=budget.requests,
    )


def get_advice(runner: WhatIfRunner, pool: str, job_id: str) -> WhatIfJob:
    job = runner.get(job_id)
    # Another pool's job is not found here: ids are not secrets, but a pool's page is its own.
    if job is None or job.pool != pool:
        raise NotFound(f"advice {job_id} not found for pool {pool!r} (records last a day)")
    return job


def apply_advice(
    session: Session,
    cache: Invalidates,
    runner: WhatIfRunner,
    pool_id: int,
    pool: str,
    job_id: str,
    index: int,
    actor: Actor,
) -> Policy:
    """Save ranked candidate ``index`` as the pool's policy: a new audited version, based on the
    version the advice started from (409 if the policy changed since)."""
    job = get_advice(runner, pool, job_id)
    if job.status != "done" or job.result is None:
        raise Conflict(f"advice {job_id} is {job.status}: nothing to apply yet")
    ranking = job.result["ranking"]
    if not 0 <= index < len(ranking):
        raise Invalid(f"candidate must be between 0 and {len(ranking) - 1}", field="candidate")
    row = ranking[index]
    if not row["appliable"]:
        raise Invalid(
            f"candidate {index} ({row['label']}) is not a Headroom policy: {row['needs']}",
            field="candidate",
        )
    spec = PolicySpec.model_validate(row["spec"])
    if job.baseline_version is None:
        if policies.policy_for_pool(session, pool_id) is not None:
            raise Conflict(
                "the pool got a policy after the advice started; run the advice again",
                current_version=0,
            )
        policy, _ = policies.save_pool_policy(session, cache, pool_id, spec, actor)
        return policy
    current = policies.policy_for_pool(session, pool_id)
    if current is None:
        raise Conflict("the pool's policy was deleted since the advice started", current_version=0)
    return policies.edit_policy(
        session,
        cache,
        current.id,
        spec.model_dump(mode="json"),
        actor,
        job.baseline_version,
    )
