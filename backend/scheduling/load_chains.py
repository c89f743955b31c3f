"""The chains that route on load and prefix counts, without latency predictions.

Three chains a policy can name besides the predicted-latency one (``SchedulingPolicy.chain``):

* ``llm-d-default``: llm-d's current default, the optimized-baseline guide's "sticky until
  saturated" chain (llm-d/llm-d ``guides/optimized-baseline/router/
  optimized-baseline.values.yaml`` 0a3b0c93; llm-d-router ``prefix-cache-affinity-filter``,
  ``token-load-scorer``, ``inflight-load-producer``): keep the pods whose prefix score reaches
  the affinity threshold (every pod when none does), unless the best sticky pod carries more
  than ``max_tokens_in_flight_penalty`` in-flight tokens above the best other one; then the
  fewest tokens (in-flight uncached prompt tokens plus this request's uncached tokens there,
  capped at ``queue_threshold_tokens``) wins, random among ties (max-score picker).
* ``load-prefix``: GIE's / llm-d's scorer chain: ``queue-scorer``,
  ``kv-cache-utilization-scorer`` and ``prefix-cache-scorer``, weighted sum, max-score picker.
* ``lmetric``: LMetric (Zhang et al., arXiv 2603.15202, 2026): new prefill tokens x batch size,
  lowest wins. **Headroom-only**: no llm-d plugin computes it; it needs ``/v1/schedule``.

The cores (:func:`sticky_until_saturated`, :func:`load_prefix`, :func:`lmetric`) take plain
per-pod lists and a ``random.Random``; they are the one implementation that both ``/v1/schedule``
(through :func:`schedule_load_chain`, from the candidates' wire fields) and the simulator's peer
routers (from their own counters and prefix index) run. They use Python floats and lists, not
numpy: the simulator calls them for every request of pools of 8 pods, where numpy's per-call
overhead costs more than the arithmetic, and the sums must stay bit-for-bit those the simulator's
peers always computed (its seeded runs did not change when they moved here).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from backend.scheduling.types import (
    Candidate,
    CandidateTrace,
    Decision,
    SchedulingPolicy,
    SchedulingRequest,
    StepTrace,
)

AFFINITY_FILTER: Final = "prefix-cache-affinity-filter"
TOKEN_LOAD_SCORER: Final = "token-load-scorer"
MAX_SCORE_PICKER: Final = "max-score-picker"
LMETRIC_SCORER: Final = "lmetric-scorer"
ACTIVE_REQUEST_SCORER: Final = "active-request-scorer"
Sticky = Literal["sticky", "broken", "no_match", "all_sticky"]


def pick_extreme(values: Sequence[float], rng: random.Random, *, lowest: bool) -> int:
    """The index of the lowest (or highest) value; exact ties broken uniformly at random (one
    draw, only when there is a tie: the max-score picker shuffles, then stable-sorts)."""
    best = min(values) if lowest else max(values)
    tied = [i for i, v in enumerate(values) if v == best]
    return tied[0] if len(tied) == 1 else tied[rng.randrange(len(tied))]


@dataclass(frozen=True, slots=True)
class Choice:
    """One chain's pick among the pods it was given (indices into them)."""

    index: int
    kept: tuple[int, ...]
    """The pods the filter kept, in order (all of them for a chain without a filter)."""
    values: tuple[float, ...]
    """What the pick compared, one per kept pod (tokens, weighted score or LMetric key)."""
    outcome: str
    """What the filter did (``sticky`` ...), or ``scored`` without a filter."""


def sticky_until_saturated(
    prefix_scores: Sequence[float],
    inflight_tokens: Sequence[int],
    uncached_tokens: Callable[[list[int]], Sequence[int]],
    policy: SchedulingPolicy,
    rng: random.Random,
) -> Choice:
    """llm-d's default chain: prefix-cache-affinity-filter, then token-load-scorer.

    ``uncached_tokens(kept)`` gives this request's prompt tokens each kept pod would compute:
    asked only for the pods the filter kept (the simulator's prefix index walks the prompt per
    pod, and the guide's producer discounts by the index's match, not the pod's cache).
    """
    n = len(prefix_scores)
    threshold, penalty = policy.sticky_affinity_threshold, policy.max_tokens_in_flight_penalty
    sticky = [i for i, s in enumerate(prefix_scores) if s >= threshold]
    keep = list(range(n))
    outcome: Sticky = "no_match"
    if sticky and len(sticky) < n:
        others = [i for i in keep if i not in sticky]
        gap = min(inflight_tokens[i] for i in sticky) - min(inflight_tokens[i] for i in others)
        # A penalty of 0 disables the load gate, as upstream's filter reads it.
        if penalty > 0 and gap > penalty:
            outcome = "broken"
        else:
            keep, outcome = sticky, "sticky"
    elif sticky:
        outcome = "all_sticky"
    new = uncached_tokens(keep)
    cap = policy.queue_threshold_tokens
    tokens = [min(inflight_tokens[i] + t, cap) for i, t in zip(keep, new, strict=True)]
    chosen = pick_extreme(tokens, rng, lowest=True)
    return Choice(keep[chosen], tuple(keep), tuple(float(t) for t in tokens), outcome)


