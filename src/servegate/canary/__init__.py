"""Canary judgement: which share of live traffic the candidate gets, and when to roll back."""

from servegate.canary.controller import Controller, Decision, Recorder
from servegate.canary.judge import IntervalJudgement, judge_interval
from servegate.canary.plan import CanaryPlan, CanaryPlanError, parse_plan
from servegate.canary.protocol import METRICS, CanaryController, RequestObservation, Side

__all__ = [
    "METRICS",
    "CanaryController",
    "CanaryPlan",
    "CanaryPlanError",
    "Controller",
    "Decision",
    "IntervalJudgement",
    "Recorder",
    "RequestObservation",
    "Side",
    "judge_interval",
    "parse_plan",
]
