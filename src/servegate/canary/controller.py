"""The canary controller: routes a weight to the candidate, judges each interval, moves the weight.

It implements `protocol.CanaryController`. `choose` sends `weight` % of requests to the
candidate (and, with a secondary, an equal share to it while the primary keeps at least as many,
so the noise floor is measured alongside); `observe` files each answer into the current interval;
at the interval's end `tick` judges it (judge.py) and acts:

- pass → promote to the next step (a fresh interval); passing the step before 100 completes it;
- any check failed (the gates' rule, judge.py) → roll back to 0 %, final;
- a core check not measured (too few answers or blocks) → hold: the interval is extended and
  keeps its answers, at most `canary.max_extensions` times per step, after which it rolls back
  (a candidate that could not be judged is never promoted).

Fail safe: when a decision cannot be computed or recorded (the store locked past its busy
timeout, any exception), the controller stops routing to the candidate (weight 0), says so in its
snapshot (`fault`, counted in `faults`), and the proxy's healthz and Flagger's hooks answer "not
ready" until the proxy is restarted, which resumes from the last state the store holds.

Every decision goes to the recorder with the state it led to; a controller built from a saved
state resumes at that step (the interrupted interval starts again: answers are not saved).

`finish` ends the canary from outside, when the rollout system that owns the workloads is done
with them (Flagger's post-rollout hook: its canary Deployment is scaled to zero and its primary
runs whichever version won): phase `finalised`, every request to the primary, final.
"""

from __future__ import annotations

import array
import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from servegate.canary.judge import JUDGED, IntervalJudgement, judge_interval
from servegate.canary.plan import CanaryPlan, CanaryPlanError
from servegate.canary.protocol import RequestObservation, Side
from servegate.config.models import Policy

Phase = Literal["progressing", "promoted", "rolled_back", "finalised"]
Action = Literal["promote", "hold", "rollback", "complete", "finalise"]
STATE_VERSION = 1
log = logging.getLogger("servegate.canary")
# Per side and metric and interval; beyond this a uniform sample of this many is judged. Judging
# 10 metrics of 20,000 answers a side took ~0.1 s on one busy core (benchmarks/RESULTS.md).
MAX_SAMPLES = 20_000


@dataclass(frozen=True)
class Decision:
    """What the controller did at the end of an interval, and the evidence for it."""

    decided_at: float  # time.time()
    step_index: int  # the step that was judged
    weight: float  # its weight, %
    action: Action
    score: float | None
    reason: str
    evidence: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """JSON-able."""
        return {
            "decided_at": self.decided_at,
            "step_index": self.step_index,
            "weight": self.weight,
            "action": self.action,
            "score": self.score,
            "reason": self.reason,
            "evidence": self.evidence,
        }


class Recorder(Protocol):
    def record(self, decision: Decision, state: Mapping[str, Any]) -> None:
        """Keep the decision and the state it led to (may block: run() calls it in a thread)."""
        ...


@dataclass
class _Window:
    """The answers of the interval being judged, per side and metric: every answer up to
    MAX_SAMPLES per side and metric, then a uniform reservoir sample of them (memory and the
    time to judge stay bounded under any traffic)."""

    started_at: float
    # array('d'): 8 bytes an answer and no object per value, so a judged window is freed at once
    samples: dict[Side, dict[str, array.array[float]]] = field(default_factory=dict)
    seen: dict[tuple[Side, str], int] = field(default_factory=dict)
    requests: dict[Side, int] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def add(self, obs: RequestObservation) -> None:
        self.requests[obs.side] = self.requests.get(obs.side, 0) + 1
        side = self.samples.setdefault(obs.side, {})
        for name, value in obs.metrics.items():
            if name in JUDGED:
                self._keep(obs.side, side.setdefault(name, array.array("d")), name, float(value))

    def _keep(self, side: Side, values: array.array[float], name: str, value: float) -> None:
        seen = self.seen[side, name] = self.seen.get((side, name), 0) + 1
        if len(values) < MAX_SAMPLES:
            values.append(value)
            return
        slot = self.rng.randrange(seen)  # Algorithm R: each answer kept with equal chance
        if slot < MAX_SAMPLES:
            values[slot] = value

    def absorb(self, later: _Window) -> None:
        """Take the answers of a window opened while this one was being judged."""
        for side, metrics in later.samples.items():
            self.requests[side] = self.requests.get(side, 0) + later.requests.get(side, 0)
            mine = self.samples.setdefault(side, {})
            for name, values in metrics.items():
                for value in values:
                    self._keep(side, mine.setdefault(name, array.array("d")), name, value)

    @property
    def sampled(self) -> bool:
        return any(n > MAX_SAMPLES for n in self.seen.values())