def load_prefix(
    waiting: Sequence[int],
    kv_usage: Sequence[float],
    prefix_scores: Sequence[float],
    policy: SchedulingPolicy,
    rng: random.Random,
) -> Choice:
    """queue-scorer, kv-cache-utilization-scorer and prefix-cache-scorer, weighted, max-score.

    queue = (q_max - q) / (q_max - q_min) over the pods (1 for all when equal); kv = 1 - usage;
    prefix = the prefix score (matched blocks / blocks).
    """
    wq = policy.load_prefix_queue_weight
    wkv = policy.load_prefix_kv_weight
    wp = policy.load_prefix_prefix_weight
    q_max, q_min = max(waiting), min(waiting)
    scores = []
    for q, kv, pre in zip(waiting, kv_usage, prefix_scores, strict=True):
        queue = 1.0 if q_max == q_min else (q_max - q) / (q_max - q_min)
        scores.append(wq * queue + wkv * (1.0 - kv) + wp * pre)
    chosen = pick_extreme(scores, rng, lowest=False)
    return Choice(chosen, tuple(range(len(scores))), tuple(scores), "scored")


def lmetric_keys(new_tokens: Sequence[int], batch: Sequence[int]) -> list[float]:
    """LMetric's score per pod, lowest best: new prefill tokens x batch size, then (among equal
    products, e.g. idle pods) fewer new tokens. One float per pod, exact for any realistic
    sizes, keeps the random tie-break of :func:`pick_extreme`."""
    top = max(new_tokens, default=0) + 1
    return [float(b * n * top + n) for b, n in zip(batch, new_tokens, strict=True)]


def lmetric(new_tokens: Sequence[int], batch: Sequence[int], rng: random.Random) -> Choice:
    """LMetric: the lowest new prefill tokens x batch size (Headroom-only: needs /v1/schedule).

    ``new_tokens``: this request's uncached prompt tokens there, plus (the policy's
    ``lmetric_pending``) the uncached tokens already dispatched there and not yet prefilled.
    ``batch``: the pod's requests in flight (``lmetric_batch``: the router's count or the
    scraped running gauge). The caller builds both from what it knows.
    """
    keys = lmetric_keys(new_tokens, batch)
    chosen = pick_extreme(keys, rng, lowest=True)
    return Choice(chosen, tuple(range(len(keys))), tuple(keys), "scored")


# --- /v1/schedule: the chains from the candidates' wire fields ----------------------------


def _uncached(prompt_tokens: int, prefix_score: float) -> int:
    """This request's prompt tokens a pod would compute, from the prefix score the caller sent
    (the share of the prompt's blocks the pod holds)."""
    return prompt_tokens - min(round(prefix_score * prompt_tokens), prompt_tokens)


def _batch(c: Candidate, policy: SchedulingPolicy) -> int:
    return c.num_request_running if policy.lmetric_batch == "scraped" else c.in_flight


def _choose(
    request: SchedulingRequest,
    pods: Sequence[Candidate],
    policy: SchedulingPolicy,
    rng: random.Random,
) -> Choice:
    prompt = request.prompt_tokens
    if policy.chain == "llm-d-default":
        return sticky_until_saturated(
            [c.prefix_cache_score for c in pods],
            [c.prefill_tokens_in_flight for c in pods],
            lambda kept: [_uncached(prompt, pods[i].prefix_cache_score) for i in kept],
            policy,
            rng,
        )
    if policy.chain == "load-prefix":
        return load_prefix(
            [c.num_request_waiting for c in pods],
            [c.kv_cache_percentage for c in pods],
            [c.prefix_cache_score for c in pods],
            policy,
            rng,
        )
    if policy.chain == "lmetric":
        pending = policy.lmetric_pending
        new = [
            _uncached(prompt, c.prefix_cache_score) + (c.prefill_tokens_in_flight if pending else 0)
            for c in pods
        ]
        return lmetric(new, [_batch(c, policy) for c in pods], rng)
    raise ValueError(f"chain {policy.chain!r} is not a load chain")


_HOW: Final = {
    "llm-d-default": "fewest tokens (token-load-scorer)",
    "load-prefix": "highest weighted queue/kv/prefix score",
    "lmetric": "lowest new prefill tokens x batch size (LMetric, Headroom-only)",
}


