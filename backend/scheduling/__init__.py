"""Predicted-latency scheduling: upstream llm-d's plugin chain plus our improvements.

Pure library (plain Python + numpy): the web layer calls :func:`schedule`.
"""

from backend.scheduling.chain import schedule
from backend.scheduling.transfer import TransferModel, distance
from backend.scheduling.types import (
    Candidate,
    CandidateTrace,
    Decision,
    PDTrace,
    Predictor,
    SchedulingPolicy,
    SchedulingRequest,
    StepTrace,
    Topology,
    TransferConfig,
)

__all__ = [
    "Candidate",
    "CandidateTrace",
    "Decision",
    "PDTrace",
    "Predictor",
    "SchedulingPolicy",
    "SchedulingRequest",
    "StepTrace",
    "Topology",
    "TransferConfig",
    "TransferModel",
    "distance",
    "schedule",
]