class Controller:
    """A canary over `plan`, judged under `policy`; `state` resumes a saved one."""

    def __init__(
        self,
        plan: CanaryPlan,
        policy: Policy,
        *,
        secondary: bool = False,
        recorder: Recorder | None = None,
        state: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.plan, self.policy, self.secondary = plan, policy, secondary
        self._recorder, self._clock = recorder, clock
        now = clock()
        self.step_index, self.phase, self.extensions = 0, "progressing", 0
        self.weight = plan.steps[0]
        self.last_decision: Decision | None = None
        # Fail safe: set when a decision could not be computed or recorded; from then on every
        # request goes to the primary and the hooks answer "not ready" until a restart.
        self.fault: str | None = None
        self.faults = 0
        if state is not None:
            self._resume(state)
        self._window = _Window(now)
        self.due_at = now + plan.interval_s

    def _resume(self, state: Mapping[str, Any]) -> None:
        steps = tuple(float(s) for s in state.get("steps", ()))
        if state.get("version") != STATE_VERSION or steps != self.plan.steps:
            shown = ",".join(f"{s:g}" for s in steps) or "?"
            raise CanaryPlanError(
                f"--steps: the saved canary ran with steps {shown}; resume it with the same "
                "steps or start another session"
            )
        self.step_index = int(state["step_index"])
        self.phase = state["phase"]
        self.weight = float(state["weight"])
        self.extensions = int(state["extensions"])
        last = state.get("last_decision")
        self.last_decision = None if last is None else Decision(**last)

    # --- the contract with the proxy -------------------------------------------------------

    def choose(self, u: float) -> Side:
        """The side that serves a request, given `u` drawn uniformly from [0, 1)."""
        if self.fault is not None:
            return "primary"
        share = self.weight / 100
        if u < share:
            return "candidate"
        if self.secondary and self.phase == "progressing" and u < share + self.secondary_share:
            return "secondary"
        return "primary"

    @property
    def secondary_share(self) -> float:
        """The secondary's share: the candidate's, but never more than the primary keeps."""
        share = self.weight / 100
        return min(share, (1 - share) / 2) if self.secondary else 0.0

    def observe(self, observation: RequestObservation) -> None:
        """File one answer into the current interval; answers from before it started, or after
        the canary finished, judge nothing."""
        if (
            self.phase != "progressing"
            or self.fault is not None
            or observation.at < self._window.started_at
        ):
            return
        self._window.add(observation)

    async def run(self, stop: asyncio.Event) -> None:
        """Judge every interval until `stop` is set or the canary has finished. The judgement
        (scipy, up to MAX_SAMPLES answers a metric) and the store write run in threads, so the
        proxy's event loop keeps serving; answers arriving meanwhile go to a new window."""
        while self.phase == "progressing" and not stop.is_set():
            wait = self.due_at - self._clock()
            if wait > 0:
                try:
                    await asyncio.wait_for(stop.wait(), timeout=wait)
                    return
                except TimeoutError:
                    pass
            closed_at, judged_window = self._clock(), self._window
            self._window = _Window(closed_at)
            try:
                judged = await asyncio.to_thread(self._judge, judged_window)
                decision = self._decide(judged, judged_window, closed_at)
                if self._recorder is not None:
                    await asyncio.to_thread(self._recorder.record, decision, self.state())
            except Exception as exc:  # any failure here must fail safe
                self.fail_safe(f"the interval's decision could not be made or recorded: {exc}")
                return

    def fail_safe(self, reason: str) -> None:
        """Stop routing to the candidate: the controller cannot trust its own state. The store
        keeps the last recorded state, so a restarted proxy resumes from there."""
        self.fault = reason
        self.faults += 1
        self.weight = 0.0
        log.error("servegate canary failed safe, every request to the primary: %s", reason)

    async def finish(self, reason: str, evidence: Mapping[str, Any]) -> Decision:
        """End the canary for good: phase `finalised`, weight 0 (every request to the primary,
        no secondary share), recorded like a judged decision (the store write in a thread)."""
        decision = Decision(
            self._clock(),
            self.step_index,
            self.weight,
            "finalise",
            None,
            reason,
            {
                **evidence,
                "before": {"phase": self.phase, "weight": self.weight},
                "next_weight": 0.0,
            },
        )
        self.phase, self.weight, self.extensions = "finalised", 0.0, 0
        self._window = _Window(decision.decided_at)
        self.last_decision = decision
        if self._recorder is not None:
            try:
                await asyncio.to_thread(self._recorder.record, decision, self.state())
            except Exception as exc:  # any failure here must fail safe
                self.fail_safe(f"the finalisation could not be recorded: {exc}")
        return decision

    def snapshot(self) -> dict[str, Any]:
        """State, the current interval's request counts and the last decision, JSON-able."""
        return {
            **self.state(),
            "secondary_weight": round(self.secondary_share * 100, 6),
            "interval_started_at": self._window.started_at,
            "due_at": self.due_at,
            "requests": dict(self._window.requests),
            "fault": self.fault,
            "faults": self.faults,
        }

    # --- judgement -------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What a restart needs (proxy_sessions.state_json)."""
        return {
            "version": STATE_VERSION,
            "steps": list(self.plan.steps),
            "interval_s": self.plan.interval_s,
            "step_index": self.step_index,
            "weight": self.weight,
            "phase": self.phase,
            "extensions": self.extensions,
            "last_decision": None if self.last_decision is None else self.last_decision.as_dict(),
        }

    def tick(self) -> Decision | None:
        """Judge the interval if it is due, in this thread; the decision taken, or None (not
        due, or finished). Records nothing: `run` passes each decision to the recorder."""
        now = self._clock()
        if self.phase != "progressing" or now < self.due_at:
            return None
        return self._decide(self._judge(self._window), self._window, now)

    def _judge(self, w: _Window) -> IntervalJudgement:
        return judge_interval(
            w.samples.get("primary", {}),
            w.samples.get("candidate", {}),
            self.policy,
            w.samples.get("secondary") if self.secondary else None,
        )

    def _decide(self, judged: IntervalJudgement, w: _Window, closed_at: float) -> Decision:
        action, reason = self._act(judged)
        evidence = {
            **judged.evidence(),
            "interval": {
                "started_at": w.started_at,
                "ended_at": closed_at,
                "extensions": self.extensions,
            },
            "requests": dict(w.requests),
            "sampled": w.sampled,
            "secondary": self.secondary,
        }
        decision = Decision(
            closed_at, self.step_index, self.weight, action, judged.score, reason, evidence
        )
        self._apply(action, w)
        decision.evidence["next_weight"] = self.weight
        self.last_decision = decision
        return decision

    def _act(self, judged: IntervalJudgement) -> tuple[Action, str]:
        if judged.outcome == "fail":
            return "rollback", judged.reason
        if judged.outcome == "pass":
            last = self.step_index + 1 >= len(self.plan.steps) - 1
            return ("complete" if last else "promote"), judged.reason
        limit = self.policy.canary.max_extensions
        if self.extensions >= limit:
            return "rollback", (
                f"{judged.outcome} after {self.extensions} extension(s) of step "
                f"{self.weight:g} % (canary.max_extensions {limit}): {judged.reason}"
            )
        return "hold", judged.reason

    def _apply(self, action: Action, judged: _Window) -> None:
        now = self._clock()
        if action == "hold":
            # The step goes on: its answers are kept, with any that came while it was judged.
            if self._window is not judged:
                judged.absorb(self._window)
            self._window = judged
            self.extensions += 1
            self.due_at = now + self.plan.interval_s
            return
        if action == "rollback":
            self.phase, self.weight = "rolled_back", 0.0
        elif action == "complete":
            self.phase, self.step_index, self.weight = "promoted", len(self.plan.steps) - 1, 100.0
        else:
            self.step_index += 1
            self.weight = self.plan.steps[self.step_index]
        self.extensions = 0
        # Answers served at the old weight while the interval was judged judge nothing.
        self._window = _Window(now)
        self.due_at = now + self.plan.interval_s