def _steps(profile: str, policy: SchedulingPolicy, choice: Choice, n: int) -> list[StepTrace]:
    steps = []
    if policy.chain == "llm-d-default":
        steps.append(StepTrace(profile, AFFINITY_FILTER, choice.outcome, len(choice.kept)))
        scorer = TOKEN_LOAD_SCORER
    else:
        scorer = LMETRIC_SCORER if policy.chain == "lmetric" else "queue/kv/prefix scorers"
    steps.append(StepTrace(profile, scorer, "scored", len(choice.kept)))
    steps.append(StepTrace(profile, MAX_SCORE_PICKER, _HOW[policy.chain], 1))
    return steps


def _traces(
    pods: Sequence[Candidate], profile: str, choice: Choice | None, policy: SchedulingPolicy
) -> list[CandidateTrace]:
    values = {} if choice is None else dict(zip(choice.kept, choice.values, strict=True))
    removed = AFFINITY_FILTER if policy.chain == "llm-d-default" else None
    return [
        CandidateTrace(
            name=c.name,
            role=c.role,
            pod_class=c.pod_class,
            profile=profile,
            ttft_ms=None,
            tpot_ms=None,
            ttft_headroom_ms=None,
            tpot_headroom_ms=None,
            combined_headroom_ms=None,
            valid=None,
            tier=None,
            score=values.get(i),
            removed_by=None if i in values or choice is None else removed,
        )
        for i, c in enumerate(pods)
    ]


def schedule_load_chain(
    request: SchedulingRequest, candidates: Sequence[Candidate], policy: SchedulingPolicy
) -> Decision:
    """``schedule`` for a policy whose chain is not the predicted-latency one.

    No admitter and no predictions: every request is admitted. A candidate's ``score`` in the
    decision is what the pick compared: tokens (lowest wins) for ``llm-d-default``, the weighted
    score (highest wins) for ``load-prefix``, the LMetric key (lowest wins) for ``lmetric``.

    Under P/D (prefill-role pods and pods that can decode), the prefill pod is chosen by the
    chain among the prefill pods, then the decode pod: by ``active-request-scorer`` (fewest
    requests in flight) for ``llm-d-default``, as the pd-disaggregation guide composes it, and
    by the same chain among the decode pods for the others.
    """
    rng = random.Random(request.seed)
    prefill = [i for i, c in enumerate(candidates) if c.role == "prefill"]
    decode = [i for i, c in enumerate(candidates) if c.role != "prefill"]
    if prefill and decode:
        p_pods = [candidates[i] for i in prefill]
        d_pods = [candidates[i] for i in decode]
        p_choice = _choose(request, p_pods, policy, rng)
        if policy.chain == "llm-d-default":
            counts = [_batch(c, policy) for c in d_pods]
            d_index = pick_extreme(counts, rng, lowest=True)
            d_choice = Choice(
                d_index, tuple(range(len(d_pods))), tuple(float(x) for x in counts), "scored"
            )
            d_steps = [
                StepTrace("decode", ACTIVE_REQUEST_SCORER, "scored", len(d_pods)),
                StepTrace("decode", MAX_SCORE_PICKER, "fewest requests in flight", 1),
            ]
        else:
            d_choice = _choose(request, d_pods, policy, rng)
            d_steps = _steps("decode", policy, d_choice, len(d_pods))
        p_name, d_name = p_pods[p_choice.index].name, d_pods[d_choice.index].name
        by_index = {
            **dict(zip(prefill, _traces(p_pods, "prefill", p_choice, policy), strict=True)),
            **dict(zip(decode, _traces(d_pods, "decode", d_choice, policy), strict=True)),
        }
        return Decision(
            admitted=True,
            reason=f"admitted: the {policy.chain} chain has no admitter; prefill on {p_name}, "
            f"decode on {d_name}",
            chosen=d_name,
            prefill=p_name,
            decode=d_name,
            fallback=False,
            mode=policy.chain,
            picker=MAX_SCORE_PICKER,
            candidates=tuple(by_index[i] for i in range(len(candidates))),
            steps=(*_steps("prefill", policy, p_choice, len(p_pods)), *d_steps),
        )
    choice = _choose(request, candidates, policy, rng)
    name = candidates[choice.index].name
    return Decision(
        admitted=True,
        reason=f"admitted: the {policy.chain} chain has no admitter; chose {name} by "
        f"{_HOW[policy.chain]}",
        chosen=name,
        prefill=None,
        decode=None,
        fallback=False,
        mode=policy.chain,
        picker=MAX_SCORE_PICKER,
        candidates=tuple(_traces(candidates, "default", choice, policy)),
        steps=tuple(_steps("default", policy, choice, len(candidates))),
    )
